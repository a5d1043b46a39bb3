/*
 * AVX-VNNI kernel table: x86_avx2.c built again with the VEX-encoded vpdpbusd (Intel Alder Lake
 * and later, AMD Zen 5) in place of vpmaddubsw + vpmaddwd. Exports only es_kern_fill_avxvnni();
 * the element-wise steps stay those of the AVX2 table (they have no integer products).
 */
#define ES_AVXVNNI 1
#include "x86_avx2.c"

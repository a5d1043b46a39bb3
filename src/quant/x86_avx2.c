/* AVX2 kernel table (placeholder while the AVX-512 table is built: scalar entries). */
#include "quant/kern.h"

void es_kern_fill_avx2(es_kern *k) { k->isa = "avx2"; }

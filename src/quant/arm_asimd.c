/*
 * AArch64 asimd kernel table: arm_neon.c built again with ES_ASIMD and no -march flag, for cores
 * with Advanced SIMD but without dotprod (Cortex-A53/A57/A72, the Raspberry Pi 3 and 4): each
 * sdot becomes smull + sadalp on the same tile records. Exports only es_kern_fill_asimd(); the
 * element-wise steps are those of vec_neon.c (baseline NEON).
 */
#define ES_ASIMD 1
#include "arm_neon.c"

/*
 * AArch64 i8mm kernel table: arm_neon.c built again with ES_I8MM (and -march=...+i8mm), whose
 * integer micro-kernel multiplies 2 tokens by 2 output rows per smmla instead of 1 token by 4
 * rows per sdot. Exports only es_kern_fill_i8mm(); the element-wise steps stay those of the
 * neon table (they have no integer products).
 */
#define ES_I8MM 1
#include "arm_neon.c"

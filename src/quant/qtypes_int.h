/*
 * Internals of the weight types shared by qtypes.c (the table, the dequantizers) and quantize.c
 * (the reference quantizers): the block layouts not in qtypes.h, and the decoding helpers both
 * need. Internal to quant/.
 */
#ifndef ES_QTYPES_INT_H
#define ES_QTYPES_INT_H

#include "quant/qtypes.h"

/* Block layouts not in qtypes.h. All fields are little-endian in the file. */
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
typedef struct {
    es_f16 d, m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1; /* x = d*q + m */
typedef struct {
    es_f16 d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0; /* x = d*(q-16) */
typedef struct {
    es_f16 d, m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1; /* x = d*q + m */
_Static_assert(sizeof(block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1 block");

/* MXFP4 (decoded by qtypes.c, written by quantize.c): x = d * kv[q] with d = 2^(e-128)
 * (es_e8m0_half) and ggml's kvalues_mxfp4 below, the E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6
 * doubled so that they are integers, then their negatives (hence d is half the E8M0 scale
 * 2^(e-127)); the nibbles laid out as in Q4_0: value j < 16 in the low nibble of qs[j], j + 16
 * in its high one. */
#define QK_MXFP4 32
typedef struct {
    uint8_t e; /* E8M0: a biased exponent, no sign, no mantissa */
    uint8_t qs[QK_MXFP4 / 2];
} block_mxfp4;
_Static_assert(sizeof(block_mxfp4) == 17, "mxfp4 block");
static const int8_t mxfp4_levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static inline float h2f(es_f16 h)
{
    return es_f16_to_f32(h);
}

/*
 * Q4_K / Q5_K sub-block scales. A 256-weight super-block has 8 sub-blocks of 32 weights, each
 * with a 6-bit scale sc[j] and a 6-bit min m[j], packed into 12 bytes s[0..11]:
 *
 *   j = 0..3:  sc[j] = s[j]   & 63            m[j] = s[j+4] & 63
 *   j = 4..7:  sc[j] = (s[j+4] & 15) | (s[j-4] >> 6) << 4
 *              m[j]  = (s[j+4] >> 4) | (s[j]   >> 6) << 4
 *
 * i.e. bytes 0..3 carry sc[0..3] plus the top 2 bits of sc[4..7]; bytes 4..7 carry m[0..3] plus
 * the top 2 bits of m[4..7]; bytes 8..11 carry the low 4 bits of sc[4..7] (low nibble) and
 * m[4..7] (high nibble). A weight decodes to (d*sc)*q - (dmin*m).
 */
static inline void k4_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

#endif

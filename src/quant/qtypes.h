/*
 * Weight block formats, with ggml's type ids and bit layouts (bit-exact with GGUF files).
 *
 *   F32  : float                                    1 elem / 4 bytes
 *   F16  : IEEE half                                1 elem / 2 bytes
 *   BF16 : bfloat16 (top 16 bits of a float)        1 elem / 2 bytes
 *   Q8_0 : { f16 d; int8 qs[32] }                   32 elems / 34 bytes, x = d*q
 *   Q4_0 : { f16 d; u8 qs[16] }                     32 elems / 18 bytes, x = d*(nibble-8);
 *          element j (0..15) is the low nibble of qs[j], element j+16 the high nibble of qs[j]
 *   Q4_K : { f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }              256 elems / 144 bytes
 *   Q5_K : { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }   256 elems / 176 bytes
 *   Q6_K : { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }             256 elems / 210 bytes
 *   Q8_K : { float d; i8 qs[256]; i16 bsums[16] }  256 elems / 292 bytes (activations only)
 *   MXFP4: { u8 e; u8 qs[16] }                      32 elems / 17 bytes, x = kv[nibble] * d with
 *          kv = ggml's kvalues_mxfp4 (E2M1 doubled: 0 1 2 3 4 6 8 12, then their negatives) and
 *          d = 2^(e-128) (es_e8m0_half); nibbles laid out as in Q4_0
 *   I8   : int8_t                                   1 elem / 1 byte (storage only: the byte
 *          array holding a pack's expert records; supported == false, so no model binds it)
 * The K-quant sub-block scale packing is documented in qtypes_int.h (k4_scale_min).
 */
#ifndef ES_QTYPES_H
#define ES_QTYPES_H

#include "core/util.h"
#include <stdbool.h>
#include <string.h>

typedef enum es_qtype {
    ES_QTYPE_F32 = 0,
    ES_QTYPE_F16 = 1,
    ES_QTYPE_Q4_0 = 2,
    ES_QTYPE_Q4_1 = 3,
    ES_QTYPE_Q5_0 = 6,
    ES_QTYPE_Q5_1 = 7,
    ES_QTYPE_Q8_0 = 8,
    ES_QTYPE_Q8_1 = 9,
    ES_QTYPE_Q2_K = 10,
    ES_QTYPE_Q3_K = 11,
    ES_QTYPE_Q4_K = 12,
    ES_QTYPE_Q5_K = 13,
    ES_QTYPE_Q6_K = 14,
    ES_QTYPE_Q8_K = 15,
    ES_QTYPE_IQ4_NL = 20,
    ES_QTYPE_IQ4_XS = 23,
    ES_QTYPE_I8 = 24, /* storage only (packed expert records): no dequantizer, no kernels */
    ES_QTYPE_BF16 = 30,
    ES_QTYPE_MXFP4 = 39,
    ES_QTYPE_COUNT = 40 /* size of tables indexed by type id */
} es_qtype;

#define ES_QK8_0 32
#define ES_QK4_0 32
#define ES_QK_K 256
#define ES_K_SCALE_SIZE 12

typedef uint16_t es_f16;
typedef uint16_t es_bf16;

typedef struct { es_f16 d; int8_t qs[ES_QK8_0]; } es_block_q8_0;
typedef struct { es_f16 d; uint8_t qs[ES_QK4_0 / 2]; } es_block_q4_0;
typedef struct { es_f16 d, dmin; uint8_t scales[ES_K_SCALE_SIZE]; uint8_t qs[ES_QK_K / 2]; } es_block_q4_K;
typedef struct { es_f16 d, dmin; uint8_t scales[ES_K_SCALE_SIZE]; uint8_t qh[ES_QK_K / 8]; uint8_t qs[ES_QK_K / 2]; } es_block_q5_K;
typedef struct { uint8_t ql[ES_QK_K / 2]; uint8_t qh[ES_QK_K / 4]; int8_t scales[ES_QK_K / 16]; es_f16 d; } es_block_q6_K;
typedef struct { uint8_t hmask[ES_QK_K / 8]; uint8_t qs[ES_QK_K / 4]; uint8_t scales[12]; es_f16 d; } es_block_q3_K;
typedef struct { uint8_t scales[ES_QK_K / 16]; uint8_t qs[ES_QK_K / 4]; es_f16 d, dmin; } es_block_q2_K;
typedef struct { float d; int8_t qs[ES_QK_K]; int16_t bsums[ES_QK_K / 16]; } es_block_q8_K;

_Static_assert(sizeof(es_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(es_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(es_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(es_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(es_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(es_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(es_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(es_block_q8_K) == 292, "q8_K block");

typedef struct es_qtype_info {
    const char *name;    /* "q4_0", as ggml names it */
    uint32_t block_elems;
    uint32_t block_bytes;
    bool supported;      /* we can dequantize (and so compute with) it */
} es_qtype_info;

/* Info for a ggml type id; NULL for ids ggml does not define. Types ggml defines that we cannot
 * compute with have supported == false (their sizes are still right, so files with them can be
 * listed by `estream info`). */
const es_qtype_info *es_qtype_info_get(uint32_t type);
const char *es_qtype_name(uint32_t type); /* "?" for unknown */
/* Whether a model's tensors may have this type: every supported type but q8_K (llama.cpp's
 * activation format, which no file's weights use and no kernel table multiplies with). */
bool es_qtype_is_weight(uint32_t type);
/* Those types as ggml names them ("f32, f16, ..."), for the error that refuses the others. */
const char *es_qtype_weight_list(void);
/* Parses "q4_0", "F16" etc. (case-insensitive); returns false if unknown. */
bool es_qtype_parse(const char *name, es_qtype *out);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or type unknown. */
size_t es_qtype_row_bytes(uint32_t type, int64_t n);
/* True for the float types (F32, F16, BF16): products with them are float, not integer. */
static inline bool es_qtype_is_float(uint32_t type)
{
    return type == ES_QTYPE_F32 || type == ES_QTYPE_F16 || type == ES_QTYPE_BF16;
}

/* Half and bfloat16 conversions (round to nearest even, NaN kept, as ggml does). */
float es_f16_to_f32(es_f16 h);
es_f16 es_f32_to_f16(float f);
float es_bf16_to_f32(es_bf16 h);
es_bf16 es_f32_to_bf16(float f);

/* The scale of an MXFP4 block from its E8M0 byte e: 2^(e-128), half the E8M0 value 2^(e-127)
 * (its levels are E2M1 values doubled), as ggml's ggml_e8m0_to_fp32_half builds the float's bits:
 * e >= 2 a normal float of exponent e - 1, e = 0 and 1 the subnormals 2^-128 and 2^-127. Every
 * e is finite (255 gives 2^127). Exact; the kernel tables use this or the same bits in SIMD. */
static inline float es_e8m0_half(uint8_t e)
{
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Dequantizes n elements (a multiple of the block size) of type from src to dst (float).
 * Scalar reference code, the oracle for every SIMD path; bit-exact with ggml's dequantize_row_*.
 * type must have supported == true and n a multiple of block_elems: anything else is a caller
 * bug and aborts (ES_ASSERT). src needs no alignment beyond its block struct's (2 bytes; 4 for
 * F32 and Q8_K). Thread-safe. */
void es_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Quantizes n floats to type (every supported type but IQ4_NL and IQ4_XS, which estream decodes
 * only: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K, MXFP4 with ggml's
 * reference algorithms (quantize_row_*_ref; the output is byte-identical to ggml's, except that an
 * all-zero Q8_K block gets zero bsums, and MXFP4 blocks whose max |x| is below 2^-125, where
 * ggml's conversion of a negative exponent byte is undefined, get e = 0); Q2_K and Q3_K with
 * simpler fits of their own, for synthetic data). dst holds
 * es_qtype_row_bytes(type, n) bytes. Returns false if the type has no quantizer; n not a multiple
 * of the block size aborts (ES_ASSERT). Thread-safe. */
bool es_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

#endif

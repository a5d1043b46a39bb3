/* IEEE half and bfloat16 <-> float conversions (scalar, bit-exact with ggml's reference). */
#include "quant/qtypes.h"

#include <string.h>

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float es_f16_to_f32(es_f16 h)
{
    /* Shift the half's exponent/mantissa into float position and rescale by 2^112 (normal
     * numbers and subnormals alike); infinities and NaNs get the float's all-ones exponent. */
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = bits_f32((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = bits_f32((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result =
        sign | (two_w < denormalized_cutoff ? f32_bits(denormalized) : f32_bits(normalized));
    return bits_f32(result);
}

es_f16 es_f32_to_f16(float f)
{
    /* Round to nearest even by letting the FPU add a scaled bias; overflow goes to infinity. */
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
    const uint32_t w = f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = bits_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (es_f16)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float es_bf16_to_f32(es_bf16 h) { return bits_f32((uint32_t)h << 16); }

es_bf16 es_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (es_bf16)((u >> 16) | 64); /* quiet NaN */
    return (es_bf16)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);               /* nearest even */
}

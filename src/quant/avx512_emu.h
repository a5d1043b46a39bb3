/*
 * The AVX-512 intrinsics of the avx512 and amx tables on an AVX2 CPU, for the tests only: the
 * Makefile force-includes this header (-include) into a second build of x86_avx512.c,
 * vec_avx512.c and x86_amx.c made with AVX2 flags alone (ES_AVX512_EMULATE), which the test
 * programs link so that a CPU without AVX-512 (AMD Zen 2/3, most desktops) still runs those
 * tables' code, bit for bit against the scalar table. The library, the CLI and the benchmarks
 * never contain it.
 *
 * SIMDe (Debian's libsimde-dev: portable implementations of the x86 intrinsics, each 512-bit
 * operation as two 256-bit ones here) provides most of them under their Intel names
 * (SIMDE_ENABLE_NATIVE_ALIASES). What its 0.7.4 lacks is below, lane for lane as Intel's
 * manual defines it; the float reductions in the order of GCC's avx512fintrin.h (upper 256 +
 * lower 256, then the 128-bit halves, then lanes {2,3} onto {0,1}, then lane 1 onto lane 0),
 * the order the avx512 table's bits come from. Masked loads and stores touch only the lanes
 * the mask selects, as the instructions do (they never fault on the others). tests/test_emu512.c
 * holds what is written here to those definitions.
 */
#ifndef ES_QUANT_AVX512_EMU_H
#define ES_QUANT_AVX512_EMU_H

#if defined(__AVX512F__)
#error "avx512_emu.h is for builds without AVX-512 (it stands in for the instructions)"
#endif

/* This build's fills, under names of their own beside the library's real ones (the dispatcher
 * gets them through es_kern_avx512_register_emulation, called from x86_amx.c's build). */
#define es_kern_fill_avx512 es_kern_fill_avx512_emulated
#define es_vec_fill_avx512 es_vec_fill_avx512_emulated

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <stdint.h>
#include <string.h>

/* Lanes of the 512-bit types as plain arrays. */
typedef union {
    __m512i v;
    int32_t i32[16];
    int64_t i64[8];
    __m256i h[2];
    __m128i q[4];
} es_emu_512i;
typedef union {
    __m512 v;
    float f[16];
    __m256 h[2];
} es_emu_512;

/* vpdpbusd (unsigned a times signed b, four bytes per int32 lane, wrapping add): the even and
 * odd bytes widened to 16 bits and multiplied pairwise by vpmaddwd, exact (|a b| <= 32,640).
 * Ours rather than SIMDe's, whose generic form made the avx512 table's build take minutes. */
static inline __m256i es_emu_dpbusd_256(__m256i src, __m256i a, __m256i b)
{
    const __m256i lo8 = _mm256_set1_epi16(0x00ff);
    const __m256i a_even = _mm256_and_si256(a, lo8), a_odd = _mm256_srli_epi16(a, 8);
    const __m256i b_even = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8);
    const __m256i b_odd = _mm256_srai_epi16(b, 8);
    return _mm256_add_epi32(src, _mm256_add_epi32(_mm256_madd_epi16(a_even, b_even),
                                                  _mm256_madd_epi16(a_odd, b_odd)));
}
static inline __m512i es_emu_dpbusd_epi32(__m512i src, __m512i a, __m512i b)
{
    es_emu_512i s = {.v = src}, x = {.v = a}, y = {.v = b};
    s.h[0] = es_emu_dpbusd_256(s.h[0], x.h[0], y.h[0]);
    s.h[1] = es_emu_dpbusd_256(s.h[1], x.h[1], y.h[1]);
    return s.v;
}
#undef _mm512_dpbusd_epi32
#define _mm512_dpbusd_epi32(src, a, b) es_emu_dpbusd_epi32((src), (a), (b))

static inline __m256i es_emu_maskz_loadu_epi16_256(uint16_t k, const void *p)
{
    int16_t r[16] = {0};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy(&r[i], (const char *)p + 2 * i, 2);
    return _mm256_loadu_si256((const __m256i *)r);
}
#define _mm256_maskz_loadu_epi16(k, p) es_emu_maskz_loadu_epi16_256((k), (p))

static inline __m512i es_emu_maskz_loadu_epi32(uint16_t k, const void *p)
{
    es_emu_512i r = {.i32 = {0}};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy(&r.i32[i], (const char *)p + 4 * i, 4);
    return r.v;
}
#define _mm512_maskz_loadu_epi32(k, p) es_emu_maskz_loadu_epi32((k), (p))

static inline __m512 es_emu_maskz_loadu_ps(uint16_t k, const void *p)
{
    es_emu_512 r = {.f = {0}};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy(&r.f[i], (const char *)p + 4 * i, 4);
    return r.v;
}
#define _mm512_maskz_loadu_ps(k, p) es_emu_maskz_loadu_ps((k), (p))

static inline void es_emu_mask_storeu_ps(void *p, uint16_t k, __m512 a)
{
    es_emu_512 x = {.v = a};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy((char *)p + 4 * i, &x.f[i], 4);
}
#define _mm512_mask_storeu_ps(p, k, a) es_emu_mask_storeu_ps((p), (k), (a))

static inline uint16_t es_emu_cmplt_epi32_mask(__m512i a, __m512i b)
{
    es_emu_512i x = {.v = a}, y = {.v = b};
    uint16_t m = 0;
    for (int i = 0; i < 16; i++)
        m |= (uint16_t)((x.i32[i] < y.i32[i]) << i);
    return m;
}
#define _mm512_cmplt_epi32_mask(a, b) es_emu_cmplt_epi32_mask((a), (b))

/* vpmovdw / vpmovdb: truncation, lane i to the i-th 16- or 8-bit element. */
static inline __m256i es_emu_cvtepi32_epi16(__m512i a)
{
    es_emu_512i x = {.v = a};
    int16_t r[16];
    for (int i = 0; i < 16; i++)
        r[i] = (int16_t)(uint16_t)(uint32_t)x.i32[i];
    return _mm256_loadu_si256((const __m256i *)r);
}
#define _mm512_cvtepi32_epi16(a) es_emu_cvtepi32_epi16(a)

static inline __m128i es_emu_cvtepi32_epi8(__m512i a)
{
    es_emu_512i x = {.v = a};
    int8_t r[16];
    for (int i = 0; i < 16; i++)
        r[i] = (int8_t)(uint8_t)(uint32_t)x.i32[i];
    return _mm_loadu_si128((const __m128i *)r);
}
#define _mm512_cvtepi32_epi8(a) es_emu_cvtepi32_epi8(a)

static inline __m512 es_emu_cvtepi32_ps(__m512i a)
{
    es_emu_512i x = {.v = a};
    es_emu_512 r;
    r.h[0] = _mm256_cvtepi32_ps(x.h[0]);
    r.h[1] = _mm256_cvtepi32_ps(x.h[1]);
    return r.v;
}
#define _mm512_cvtepi32_ps(a) es_emu_cvtepi32_ps(a)

/* Rounds by MXCSR (to nearest even), as vcvtps2dq does. */
static inline __m512i es_emu_cvtps_epi32(__m512 a)
{
    es_emu_512 x = {.v = a};
    es_emu_512i r;
    r.h[0] = _mm256_cvtps_epi32(x.h[0]);
    r.h[1] = _mm256_cvtps_epi32(x.h[1]);
    return r.v;
}
#define _mm512_cvtps_epi32(a) es_emu_cvtps_epi32(a)

static inline __m512i es_emu_cvtepu16_epi32(__m256i a)
{
    es_emu_512i r;
    r.h[0] = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(a));
    r.h[1] = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(a, 1));
    return r.v;
}
#define _mm512_cvtepu16_epi32(a) es_emu_cvtepu16_epi32(a)

static inline __m512 es_emu_cvtph_ps(__m256i a)
{
    es_emu_512 r;
    r.h[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(a));
    r.h[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1));
    return r.v;
}
#define _mm512_cvtph_ps(a) es_emu_cvtph_ps(a)

static inline __m512i es_emu_srai_epi32(__m512i a, unsigned n)
{
    es_emu_512i x = {.v = a};
    const __m128i c = _mm_cvtsi32_si128((int)n);
    x.h[0] = _mm256_sra_epi32(x.h[0], c);
    x.h[1] = _mm256_sra_epi32(x.h[1], c);
    return x.v;
}
#define _mm512_srai_epi32(a, n) es_emu_srai_epi32((a), (unsigned)(n))

/* vpgatherdd: lane i = *(int32_t *)(base + idx[i] * scale). */
static inline __m512i es_emu_i32gather_epi32(__m512i idx, const void *base, int scale)
{
    es_emu_512i x = {.v = idx}, r;
    for (int i = 0; i < 16; i++)
        memcpy(&r.i32[i], (const char *)base + (int64_t)x.i32[i] * scale, 4);
    return r.v;
}
#define _mm512_i32gather_epi32(idx, base, scale) es_emu_i32gather_epi32((idx), (base), (scale))

/* vgatherqps with a mask: lane i (of 8) from base + idx[i] * scale where k selects it, else src. */
static inline __m256 es_emu_mask_i64gather_ps(__m256 src, uint8_t k, __m512i idx,
                                              const void *base, int scale)
{
    es_emu_512i x = {.v = idx};
    float r[8];
    _mm256_storeu_ps(r, src);
    for (int i = 0; i < 8; i++)
        if (k >> i & 1) memcpy(&r[i], (const char *)base + x.i64[i] * scale, 4);
    return _mm256_loadu_ps(r);
}
#define _mm512_mask_i64gather_ps(src, k, idx, base, scale)                                         \
    es_emu_mask_i64gather_ps((src), (k), (idx), (base), (scale))

/* vshufi64x2: 128-bit lanes 0, 1 of a and 2, 3 of b, each chosen by two bits of imm. */
static inline __m512i es_emu_shuffle_i64x2(__m512i a, __m512i b, int imm)
{
    es_emu_512i x = {.v = a}, y = {.v = b}, r;
    r.q[0] = x.q[imm & 3];
    r.q[1] = x.q[imm >> 2 & 3];
    r.q[2] = y.q[imm >> 4 & 3];
    r.q[3] = y.q[imm >> 6 & 3];
    return r.v;
}
#define _mm512_shuffle_i64x2(a, b, imm) es_emu_shuffle_i64x2((a), (b), (imm))

static inline int es_emu_reduce_add_epi32(__m512i a)
{
    es_emu_512i x = {.v = a};
    uint32_t s = 0; /* integer addition: any order gives the same wrapped sum */
    for (int i = 0; i < 16; i++)
        s += (uint32_t)x.i32[i];
    return (int)s;
}
#define _mm512_reduce_add_epi32(a) es_emu_reduce_add_epi32(a)

static inline float es_emu_reduce_add_ps(__m512 a)
{
    es_emu_512 x = {.v = a};
    const __m256 t3 = _mm256_add_ps(x.h[1], x.h[0]);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, 1));
}
#define _mm512_reduce_add_ps(a) es_emu_reduce_add_ps(a)

static inline float es_emu_reduce_max_ps(__m512 a)
{
    es_emu_512 x = {.v = a};
    const __m256 t3 = _mm256_max_ps(x.h[1], x.h[0]);
    const __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_max_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_max_ps(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1))));
}
#define _mm512_reduce_max_ps(a) es_emu_reduce_max_ps(a)

#endif

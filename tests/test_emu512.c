/*
 * src/quant/avx512_emu.h, the AVX-512 stand-in the tests' AVX2 build of the avx512 and amx
 * tables runs on, held to the instructions' definitions: each intrinsic it writes itself (those
 * SIMDe 0.7.4 lacks) against a scalar transcription of Intel's pseudo-code, and the float
 * reductions against GCC's avx512fintrin.h order (__MM512_REDUCE_OP: upper 256 + lower 256, the
 * 128-bit halves, lanes {2,3} onto {0,1}, lane 1 onto lane 0), on inputs where another order
 * gives other bits. The tables' tests compare products bit for bit, but their vector steps only
 * within a tolerance, so a reduction summed in another order would pass there and give other
 * bits than a real AVX-512 CPU.
 *
 * Built for x86-64 only, with AVX2 flags and the header force-included (the Makefile), so it
 * runs on any AVX2 CPU, AVX-512 or not.
 */
#include "t.h"

#include <sys/mman.h>

#include "core/cpu.h"

/* what the emulation's build is compiled for (CPUID and XCR0, as the dispatcher asks) */
#define NEED_AVX2()                                                                                \
    do {                                                                                           \
        if (!es_cpu_has(ES_CPU_AVX2 | ES_CPU_FMA | ES_CPU_F16C)) skip();                           \
    } while (0)

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A float of random sign and magnitude 2^-24 .. 2^24 (mantissa random): sums of sixteen of them
 * round differently in different orders. */
static float wide_float(t_rng *r)
{
    const int e = (int)(t_next(r) % 49) - 24;
    const float m = 1.0f + (float)(t_next(r) >> 41) / 8388608.0f;
    return (t_next(r) & 1 ? -1.0f : 1.0f) * ldexpf(m, e);
}

/* GCC's order for _mm512_reduce_add_ps, in scalars. */
static float reduce_add_gcc(const float a[16])
{
    float t3[8], t6[4], t8[4];
    for (int i = 0; i < 8; i++) t3[i] = a[8 + i] + a[i];
    for (int i = 0; i < 4; i++) t6[i] = t3[4 + i] + t3[i];
    for (int i = 0; i < 4; i++) t8[i] = t6[i] + t6[i ^ 2];
    return t8[0] + t8[1];
}

static void test_reduce_add_order(void **state)
{
    (void)state;
    NEED_AVX2();
    t_rng r = {7};
    int other_order_differs = 0;
    for (int trial = 0; trial < 4000; trial++) {
        es_emu_512 x;
        for (int i = 0; i < 16; i++) x.f[i] = wide_float(&r);
        const float want = reduce_add_gcc(x.f), got = _mm512_reduce_add_ps(x.v);
        if (bits_of(got) != bits_of(want))
            fail_msg("trial %d: emulated sum %a, GCC's order %a", trial, (double)got, (double)want);
        float lane_order = 0.0f;
        for (int i = 0; i < 16; i++) lane_order += x.f[i];
        other_order_differs += bits_of(lane_order) != bits_of(want);
    }
    /* the inputs can tell the orders apart, or the check above would prove nothing */
    assert_true(other_order_differs > 1000);
    print_message("reduce_add_ps: 4000 sums in GCC's order; lane order differs in %d\n",
                  other_order_differs);
}

static void test_reduce_max_and_int(void **state)
{
    (void)state;
    NEED_AVX2();
    t_rng r = {11};
    for (int trial = 0; trial < 1000; trial++) {
        es_emu_512 x;
        es_emu_512i y;
        float m = -INFINITY;
        uint32_t s = 0;
        for (int i = 0; i < 16; i++) {
            x.f[i] = wide_float(&r);
            m = x.f[i] > m ? x.f[i] : m;
            y.i32[i] = (int32_t)(uint32_t)t_next(&r); /* the int sum wraps */
            s += (uint32_t)y.i32[i];
        }
        assert_int_equal(bits_of(_mm512_reduce_max_ps(x.v)), bits_of(m));
        assert_int_equal((uint32_t)_mm512_reduce_add_epi32(y.v), s);
    }
}

/* vpdpbusd: each int32 lane plus four products of an unsigned byte of a and a signed byte of b,
 * wrapping. */
static void test_dpbusd(void **state)
{
    (void)state;
    NEED_AVX2();
    t_rng r = {13};
    for (int trial = 0; trial < 2000; trial++) {
        es_emu_512i s, a, b, want;
        uint8_t ab[64];
        int8_t bb[64];
        for (int i = 0; i < 64; i++) {
            /* the extremes often: 255 * -128 four times is the largest product sum */
            ab[i] = trial % 4 == 0 ? 255 : (uint8_t)t_next(&r);
            bb[i] = trial % 4 == 0 ? -128 : trial % 4 == 1 ? 127 : (int8_t)t_next(&r);
        }
        memcpy(a.i32, ab, 64);
        memcpy(b.i32, bb, 64);
        for (int i = 0; i < 16; i++) {
            s.i32[i] = trial % 3 == 0 ? INT32_MAX - i : trial % 3 == 1 ? INT32_MIN + i
                                                                       : (int32_t)t_next(&r);
            uint32_t acc = (uint32_t)s.i32[i];
            for (int j = 0; j < 4; j++) acc += (uint32_t)(ab[4 * i + j] * bb[4 * i + j]);
            want.i32[i] = (int32_t)acc;
        }
        es_emu_512i got = {.v = _mm512_dpbusd_epi32(s.v, a.v, b.v)};
        assert_memory_equal(got.i32, want.i32, 64);
    }
}

/* Masked loads and stores touch only the lanes the mask selects: the data ends where a page the
 * process may not read begins, so reading a masked-off lane faults. */
static void test_masked_access(void **state)
{
    (void)state;
    NEED_AVX2();
    const long page = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mprotect(m + page, (size_t)page, PROT_NONE), 0);
    for (int i = 0; i < page; i++) m[i] = (char)(i * 7 + 3);
    for (int lanes = 0; lanes <= 16; lanes++) {
        const uint16_t k = (uint16_t)((1u << lanes) - 1);
        /* the first `lanes` elements readable, the next one on the guarded page */
        const char *p32 = m + page - 4 * lanes, *p16 = m + page - 2 * lanes;
        es_emu_512i w = {.v = _mm512_maskz_loadu_epi32(k, p32)};
        es_emu_512 f = {.v = _mm512_maskz_loadu_ps(k, p32)};
        int16_t h[16];
        _mm256_storeu_si256((__m256i *)h, _mm256_maskz_loadu_epi16(k, p16));
        for (int i = 0; i < 16; i++) {
            int32_t w_want = 0;
            int16_t h_want = 0;
            if (i < lanes) {
                memcpy(&w_want, p32 + 4 * i, 4);
                memcpy(&h_want, p16 + 2 * i, 2);
            }
            assert_int_equal(w.i32[i], w_want);
            assert_int_equal(bits_of(f.f[i]), (uint32_t)w_want);
            assert_int_equal(h[i], h_want);
        }
        /* a masked store writes the selected lanes alone: the rest keep their bytes */
        es_emu_512 v;
        for (int i = 0; i < 16; i++) v.f[i] = (float)(i + 1);
        float *q = (float *)(m + page - 4 * lanes);
        char before[64];
        memcpy(before, q, 4 * (size_t)lanes);
        const uint16_t odd = (uint16_t)(k & 0xaaaa);
        _mm512_mask_storeu_ps(q, odd, v.v);
        for (int i = 0; i < lanes; i++) {
            float old;
            memcpy(&old, before + 4 * i, 4);
            assert_int_equal(bits_of(q[i]), bits_of(i & 1 ? v.f[i] : old));
        }
    }
    munmap(m, 2 * (size_t)page);
}

static void test_conversions(void **state)
{
    (void)state;
    NEED_AVX2();
    es_emu_512i x;
    const int32_t ints[16] = {0x12345678, -1, INT32_MIN, INT32_MAX, 255, 256, -129, 128,
                              16777217, -16777217, 0x7fff, 0x8000, 65535, -65536, 1, 0};
    memcpy(x.i32, ints, 64);
    int16_t w16[16];
    int8_t w8[16];
    _mm256_storeu_si256((__m256i *)w16, _mm512_cvtepi32_epi16(x.v));
    _mm_storeu_si128((__m128i *)w8, _mm512_cvtepi32_epi8(x.v));
    es_emu_512 fl = {.v = _mm512_cvtepi32_ps(x.v)};
    for (int i = 0; i < 16; i++) {
        assert_int_equal((uint16_t)w16[i], (uint32_t)ints[i] & 0xffff); /* truncation */
        assert_int_equal((uint8_t)w8[i], (uint32_t)ints[i] & 0xff);
        assert_int_equal(bits_of(fl.f[i]), bits_of((float)ints[i])); /* to nearest even */
    }
    /* vcvtps2dq: to nearest, ties to even; out of range and NaN give 0x80000000 */
    const float fs[16] = {2.5f, 3.5f, -2.5f, -1.5f, 0.49999997f, -0.5f, 1e10f, -1e10f,
                          NAN, 2147483520.0f, -2147483648.0f, 7.0f, -7.5f, 0.0f, -0.0f, 1.5f};
    const int32_t fs_want[16] = {2, 4, -2, -2, 0, 0, INT32_MIN, INT32_MIN,
                                 INT32_MIN, 2147483520, INT32_MIN, 7, -8, 0, 0, 2};
    es_emu_512 f;
    memcpy(f.f, fs, 64);
    es_emu_512i c = {.v = _mm512_cvtps_epi32(f.v)};
    assert_memory_equal(c.i32, fs_want, 64);
    /* vpmovzxwd and vcvtph2ps: lane i of the 16-bit input to lane i */
    const uint16_t hs[16] = {0x3c00, 0xbc00, 0x0001, 0x8001, 0x7bff, 0x7c00, 0xfc00, 0x0400,
                             0x3555, 0xffff, 0x0000, 0x8000, 0x4000, 0x03ff, 0x1234, 0xc000};
    const float hs_want[16] = {1.0f, -1.0f, 0x1p-24f, -0x1p-24f, 65504.0f, INFINITY, -INFINITY,
                               0x1p-14f, 0x1.554p-2f, NAN, 0.0f, -0.0f, 2.0f, 0x1.ff8p-15f,
                               0x1.8dp-11f, -2.0f};
    __m256i hv = _mm256_loadu_si256((const __m256i *)hs);
    es_emu_512i u = {.v = _mm512_cvtepu16_epi32(hv)};
    es_emu_512 hf = {.v = _mm512_cvtph_ps(hv)};
    for (int i = 0; i < 16; i++) {
        assert_int_equal(u.i32[i], hs[i]);
        if (isnan(hs_want[i]))
            assert_true(isnan(hf.f[i]));
        else
            assert_int_equal(bits_of(hf.f[i]), bits_of(hs_want[i]));
    }
    /* vpsrad: an arithmetic shift; by 32 or more every bit is the sign */
    const unsigned shifts[] = {0, 1, 5, 31, 32, 40, 255};
    for (size_t s = 0; s < T_LEN(shifts); s++) {
        es_emu_512i y = {.v = _mm512_srai_epi32(x.v, shifts[s])};
        for (int i = 0; i < 16; i++) {
            const int32_t want = shifts[s] >= 32 ? (ints[i] < 0 ? -1 : 0)
                                                 : (int32_t)((int64_t)ints[i] >> shifts[s]);
            assert_int_equal(y.i32[i], want);
        }
    }
    /* vpcmpd lt: signed */
    es_emu_512i zero = {.i32 = {0}};
    uint16_t lt = _mm512_cmplt_epi32_mask(x.v, zero.v), lt_want = 0;
    for (int i = 0; i < 16; i++) lt_want |= (uint16_t)((ints[i] < 0) << i);
    assert_int_equal(lt, lt_want);
}

static void test_gathers_and_shuffle(void **state)
{
    (void)state;
    NEED_AVX2();
    int32_t table[64];
    for (int i = 0; i < 64; i++) table[i] = i * 1000 + 7;
    es_emu_512i idx;
    for (int i = 0; i < 16; i++) idx.i32[i] = (i * 11) % 32 - 16; /* negative indices too */
    const int32_t *mid = table + 32;
    es_emu_512i g4 = {.v = _mm512_i32gather_epi32(idx.v, mid, 4)};
    es_emu_512i g1 = {.v = _mm512_i32gather_epi32(idx.v, mid, 1)}; /* byte offsets, unaligned */
    for (int i = 0; i < 16; i++) {
        assert_int_equal(g4.i32[i], mid[idx.i32[i]]);
        int32_t want;
        memcpy(&want, (const char *)mid + idx.i32[i], 4);
        assert_int_equal(g1.i32[i], want);
    }
    float ft[32];
    for (int i = 0; i < 32; i++) ft[i] = (float)i + 0.25f;
    es_emu_512i idx64;
    for (int i = 0; i < 8; i++) idx64.i64[i] = 31 - 3 * i;
    float src[8], got[8];
    for (int i = 0; i < 8; i++) src[i] = -1.0f - (float)i;
    for (unsigned k = 0; k < 256; k += 37) {
        _mm256_storeu_ps(got, _mm512_mask_i64gather_ps(_mm256_loadu_ps(src), (uint8_t)k,
                                                       idx64.v, ft, 4));
        for (int i = 0; i < 8; i++)
            assert_int_equal(bits_of(got[i]), bits_of(k >> i & 1 ? ft[idx64.i64[i]] : src[i]));
    }
    /* vshufi64x2: result lanes 0-1 from a's 128-bit lanes, 2-3 from b's, two bits each */
    es_emu_512i a, b;
    for (int i = 0; i < 16; i++) a.i32[i] = i, b.i32[i] = 100 + i;
#define SHUF(imm)                                                                                  \
    do {                                                                                           \
        es_emu_512i r = {.v = _mm512_shuffle_i64x2(a.v, b.v, imm)};                                \
        for (int q = 0; q < 4; q++)                                                                \
            for (int j = 0; j < 4; j++)                                                            \
                assert_int_equal(r.i32[4 * q + j],                                                 \
                                 (q < 2 ? a : b).i32[4 * ((imm) >> (2 * q) & 3) + j]);             \
    } while (0)
    /* the intrinsic's imm is an immediate in the real instruction: literal values */
    SHUF(0x00); SHUF(0x1b); SHUF(0x44); SHUF(0x4e); SHUF(0xe4); SHUF(0xee); SHUF(0xb1); SHUF(0xff);
#undef SHUF
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_add_order), cmocka_unit_test(test_reduce_max_and_int),
        cmocka_unit_test(test_dpbusd),           cmocka_unit_test(test_masked_access),
        cmocka_unit_test(test_conversions),      cmocka_unit_test(test_gathers_and_shuffle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

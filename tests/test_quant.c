/*
 * Tests for the type table and the scalar reference (de)quantizers (src/quant/qtypes.c,
 * src/quant/quantize.c).
 *
 * Decoders are checked against hand-built blocks: the bytes are written out here and the
 * expected floats are worked out by hand from ggml's format definitions (comments show the
 * arithmetic), so a layout mistake in qtypes.c cannot hide behind a matching mistake in the test.
 * Quantizers are checked for ggml's reference rounding on small exact cases, then by round trips
 * with a stated error bound per type.
 */
#include <unistd.h> /* getpid() for t.h */

#include "t.h"

#include "quant/qtypes.h"

#include <math.h>

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Exact (bitwise) comparison of n floats; reports the first mismatch. */
static void expect_floats(const float *got, const float *want, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        if (f32_bits(got[i]) != f32_bits(want[i]))
            fail_msg("%s[%d]: got %.9g (0x%08x), want %.9g (0x%08x)", what, i, got[i],
                     f32_bits(got[i]), want[i], f32_bits(want[i]));
    }
}

/* ---------------------------------------------------------------------------------------------
 * Type table
 * ------------------------------------------------------------------------------------------- */

static void test_table(void **state)
{
    (void)state;
    /* id, name, block elements, block bytes, supported (ggml type_traits) */
    /* clang-format off */
    static const struct { uint32_t id; const char *name; uint32_t be, bb; bool sup; } want[] = {
        {0, "f32", 1, 4, true},           {1, "f16", 1, 2, true},
        {2, "q4_0", 32, 18, true},        {3, "q4_1", 32, 20, true},
        {6, "q5_0", 32, 22, true},        {7, "q5_1", 32, 24, true},
        {8, "q8_0", 32, 34, true},        {9, "q8_1", 32, 36, false},
        {10, "q2_K", 256, 84, true},      {11, "q3_K", 256, 110, true},
        {12, "q4_K", 256, 144, true},     {13, "q5_K", 256, 176, true},
        {14, "q6_K", 256, 210, true},     {15, "q8_K", 256, 292, true},
        {16, "iq2_xxs", 256, 66, false},  {17, "iq2_xs", 256, 74, false},
        {18, "iq3_xxs", 256, 98, false},  {19, "iq1_s", 256, 50, false},
        {20, "iq4_nl", 32, 18, true},     {21, "iq3_s", 256, 110, false},
        {22, "iq2_s", 256, 82, false},    {23, "iq4_xs", 256, 136, true},
        {24, "i8", 1, 1, false},          {25, "i16", 1, 2, false},
        {26, "i32", 1, 4, false},         {27, "i64", 1, 8, false},
        {28, "f64", 1, 8, false},         {29, "iq1_m", 256, 56, false},
        {30, "bf16", 1, 2, true},         {34, "tq1_0", 256, 54, false},
        {35, "tq2_0", 256, 66, false},    {39, "mxfp4", 32, 17, true},
    };
    /* clang-format on */
    bool seen[ES_QTYPE_COUNT] = {0};
    for (size_t i = 0; i < ES_LEN(want); i++) {
        const es_qtype_info *q = es_qtype_info_get(want[i].id);
        assert_non_null(q);
        assert_string_equal(q->name, want[i].name);
        assert_string_equal(es_qtype_name(want[i].id), want[i].name);
        assert_int_equal(q->block_elems, want[i].be);
        assert_int_equal(q->block_bytes, want[i].bb);
        assert_int_equal(q->supported, want[i].sup);
        seen[want[i].id] = true;
    }
    /* Retired ids (4, 5, 31-33, 36-38) and anything past the table are unknown. */
    for (uint32_t t = 0; t < ES_QTYPE_COUNT; t++)
        if (!seen[t]) {
            assert_null(es_qtype_info_get(t));
            assert_string_equal(es_qtype_name(t), "?");
        }
    assert_null(es_qtype_info_get(ES_QTYPE_COUNT));
    assert_null(es_qtype_info_get(UINT32_MAX));
    assert_string_equal(es_qtype_name(1000), "?");
    /* The header's structs agree with the table. */
    assert_int_equal(es_qtype_info_get(ES_QTYPE_Q4_K)->block_bytes, sizeof(es_block_q4_K));
    assert_int_equal(es_qtype_info_get(ES_QTYPE_Q8_K)->block_bytes, sizeof(es_block_q8_K));
}

/* es_qtype_weight_list() (the refusal's list of types) names exactly the supported types but
 * q8_K, each once, ", "-separated, and es_qtype_is_weight() accepts exactly those. */
static void test_weight_list(void **state)
{
    (void)state;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", es_qtype_weight_list());
    int listed[ES_QTYPE_COUNT] = {0};
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (tok != buf) {
            assert_true(tok[0] == ' ');
            tok++;
        }
        es_qtype t;
        if (!es_qtype_parse(tok, &t)) fail_msg("'%s' in the list is not a type", tok);
        assert_string_equal(es_qtype_name(t), tok); /* ggml's spelling */
        listed[t]++;
    }
    for (uint32_t t = 0; t < ES_QTYPE_COUNT; t++) {
        const es_qtype_info *q = es_qtype_info_get(t);
        const int want = q && q->supported && t != ES_QTYPE_Q8_K;
        assert_int_equal(es_qtype_is_weight(t), want);
        if (listed[t] != want)
            fail_msg("%s listed %d times, want %d", es_qtype_name(t), listed[t], want);
    }
    assert_false(es_qtype_is_weight(ES_QTYPE_COUNT));
    assert_false(es_qtype_is_weight(UINT32_MAX));
}

static void test_parse(void **state)
{
    (void)state;
    es_qtype t = ES_QTYPE_F32;
    assert_true(es_qtype_parse("q4_0", &t));
    assert_int_equal(t, ES_QTYPE_Q4_0);
    assert_true(es_qtype_parse("Q4_K", &t));
    assert_int_equal(t, ES_QTYPE_Q4_K);
    assert_true(es_qtype_parse("q6_k", &t));
    assert_int_equal(t, ES_QTYPE_Q6_K);
    assert_true(es_qtype_parse("F16", &t));
    assert_int_equal(t, ES_QTYPE_F16);
    assert_true(es_qtype_parse("bf16", &t));
    assert_int_equal(t, ES_QTYPE_BF16);
    assert_true(es_qtype_parse("f32", &t));
    assert_int_equal(t, ES_QTYPE_F32);
    assert_true(es_qtype_parse("IQ2_XXS", &t));
    assert_int_equal((int)t, 16);
    assert_true(es_qtype_parse("MXFP4", &t));
    assert_int_equal((int)t, 39);
    assert_true(es_qtype_parse("q8_0", NULL)); /* out may be NULL */
    /* Not names: prefixes, extensions, spaces, retired or made-up types. */
    t = ES_QTYPE_Q8_0;
    assert_false(es_qtype_parse("", &t));
    assert_false(es_qtype_parse("q4", &t));
    assert_false(es_qtype_parse("q4_0x", &t));
    assert_false(es_qtype_parse(" q4_0", &t));
    assert_false(es_qtype_parse("q4_0 ", &t));
    assert_false(es_qtype_parse("q4_2", &t));
    assert_false(es_qtype_parse("?", &t));
    assert_false(es_qtype_parse(NULL, &t));
    assert_int_equal(t, ES_QTYPE_Q8_0); /* untouched on failure */
}

static void test_row_bytes(void **state)
{
    (void)state;
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_F32, 7), 28);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_BF16, 3), 6);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_0, 32), 18);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_0, 4096), 128 * 18);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_0, 33), 0);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_0, 16), 0);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_0, 0), 0);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_0, -32), 0);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q8_0, 2816), 88 * 34);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_K, 256), 144);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_K, 2816), 11 * 144);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_K, 255), 0);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_K, 257), 0);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q4_K, 32), 0); /* a Q4_0 block is not enough */
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_Q6_K, 14336), 56 * 210);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_MXFP4, 2880), 90 * 17); /* gpt-oss's rows */
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_MXFP4, 48), 0);
    assert_int_equal(es_qtype_row_bytes(16, 512), 132); /* iq2_xxs: known though unsupported */
    assert_int_equal(es_qtype_row_bytes(4, 32), 0);   /* retired id */
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_COUNT, 32), 0);
    assert_int_equal(es_qtype_row_bytes(28, INT64_MAX), 0); /* 8 * INT64_MAX overflows size_t */
}

/* ---------------------------------------------------------------------------------------------
 * F16 / BF16
 * ------------------------------------------------------------------------------------------- */

static void test_f16_values(void **state)
{
    (void)state;
    /* Halves chosen for every class: zeros, normals, subnormals, max, inf, NaN. */
    static const es_f16 h[] = {0x0000, 0x8000, 0x3C00, 0xC000, 0x0001, 0x8001, 0x03FF,
                               0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x3555, 0x3800};
    /* clang-format off */
    static const float want[] = {
        0.0f, -0.0f, 1.0f, -2.0f,
        5.9604644775390625e-08f,  /* 0x0001 = 2^-24, smallest subnormal */
        -5.9604644775390625e-08f,
        6.0975551605224609375e-05f, /* 0x03FF = 1023 * 2^-24, largest subnormal */
        6.103515625e-05f,           /* 0x0400 = 2^-14, smallest normal */
        65504.0f,                   /* 0x7BFF, largest finite */
        INFINITY, -INFINITY,
        0.333251953125f,            /* 0x3555: 2^-2 * (1 + 341/1024) */
        0.5f,
    };
    /* clang-format on */
    float got[ES_LEN(h)];
    es_dequantize_row(ES_QTYPE_F16, h, got, (int64_t)ES_LEN(h));
    expect_floats(got, want, (int)ES_LEN(h), "f16");
    for (size_t i = 0; i < ES_LEN(h); i++)
        assert_int_equal(es_f32_to_f16(want[i]), h[i]);
    /* NaN stays NaN both ways, sign kept. */
    assert_true(isnan(es_f16_to_f32(0x7E00)));
    assert_true(isnan(es_f16_to_f32(0x7C01)));
    assert_true(isnan(es_f16_to_f32(0xFE00)) && signbit(es_f16_to_f32(0xFE00)));
    const es_f16 hn = es_f32_to_f16(NAN);
    assert_true((hn & 0x7C00) == 0x7C00 && (hn & 0x03FF) != 0);
    /* Rounding: nearest, ties to even; overflow to inf; underflow to (signed) zero. */
    assert_int_equal(es_f32_to_f16(65519.0f), 0x7BFF);
    assert_int_equal(es_f32_to_f16(65520.0f), 0x7C00); /* halfway to 65536: even = inf */
    assert_int_equal(es_f32_to_f16(1e10f), 0x7C00);
    assert_int_equal(es_f32_to_f16(-1e10f), 0xFC00);
    assert_int_equal(es_f32_to_f16(1.0f + 0x1.0p-11f), 0x3C00); /* tie -> even mantissa 0 */
    assert_int_equal(es_f32_to_f16(1.0f + 0x1.8p-10f), 0x3C02); /* tie (1.5 ulp) -> 2 */
    assert_int_equal(es_f32_to_f16(1.0f + 0x1.2p-10f), 0x3C01); /* 1.125 ulp -> 1 */
    assert_int_equal(es_f32_to_f16(0x1.0p-25f), 0x0000);        /* half of 2^-24: tie -> 0 */
    assert_int_equal(es_f32_to_f16(0x1.8p-25f), 0x0001);        /* 0.75 of 2^-24 -> 1 */
    assert_int_equal(es_f32_to_f16(0x1.8p-24f), 0x0002);        /* 1.5 * 2^-24: tie -> 2 */
    assert_int_equal(es_f32_to_f16(-0x1.0p-30f), 0x8000);
}

/* For every half h that is not NaN: f32_to_f16(f16_to_f32(h)) == h. */
static void test_f16_exhaustive(void **state)
{
    (void)state;
    int nan_count = 0;
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        const float f = es_f16_to_f32((es_f16)h);
        const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF);
        if (is_nan) {
            if (!isnan(f)) fail_msg("half 0x%04x should decode to NaN", h);
            nan_count++;
            continue;
        }
        const es_f16 back = es_f32_to_f16(f);
        if (back != h) fail_msg("half 0x%04x -> %.9g -> 0x%04x", h, f, back);
        /* Decoding is monotonic inside each sign. */
        if ((h & 0x7FFF) && (h & 0x7FFF) < 0x7C00) {
            const float prev = es_f16_to_f32((es_f16)(h - 1));
            if (!(fabsf(prev) < fabsf(f))) fail_msg("not monotonic at 0x%04x", h);
        }
    }
    assert_int_equal(nan_count, 2 * 1023);
}

static void test_bf16(void **state)
{
    (void)state;
    static const es_bf16 h[] = {0x3F80, 0xC040, 0x7F80, 0xFF80, 0x0001, 0x8000, 0x4049};
    /* clang-format off */
    static const float want[] = {
        1.0f, -3.0f, INFINITY, -INFINITY,
        0x1.0p-133f, /* 0x0001: float bits 0x00010000 = 2^-16 of the smallest... = 2^-133 */
        -0.0f,
        3.140625f, /* 0x4049: 2 * (1 + 0x49/128) = 2 * 1.5703125 */
    };
    /* clang-format on */
    float got[ES_LEN(h)];
    es_dequantize_row(ES_QTYPE_BF16, h, got, (int64_t)ES_LEN(h));
    expect_floats(got, want, (int)ES_LEN(h), "bf16");
    assert_true(isnan(es_bf16_to_f32(0x7FC0)));
    /* Rounding to nearest even on the dropped 16 bits. */
    assert_int_equal(es_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(es_f32_to_bf16(bits_f32(0x3F808000u)), 0x3F80); /* tie, even kept */
    assert_int_equal(es_f32_to_bf16(bits_f32(0x3F818000u)), 0x3F82); /* tie, odd rounds up */
    assert_int_equal(es_f32_to_bf16(bits_f32(0x3F808001u)), 0x3F81); /* above half */
    assert_int_equal(es_f32_to_bf16(bits_f32(0x3F807FFFu)), 0x3F80); /* below half */
    assert_int_equal(es_f32_to_bf16(bits_f32(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX -> inf */
    assert_int_equal(es_f32_to_bf16(INFINITY), 0x7F80);
    /* NaN: quiet, even when the payload sits only in the dropped bits (would round to inf). */
    assert_int_equal(es_f32_to_bf16(bits_f32(0x7F800001u)), 0x7FC0);
    assert_int_equal(es_f32_to_bf16(bits_f32(0xFFC00000u)), 0xFFC0);
    /* Round trip of every bf16 that is not NaN. */
    for (uint32_t b = 0; b <= 0xFFFF; b++) {
        if ((b & 0x7F80) == 0x7F80 && (b & 0x7F)) continue;
        assert_int_equal(es_f32_to_bf16(es_bf16_to_f32((es_bf16)b)), b);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Hand-built blocks, one per decoder
 * ------------------------------------------------------------------------------------------- */

static void test_dq_q4_0(void **state)
{
    (void)state;
    /* Block 0: d = 0.5 (0x3800); qs[j] = j | (15-j) << 4.
     *   element j    = (j - 8) * 0.5        -> -4.0 .. 3.5
     *   element j+16 = ((15-j) - 8) * 0.5   ->  3.5 .. -4.0
     * Block 1: d = -2 (0xC000); qs[j] = 0x8F: low nibble 15 -> (15-8)*-2 = -14,
     *   high nibble 8 -> 0. */
    es_block_q4_0 b[2];
    b[0].d = 0x3800;
    for (int j = 0; j < 16; j++)
        b[0].qs[j] = (uint8_t)(j | (15 - j) << 4);
    b[1].d = 0xC000;
    memset(b[1].qs, 0x8F, 16);
    /* clang-format off */
    static const float want[64] = {
        -4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f,
        0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f,
        3.5f, 3.0f, 2.5f, 2.0f, 1.5f, 1.0f, 0.5f, 0.0f,
        -0.5f, -1.0f, -1.5f, -2.0f, -2.5f, -3.0f, -3.5f, -4.0f,
        -14, -14, -14, -14, -14, -14, -14, -14, -14, -14, -14, -14, -14, -14, -14, -14,
        -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f,  /* 0 * -2 = -0 */
        -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f,
    };
    /* clang-format on */
    float got[64];
    es_dequantize_row(ES_QTYPE_Q4_0, b, got, 64);
    expect_floats(got, want, 64, "q4_0");
}

static void test_dq_q4_1(void **state)
{
    (void)state;
    /* d = 1 (0x3C00), m = -1 (0xBC00); qs[j] = j | (15-j) << 4.
     *   element j = j*1 - 1 -> -1 .. 14;  element j+16 = (15-j) - 1 -> 14 .. -1 */
    uint8_t blk[20] = {0x00, 0x3C, 0x00, 0xBC};
    for (int j = 0; j < 16; j++)
        blk[4 + j] = (uint8_t)(j | (15 - j) << 4);
    /* clang-format off */
    static const float want[32] = {
        -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
        14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, -1,
    };
    /* clang-format on */
    float got[32];
    es_dequantize_row(ES_QTYPE_Q4_1, blk, got, 32);
    expect_floats(got, want, 32, "q4_1");
}

static void test_dq_q5_0(void **state)
{
    (void)state;
    /* d = 0.5; qs[j] = j | j << 4 (both nibbles j); qh bytes {0x01, 0x00, 0xFF, 0x7F}, i.e. the
     * little-endian word 0x7FFF0001: fifth bit set for element 0 and elements 16..30.
     *   element 0      : (0 | 16) - 16 = 0        -> 0
     *   element 1..15  : e - 16                   -> (e-16)*0.5 = -7.5 .. -0.5
     *   element 16..30 : ((e-16) | 16) - 16 = e-16 -> 0 .. 7
     *   element 31     : (15 | 0) - 16 = -1       -> -0.5 */
    uint8_t blk[22] = {0x00, 0x38, 0x01, 0x00, 0xFF, 0x7F};
    for (int j = 0; j < 16; j++)
        blk[6 + j] = (uint8_t)(j | j << 4);
    /* clang-format off */
    static const float want[32] = {
        0.0f, -7.5f, -7.0f, -6.5f, -6.0f, -5.5f, -5.0f, -4.5f,
        -4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f,
        0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f,
        4.0f, 4.5f, 5.0f, 5.5f, 6.0f, 6.5f, 7.0f, -0.5f,
    };
    /* clang-format on */
    float got[32];
    es_dequantize_row(ES_QTYPE_Q5_0, blk, got, 32);
    expect_floats(got, want, 32, "q5_0");
}

static void test_dq_q5_1(void **state)
{
    (void)state;
    /* d = 1, m = 0.5 (0x3800); qs[j] = j | j << 4; qh = 0xFFFF0000 (bytes 00 00 FF FF):
     *   element e (0..31) = e * 1 + 0.5 */
    uint8_t blk[24] = {0x00, 0x3C, 0x00, 0x38, 0x00, 0x00, 0xFF, 0xFF};
    for (int j = 0; j < 16; j++)
        blk[8 + j] = (uint8_t)(j | j << 4);
    float want[32], got[32];
    for (int e = 0; e < 32; e++)
        want[e] = (float)e + 0.5f;
    es_dequantize_row(ES_QTYPE_Q5_1, blk, got, 32);
    expect_floats(got, want, 32, "q5_1");
}

static void test_dq_q8_0(void **state)
{
    (void)state;
    /* d = 0.25 (0x3400); qs[j] = 4j - 64, except qs[0] = -128 and qs[31] = 127.
     *   element j = (4j - 64) / 4 = j - 16; element 0 = -32; element 31 = 31.75 */
    es_block_q8_0 b;
    b.d = 0x3400;
    for (int j = 0; j < 32; j++)
        b.qs[j] = (int8_t)(4 * j - 64);
    b.qs[0] = -128;
    b.qs[31] = 127;
    /* clang-format off */
    static const float want[32] = {
        -32, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1,
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 31.75f,
    };
    /* clang-format on */
    float got[32];
    es_dequantize_row(ES_QTYPE_Q8_0, &b, got, 32);
    expect_floats(got, want, 32, "q8_0");
}

/*
 * Q4_K / Q5_K test scales. Sub-block scales sc[] and mins m[] (6 bits each):
 *   sc = {1, 2, 3, 4, 17, 33, 63, 48}    m = {0, 1, 2, 63, 5, 16, 32, 47}
 * Packed by hand:
 *   s[0..3] = sc[j] | (sc[j+4] >> 4) << 6:  1|1<<6=0x41  2|2<<6=0x82  3|3<<6=0xC3  4|3<<6=0xC4
 *   s[4..7] = m[j]  | (m[j+4] >> 4) << 6:   0|0=0x00     1|1<<6=0x41  2|2<<6=0x82  63|2<<6=0xBF
 *   s[8..11] = (sc[j+4] & 15) | (m[j+4] & 15) << 4:  1|5<<4=0x51  1|0=0x01  15|0=0x0F  0|15<<4=0xF0
 */
static const uint8_t k_scales[12] = {0x41, 0x82, 0xC3, 0xC4, 0x00, 0x41,
                                     0x82, 0xBF, 0x51, 0x01, 0x0F, 0xF0};
static const int k_sc[8] = {1, 2, 3, 4, 17, 33, 63, 48};
static const int k_m[8] = {0, 1, 2, 63, 5, 16, 32, 47};

static void test_dq_q4_K(void **state)
{
    (void)state;
    /* d = 1, dmin = 0.5. qs[32c + l] = (l & 15) | (15 - (l & 15)) << 4, so in chunk c
     * sub-block 2c has q = l & 15 and sub-block 2c+1 has q = 15 - (l & 15).
     * x = (1*sc)*q - 0.5*m. Worked out:
     *   e=0   sub 0, q 0 : 1*0  - 0     = 0
     *   e=5   sub 0, q 5 : 1*5  - 0     = 5
     *   e=32  sub 1, q 15: 2*15 - 0.5   = 29.5
     *   e=98  sub 3, q 13: 4*13 - 31.5  = 20.5
     *   e=143 sub 4, q 15: 17*15 - 2.5  = 252.5
     *   e=160 sub 5, q 15: 33*15 - 8    = 487
     *   e=195 sub 6, q 3 : 63*3 - 16    = 173
     *   e=225 sub 7, q 14: 48*14 - 23.5 = 648.5 */
    es_block_q4_K b;
    b.d = 0x3C00;
    b.dmin = 0x3800;
    memcpy(b.scales, k_scales, 12);
    for (int i = 0; i < 128; i++)
        b.qs[i] = (uint8_t)((i & 15) | (15 - (i & 15)) << 4);
    float got[256], want[256];
    es_dequantize_row(ES_QTYPE_Q4_K, &b, got, 256);
    static const struct {
        int e;
        float v;
    } spot[] = {
        {0, 0},        {5, 5},     {32, 29.5f}, {98, 20.5f},
        {143, 252.5f}, {160, 487}, {195, 173},  {225, 648.5f},
    };
    for (size_t i = 0; i < ES_LEN(spot); i++)
        expect_floats(&got[spot[i].e], &spot[i].v, 1, "q4_K");
    for (int e = 0; e < 256; e++) {
        const int s = e / 32, l = e % 32, q = s % 2 ? 15 - (l & 15) : (l & 15);
        want[e] = (float)(k_sc[s] * q) - 0.5f * (float)k_m[s]; /* all exact in float */
    }
    expect_floats(got, want, 256, "q4_K");
    /* d and dmin scale everything: d = 2^-4 (0x2C00), dmin = 0 -> x = sc*q/16. */
    b.d = 0x2C00;
    b.dmin = 0x0000;
    es_dequantize_row(ES_QTYPE_Q4_K, &b, got, 256);
    const float w225 = 42.0f; /* sub 7, q 14: 48*14/16 */
    expect_floats(&got[225], &w225, 1, "q4_K scaled");
}

static void test_dq_q5_K(void **state)
{
    (void)state;
    /* Same d, dmin, scales and low nibbles as the Q4_K test. qh[l] = 0xAA for l < 16 (fifth bit
     * for the odd sub-blocks) and 0x55 for l >= 16 (even sub-blocks). x = sc*q - 0.5*m:
     *   e=0   sub 0, l 0 , q 0       : 0
     *   e=16  sub 0, l 16, q 0 + 16  : 1*16          = 16
     *   e=32  sub 1, l 0 , q 15 + 16 : 2*31 - 0.5    = 61.5
     *   e=48  sub 1, l 16, q 15      : 2*15 - 0.5    = 29.5
     *   e=195 sub 6, l 3 , q 3       : 63*3 - 16     = 173
     *   e=225 sub 7, l 1 , q 14 + 16 : 48*30 - 23.5  = 1416.5
     *   e=255 sub 7, l 31, q 0       : 0 - 23.5      = -23.5 */
    es_block_q5_K b;
    b.d = 0x3C00;
    b.dmin = 0x3800;
    memcpy(b.scales, k_scales, 12);
    for (int i = 0; i < 128; i++)
        b.qs[i] = (uint8_t)((i & 15) | (15 - (i & 15)) << 4);
    for (int l = 0; l < 32; l++)
        b.qh[l] = l < 16 ? 0xAA : 0x55;
    float got[256], want[256];
    es_dequantize_row(ES_QTYPE_Q5_K, &b, got, 256);
    static const struct {
        int e;
        float v;
    } spot[] = {
        {0, 0}, {16, 16}, {32, 61.5f}, {48, 29.5f}, {195, 173}, {225, 1416.5f}, {255, -23.5f},
    };
    for (size_t i = 0; i < ES_LEN(spot); i++)
        expect_floats(&got[spot[i].e], &spot[i].v, 1, "q5_K");
    for (int e = 0; e < 256; e++) {
        const int s = e / 32, l = e % 32;
        int q = s % 2 ? 15 - (l & 15) : (l & 15);
        if ((s % 2 == 1) == (l < 16)) q += 16;
        want[e] = (float)(k_sc[s] * q) - 0.5f * (float)k_m[s];
    }
    expect_floats(got, want, 256, "q5_K");
}

static void test_dq_q6_K(void **state)
{
    (void)state;
    /* d = 0.5; scales = {1,-1,2,-2,3,-3,4,-4,5,-5,6,-6,7,-7,127,-128}: sub-block e/16.
     * Half 0: ql[0..31] = 0x5A, ql[32..63] = 0xC3, qh[0..31] = 0xE4 (2-bit fields 0,1,2,3 from
     * the bottom):
     *   e = l      : 0xA | 0<<4 = 10 -> 10-32 = -22
     *   e = l + 32 : 0x3 | 1<<4 = 19 -> -13
     *   e = l + 64 : 0x5 | 2<<4 = 37 -> 5
     *   e = l + 96 : 0xC | 3<<4 = 60 -> 28
     * Half 1: ql[64..95] = 0xF0, ql[96..127] = 0x0F, qh[32..63] = 0x1B (fields 3,2,1,0):
     *   e = 128+l  : 0x0 | 3<<4 = 48 -> 16
     *   e = 160+l  : 0xF | 2<<4 = 47 -> 15
     *   e = 192+l  : 0xF | 1<<4 = 31 -> -1
     *   e = 224+l  : 0x0 | 0<<4 = 0  -> -32
     * x = (0.5*scale)*q. Worked out:
     *   e=0: 0.5*1*-22 = -11       e=16: 0.5*-1*-22 = 11     e=40: 0.5*2*-13 = -13
     *   e=70: 0.5*3*5 = 7.5        e=127: 0.5*-4*28 = -56    e=128: 0.5*5*16 = 40
     *   e=200: 0.5*7*-1 = -3.5     e=230: 0.5*127*-32 = -2032  e=255: 0.5*-128*-32 = 2048 */
    es_block_q6_K b;
    static const int8_t sc[16] = {1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 127, -128};
    memset(b.ql, 0x5A, 32);
    memset(b.ql + 32, 0xC3, 32);
    memset(b.ql + 64, 0xF0, 32);
    memset(b.ql + 96, 0x0F, 32);
    memset(b.qh, 0xE4, 32);
    memset(b.qh + 32, 0x1B, 32);
    memcpy(b.scales, sc, 16);
    b.d = 0x3800;
    float got[256], want[256];
    es_dequantize_row(ES_QTYPE_Q6_K, &b, got, 256);
    static const struct {
        int e;
        float v;
    } spot[] = {
        {0, -11},  {16, 11},     {40, -13},    {70, 7.5f},  {127, -56},
        {128, 40}, {200, -3.5f}, {230, -2032}, {255, 2048},
    };
    for (size_t i = 0; i < ES_LEN(spot); i++)
        expect_floats(&got[spot[i].e], &spot[i].v, 1, "q6_K");
    static const int qv[8] = {-22, -13, 5, 28, 16, 15, -1, -32}; /* per group of 32 */
    for (int e = 0; e < 256; e++)
        want[e] = 0.5f * (float)sc[e / 16] * (float)qv[e / 32];
    expect_floats(got, want, 256, "q6_K");
}

static void test_dq_q8_K(void **state)
{
    (void)state;
    /* d = 0.25 (a float, not a half); qs[j] = j - 128 -> x = (j - 128) / 4. bsums unused. */
    es_block_q8_K b;
    memset(&b, 0, sizeof(b));
    b.d = 0.25f;
    for (int j = 0; j < 256; j++)
        b.qs[j] = (int8_t)(j - 128);
    float got[256], want[256];
    for (int j = 0; j < 256; j++)
        want[j] = (float)(j - 128) / 4.0f;
    es_dequantize_row(ES_QTYPE_Q8_K, &b, got, 256);
    expect_floats(got, want, 256, "q8_K");
}

/* ---------------------------------------------------------------------------------------------
 * Quantizers: exact reference rounding on small cases
 * ------------------------------------------------------------------------------------------- */

static void test_q_q8_0_rounding(void **state)
{
    (void)state;
    /* amax = 127 -> d = 1 (0x3C00), id = 1; q = roundf(x): halves go away from zero. */
    float x[32] = {127.0f, 2.5f, -2.5f, 1.4f, -1.6f, 0.5f, -0.49f, -127.0f};
    es_block_q8_0 b;
    assert_true(es_quantize_row(ES_QTYPE_Q8_0, x, &b, 32));
    assert_int_equal(b.d, 0x3C00);
    static const int8_t want[8] = {127, 3, -3, 1, -2, 1, 0, -127};
    for (int j = 0; j < 8; j++)
        assert_int_equal(b.qs[j], want[j]);
    for (int j = 8; j < 32; j++)
        assert_int_equal(b.qs[j], 0);
    /* Requantizing a decoded block gives the same block (d = 127*d/127 exactly). */
    t_rng r = {7};
    for (int j = 0; j < 32; j++)
        x[j] = t_uniform(&r) * 3.0f;
    es_block_q8_0 b1, b2;
    float y[32];
    es_quantize_row(ES_QTYPE_Q8_0, x, &b1, 32);
    es_dequantize_row(ES_QTYPE_Q8_0, &b1, y, 32);
    es_quantize_row(ES_QTYPE_Q8_0, y, &b2, 32);
    assert_memory_equal(&b1, &b2, sizeof(b1));
}

static void test_q_q4_0_rounding(void **state)
{
    (void)state;
    /* The signed extreme is -1, so d = -1/-8 = 0.125 (0x3000), id = 8, q = min(15, trunc(8x
     * + 8.5)): -1      -> 0.5   -> 0        0.875   -> 15.5  -> 15 0.99    -> 16.42 -> 15 (clamped)
     *   0.0625  -> 9.0   -> 9        -0.0625 -> 8.0   -> 8
     *   0.1     -> 9.3   -> 9        -0.3    -> 6.1   -> 6      0 -> 8.5 -> 8 */
    float x[32] = {-1.0f, 0.875f, 0.99f, 0.0625f, -0.0625f, 0.1f, -0.3f};
    es_block_q4_0 b;
    assert_true(es_quantize_row(ES_QTYPE_Q4_0, x, &b, 32));
    assert_int_equal(b.d, 0x3000);
    static const int want[7] = {0, 15, 15, 9, 8, 9, 6};
    for (int j = 0; j < 7; j++)
        assert_int_equal(b.qs[j] & 0x0F, want[j]);
    for (int j = 7; j < 16; j++)
        assert_int_equal(b.qs[j] & 0x0F, 8);
    for (int j = 0; j < 16; j++)
        assert_int_equal(b.qs[j] >> 4, 8); /* elements 16..31 are 0 */
    /* A positive extreme gives a negative d: x = 2 -> d = -0.25 (0xB400), q = 0. */
    memset(x, 0, sizeof(x));
    x[16] = 2.0f;
    x[17] = -1.0f; /* -1 * -4 + 8.5 = 12.5 -> 12 */
    es_quantize_row(ES_QTYPE_Q4_0, x, &b, 32);
    assert_int_equal(b.d, 0xB400);
    assert_int_equal(b.qs[0] >> 4, 0);
    assert_int_equal(b.qs[1] >> 4, 12);
}

static void test_q_q8_K_rounding(void **state)
{
    (void)state;
    /* The signed extreme is -127 -> iscale = -127/-127 = 1, d = 1. q = nearest, ties to EVEN
     * (unlike Q8_0's roundf): 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 0.5 -> 0, 1.5 -> 2. */
    float x[256] = {-127.0f, 2.5f, 3.5f, -2.5f, 0.5f, 1.5f, 100.0f};
    es_block_q8_K b;
    assert_true(es_quantize_row(ES_QTYPE_Q8_K, x, &b, 256));
    assert_true(b.d == 1.0f);
    static const int8_t want[7] = {-127, 2, 4, -2, 0, 2, 100};
    for (int j = 0; j < 7; j++)
        assert_int_equal(b.qs[j], want[j]);
    assert_int_equal(b.bsums[0], -127 + 2 + 4 - 2 + 0 + 2 + 100);
    for (int g = 1; g < 16; g++)
        assert_int_equal(b.bsums[g], 0);
    /* All zero: d = 0 and q = 0. */
    memset(x, 0, sizeof(x));
    es_quantize_row(ES_QTYPE_Q8_K, x, &b, 256);
    assert_true(b.d == 0.0f);
    for (int j = 0; j < 256; j++)
        assert_int_equal(b.qs[j], 0);
}

static void test_q_q4_1_rounding(void **state)
{
    (void)state;
    /* min -1, max 2 -> d = 3/15 = 0.2 (f16 0x3266), m = -1 (0xBC00); q = min(15, trunc((x+1)*5 +
     * 0.5)): -1 -> 0      2 -> 15       0.45 -> 7.75 -> 7      1.3 -> 12 */
    float x[32] = {-1.0f, 2.0f, 0.45f, 1.3f};
    for (int j = 4; j < 32; j++)
        x[j] = -1.0f;
    uint8_t b[20];
    assert_true(es_quantize_row(ES_QTYPE_Q4_1, x, b, 32));
    assert_int_equal(b[0] | b[1] << 8, 0x3266);
    assert_int_equal(b[2] | b[3] << 8, 0xBC00);
    assert_int_equal(b[4] & 0x0F, 0);
    assert_int_equal(b[5] & 0x0F, 15);
    assert_int_equal(b[6] & 0x0F, 7);
    assert_int_equal(b[7] & 0x0F, 12);
}

/* IQ4_NL and IQ4_XS decode by hand-built blocks: 4-bit indices into llama.cpp's 16 non-linear
 * levels, per 32 values (IQ4_NL: an F16 scale) or per 256 with 6-bit sub-block scales minus 32
 * (IQ4_XS: low 4 bits in scales_l, two per byte, high 2 bits in scales_h). Neither has a
 * quantizer in estream (it reads them). */
static void test_dq_iq4(void **state)
{
    (void)state;
    static const float lv[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};
    uint8_t nl[18] = {0x00, 0x38}; /* d = 0.5 (F16 0x3800, little-endian) */
    for (int j = 0; j < 16; j++) nl[2 + j] = (uint8_t)(j | (15 - j) << 4);
    float y[256];
    es_dequantize_row(ES_QTYPE_IQ4_NL, nl, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.5f * lv[j]);
        assert_true(y[16 + j] == 0.5f * lv[15 - j]);
    }
    /* IQ4_XS: d = 1 (0x3C00); sub-block b's scale ls = 33 + 3b (6 bits), so x = (1 + 3b) lv[q];
     * its nibbles are q = (j + b) & 15 (low, values 0..15), (j + 2b + 1) & 15 (high, 16..31) */
    uint8_t xs[136] = {0x00, 0x3C};
    uint16_t sh = 0;
    for (int b = 0; b < 8; b++) {
        const int ls = 33 + 3 * b;
        xs[4 + b / 2] |= (uint8_t)((ls & 15) << (4 * (b % 2)));
        sh |= (uint16_t)((ls >> 4) << (2 * b));
        for (int j = 0; j < 16; j++)
            xs[8 + 16 * b + j] = (uint8_t)(((j + b) & 15) | ((j + 2 * b + 1) & 15) << 4);
    }
    xs[2] = (uint8_t)(sh & 0xFF);
    xs[3] = (uint8_t)(sh >> 8);
    es_dequantize_row(ES_QTYPE_IQ4_XS, xs, y, 256);
    for (int b = 0; b < 8; b++)
        for (int j = 0; j < 16; j++) {
            assert_true(y[32 * b + j] == (float)(1 + 3 * b) * lv[(j + b) & 15]);
            assert_true(y[32 * b + 16 + j] == (float)(1 + 3 * b) * lv[(j + 2 * b + 1) & 15]);
        }
    float x[256] = {0};
    assert_false(es_quantize_row(ES_QTYPE_IQ4_NL, x, y, 32));
    assert_false(es_quantize_row(ES_QTYPE_IQ4_XS, x, y, 256));
}

/* MXFP4 by hand-built blocks: each nibble picks one of ggml's kvalues_mxfp4 (E2M1 doubled), the
 * low nibbles values 0..15 and the high ones 16..31, times 2^(e-128) from the E8M0 byte: the
 * subnormal scales of e = 0 and 1, the normal ones up to e = 255 (2^127, finite). */
static void test_dq_mxfp4(void **state)
{
    (void)state;
    static const float lv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    static const uint8_t es[] = {0, 1, 2, 100, 127, 128, 129, 200, 254, 255};
    uint8_t blk[ES_LEN(es)][17];
    for (size_t i = 0; i < ES_LEN(es); i++) {
        blk[i][0] = es[i];
        for (int j = 0; j < 16; j++)
            blk[i][1 + j] = (uint8_t)(((j + i) & 15) | ((7 * j + i) & 15) << 4);
    }
    float y[ES_LEN(es) * 32];
    es_dequantize_row(ES_QTYPE_MXFP4, blk, y, (int64_t)ES_LEN(es) * 32);
    for (size_t i = 0; i < ES_LEN(es); i++) {
        const float d = ldexpf(1.0f, es[i] - 128);
        assert_true(es_e8m0_half(es[i]) == d);
        assert_true(d > 0 && isfinite(d));
        for (int j = 0; j < 16; j++) {
            const float lo = lv[(j + i) & 15] * d, hi = lv[(7 * j + i) & 15] * d;
            if (memcmp(&y[32 * i + j], &lo, 4) || memcmp(&y[32 * i + 16 + j], &hi, 4))
                fail_msg("mxfp4 e=%d j=%d: %g %g, want %g %g", es[i], j, y[32 * i + j],
                         y[32 * i + 16 + j], lo, hi);
        }
    }
    assert_true(es_e8m0_half(0) == 0x1p-128f && es_e8m0_half(1) == 0x1p-127f);
    assert_true(es_e8m0_half(255) == 0x1p127f);
    /* 12 * 2^127 overflows: inf, as ggml's float product gives */
    uint8_t big[17] = {255, 0x07};
    es_dequantize_row(ES_QTYPE_MXFP4, big, y, 32);
    assert_true(isinf(y[0]) && y[0] > 0 && y[16] == 0.0f && y[1] == 0.0f);
}

static void test_q_unsupported(void **state)
{
    (void)state;
    float x[256] = {0};
    uint8_t y[512];
    assert_false(es_quantize_row(ES_QTYPE_Q8_1, x, y, 32));
    assert_false(es_quantize_row(17, x, y, 256));            /* iq2_xs */
    assert_false(es_quantize_row(16, x, y, 256));            /* iq2_xxs */
    assert_false(es_quantize_row(4, x, y, 32));              /* retired id */
    assert_false(es_quantize_row(ES_QTYPE_COUNT, x, y, 32)); /* unknown */
    assert_false(es_quantize_row(16, x, y, 7));   /* no quantizer beats bad length */
}

/* ---------------------------------------------------------------------------------------------
 * Round trips with error bounds
 * ------------------------------------------------------------------------------------------- */

enum { RT_N = 4096 };

/* Test rows: uniform in [-1, 1), scaled per 256 block by up to 100x so blocks differ, with a
 * few outliers, a constant block and an all-zero block. */
static void make_row(float *x, int n, uint64_t seed)
{
    t_rng r = {seed};
    for (int i = 0; i < n; i++) {
        const int blk = i / 256;
        const float scale = blk % 4 == 0   ? 1.0f
                            : blk % 4 == 1 ? 0.01f
                            : blk % 4 == 2 ? 100.0f
                                           : 3.0f;
        x[i] = t_uniform(&r) * scale;
    }
    x[300] = 40.0f;    /* outlier in a 0.01-scaled block */
    x[1000] = -700.0f; /* outlier in a 3-scaled block */
    for (int i = 2048; i < 2048 + 256; i++)
        x[i] = 0.75f; /* constant block */
    for (int i = 2304; i < 2304 + 256; i++)
        x[i] = 0.0f; /* all-zero block */
}

static void roundtrip(uint32_t type, const float *x, float *y, int n)
{
    const size_t bytes = es_qtype_row_bytes(type, n);
    assert_true(bytes > 0);
    uint8_t *q = malloc(bytes);
    assert_non_null(q);
    assert_true(es_quantize_row(type, x, q, n));
    es_dequantize_row(type, q, y, n);
    /* Blocks are independent: quantizing one block alone gives the same bytes. */
    const es_qtype_info *info = es_qtype_info_get(type);
    uint8_t one[512];
    const int be = (int)info->block_elems;
    for (int b = 0; b < n / be; b += 7) {
        es_quantize_row(type, x + (size_t)b * be, one, be);
        assert_memory_equal(one, q + (size_t)b * info->block_bytes, info->block_bytes);
    }
    free(q);
}

static void test_rt_float(void **state)
{
    (void)state;
    static float x[RT_N], y[RT_N];
    make_row(x, RT_N, 1);
    /* F32 is a copy. */
    roundtrip(ES_QTYPE_F32, x, y, RT_N);
    assert_memory_equal(x, y, sizeof(x));
    /* F16: relative error <= 2^-11 (half ulp) for normal halves; absolute <= 2^-25 below 2^-14. */
    roundtrip(ES_QTYPE_F16, x, y, RT_N);
    for (int i = 0; i < RT_N; i++) {
        if (!t_near(y[i], x[i], fmaxf(fabsf(x[i]) * 0x1.0p-11f, 0x1.0p-25f)))
            fail_msg("f16 x[%d]=%g y=%g", i, x[i], y[i]);
    }
    /* BF16: relative error <= 2^-8 (half ulp of an 8-bit significand). */
    roundtrip(ES_QTYPE_BF16, x, y, RT_N);
    for (int i = 0; i < RT_N; i++)
        if (!t_near(y[i], x[i], fabsf(x[i]) * 0x1.0p-8f))
            fail_msg("bf16 x[%d]=%g y=%g", i, x[i], y[i]);
}

/*
 * 32-element types. With D the decoded scale |d| of the block and amax its largest |x|:
 *   Q8_0: |err| <= D/2 + 127*D*2^-11          (rounding, plus d rounded to a half)
 *   Q4_1, Q5_1: |err| <= D/2 + nmax*D*2^-11 + |m|*2^-11
 *   Q4_0, Q5_0: |err| <= D/2 + slop, except values beyond +7D (Q4_0) / +15D (Q5_0) on the side
 *               opposite the extreme, clamped to the last level: |err| <= D + slop
 */
static void test_rt_32(void **state)
{
    (void)state;
    static float x[RT_N], y[RT_N];
    static const uint32_t types[] = {ES_QTYPE_Q8_0, ES_QTYPE_Q4_0, ES_QTYPE_Q4_1, ES_QTYPE_Q5_0,
                                     ES_QTYPE_Q5_1};
    for (int seed = 1; seed <= 3; seed++) {
        make_row(x, RT_N, (uint64_t)seed);
        for (size_t t = 0; t < ES_LEN(types); t++) {
            const uint32_t type = types[t];
            const size_t bytes = es_qtype_row_bytes(type, RT_N);
            uint8_t *q = malloc(bytes);
            roundtrip(type, x, y, RT_N);
            es_quantize_row(type, x, q, RT_N);
            const size_t bb = es_qtype_info_get(type)->block_bytes;
            for (int b = 0; b < RT_N / 32; b++) {
                const uint8_t *blk = q + b * bb;
                const float D = fabsf(es_f16_to_f32((es_f16)(blk[0] | blk[1] << 8)));
                float m = 0, nmax = 0, bound_in = 0, bound_clamp = 0;
                if (type == ES_QTYPE_Q4_1 || type == ES_QTYPE_Q5_1)
                    m = fabsf(es_f16_to_f32((es_f16)(blk[2] | blk[3] << 8)));
                nmax = type == ES_QTYPE_Q8_0                            ? 127
                       : type == ES_QTYPE_Q4_0 || type == ES_QTYPE_Q4_1 ? 15
                                                                        : 31;
                const float slop = (nmax + 1) * D * 0x1.0p-11f + m * 0x1.0p-11f + 1e-30f;
                bound_in = 0.5f * D + slop;
                bound_clamp =
                    (type == ES_QTYPE_Q4_0 || type == ES_QTYPE_Q5_0) ? D + slop : bound_in;
                for (int j = 0; j < 32; j++) {
                    const int i = b * 32 + j;
                    const float err = fabsf(x[i] - y[i]);
                    if (!t_near(y[i], x[i], bound_clamp) ||
                        (err > bound_in && !(fabsf(x[i]) > (nmax / 2 - 1) * D)))
                        fail_msg("%s seed %d x[%d]=%g y=%g err=%g D=%g", es_qtype_name(type), seed,
                                 i, x[i], y[i], err, D);
                }
            }
            /* An all-zero block decodes to zeros exactly; a constant block to within the bound. */
            for (int i = 2304; i < 2304 + 256; i++)
                assert_true(y[i] == 0.0f);
            free(q);
        }
    }
}

/* Relative RMS error sqrt(sum (x-y)^2 / sum x^2) over one block of n. */
static double rel_rmse(const float *x, const float *y, int n)
{
    double e = 0, s = 0;
    for (int i = 0; i < n; i++) {
        e += (double)(x[i] - y[i]) * (x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return s > 0 ? sqrt(e / s) : (e > 0 ? INFINITY : 0);
}

/*
 * MXFP4 (ggml's quantize_row_mxfp4_ref): per block of 32 with amax = max |x| > 0, the exponent byte
 * is floor(log2(amax)) + 125, so d = 2^(e-128) has 2^(e-125) <= amax < 2^(e-124) (a log2f that
 * rounds up just below a power of two may give one more: checked with a 2^-20 margin), and each
 * value takes the nearest level of {0, +-1, +-2, +-3, +-4, +-6, +-8, +-12} * d: no level is
 * closer to x than y, and |x - y| <= amax / 4 (half the top gap 4d <= amax / 4 below 12 d =
 * 1.5 * 2^(e-125); above it x clamps to 12 d, by less than 2^(e-124) - 12 d <= amax / 4). An
 * all-zero block is e = 0 and zeros; a block whose max is below 2^-125 (ggml's byte conversion is
 * undefined there) gets e = 0 and its nearest levels. Blocks without outliers keep a relative
 * RMS error under 0.2: for values uniform in [-a, a] it is 0.10 to 0.14 as a / 2^floor(log2 a)
 * goes from 1 to 2 (the levels' steps grow toward 12 d, and past 12 d = 1.5 * 2^floor(log2 a)
 * values clamp), and a block holds only 32 of them.
 */
static void test_rt_mxfp4(void **state)
{
    (void)state;
    static const float lv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    static float x[RT_N], y[RT_N];
    static uint8_t q[RT_N / 32 * 17];
    double worst = 0;
    for (int seed = 1; seed <= 3; seed++) {
        make_row(x, RT_N, (uint64_t)seed);
        for (int i = 32; i < 64; i++) x[i] = 0.0f; /* block 1: tiny, below 2^-125 */
        x[40] = 0x1p-130f;
        x[41] = -0x1p-127f;
        roundtrip(ES_QTYPE_MXFP4, x, y, RT_N);
        assert_true(es_quantize_row(ES_QTYPE_MXFP4, x, q, RT_N));
        for (int b = 0; b < RT_N / 32; b++) {
            const float *xb = x + 32 * b, *yb = y + 32 * b;
            const int e = q[17 * b];
            const float d = es_e8m0_half((uint8_t)e);
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
            if (amax == 0.0f || b == 1) {
                assert_int_equal(e, 0);
                for (int j = 0; j < 32; j++)
                    assert_true(yb[j] == (b == 1 && j == 9 ? -0x1p-127f : 0.0f)); /* x[41] */
                continue;
            }
            const bool e_ok = ldexpf(1.0f, e - 125) <= amax * (1 + 0x1p-20f) &&
                              amax < ldexpf(1.0f, e - 124) * (1 + 0x1p-20f);
            if (!e_ok) fail_msg("mxfp4 seed %d block %d: e = %d for max |x| %g", seed, b, e, amax);
            for (int j = 0; j < 32; j++) {
                const float err = fabsf(xb[j] - yb[j]);
                for (int l = 0; l < 16; l++)
                    if (fabsf(lv[l] * d - xb[j]) < err)
                        fail_msg("mxfp4 seed %d x[%d] = %g: y = %g, but %g is nearer", seed,
                                 32 * b + j, xb[j], yb[j], lv[l] * d);
                if (!t_near(yb[j], xb[j], amax / 4))
                    fail_msg("mxfp4 seed %d x[%d] = %g: y = %g, beyond amax/4 (%g)", seed,
                             32 * b + j, xb[j], yb[j], amax / 4);
            }
            const double rel = rel_rmse(xb, yb, 32);
            if (b == 9 || b == 31) continue; /* make_row's outliers: x[300], x[1000] */
            worst = rel > worst ? rel : worst;
            if (rel > 0.2) fail_msg("mxfp4 seed %d block %d: rel rmse %g", seed, b, rel);
        }
    }
    print_message("mxfp4: worst relative rmse of a block %.3f\n", worst);
}

/*
 * 256-element types. K-quants fit per-sub-block scales, so the bound is statistical: on uniform
 * data the relative RMS error of a b-bit grid spanning [-1, 1] is about (2/(2^b - 1))/sqrt(12)
 * / rms(x) = 1/(2^b - 1) (rms(x) = 1/sqrt 3). We require, per 256 block without outliers:
 *   Q4_K <= 0.09 (grid 1/15 = 0.067)   Q5_K <= 0.045 (1/31 = 0.032)   Q6_K <= 0.025 (1/63 = 0.016)
 *   Q3_K <= 0.2 (1/7 = 0.14), each element within amax/4 (half its grid step of amax/4 plus
 *   the 6-bit scale's rounding; amax/8 for the others)
 *   Q2_K <= 0.45 (1/3 = 0.33), each element within amax/2 (half its grid step of 2*amax/3 plus
 *   the 4-bit scale's and min's rounding)
 *   Q8_K: |err| <= |d|/2 per element, exactly (one float scale, round to nearest).
 * Blocks with an outlier may lose more (4-bit grid stretched by 40x the rest); there each element
 * must still be within 1/8 of the block's amax. Constant and zero blocks: error <= 1% / exactly 0.
 */
static void test_rt_k(void **state)
{
    (void)state;
    static float x[RT_N], y[RT_N];
    static const struct {
        uint32_t type;
        double rel;
        float elem; /* each element within amax / elem */
    } cases[] = {{ES_QTYPE_Q4_K, 0.09, 8}, {ES_QTYPE_Q5_K, 0.045, 8}, {ES_QTYPE_Q6_K, 0.025, 8},
                 {ES_QTYPE_Q3_K, 0.2, 4}, {ES_QTYPE_Q2_K, 0.45, 2}};
    for (int seed = 1; seed <= 3; seed++) {
        make_row(x, RT_N, (uint64_t)seed);
        for (size_t c = 0; c < ES_LEN(cases); c++) {
            roundtrip(cases[c].type, x, y, RT_N);
            for (int b = 0; b < RT_N / 256; b++) {
                const float *xb = x + 256 * b, *yb = y + 256 * b;
                float amax = 0;
                for (int i = 0; i < 256; i++)
                    amax = fmaxf(amax, fabsf(xb[i]));
                const bool outlier = b == 1 || b == 3;
                const double r = rel_rmse(xb, yb, 256);
                if (b == 9) { /* all zero */
                    for (int i = 0; i < 256; i++)
                        assert_true(yb[i] == 0.0f);
                    continue;
                }
                const double lim = b == 8 ? 0.01 : outlier ? 1.0 : cases[c].rel;
                if (r > lim)
                    fail_msg("%s seed %d block %d: rel rmse %g > %g", es_qtype_name(cases[c].type),
                             seed, b, r, lim);
                for (int i = 0; i < 256; i++)
                    if (!t_near(yb[i], xb[i], amax / cases[c].elem))
                        fail_msg("%s seed %d x[%d]=%g y=%g amax=%g", es_qtype_name(cases[c].type),
                                 seed, 256 * b + i, xb[i], yb[i], amax);
            }
        }
        /* Q8_K: per-element bound and bsums. */
        es_block_q8_K *q = malloc(sizeof(es_block_q8_K) * (RT_N / 256));
        roundtrip(ES_QTYPE_Q8_K, x, y, RT_N);
        es_quantize_row(ES_QTYPE_Q8_K, x, q, RT_N);
        for (int b = 0; b < RT_N / 256; b++) {
            for (int i = 0; i < 256; i++) {
                if (!t_near(y[256 * b + i], x[256 * b + i], fabsf(q[b].d) * 0.5f * (1 + 1e-5f) + 1e-30f))
                    fail_msg("q8_K x[%d]=%g y=%g d=%g", 256 * b + i, x[256 * b + i], y[256 * b + i],
                             q[b].d);
            }
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int l = 0; l < 16; l++)
                    s += q[b].qs[16 * g + l];
                assert_int_equal(q[b].bsums[g], s);
            }
        }
        free(q);
    }
}

/* Small awkward inputs for the K quantizers: one nonzero, all-negative, all-positive, tiny. */
static void test_rt_k_edge(void **state)
{
    (void)state;
    static const uint32_t types[] = {ES_QTYPE_Q4_K, ES_QTYPE_Q5_K, ES_QTYPE_Q6_K,
                                     ES_QTYPE_Q8_K, ES_QTYPE_Q4_0, ES_QTYPE_Q8_0};
    float x[256], y[256];
    for (size_t t = 0; t < ES_LEN(types); t++) {
        const char *nm = es_qtype_name(types[t]);
        /* One spike: it must come back within 1/8 of itself, the rest stay near 0. */
        memset(x, 0, sizeof(x));
        x[77] = -3.0f;
        roundtrip(types[t], x, y, 256);
        if (!t_near(y[77], -3.0f, 3.0f / 8)) fail_msg("%s spike: %g", nm, y[77]);
        for (int i = 0; i < 256; i++)
            if (i != 77 && !t_near(y[i], 0.0f, 3.0f / 8)) fail_msg("%s spike y[%d]=%g", nm, i, y[i]);
        /* All positive in [1, 2] and all negative in [-2, -1]. */
        for (int sign = -1; sign <= 1; sign += 2) {
            t_rng r = {99};
            for (int i = 0; i < 256; i++)
                x[i] = sign * (1.5f + 0.5f * t_uniform(&r));
            roundtrip(types[t], x, y, 256);
            for (int i = 0; i < 256; i++)
                if (!t_near(y[i], x[i], 0.25f))
                    fail_msg("%s sign %d x[%d]=%g y=%g", nm, sign, i, x[i], y[i]);
        }
        /* Small values (|x| < 1e-3): the half-precision scales are still normal numbers, so
         * the relative error stays near its usual size. (Much smaller blocks lose precision in
         * every type with a half scale: Q4_K's d = max_scale/63 underflows below ~1e-5, as in
         * ggml. Only Q8_K, with a float d, is scale-free; checked below at 1e-6.) */
        t_rng r = {5};
        for (int i = 0; i < 256; i++)
            x[i] = 1e-3f * t_uniform(&r);
        roundtrip(types[t], x, y, 256);
        if (rel_rmse(x, y, 256) > 0.1) fail_msg("%s small: rel rmse %g", nm, rel_rmse(x, y, 256));
        for (int i = 0; i < 256; i++)
            x[i] *= 1e-3f;
        roundtrip(types[t], x, y, 256);
        for (int i = 0; i < 256; i++)
            assert_true(isfinite(y[i]));
        if (types[t] == ES_QTYPE_Q8_K && rel_rmse(x, y, 256) > 0.01)
            fail_msg("q8_K tiny: rel rmse %g", rel_rmse(x, y, 256));
    }
}

/* ---------------------------------------------------------------------------------------------
 * Golden hashes from ggml itself
 * ------------------------------------------------------------------------------------------- */

static uint64_t fnv1a(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/*
 * FNV-1a hashes recorded by running ggml's own quantize_row_*_ref and dequantize_row_*
 * (ggml-org/ggml at commit d99724f2, ggml-quants.c, built outside this tree) on the inputs below:
 *   quant: 2048 floats, t_rng seed 2024, x = t_uniform * S[b%5] (+ 0.5*S[b%5] when b%3 == 0),
 *          b = i/32, S = {1e-3, 1e-2, 0.1, 1, 10}; hash of the row's bytes.
 *   dequant: row bytes from t_next (seed 77, one byte per call, low 8 bits), so scales include
 *          subnormal, inf and NaN halves; hash of the 2048 output floats (NaNs canonicalised).
 * Matching these means dequantization is bit-exact with ggml and quantization byte-identical.
 */
static void test_golden_ggml(void **state)
{
    (void)state;
    /* clang-format off */
    static const struct { uint32_t type; uint64_t quant, dequant; } golden[] = {
        {ES_QTYPE_Q4_0, 0x0909dea75c8577caull, 0x0f38fac64813ce76ull},
        {ES_QTYPE_Q4_1, 0x73fd5b5d31a32ef3ull, 0x2277e5a319af154aull},
        {ES_QTYPE_Q5_0, 0x52999b638bcb2b8aull, 0xb5d0745eccae4ac3ull},
        {ES_QTYPE_Q5_1, 0x07ce623760a261d0ull, 0x2f84ecaaffb30731ull},
        {ES_QTYPE_Q8_0, 0x15550c9a3b8afb7cull, 0xe7a3fe55c9ce793eull},
        {ES_QTYPE_Q4_K, 0xded1f47b1aad8e2bull, 0x59db741e29adcef4ull},
        {ES_QTYPE_Q5_K, 0x7431b836a4abd506ull, 0x326ba4e90c78684full},
        {ES_QTYPE_Q6_K, 0x4125b012db87d19eull, 0x146575ddd264741bull},
        {ES_QTYPE_Q8_K, 0x5216c91b2eade618ull, 0x0de3441636d9afe6ull},
        /* MXFP4: from llama.cpp 3f545bec's ggml (quantize_row_mxfp4_ref, dequantize_row_mxfp4
         * through ggml_get_type_traits, a small program linked with its libggml-base, not
         * committed), on the same inputs; the random bytes keep their E8M0 bytes raw: every e
         * gives a finite 2^(e-128), and 26 of the 2048 values (|level| * 2^(e-128) >= 2^128,
         * at e >= 253) overflow to inf in both */
        {ES_QTYPE_MXFP4, 0xbae8378ae6599b11ull, 0x87afd4340d8cc97eull},
    };
    /* clang-format on */
    enum { N = 2048 };
    static const float S[5] = {1e-3f, 1e-2f, 0.1f, 1.0f, 10.0f};
    static float x[N], y[N];
    static uint8_t q[N * 2];
    for (size_t k = 0; k < ES_LEN(golden); k++) {
        const uint32_t type = golden[k].type;
        const size_t rb = es_qtype_row_bytes(type, N);
        t_rng r = {2024};
        for (int i = 0; i < N; i++) {
            const int b = i / 32;
            x[i] = t_uniform(&r) * S[b % 5] + (b % 3 == 0 ? 0.5f * S[b % 5] : 0.0f);
        }
        memset(q, 0, sizeof(q));
        assert_true(es_quantize_row(type, x, q, N));
        if (fnv1a(q, rb) != golden[k].quant)
            fail_msg("%s: quantized bytes differ from ggml's", es_qtype_name(type));
        t_rng r2 = {77};
        for (size_t i = 0; i < rb; i++)
            q[i] = (uint8_t)t_next(&r2);
        es_dequantize_row(type, q, y, N);
        for (int i = 0; i < N; i++)
            if (isnan(y[i])) y[i] = NAN;
        if (fnv1a(y, sizeof(y)) != golden[k].dequant)
            fail_msg("%s: dequantized floats differ from ggml's", es_qtype_name(type));
    }
    /* Q3_K and Q2_K: dequantization only (estream's quantizers are its own, for synthetic
     * models), the same random bytes through ggml's dequantize_row_q3_K / _q2_K (llama.cpp
     * 3f545bec's ggml, which gives the Q6_K hash above too) */
    static const struct {
        uint32_t type;
        uint64_t dequant;
    } dq_only[] = {{ES_QTYPE_Q3_K, 0x74b8961d3bb7d93cull}, {ES_QTYPE_Q2_K, 0x086a680cb2201fd2ull}};
    for (size_t k = 0; k < ES_LEN(dq_only); k++) {
        const size_t rb = es_qtype_row_bytes(dq_only[k].type, N);
        t_rng r2 = {77};
        for (size_t i = 0; i < rb; i++)
            q[i] = (uint8_t)t_next(&r2);
        es_dequantize_row(dq_only[k].type, q, y, N);
        for (int i = 0; i < N; i++)
            if (isnan(y[i])) y[i] = NAN;
        if (fnv1a(y, sizeof(y)) != dq_only[k].dequant)
            fail_msg("%s: dequantized floats differ from ggml's", es_qtype_name(dq_only[k].type));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_weight_list),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_f16_values),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_dq_q4_0),
        cmocka_unit_test(test_dq_q4_1),
        cmocka_unit_test(test_dq_q5_0),
        cmocka_unit_test(test_dq_q5_1),
        cmocka_unit_test(test_dq_q8_0),
        cmocka_unit_test(test_dq_q4_K),
        cmocka_unit_test(test_dq_q5_K),
        cmocka_unit_test(test_dq_q6_K),
        cmocka_unit_test(test_dq_q8_K),
        cmocka_unit_test(test_q_q8_0_rounding),
        cmocka_unit_test(test_q_q4_0_rounding),
        cmocka_unit_test(test_q_q8_K_rounding),
        cmocka_unit_test(test_q_q4_1_rounding),
        cmocka_unit_test(test_q_unsupported),
        cmocka_unit_test(test_dq_iq4),
        cmocka_unit_test(test_dq_mxfp4),
        cmocka_unit_test(test_rt_float),
        cmocka_unit_test(test_rt_32),
        cmocka_unit_test(test_rt_mxfp4),
        cmocka_unit_test(test_rt_k),
        cmocka_unit_test(test_rt_k_edge),
        cmocka_unit_test(test_golden_ggml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

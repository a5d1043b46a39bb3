/*
 * Kernel dispatch: picks the ISA once, fills es_kern_active, and forwards the engine's calls.
 *
 * DESIGN: one table of function pointers indexed by weight type (STYLE §6). The scalar table is
 * filled first, then each ISA the CPU has overrides the entries it implements, in increasing
 * order (x86: avx2, avxvnni, avx512, amx; AArch64: asimd, neon, i8mm), up to the ISA requested
 * by ESTREAM_ISA. An ISA the CPU lacks is passed over (an AVX-512 VNNI machine need not have
 * AVX-VNNI). amx is avx512 plus the tiles: it needs AMX-TILE and AMX-INT8 in CPUID, the tile
 * state in XCR0 and the kernel's grant (core/cpu.c es_cpu_amx_unusable); where one is missing,
 * the reason is logged at ESTREAM_LOG=2 and returned by es_kern_isa_why_not() (estream info
 * --system prints it). Test programs may link an emulation of the tiles, which registers itself
 * (es_kern_amx_register_emulation): "amx" is then available by name on an AVX-512 CPU without
 * AMX, but never the default, so nothing but a test that asks for it runs the emulation; and an
 * emulation of AVX-512 itself on AVX2 (es_kern_avx512_register_emulation), which offers "avx512"
 * and "amx" by name on a CPU without AVX-512, under the same rule. The
 * list of names is the same on every architecture; another architecture's tables are never
 * available (their files are not even built), and a request for one gets the best table of this
 * machine. On AArch64, asimd needs only Advanced SIMD (every Linux AArch64 CPU), neon adds
 * dotprod, i8mm adds smmla. After es_kern_init() the table is read-only; the wrappers below read
 * it without locks. A wrapper called before any es_kern_init() initializes once (pthread_once)
 * with the environment's choice.
 */
#include "quant/kern.h"

#include "core/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

es_kern es_kern_active;

const char *const es_kern_isa_names[ES_KERN_N_ISA + 1] = {
    "scalar", "avx2", "avxvnni", "avx512", "amx", "asimd", "neon", "i8mm", NULL};
#define isa_names es_kern_isa_names
#define ISA_LIST "scalar, avx2, avxvnni, avx512, amx, asimd, neon, i8mm"
enum {
    ISA_SCALAR,
    ISA_AVX2,
    ISA_AVXVNNI,
    ISA_AVX512,
    ISA_AMX,
    ISA_ASIMD,
    ISA_NEON,
    ISA_I8MM,
    ISA_COUNT
};
_Static_assert(ISA_COUNT == ES_KERN_N_ISA, "one name per ISA");

/* Which architecture's files this build has (the Makefile builds x86_*.c only for x86-64 and
 * arm_*.c only for AArch64, so the other fills do not exist here). */
#if defined(__x86_64__)
#define BUILT_X86 1
#else
#define BUILT_X86 0
#endif
#if defined(__aarch64__)
#define BUILT_ARM64 1
#else
#define BUILT_ARM64 0
#endif

/* The architecture a table is for: 0 any (scalar), 1 x86-64, 2 AArch64. */
static int isa_arch(int isa)
{
    return isa == ISA_SCALAR ? 0 : isa <= ISA_AMX ? 1 : 2;
}

static bool isa_native(int isa)
{
    const int a = isa_arch(isa);
    return a == 0 || (a == 1 && BUILT_X86) || (a == 2 && BUILT_ARM64);
}

/* Set before main by the test-only emulation object (never in the library or the CLI). */
static void (*amx_emulation)(es_kern *k);

void es_kern_amx_register_emulation(void (*fill)(es_kern *k))
{
    amx_emulation = fill;
}

/* Set before main by the test-only AVX-512 emulation objects (avx512_emu.h). */
static struct {
    void (*kern)(es_kern *k), (*vec)(es_kern *k), (*amx)(es_kern *k);
} avx512_emulation;

void es_kern_avx512_register_emulation(void (*kern)(es_kern *k), void (*vec)(es_kern *k),
                                       void (*amx)(es_kern *k))
{
    avx512_emulation.kern = kern;
    avx512_emulation.vec = vec;
    avx512_emulation.amx = amx;
}

static bool isa_ok(int isa);

/* The CPU's own AVX-512 (F/BW/VL/DQ, VNNI) on top of AVX2. */
static bool avx512_real(void)
{
    return BUILT_X86 && es_cpu_has(ES_CPU_AVX2 | ES_CPU_FMA | ES_CPU_F16C | ES_CPU_AVX512_CORE |
                                   ES_CPU_AVX512_VNNI);
}

bool es_kern_avx512_emulated(void)
{
    return avx512_emulation.kern && !avx512_real() && isa_ok(ISA_AVX2);
}

/* The real tiles: the CPU's AVX-512 (amx decodes and scales with it) and AMX usable here. */
static bool amx_real(void)
{
    return avx512_real() && es_cpu_amx_unusable() == NULL;
}

/* The emulated tiles' fill: on the CPU's AVX-512, or on the emulated one. */
static void (*amx_emulation_fill(void))(es_kern *k)
{
    if (amx_real()) return NULL;
    if (avx512_real()) return amx_emulation;
    return es_kern_avx512_emulated() ? avx512_emulation.amx : NULL;
}

bool es_kern_amx_emulated(void)
{
    return amx_emulation_fill() != NULL;
}

static bool isa_ok(int isa)
{
    if (!isa_native(isa)) return false;
    switch (isa) {
    case ISA_SCALAR:
        return true;
    case ISA_AVX2:
        return es_cpu_has(ES_CPU_AVX2 | ES_CPU_FMA | ES_CPU_F16C);
    case ISA_AVXVNNI:
        return es_cpu_has(ES_CPU_AVX2 | ES_CPU_FMA | ES_CPU_F16C | ES_CPU_AVX_VNNI);
    case ISA_AVX512:
        return avx512_real() || es_kern_avx512_emulated();
    case ISA_AMX:
        return amx_real() || es_kern_amx_emulated();
    case ISA_ASIMD:
        return es_cpu_has(ES_CPU_NEON);
    case ISA_NEON:
        return es_cpu_has(ES_CPU_NEON | ES_CPU_DOTPROD);
    case ISA_I8MM:
        return es_cpu_has(ES_CPU_NEON | ES_CPU_DOTPROD | ES_CPU_I8MM);
    }
    return false;
}

/* A table that runs here only on a test program's emulation. */
static bool emulated(int isa)
{
    if (!isa_ok(isa)) return false;
    return isa == ISA_AVX512 ? !avx512_real() : isa == ISA_AMX ? !amx_real() : false;
}

static int isa_index(const char *name)
{
    for (int i = 0; i < ISA_COUNT; i++)
        if (strcmp(name, isa_names[i]) == 0) return i;
    return -1;
}

static void fill_upto(es_kern *k, int isa)
{
    es_kern_fill_scalar(k);
    es_vec_fill_scalar(k);
#if BUILT_X86
    if (isa >= ISA_AVX2 && isa_ok(ISA_AVX2)) {
        es_kern_fill_avx2(k);
        es_vec_fill_avx2(k);
    }
    if (isa >= ISA_AVXVNNI && isa_ok(ISA_AVXVNNI)) es_kern_fill_avxvnni(k);
    if (isa >= ISA_AVX512 && avx512_real()) {
        es_kern_fill_avx512(k);
        es_vec_fill_avx512(k);
    } else if (isa >= ISA_AVX512 && es_kern_avx512_emulated()) {
        avx512_emulation.kern(k);
        avx512_emulation.vec(k);
    }
    if (isa >= ISA_AMX && amx_real()) es_kern_fill_amx(k);
    else if (isa >= ISA_AMX && es_kern_amx_emulated()) amx_emulation_fill()(k);
#endif
#if BUILT_ARM64
    if (isa >= ISA_ASIMD && isa_ok(ISA_ASIMD)) {
        es_kern_fill_asimd(k);
        es_vec_fill_neon(k); /* baseline NEON: no extension needed */
    }
    if (isa >= ISA_NEON && isa_ok(ISA_NEON)) es_kern_fill_neon(k);
    if (isa >= ISA_I8MM && isa_ok(ISA_I8MM)) es_kern_fill_i8mm(k);
#endif
}

bool es_kern_isa_available(const char *isa)
{
    int i = isa ? isa_index(isa) : -1;
    return i >= 0 && isa_ok(i);
}

const char *es_kern_isa_why_not(const char *isa)
{
    const int i = isa ? isa_index(isa) : -1;
    if (i < 0) return "unknown kernel table (" ISA_LIST ")";
    if (isa_ok(i)) return NULL;
    if (!isa_native(i))
        return isa_arch(i) == 1 ? "an x86-64 table (this build is not for x86-64)"
                                : "an AArch64 table (this build is not for AArch64)";
    switch (i) {
    case ISA_AVX2:
        return "this CPU (or OS) lacks AVX2, FMA or F16C";
    case ISA_AVXVNNI:
        return "this CPU (or OS) lacks AVX2, FMA, F16C or AVX-VNNI";
    case ISA_AVX512:
        return "this CPU (or OS) lacks AVX-512 F/BW/VL/DQ or VNNI";
    case ISA_AMX:
        return avx512_real() ? es_cpu_amx_unusable()
                             : "amx decodes and scales with AVX-512 (F/BW/VL/DQ, VNNI), "
                               "which this CPU (or OS) lacks";
    case ISA_ASIMD:
        return "this CPU lacks Advanced SIMD";
    case ISA_NEON:
        return "this CPU lacks the dotprod extension";
    case ISA_I8MM:
        return "this CPU lacks the dotprod or i8mm extension";
    }
    return "not available";
}

bool es_kern_get(const char *isa, es_kern *k)
{
    if (!es_kern_isa_available(isa)) return false;
    fill_upto(k, isa_index(isa));
    return true;
}

const char *es_kern_init(const char *force)
{
    if (!force) force = getenv("ESTREAM_ISA");
    int best = ISA_SCALAR;
    for (int i = ISA_COUNT - 1; i > ISA_SCALAR; i--)
        if (isa_ok(i) && !emulated(i)) { /* an emulation is never the default */
            best = i;
            break;
        }
    int want = best;
    if (force && *force) {
        int i = isa_index(force);
        if (i < 0) {
            es_log(ES_LOG_WARN, "ESTREAM_ISA=%s: unknown ISA (" ISA_LIST "); using %s", force,
                   isa_names[best]);
        } else if (!isa_native(i)) {
            es_log(ES_LOG_WARN, "ESTREAM_ISA=%s: a table for another architecture; using %s",
                   force, isa_names[best]);
        } else if (!isa_ok(i)) {
            const char *why = es_kern_isa_why_not(force);
            while (i > ISA_SCALAR && !isa_ok(i))
                i--;
            es_log(ES_LOG_WARN, "ESTREAM_ISA=%s: %s; using %s", force, why, isa_names[i]);
            want = i;
        } else {
            want = i;
        }
    }
    fill_upto(&es_kern_active, want);
    es_log(ES_LOG_INFO, "kernels: %s%s", es_kern_active.isa,
           !emulated(want)             ? ""
           : es_kern_avx512_emulated() ? " (the tests' emulation of AVX-512 on AVX2)"
                                       : " (the tests' emulation of the tiles)");
    /* where the avx512 table runs, say why its tiles do not (ESTREAM_LOG=2) */
    if (avx512_real() && !amx_real())
        es_log(ES_LOG_INFO, "kernels: amx not used: %s", es_cpu_amx_unusable());
    return es_kern_active.isa;
}

static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static void default_init(void)
{
    /* Skip if an explicit es_kern_init() came first. */
    if (!es_kern_active.isa) es_kern_init(NULL);
}

static inline const es_kern *active(void)
{
    if (__builtin_expect(es_kern_active.isa == NULL, 0)) pthread_once(&default_once, default_init);
    return &es_kern_active;
}

const char *es_kern_isa_name(void)
{
    return active()->isa;
}

bool es_kern_supports(const es_kern *k, uint32_t wtype)
{
    return wtype < ES_QTYPE_COUNT && k->op[wtype].gemm != NULL;
}

static const es_kern_ops *ops(const es_kern *k, uint32_t wtype)
{
    ES_ASSERT(es_kern_supports(k, wtype));
    return &k->op[wtype];
}

size_t es_act_row_bytes(const es_kern *k, uint32_t wtype, int64_t K)
{
    return ops(k, wtype)->act_row_bytes(K);
}

size_t es_act_bytes(const es_kern *k, uint32_t wtype, int64_t n_rows, int64_t K)
{
    return (size_t)n_rows * ops(k, wtype)->act_row_bytes(K);
}

void es_act_prepare(const es_kern *k, uint32_t wtype, const float *X, int64_t ldx, int64_t n_rows,
                    int64_t K, void *act)
{
    ES_DASSERT(((uintptr_t)act & 63) == 0);
    ops(k, wtype)->act_prepare(X, ldx, n_rows, K, act);
}

size_t es_gemm_scratch_bytes(const es_kern *k, uint32_t wtype, int64_t K)
{
    return ops(k, wtype)->scratch_bytes(K);
}

void es_gemm(const es_kern *k, uint32_t wtype, const void *W, int64_t K, int64_t n0, int64_t n1,
             const void *act, const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy,
             int accumulate, void *scratch)
{
    ES_DASSERT(((uintptr_t)scratch & 63) == 0 && n0 <= n1);
    if (n0 >= n1 || n_rows <= 0) return;
    ops(k, wtype)->gemm(W, K, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);
}

const es_kern *es_kern_default(void) { return active(); }

bool es_kern_supports_tiled(const es_kern *k, uint32_t wtype)
{
    return wtype < ES_QTYPE_COUNT && k->op[wtype].gemm_tiled != NULL;
}

void es_gemm_tiled(const es_kern *k, uint32_t wtype, const void *W, int64_t K, int64_t N,
                   int64_t n0, int64_t n1, const void *act, const int32_t *rows, int64_t n_rows,
                   float *Y, int64_t ldy, int accumulate, void *scratch)
{
    ES_ASSERT(es_kern_supports_tiled(k, wtype) && 0 <= n0 && n1 <= N);
    ES_DASSERT(((uintptr_t)scratch & 63) == 0 && n0 <= n1);
    if (n0 >= n1 || n_rows <= 0) return;
    k->op[wtype].gemm_tiled(W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);
}

const char *const *es_kernels_list(void) { return es_kern_isa_names; }

/*
 * CPU feature and cache detection (x86-64 and AArch64).
 *
 * DESIGN: features come from CPUID, and a vector extension counts only if the OS also saves its
 * register state on context switch (XCR0 read with xgetbv): a CPU can report AVX-512 while the
 * kernel or hypervisor leaves ZMM state unsaved, and using it then corrupts registers. Cache sizes
 * come from CPUID leaf 4 (Intel) or 0x8000001D (AMD), not from sysfs/lscpu, which virtual machines
 * often report wrongly. On AArch64 features come from the kernel's HWCAP/HWCAP2 words (getauxval),
 * which already reflect what the OS enables, and cache sizes from sysfs (defaults if absent).
 * Everything is computed once on first use and read-only afterwards.
 *
 * Thread-safety: every function here may be called from any thread at any time.
 */
#ifndef ES_CPU_H
#define ES_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Feature bits for es_cpu_has(). Each is set only when both CPUID and XCR0 allow it. */
#define ES_CPU_SSE42 (1ull << 0)
#define ES_CPU_AVX (1ull << 1)
#define ES_CPU_AVX2 (1ull << 2)
#define ES_CPU_FMA (1ull << 3)
#define ES_CPU_F16C (1ull << 4)
#define ES_CPU_AVX_VNNI (1ull << 5) /* VEX-encoded vpdpbusd on ymm (Alder Lake, Zen 5) */
#define ES_CPU_AVX512F (1ull << 8)
#define ES_CPU_AVX512BW (1ull << 9)
#define ES_CPU_AVX512VL (1ull << 10)
#define ES_CPU_AVX512DQ (1ull << 11)
#define ES_CPU_AVX512_VNNI (1ull << 12)
#define ES_CPU_AVX512_BF16 (1ull << 13)
#define ES_CPU_AVX512_FP16 (1ull << 14)
#define ES_CPU_AVX512_VBMI (1ull << 15)
#define ES_CPU_AMX_TILE (1ull << 16) /* Linux also needs arch_prctl: es_cpu_amx_unusable() */
#define ES_CPU_AMX_INT8 (1ull << 17)
#define ES_CPU_AMX_BF16 (1ull << 18)
/* AArch64 (from HWCAP/HWCAP2) */
#define ES_CPU_NEON (1ull << 24)    /* Advanced SIMD (ASIMD): every Linux AArch64 CPU has it */
#define ES_CPU_DOTPROD (1ull << 25) /* SDOT/UDOT int8 dot products (Armv8.2+, Cortex-A76+) */
#define ES_CPU_I8MM (1ull << 26)    /* SMMLA int8 2x8x2 matrix multiply (Armv8.6+, Neoverse V1+) */
#define ES_CPU_FP16 (1ull << 27)    /* half-precision arithmetic (reported only) */

/* The AVX-512 subset every Skylake-SP-or-later and Zen 4-or-later part has. */
#define ES_CPU_AVX512_CORE (ES_CPU_AVX512F | ES_CPU_AVX512BW | ES_CPU_AVX512VL | ES_CPU_AVX512DQ)

typedef struct es_cpu_info {
    char vendor[13];       /* "GenuineIntel", "AuthenticAMD"; AArch64: implementer ("ARM") */
    char brand[49];        /* brand string, leading spaces trimmed; AArch64: MIDR part, "aarch64" */
    int family, model;     /* display family and model; AArch64: implementer and part numbers */
    uint64_t flags;        /* ES_CPU_* */
    size_t l1d_bytes;      /* per core; never 0 (a conservative default if CPUID has none) */
    size_t l2_bytes;       /* per core (or per the group that shares it); never 0 */
    size_t l3_bytes;       /* 0 if none reported */
    bool cache_from_cpuid; /* false: the sizes above are defaults, CPUID (sysfs) gave nothing */
} es_cpu_info;

/* The detected CPU. The pointer is valid for the life of the process. */
const es_cpu_info *es_cpu_get(void);

/* True if every bit in flags is supported by the CPU and enabled by the OS. */
bool es_cpu_has(uint64_t flags);

/* Whether the AMX tiles can run here: CPUID reports AMX-TILE and AMX-INT8, XCR0 enables the tile
 * state (bits 17, 18), and the kernel grants this process the tile data (Linux asks for it:
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), requested once, on the first call).
 * Returns NULL when all hold, else a static sentence saying which does not. */
const char *es_cpu_amx_unusable(void);

/* Writes a space-separated list of the detected ES_CPU_* names ("avx2 fma f16c avx512f ...")
 * into buf (always NUL-terminated when cap > 0). Returns buf. */
char *es_cpu_flags_str(uint64_t flags, char *buf, size_t cap);

#endif

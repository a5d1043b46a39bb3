/*
 * CPU detection: CPUID feature bits checked against the OS-enabled state in XCR0, and cache sizes
 * from the deterministic cache-parameter leaves.
 *
 * DESIGN: detection runs once (pthread_once) and fills a static es_cpu_info that is read-only
 * afterwards, so es_cpu_has() is a load and a compare. On AArch64 the features are the HWCAP bits
 * the kernel reports (it sets them only for what it lets user space run) and the caches come from
 * sysfs. On any other architecture every flag is off and the cache sizes are defaults; the scalar
 * kernels then run.
 */
#include "core/cpu.h"
#include "core/cpuset.h"
#include "core/memlimit.h"

#include "estream.h"
#include "estream_tools.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif
#if defined(__aarch64__)
#include <stdlib.h>
#include <sys/auxv.h>
#define HAVE_ARM64 1
#else
#define HAVE_ARM64 0
#endif

static es_cpu_info info;
static pthread_once_t once = PTHREAD_ONCE_INIT;
#if HAVE_X86
/* CPUID's AMX-TILE and AMX-INT8 bits, and XCR0's tile state, apart (info.flags has AMX only
 * when both hold), for es_cpu_amx_unusable() to say which is missing. */
static bool amx_cpuid, amx_xcr0;
#endif

/* Defaults when CPUID (sysfs) has no cache sizes: small enough to be right on every x86 since
 * 2013 and on every 64-bit Arm core with dotprod. */
#define DEFAULT_L1D ((size_t)32 << 10)
#define DEFAULT_L2 ((size_t)256 << 10)

#if HAVE_X86
typedef struct {
    uint32_t a, b, c, d;
} regs4;

static regs4 cpuid(uint32_t leaf, uint32_t sub)
{
    regs4 r = {0, 0, 0, 0};
    __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
    return r;
}

/* XCR0: which register states the OS saves. Only valid when CPUID.1:ECX.OSXSAVE is set. */
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

/* Leaf 4 and AMD's 0x8000001D share one layout: subleaf i describes cache i until type 0. */
static bool caches_from_leaf(uint32_t leaf, size_t *l1d, size_t *l2, size_t *l3)
{
    bool any = false;
    for (uint32_t i = 0; i < 16; i++) {
        regs4 r = cpuid(leaf, i);
        uint32_t type = r.a & 31, level = (r.a >> 5) & 7;
        if (type == 0) break;
        if (type == 2) continue; /* instruction cache */
        size_t ways = ((r.b >> 22) & 1023) + 1, parts = ((r.b >> 12) & 1023) + 1;
        size_t line = (r.b & 4095) + 1, sets = (size_t)r.c + 1;
        size_t bytes = ways * parts * line * sets;
        if (level == 1 && type == 1) *l1d = bytes, any = true;
        if (level == 2) *l2 = bytes, any = true;
        if (level == 3) *l3 = bytes, any = true;
    }
    return any;
}

static void detect(void)
{
    regs4 r = cpuid(0, 0);
    uint32_t max_leaf = r.a;
    memcpy(info.vendor + 0, &r.b, 4);
    memcpy(info.vendor + 4, &r.d, 4);
    memcpy(info.vendor + 8, &r.c, 4);
    info.vendor[12] = 0;
    bool amd = strcmp(info.vendor, "AuthenticAMD") == 0 || strcmp(info.vendor, "HygonGenuine") == 0;

    regs4 ext = cpuid(0x80000000u, 0);
    if (ext.a >= 0x80000004u) {
        char b[49] = {0};
        for (uint32_t i = 0; i < 3; i++) {
            regs4 s = cpuid(0x80000002u + i, 0);
            memcpy(b + 16 * i, &s, 16);
        }
        const char *p = b;
        while (*p == ' ')
            p++;
        snprintf(info.brand, sizeof(info.brand), "%s", p);
    }

    uint64_t f = 0;
    regs4 l1 = cpuid(1, 0);
    uint32_t fam = (l1.a >> 8) & 15, mod = (l1.a >> 4) & 15;
    if (fam == 15) fam += (l1.a >> 20) & 255;
    if (fam == 6 || fam >= 15) mod += ((l1.a >> 16) & 15) << 4;
    info.family = (int)fam;
    info.model = (int)mod;

    if (l1.c & (1u << 20)) f |= ES_CPU_SSE42;
    /* The OS must have enabled XSAVE (OSXSAVE) before xgetbv may be executed at all. */
    uint64_t xcr0 = (l1.c & (1u << 27)) ? xgetbv0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6;         /* XMM and YMM state */
    bool os_avx512 = (xcr0 & 0xE6) == 0xE6;    /* plus opmask, ZMM_Hi256, Hi16_ZMM */
    bool os_amx = (xcr0 & 0x60000) == 0x60000; /* XTILECFG and XTILEDATA */

    if (os_avx && (l1.c & (1u << 28))) f |= ES_CPU_AVX;
    if (os_avx && (l1.c & (1u << 12))) f |= ES_CPU_FMA;
    if (os_avx && (l1.c & (1u << 29))) f |= ES_CPU_F16C;
    if (max_leaf >= 7) {
        regs4 s0 = cpuid(7, 0), s1 = cpuid(7, 1);
        if (os_avx && (s0.b & (1u << 5))) f |= ES_CPU_AVX2;
        if (os_avx && (s1.a & (1u << 4))) f |= ES_CPU_AVX_VNNI;
        if (os_avx512) {
            if (s0.b & (1u << 16)) f |= ES_CPU_AVX512F;
            if (s0.b & (1u << 17)) f |= ES_CPU_AVX512DQ;
            if (s0.b & (1u << 30)) f |= ES_CPU_AVX512BW;
            if (s0.b & (1u << 31)) f |= ES_CPU_AVX512VL;
            if (s0.c & (1u << 1)) f |= ES_CPU_AVX512_VBMI;
            if (s0.c & (1u << 11)) f |= ES_CPU_AVX512_VNNI;
            if (s0.d & (1u << 23)) f |= ES_CPU_AVX512_FP16;
            if (s1.a & (1u << 5)) f |= ES_CPU_AVX512_BF16;
        }
        amx_cpuid = (s0.d & (3u << 24)) == (3u << 24);
        amx_xcr0 = os_amx;
        if (os_amx) {
            if (s0.d & (1u << 24)) f |= ES_CPU_AMX_TILE;
            if (s0.d & (1u << 25)) f |= ES_CPU_AMX_INT8;
            if (s0.d & (1u << 22)) f |= ES_CPU_AMX_BF16;
        }
    }
    /* An AVX-512 extension is useless without the foundation. */
    if (!(f & ES_CPU_AVX512F))
        f &= ~(ES_CPU_AVX512BW | ES_CPU_AVX512VL | ES_CPU_AVX512DQ | ES_CPU_AVX512_VNNI |
               ES_CPU_AVX512_BF16 | ES_CPU_AVX512_FP16 | ES_CPU_AVX512_VBMI);
    info.flags = f;

    size_t l1d = 0, l2 = 0, l3 = 0;
    bool got = false;
    if (amd) {
        regs4 e1 = cpuid(0x80000001u, 0);
        if (ext.a >= 0x8000001Du && (e1.c & (1u << 22))) /* topology extensions */
            got = caches_from_leaf(0x8000001Du, &l1d, &l2, &l3);
        if (!got && ext.a >= 0x80000006u) {
            regs4 c5 = cpuid(0x80000005u, 0), c6 = cpuid(0x80000006u, 0);
            l1d = (size_t)(c5.c >> 24) << 10;
            l2 = (size_t)(c6.c >> 16) << 10;
            l3 = (size_t)(c6.d >> 18) << 19;
            got = l1d || l2;
        }
    } else if (max_leaf >= 4) {
        got = caches_from_leaf(4, &l1d, &l2, &l3);
    }
    info.cache_from_cpuid = got && l1d && l2;
    info.l1d_bytes = l1d ? l1d : DEFAULT_L1D;
    info.l2_bytes = l2 ? l2 : DEFAULT_L2;
    info.l3_bytes = l3;
}
#elif HAVE_ARM64
/* HWCAP bits of the arm64 Linux ABI (asm/hwcap.h), spelled out so old headers still build. */
#define HWCAP_ASIMD_BIT (1ul << 1)
#define HWCAP_ASIMDHP_BIT (1ul << 10)
#define HWCAP_ASIMDDP_BIT (1ul << 20)
#define HWCAP2_I8MM_BIT (1ul << 13)

/* Size in bytes of a sysfs cache "size" file ("48K", "1024K", "32M"); 0 if unreadable. */
static size_t sysfs_size(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[32] = {0};
    size_t v = 0;
    if (fgets(buf, sizeof(buf), f)) {
        char *end;
        v = (size_t)strtoull(buf, &end, 10);
        if (*end == 'K') v <<= 10;
        else if (*end == 'M') v <<= 20;
    }
    fclose(f);
    return v;
}

static int sysfs_int(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int v = -1;
    if (fscanf(f, "%d", &v) != 1) v = -1;
    fclose(f);
    return v;
}

/* cpu0's caches: index<i>/{level,type,size}; missing entries keep their zero. */
static void caches_from_sysfs(size_t *l1d, size_t *l2, size_t *l3)
{
    for (int i = 0; i < 8; i++) {
        char p[96], type[16] = {0};
        snprintf(p, sizeof(p), "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        FILE *f = fopen(p, "r");
        if (!f) break;
        if (!fgets(type, sizeof(type), f)) type[0] = 0;
        fclose(f);
        if (strncmp(type, "Instruction", 11) == 0) continue;
        snprintf(p, sizeof(p), "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        const int level = sysfs_int(p);
        snprintf(p, sizeof(p), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        const size_t bytes = sysfs_size(p);
        if (level == 1) *l1d = bytes;
        if (level == 2) *l2 = bytes;
        if (level == 3) *l3 = bytes;
    }
}

/* Implementer and part of cpu0 from /proc/cpuinfo ("CPU implementer : 0x41"); -1 if absent
 * (qemu-user shows the host's file, which has neither). */
static void midr_from_cpuinfo(int *impl, int *part)
{
    *impl = *part = -1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        const char *c = strchr(line, ':');
        if (!c) continue;
        if (strncmp(line, "CPU implementer", 15) == 0 && *impl < 0)
            *impl = (int)strtol(c + 1, NULL, 0);
        else if (strncmp(line, "CPU part", 8) == 0 && *part < 0)
            *part = (int)strtol(c + 1, NULL, 0);
    }
    fclose(f);
}

static void detect(void)
{
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    uint64_t f = 0;
    if (hw & HWCAP_ASIMD_BIT) f |= ES_CPU_NEON;
    if (hw & HWCAP_ASIMDDP_BIT) f |= ES_CPU_DOTPROD;
    if (hw & HWCAP_ASIMDHP_BIT) f |= ES_CPU_FP16;
    if (hw2 & HWCAP2_I8MM_BIT) f |= ES_CPU_I8MM;
    info.flags = f;

    int impl, part;
    midr_from_cpuinfo(&impl, &part);
    static const struct {
        int id;
        const char *name;
    } vendors[] = {{0x41, "ARM"},      {0x42, "Broadcom"}, {0x46, "Fujitsu"}, {0x48, "HiSilicon"},
                   {0x4e, "NVIDIA"},   {0x51, "Qualcomm"}, {0x61, "Apple"},   {0x6d, "Microsoft"},
                   {0xc0, "Ampere"}};
    snprintf(info.vendor, sizeof(info.vendor), "unknown");
    for (size_t i = 0; i < sizeof(vendors) / sizeof(vendors[0]); i++)
        if (vendors[i].id == impl)
            snprintf(info.vendor, sizeof(info.vendor), "%s", vendors[i].name);
    if (impl >= 0 && part >= 0)
        snprintf(info.brand, sizeof(info.brand), "aarch64 implementer 0x%02x part 0x%03x", impl,
                 part);
    else
        snprintf(info.brand, sizeof(info.brand), "aarch64");
    info.family = impl;
    info.model = part;

    size_t l1d = 0, l2 = 0, l3 = 0;
    caches_from_sysfs(&l1d, &l2, &l3);
    info.cache_from_cpuid = l1d && l2;
    info.l1d_bytes = l1d ? l1d : DEFAULT_L1D;
    info.l2_bytes = l2 ? l2 : DEFAULT_L2;
    if (info.l2_bytes < info.l1d_bytes) info.l2_bytes = info.l1d_bytes;
    info.l3_bytes = l3;
}
#else
static void detect(void)
{
    snprintf(info.vendor, sizeof(info.vendor), "unknown");
    info.l1d_bytes = DEFAULT_L1D;
    info.l2_bytes = DEFAULT_L2;
}
#endif

/* detect(), then ESTREAM_L2_KIB: an L2 size (KiB per core) that replaces the detected one, so
 * that the tests see the buffers and budgets of machines with other caches (the kernels' tiles
 * and the per-thread scratch are sized from it; results do not depend on it). */
static void detect_with_override(void)
{
    detect();
    const char *e = getenv("ESTREAM_L2_KIB");
    char *end;
    const unsigned long kib = e && *e ? strtoul(e, &end, 10) : 0;
    if (kib >= 64 && kib <= (1ul << 20) && !*end) {
        info.l2_bytes = (size_t)kib << 10;
        if (info.l2_bytes < info.l1d_bytes) info.l2_bytes = info.l1d_bytes;
    }
}

const es_cpu_info *es_cpu_get(void)
{
    pthread_once(&once, detect_with_override);
    return &info;
}

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static const char *amx_why;

/* Linux keeps the 8 KiB of tile data out of a process's signal frames and context switches
 * until the process asks for it (arch_prctl, since 5.16): asked for here, once, and only after
 * CPUID and XCR0 said yes, so a process that never considers AMX never changes its state. */
static void amx_check(void)
{
    es_cpu_get();
#if HAVE_X86 && defined(__linux__)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (!amx_cpuid) {
        amx_why = "this CPU reports no AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25)";
        return;
    }
    if (!amx_xcr0) {
        amx_why = "the OS does not enable the AMX tile state (XCR0 bits 17 and 18)";
        return;
    }
    static char buf[192];
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        snprintf(buf, sizeof(buf),
                 "the kernel refused the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: %s)",
                 strerror(errno));
        amx_why = buf;
    } else if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0 ||
               !(perm & (1ul << XFEATURE_XTILEDATA))) {
        amx_why = "the kernel did not grant the AMX tile data (arch_prctl ARCH_GET_XCOMP_PERM)";
    }
#elif HAVE_X86
    amx_why = "AMX needs Linux's arch_prctl(ARCH_REQ_XCOMP_PERM)";
#else
    amx_why = "AMX is an x86-64 extension";
#endif
}

const char *es_cpu_amx_unusable(void)
{
    pthread_once(&amx_once, amx_check);
    return amx_why;
}

bool es_cpu_has(uint64_t flags)
{
    return (es_cpu_get()->flags & flags) == flags;
}

char *es_cpu_flags_str(uint64_t flags, char *buf, size_t cap)
{
    static const struct {
        uint64_t bit;
        const char *name;
    } names[] = {
        {ES_CPU_SSE42, "sse4.2"},
        {ES_CPU_AVX, "avx"},
        {ES_CPU_AVX2, "avx2"},
        {ES_CPU_FMA, "fma"},
        {ES_CPU_F16C, "f16c"},
        {ES_CPU_AVX_VNNI, "avx_vnni"},
        {ES_CPU_AVX512F, "avx512f"},
        {ES_CPU_AVX512BW, "avx512bw"},
        {ES_CPU_AVX512VL, "avx512vl"},
        {ES_CPU_AVX512DQ, "avx512dq"},
        {ES_CPU_AVX512_VNNI, "avx512_vnni"},
        {ES_CPU_AVX512_BF16, "avx512_bf16"},
        {ES_CPU_AVX512_FP16, "avx512_fp16"},
        {ES_CPU_AVX512_VBMI, "avx512_vbmi"},
        {ES_CPU_AMX_TILE, "amx_tile"},
        {ES_CPU_AMX_INT8, "amx_int8"},
        {ES_CPU_AMX_BF16, "amx_bf16"},
        {ES_CPU_NEON, "neon"},
        {ES_CPU_DOTPROD, "dotprod"},
        {ES_CPU_I8MM, "i8mm"},
        {ES_CPU_FP16, "fp16"},
    };
    if (cap == 0) return buf;
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!(flags & names[i].bit)) continue;
        int w = snprintf(buf + n, cap - n, "%s%s", n ? " " : "", names[i].name);
        if (w < 0 || (size_t)w >= cap - n) break;
        n += (size_t)w;
    }
    return buf;
}

void es_cpu_describe(es_cpu_desc *out)
{
    const es_cpu_info *ci = es_cpu_get();
    memset(out, 0, sizeof(*out));
    _Static_assert(sizeof(out->brand) >= sizeof(ci->brand), "es_cpu_desc holds the brand");
    memcpy(out->brand, ci->brand, sizeof(ci->brand)); /* NUL-terminated; the rest is zero */
    es_cpu_flags_str(ci->flags, out->features, sizeof(out->features));
    out->l1d_bytes = ci->l1d_bytes;
    out->l2_bytes = ci->l2_bytes;
    out->l3_bytes = ci->l3_bytes;
    out->cache_from_cpuid = ci->cache_from_cpuid;
    const es_cpuset *cs = es_cpuset_get();
    out->cpus_online = cs->online;
    out->cpus_allowed = cs->allowed;
    out->cores = cs->cores;
    out->cpu_quota = cs->quota;
    out->default_threads = cs->threads;
    out->omp_threads = cs->omp;
    out->perf_cores = cs->perf_cores;
    out->eff_cpus = cs->eff_cpus;
    const es_memlimit *ml = es_memlimit_get();
    out->mem_total = ml->total;
    out->mem_cgroup = ml->cgroup;
    out->mem_bytes = ml->bytes;
    snprintf(out->mem_source, sizeof(out->mem_source), "%s", ml->source);
}

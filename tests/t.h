/*
 * Shared test helpers. Every tests/test_<module>.c is a cmocka program linking libestream.a;
 * tests/run.sh runs them all and prints "N passed, N failed".
 *
 * Environment (set by tests/run.sh):
 *   ESTREAM_DATA  the shared data folder (vocabularies, WikiText-2); default ../shared/data
 *   ESTREAM_BIN   the estream CLI of this build, for end-to-end tests
 *   TMPDIR        where tests may write files (each test removes what it writes)
 */
#ifndef ES_TEST_H
#define ES_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <math.h>
#include <dirent.h>
#include <fnmatch.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "estream.h"
#include "estream_tools.h" /* the tree's own helpers: tests are its clients */

#define T_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ESTREAM_TEST_FILTER=PATTERN runs only the test cases whose names match it (cmocka's wildcards
 * * and ?): tools/mutants.sh runs the one case that kills a planted bug before anything else.
 * Set before main, so every program gets it without touching its main. */
__attribute__((constructor)) static void t_filter_from_env(void)
{
    const char *f = getenv("ESTREAM_TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
}

/* ESTREAM_TEST_SKIP=PATTERN[,PATTERN...] leaves out the cases whose names match any of the
 * patterns (fnmatch's wildcards): the TSan stage's single-threaded numerics, too slow under it;
 * the qemu stage's longest prefill. cmocka's own skip filter takes one pattern, so every
 * program's cmocka_run_group_tests goes through this copy of its table instead. */
static inline int t_run_group(const char *name, const struct CMUnitTest *tests, size_t n,
                              CMFixtureFunction setup, CMFixtureFunction teardown)
{
    const char *skip = getenv("ESTREAM_TEST_SKIP");
    struct CMUnitTest *kept = malloc(sizeof(*kept) * (n ? n : 1));
    if (!kept) return 1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool drop = false;
        for (const char *p = skip; p && *p && !drop;) {
            const size_t len = strcspn(p, ",");
            char pat[128];
            snprintf(pat, sizeof(pat), "%.*s", (int)len, p);
            drop = len > 0 && fnmatch(pat, tests[i].name, 0) == 0;
            p += len + (p[len] == ',');
        }
        if (!drop) kept[k++] = tests[i];
    }
    const int rc = _cmocka_run_group_tests(name, kept, k, setup, teardown);
    free(kept);
    return rc;
}
#undef cmocka_run_group_tests
#define cmocka_run_group_tests(group, setup, teardown) \
    t_run_group(#group, group, sizeof(group) / sizeof((group)[0]), setup, teardown)

static inline const char *t_data_dir(void)
{
    const char *d = getenv("ESTREAM_DATA");
    return d && *d ? d : "../shared/data";
}

static inline const char *t_bin(void)
{
    const char *b = getenv("ESTREAM_BIN");
    return b && *b ? b : "build/estream";
}

/* A fresh path under $TMPDIR for this process: "<tmp>/es-<pid>-<name>". */
static inline const char *t_tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    const char *tmp = getenv("TMPDIR");
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/es-%d-%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(), name);
    return p;
}

/* A fresh empty directory under $TMPDIR: "<tmp>/es-<pid>-<name>-XXXXXX". The caller owns the
 * returned string; remove the tree with t_rm_rf(). */
static inline char *t_mkdtemp(const char *name)
{
    char *d = malloc(512);
    if (!d) return NULL;
    snprintf(d, 512, "%s-XXXXXX", t_tmp_path(name));
    if (!mkdtemp(d)) { free(d); return NULL; }
    return d;
}

static inline void t_rm_rf(const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "t_rm_rf: %s failed\n", cmd);
}

static int t_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What a directory holds, as one malloc'd string of sorted lines "name kind size inode mtime"
 * ("-> target" added for links, mtime 0 for FIFOs), so that two snapshots compare equal exactly
 * when no entry was added, removed, replaced or modified. The entry named except (NULL: none)
 * is left out. */
static inline char *t_dir_snapshot(const char *dir, const char *except)
{
    DIR *d = opendir(dir);
    if (!d) return strdup("(no directory)");
    char **lines = NULL;
    size_t n = 0, total = 1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (except && !strcmp(e->d_name, except)) continue;
        char path[1024], target[512] = "", line[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) != 0) continue;
        const char kind = S_ISREG(sb.st_mode) ? 'f' : S_ISLNK(sb.st_mode) ? 'l'
                          : S_ISFIFO(sb.st_mode) ? 'p' : S_ISDIR(sb.st_mode) ? 'd' : '?';
        if (kind == 'l') {
            ssize_t k = readlink(path, target, sizeof(target) - 1);
            target[k > 0 ? k : 0] = 0;
        }
        /* a FIFO's times change when it is written through: only its kind and inode count */
        const bool timed = kind != 'p';
        snprintf(line, sizeof(line), "%s %c %lld %llu %lld.%09ld%s%s\n", e->d_name, kind,
                 (long long)sb.st_size, (unsigned long long)sb.st_ino,
                 timed ? (long long)sb.st_mtim.tv_sec : 0LL, timed ? sb.st_mtim.tv_nsec : 0L,
                 kind == 'l' ? " -> " : "", target);
        lines = realloc(lines, (n + 1) * sizeof(char *));
        lines[n++] = strdup(line);
        total += strlen(line);
    }
    closedir(d);
    if (n) qsort(lines, n, sizeof(char *), t_cmp_str);
    char *out = malloc(total);
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        strcat(out, lines[i]);
        free(lines[i]);
    }
    free(lines);
    return out;
}

/* Fails unless dir's snapshot (leaving out except) equals before. */
#define T_DIR_UNCHANGED(dir, except, before)                                                       \
    do {                                                                                           \
        char *now_ = t_dir_snapshot((dir), (except));                                              \
        if (strcmp(now_, (before)) != 0)                                                           \
            fail_msg("%s changed:\n--- before\n%s--- after\n%s", (dir), (before), now_);          \
        free(now_);                                                                                \
    } while (0)

/* Deterministic pseudo-random numbers (splitmix64): tests never depend on rand(). */
typedef struct t_rng { uint64_t s; } t_rng;
static inline uint64_t t_next(t_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* Uniform in [-1, 1). */
static inline float t_uniform(t_rng *r) { return (float)((t_next(r) >> 40) * (2.0 / 16777216.0) - 1.0); }

/* Whether got is within tol of want, with both finite: a NaN or an infinity on either side is a
 * failure (a plain `fabs(got - want) > tol` check lets NaN through, since NaN > tol is false). */
static inline int t_near(double got, double want, double tol)
{
    return isfinite(got) && isfinite(want) && fabs(got - want) <= tol;
}

/* GPT-2's byte-to-character mapping (UTF-8 of the character byte b stands for, NUL-terminated,
 * at most 3 bytes), written out independently of src/tok/utf8.c. */
static inline void t_gpt2_char(int b, char *out)
{
    int cp = b, n = 0;
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
        for (int c = 0; c < b; c++)
            if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* Reads a whole file; returns malloc'd buffer (NUL-terminated) or NULL. */
static inline char *t_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[n] = 0; if (len) *len = (size_t)n; }
    return b;
}

/* Runs a shell command, returns its exit status (or -1), capturing stdout into out (cap bytes). */
/* XORs the byte at offset `at` of the file at path with mask (a corrupted file for a test). */
static inline void t_flip_byte(const char *path, uint64_t at, uint8_t mask)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseeko(f, (off_t)at, SEEK_SET), 0);
    const int c = fgetc(f);
    assert_true(c != EOF);
    assert_int_equal(fseeko(f, (off_t)at, SEEK_SET), 0);
    assert_int_equal(fputc(c ^ mask, f), c ^ mask);
    assert_int_equal(fclose(f), 0);
}

static inline int t_run(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0;
    if (out && cap) {
        size_t r;
        while (n + 1 < cap && (r = fread(out + n, 1, cap - 1 - n, p)) > 0) n += r;
        out[n] = 0;
    }
    char sink[4096];
    while (fread(sink, 1, sizeof(sink), p) > 0) {}
    int st = pclose(p);
    return st == -1 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* Runs the shell command line cmd capturing stdout into out (may be NULL) and stderr into err
 * (may be NULL). Returns the exit code (128 + the signal for a command killed by one). */
static inline int t_run_cmd(const char *cmd, char *out, size_t cap, char *err, size_t ecap)
{
    char full[16384];
    const char *errf = t_tmp_path("stderr.txt");
    snprintf(full, sizeof(full), "{ %s; } 2>%s", cmd, errf);
    int rc = t_run(full, out, cap);
    if (err) {
        size_t len = 0;
        char *e = t_read_file(errf, &len);
        snprintf(err, ecap, "%s", e ? e : "");
        free(e);
    }
    unlink(errf);
    return rc;
}

/* Whitespace-separated integer ids from a file (tests/data/tiny-ids.txt); malloc'd. */
static inline int32_t *t_read_ids(const char *path, size_t *n)
{
    size_t len = 0;
    char *text = t_read_file(path, &len);
    if (!text) fail_msg("cannot read %s", path);
    int32_t *ids = malloc(sizeof(int32_t) * (len + 1));
    size_t k = 0;
    char *p = text, *end;
    for (long v; (v = strtol(p, &end, 10)), end != p; p = end) ids[k++] = (int32_t)v;
    free(text);
    *n = k;
    return ids;
}

/* Agreement of two logit matrices [n][nv]: the largest |difference| per position, summarised
 * over positions (median, 90th percentile, max), and the share of positions whose top-1 agrees.
 * A NaN or infinity in either matrix makes that position's difference infinite and its top-1
 * a disagreement, so no tolerance passes garbage.
 * Quantized models are compared by percentiles: a near-tie in an MoE router can send one token
 * to another expert in one engine, which moves that token's logits a lot and nothing else. */
typedef struct t_logit_stats { double median, p90, max, top1, kl; } t_logit_stats;
static int t_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static inline t_logit_stats t_compare_logits(const float *a, const float *b, size_t n, size_t nv)
{
    double *d = malloc(sizeof(double) * n);
    size_t agree = 0;
    for (size_t t = 0; t < n; t++) {
        size_t ia = 0, ib = 0;
        d[t] = 0;
        bool finite = true;
        for (size_t v = 0; v < nv; v++) {
            const double av = a[t * nv + v], bv = b[t * nv + v];
            if (!isfinite(av) || !isfinite(bv)) finite = false;
            double x = fabs(av - bv);
            d[t] = x > d[t] ? x : d[t];
            if (a[t * nv + v] > a[t * nv + ia]) ia = v;
            if (b[t * nv + v] > b[t * nv + ib]) ib = v;
        }
        if (!finite) d[t] = INFINITY;
        agree += finite && ia == ib;
    }
    qsort(d, n, sizeof(double), t_cmp_double);
    t_logit_stats s = {d[n / 2], d[(n * 9) / 10], d[n - 1], (double)agree / (double)n, 0};
    free(d);
    /* kl: the mean over positions of KL(softmax(b) || softmax(a)), b the reference (what
     * llama-perplexity --kl-divergence reports); infinite if either row is not finite. */
    for (size_t t = 0; t < n; t++) {
        const float *ra = a + t * nv, *rb = b + t * nv;
        double ma = -INFINITY, mb = -INFINITY, za = 0, zb = 0, kl = 0;
        for (size_t v = 0; v < nv; v++) {
            ma = ra[v] > ma ? ra[v] : ma;
            mb = rb[v] > mb ? rb[v] : mb;
        }
        for (size_t v = 0; v < nv; v++) {
            za += exp(ra[v] - ma);
            zb += exp(rb[v] - mb);
        }
        for (size_t v = 0; v < nv; v++) {
            const double lb = rb[v] - mb - log(zb), la = ra[v] - ma - log(za);
            kl += exp(lb) * (lb - la);
        }
        s.kl += isfinite(kl) ? kl / (double)n : INFINITY;
    }
    return s;
}

#endif

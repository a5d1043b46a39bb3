/* The memory-budget and streaming options shared by prefill, ppl and bench (cli.h). */
#include "cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char cli_stream_help[] =
    "memory budget and expert streaming:\n"
    "  --mem BUDGET       keep the process's peak resident memory under BUDGET: 600M, 1.5G,\n"
    "                     2048M, 1073741824 (bytes), 25% (of the model file), or auto (80% of\n"
    "                     the memory this process may use, MemTotal or its cgroup's limit,\n"
    "                     where the model file is larger: else resident). Experts are\n"
    "                     streamed from the file into an arena of banks; a budget too small is\n"
    "                     refused up front with the smallest one that works; one that holds\n"
    "                     every expert runs resident\n"
    "  --groups G         experts per bank (default: the largest G <= 8 with 2 banks)\n"
    "  --banks B          banks in the arena (default: as many as the budget holds)\n"
    "  --qd Q             reads in flight, 1..64 (default 4)\n"
    "  --policy P         when reads start: early (default: as soon as a bank is free, into\n"
    "                     later layers), after-routing (once the layer's routing is known),\n"
    "                     on-demand (only when the compute threads need the group)\n"
    "                     --groups, --banks, --qd or --policy without --mem stream the experts\n"
    "                     through that arena even when the model would fit\n"
    "  --io-limit MBPS    pace expert reads to MBPS megabytes per second (emulates slower\n"
    "                     storage, e.g. a phone's)\n"
    "  --io-backend B     auto (io_uring, else pread), io_uring or pread\n"
    "  --no-direct        read through the page cache (the budget is then not kept honestly)\n"
    "  --no-verify        skip the per-record checksum of a pack\n"
    "  --trace FILE.json  write a Chrome trace of the run (open it in https://ui.perfetto.dev)\n"
    "  --tune FILE|none   with --mem and no --groups/--banks/--qd, the arena and depth come\n"
    "                     from the tuning that estream tune wrote (default MODEL.tune when it\n"
    "                     exists and was made for this model, CPU, thread count and kernels);\n"
    "                     none: the default rule\n";

bool cli_stream_flag(cli_args *a, const char *s, cli_stream *o)
{
    if (!strcmp(s, "--mem")) o->mem = cli_value(a, s);
    else if (!strcmp(s, "--groups")) o->groups = (int)cli_int(s, cli_value(a, s), 1, 1 << 16);
    else if (!strcmp(s, "--banks")) o->banks = (int)cli_int(s, cli_value(a, s), 1, 1024);
    else if (!strcmp(s, "--qd")) o->qd = (int)cli_int(s, cli_value(a, s), 1, 64);
    else if (!strcmp(s, "--policy")) {
        const char *v = cli_value(a, s);
        if (cli_policy(v, &o->policy) != 0)
            cli_die("%s: --policy: expected early, after-routing or on-demand, got '%s'", a->cmd,
                    v);
        o->policy_set = true;
    } else if (!strcmp(s, "--io-limit")) {
        const char *v = cli_value(a, s);
        char *end;
        errno = 0;
        o->io_limit_mbps = strtod(v, &end);
        if (errno || end == v || *end || !(o->io_limit_mbps > 0) || o->io_limit_mbps > 1e7)
            cli_die("%s: --io-limit: expected megabytes per second (> 0), got '%s'", a->cmd, v);
    } else if (!strcmp(s, "--io-backend")) {
        const char *v = cli_value(a, s);
        if (!strcmp(v, "auto")) o->io_backend = ES_IO_AUTO;
        else if (!strcmp(v, "io_uring")) o->io_backend = ES_IO_URING;
        else if (!strcmp(v, "pread")) o->io_backend = ES_IO_PREAD;
        else cli_die("%s: --io-backend: expected auto, io_uring or pread, got '%s'", a->cmd, v);
    } else if (!strcmp(s, "--no-direct")) o->no_direct = true;
    else if (!strcmp(s, "--no-verify")) o->no_verify = true;
    else if (!strcmp(s, "--trace")) o->trace = cli_value(a, s);
    else if (!strcmp(s, "--tune")) o->tune = cli_value(a, s);
    else return false;
    return true;
}

int cli_split_list(const char *cmd, const char *flag, const char *list, char **copy,
                   char **items, int cap)
{
    *copy = strdup(list);
    if (!*copy) cli_die("out of memory");
    int n = 0;
    for (char *save = NULL, *t = strtok_r(*copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == cap) cli_die("%s: %s: at most %d values", cmd, flag, cap);
        items[n++] = t;
    }
    if (n == 0) cli_die("%s: %s: empty list", cmd, flag);
    return n;
}

int cli_policy(const char *v, es_policy *out)
{
    static const es_policy all[] = {ES_POLICY_EARLY, ES_POLICY_AFTER_ROUTING,
                                    ES_POLICY_ON_DEMAND};
    for (size_t i = 0; i < CLI_LEN(all); i++)
        if (!strcmp(v, es_policy_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

uint64_t cli_size_bytes(const char *what, const char *v, const char *model_path, bool allow_auto)
{
    if (!allow_auto && !strcmp(v, "auto"))
        cli_die("%s: expected a size such as 600M or 1.5G, got 'auto'", what);
    uint64_t bytes;
    const es_status st = es_mem_budget_parse(v, model_path, &bytes);
    if (st) cli_die_status(st, what);
    if (!strcmp(v, "auto")) { /* implicit: say what it chose */
        const char *source;
        const double lim = (double)es_memory_limit(&source) / (1 << 20);
        if (bytes)
            fprintf(stderr,
                    "estream: %s auto: %.1f MiB (%d %% of the %.1f MiB this process may "
                    "use, %s)\n",
                    what, (double)bytes / (1 << 20), ES_MEM_AUTO_PERCENT, lim, source);
        else
            fprintf(stderr,
                    "estream: %s auto: resident (the model file fits in %d %% of the %.1f "
                    "MiB this process may use, %s)\n",
                    what, ES_MEM_AUTO_PERCENT, lim, source);
    }
    return bytes;
}

uint64_t cli_budget_bytes(const char *cmd, const char *v, const char *model_path)
{
    char what[64];
    snprintf(what, sizeof(what), "%s: --mem", cmd);
    return cli_size_bytes(what, v, model_path, true);
}

void cli_stream_apply(const char *cmd, const cli_stream *o, const char *model_path,
                      es_session_params *sp)
{
    if (o->mem) sp->mem_budget_bytes = cli_budget_bytes(cmd, o->mem, model_path);
    sp->groups = o->groups;
    sp->banks = o->banks;
    sp->queue_depth = o->qd;
    sp->policy = o->policy;
    sp->stream = o->policy_set || o->io_limit_mbps > 0 || o->io_backend != ES_IO_AUTO ||
                 o->no_direct;
    sp->io_limit_bytes_per_s = o->io_limit_mbps * 1e6;
    sp->io_backend = o->io_backend;
    sp->direct_io = !o->no_direct;
    sp->verify_checksums = !o->no_verify;
    sp->trace_path = o->trace;
    if (sp->reference && (o->mem || o->groups || o->banks || o->qd || sp->stream))
        cli_die("%s: --mem and the streaming options need the fast path, not --reference", cmd);
}

es_tune *cli_stream_tune(const char *cmd, const cli_stream *o, const es_model *m,
                         const char *model_path, bool budget, es_session_params *sp)
{
    sp->tune = NULL;
    const bool explicit_file = o->tune && strcmp(o->tune, "none") != 0;
    if (o->tune && !explicit_file) return NULL;
    if (!budget || sp->groups || sp->banks || sp->queue_depth || sp->reference) {
        if (explicit_file)
            cli_die("%s: --tune needs --mem and no --groups, --banks or --qd (they fix what the "
                    "tuning would choose)", cmd);
        return NULL;
    }
    char *path = explicit_file ? strdup(o->tune) : es_tune_default_path(model_path);
    if (!path) cli_die("out of memory");
    struct stat sb;
    if (!explicit_file && stat(path, &sb) != 0) { /* no tuning: the default rule */
        free(path);
        return NULL;
    }
    es_tune *t = NULL;
    const uint64_t t0 = cli_now_ns();
    es_status st = es_tune_load(m, path, &t);
    const double load_ms = (double)(cli_now_ns() - t0) * 1e-6;
    if (st == ES_OK) {
        const int threads = sp->n_threads ? sp->n_threads : cli_default_threads();
        if ((st = es_tune_applies(t, threads, sp->kernels)) != ES_OK) {
            es_tune_destroy(t);
            t = NULL;
        }
    }
    if (st != ES_OK) {
        if (explicit_file) cli_die("%s: cannot use the tuning %s: %s", cmd, path, es_last_error());
        fprintf(stderr, "estream: %s: not using the tuning %s: %s; the default rule chooses the "
                        "arena (run estream tune again to fix)\n",
                cmd, path, es_last_error());
    } else {
        fprintf(stderr, "estream: %s: the arena comes from the tuning %s (read in %.1f ms)\n",
                cmd, path, load_ms);
    }
    free(path);
    sp->tune = t;
    return t;
}

uint64_t cli_other_measured(const es_run_stats *st)
{
    return st->peak_rss_bytes > st->arena_bytes ? st->peak_rss_bytes - st->arena_bytes : 0;
}

void cli_stream_print(FILE *f, const es_run_stats *st, bool json)
{
    if (json) {
        fprintf(f, "\"budget_bytes\": %llu, \"streaming\": %s",
                (unsigned long long)st->budget_bytes, st->streaming ? "true" : "false");
        if (!st->streaming) return;
        fprintf(f,
                ", \"other_bytes\": %llu, \"other_measured_bytes\": %llu, "
                "\"arena_bytes\": %llu, \"min_budget_bytes\": %llu, "
                "\"groups\": %d, \"banks\": %d, \"qd\": %d, \"policy\": \"%s\", "
                "\"io_backend\": \"%s\", \"direct\": %s, \"bytes_read\": %llu, "
                "\"read_seconds\": %.6f, \"read_bytes_per_second\": %.0f, "
                "\"wait_seconds\": %.6f, \"bubble_rate\": %.4f, \"groups_read\": %lld, "
                "\"groups_skipped\": %lld, \"tuned\": %s, \"predicted_seconds\": %.6f",
                (unsigned long long)st->other_bytes, (unsigned long long)cli_other_measured(st),
                (unsigned long long)st->arena_bytes, (unsigned long long)st->min_budget_bytes,
                st->groups, st->banks, st->queue_depth, st->policy, st->io_backend,
                st->direct ? "true" : "false", (unsigned long long)st->bytes_read, st->read_seconds,
                st->read_bytes_per_second, st->wait_seconds, st->bubble_rate,
                (long long)st->groups_read, (long long)st->groups_skipped,
                st->tuned ? "true" : "false", st->predicted_seconds);
        return;
    }
    const double mib = 1 << 20;
    if (st->budget_bytes && !st->streaming)
        fprintf(f, "budget:     %.0f MiB: every expert fits, run resident\n",
                (double)st->budget_bytes / mib);
    if (!st->streaming) return;
    if (st->budget_bytes)
        fprintf(f, "budget:     %.0f MiB = %.0f MiB other + arena %.0f MiB (smallest workable "
                   "budget %.0f MiB)\n",
                (double)st->budget_bytes / mib, (double)st->other_bytes / mib,
                (double)st->arena_bytes / mib, (double)st->min_budget_bytes / mib);
    fprintf(f, "other:      %.1f MiB estimated, %.1f MiB measured (peak RSS less the arena)\n",
            (double)st->other_bytes / mib, (double)cli_other_measured(st) / mib);
    fprintf(f, "arena:      %d banks x %d experts (%.1f MiB), %d reads in flight, policy %s\n",
            st->banks, st->groups, (double)st->arena_bytes / mib, st->queue_depth, st->policy);
    if (st->tuned)
        fprintf(f, "tuned:      chosen from the profiles in %.2f ms (predicted %.3f s for the "
                   "calibration prompt)\n",
                st->tune_select_seconds * 1e3, st->predicted_seconds);
    fprintf(f, "experts:    %.1f MiB read in %.3f s of I/O (%.0f MB/s, %s%s), %lld groups read, "
               "%lld skipped\n",
            (double)st->bytes_read / mib, st->read_seconds, st->read_bytes_per_second / 1e6,
            st->io_backend, st->direct ? ", O_DIRECT" : ", page cache",
            (long long)st->groups_read, (long long)st->groups_skipped);
    fprintf(f, "bubbles:    %.3f s waiting for experts (%.1f%% of the run)\n", st->wait_seconds,
            100.0 * st->bubble_rate);
}

/* estream serve: flags, the model, signals; the service itself is src/serve/. */
#include "cli/cli.h"
#include "serve/serve.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: estream serve -m MODEL [--mem BUDGET] [--host ADDR] [--port N]\n"
    "                     [--api-key KEY | --api-key-file F] [--max-queue N] [--batch-tokens N]\n"
    "                     [--timeout S] [-t THREADS] [options]\n"
    "\n"
    "A prefill-only HTTP service on one model. Concurrent requests are merged into batches, so\n"
    "under --mem they share each pass over the experts. Endpoints (docs/serve.md):\n"
    "  POST /v1/completions  OpenAI legacy completions: prompt (string, strings, ids, id lists),\n"
    "                        echo, logprobs 0..20, max_tokens 0 or 1 (the greedy next token;\n"
    "                        estream does not generate longer completions)\n"
    "  POST /v1/embeddings   OpenAI embeddings: input (string, strings, ids, id lists),\n"
    "                        encoding_format float or base64\n"
    "  POST /v1/score        estream score's records: {\"records\": [..], \"top\": N}\n"
    "  POST /v1/classify     {\"input\": S or [S..], \"labels\": [..]}: label probabilities\n"
    "  POST /tokenize, POST /detokenize, GET /tokenizer_info   vLLM's shapes\n"
    "  GET /v1/models, GET /health (503 while loading), GET /metrics (Prometheus)\n"
    "Every error is JSON in OpenAI's shape with the HTTP status: 400 bad request (the field\n"
    "named), 401 bad key, 404, 405, 408 request not in within --io-timeout, 413 can never fit\n"
    "(the limit named), 429 busy now: queue or memory full (Retry-After), 503 loading or\n"
    "stopping, 504 not done within --timeout. SIGTERM or SIGINT: stop accepting, finish the\n"
    "running batch, answer queued requests 503, exit 0 within --timeout plus a second (a\n"
    "second signal exits at once).\n"
    "\n"
    "  -m MODEL               the GGUF model or its pack\n"
    "  --host ADDR            address to listen on (default 127.0.0.1: this machine only)\n"
    "  --port N               TCP port (default 8080; 0: any free port, printed on stderr)\n"
    "  --api-key KEY          require \"Authorization: Bearer KEY\" on every endpoint but\n"
    "                         /health (visible to other users in ps: prefer --api-key-file)\n"
    "  --api-key-file F       the key is the first line of F, without the blanks around it\n"
    "  --model-name NAME      the model's id in /v1/models and replies (default: the file's\n"
    "                         name without .gguf/.pack)\n"
    "  --batch-tokens N       most tokens in one batch (default 2048; under --mem the largest\n"
    "                         of 4096, 2048, 1024, 512, then halving, that fits). A prompt may\n"
    "                         hold the model's context (max_model_len; --max-request-tokens\n"
    "                         when smaller): one longer than N runs in a batch of its own\n"
    "  --batch-wait MS        a batch the queue does not fill waits up to MS (default 50) for\n"
    "                         requests still arriving, each at most 5 ms after the last, and\n"
    "                         only while other requests are arriving or their clients were\n"
    "                         just answered: a lone request starts at once; 0: never wait\n"
    "  --max-queue N          requests admitted and not answered (default 256); more get 429\n"
    "  --max-connections N    connections served at once, a thread each (default 128); more\n"
    "                         wait their turn in the order they came\n"
    "  --max-connections-per-ip N  of them, from one client address (default half of\n"
    "                         --max-connections): a few clients cannot take them all\n"
    "  --max-body BYTES       largest request body (default 32M); larger: 413\n"
    "  --max-request-tokens N most tokens in one request, all prompts together (default 262144)\n"
    "  --request-mem BYTES    memory the admitted requests may hold together, estimated from\n"
    "                         their tokens and outputs (default under --mem: 1/32 of the\n"
    "                         budget, 32M..512M; else 1G), and as much again for bodies being\n"
    "                         received and parsed; both are counted in the budget, so a\n"
    "                         request cannot push the process over it\n"
    "  --timeout S            seconds a request may take from its first byte to its reply\n"
    "                         (default 600): 504 (408 when it is still arriving)\n"
    "  --io-timeout S         each request must arrive whole within S of the connection's\n"
    "                         accept or previous reply, and each reply be read within S\n"
    "                         (default 30): 408, or closed when nothing came\n"
    "  --pooling P            /v1/embeddings: mean (default), last, first, none\n"
    "  --no-normalize         /v1/embeddings: raw vectors (default L2-normalised)\n"
    "  --chat-template FILE   /v1/chat/completions: this Jinja chat template instead of the\n"
    "                         model's tokenizer.chat_template (docs/chat.md)\n"
    "  --rerank-template FILE /v1/rerank, /rerank: this Jinja prompt instead of Qwen3-Reranker's\n"
    "                         (variables query, document, instruction; answers \"yes\"/\"no\")\n"
    "  --no-implicit-bos      prompts as sent: a string with the tokenizer's BOS, echoed as its\n"
    "                         first token, and ids without one (default, for a model whose\n"
    "                         tokenizer adds BOS: a prompt not starting with BOS is conditioned\n"
    "                         on one that is not echoed: docs/prompts.md)\n"
    "  -t THREADS             compute threads (default: OMP_NUM_THREADS, else one per physical\n"
    "                         core this process may use, within its cgroup CPU quota: estream\n"
    "                         info --system)\n"
    "  --quiet                no line per failed connection on stderr\n";

static serve *g_sv;
static _Atomic int g_attached;

/* Waits for SIGINT/SIGTERM (blocked in every thread): the first stops the server gracefully,
 * a second exits at once. Before the model is ready there is nothing in flight: exit 0. */
static void *signal_thread(void *arg)
{
    sigset_t *set = arg;
    int sig, n = 0;
    for (;;) {
        if (sigwait(set, &sig)) continue;
        if (++n > 1 || !atomic_load(&g_attached)) {
            fprintf(stderr, "estream serve: %s, exiting now\n", n > 1 ? "second signal" : "stopped");
            _exit(n > 1 ? 128 + sig : 0);
        }
        fprintf(stderr, "estream serve: %s: finishing the running batch (queued requests get "
                "503)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        serve_shutdown(g_sv);
    }
    return NULL;
}

/* The first line of the file without the blanks around it: an editor's or echo's trailing
 * space, or a leading one, would otherwise be part of a key no client sends. */
static char *read_key(const char *path)
{
    size_t len;
    char *t = cli_read_file(path, 1 << 16, &len);
    t[strcspn(t, "\r\n")] = 0;
    size_t a = strspn(t, " \t"), b = strlen(t);
    while (b > a && (t[b - 1] == ' ' || t[b - 1] == '\t')) b--;
    memmove(t, t + a, b - a);
    t[b - a] = 0;
    if (!*t) cli_die("serve: --api-key-file %s: the first line is empty", path);
    return t;
}

/* The file's name without its folder and a .gguf or .pack ending. */
static char *default_name(const char *path)
{
    const char *b = strrchr(path, '/');
    char *n = strdup(b ? b + 1 : path);
    if (!n) cli_die("out of memory");
    const size_t k = strlen(n);
    if (k > 5 && (!strcmp(n + k - 5, ".gguf") || !strcmp(n + k - 5, ".pack"))) n[k - 5] = 0;
    return n;
}

static double seconds_flag(const char *flag, const char *v)
{
    char *end;
    const double s = strtod(v, &end);
    if (end == v || *end || !(s > 0) || s > 1e6) cli_die("serve: %s: expected seconds (> 0), got '%s'", flag, v);
    return s;
}

int cmd_serve(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "serve"};
    serve_opts o = serve_default_opts();
    const char *model = NULL, *key_file = NULL, *name = NULL, *req_mem = NULL, *body = NULL;
    int threads = 0, batch_tokens = 0;
    cli_stream so = {0};
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            fputs(cli_stream_help, stdout);
            return 0;
        } else if (!strcmp(s, "-m")) model = cli_value(&a, s);
        else if (!strcmp(s, "--host")) o.host = cli_value(&a, s);
        else if (!strcmp(s, "--port")) o.port = (int)cli_int(s, cli_value(&a, s), 0, 65535);
        else if (!strcmp(s, "--api-key")) o.api_key = cli_value(&a, s);
        else if (!strcmp(s, "--api-key-file")) key_file = cli_value(&a, s);
        else if (!strcmp(s, "--model-name")) name = cli_value(&a, s);
        else if (!strcmp(s, "--batch-tokens"))
            batch_tokens = (int)cli_int(s, cli_value(&a, s), 16, ES_MAX_BATCH_TOKENS);
        else if (!strcmp(s, "--max-queue")) o.max_queue = (int)cli_int(s, cli_value(&a, s), 1, 1 << 20);
        else if (!strcmp(s, "--batch-wait")) o.batch_wait_ms = (int)cli_int(s, cli_value(&a, s), 0, 10000);
        else if (!strcmp(s, "--max-connections"))
            o.max_connections = (int)cli_int(s, cli_value(&a, s), 1, 1 << 16);
        else if (!strcmp(s, "--max-connections-per-ip"))
            o.max_connections_per_ip = (int)cli_int(s, cli_value(&a, s), 1, 1 << 16);
        else if (!strcmp(s, "--max-body")) body = cli_value(&a, s);
        else if (!strcmp(s, "--max-request-tokens"))
            o.max_request_tokens = cli_int(s, cli_value(&a, s), 1, 1LL << 40);
        else if (!strcmp(s, "--request-mem")) req_mem = cli_value(&a, s);
        else if (!strcmp(s, "--timeout")) o.timeout_s = seconds_flag(s, cli_value(&a, s));
        else if (!strcmp(s, "--io-timeout")) o.io_timeout_s = seconds_flag(s, cli_value(&a, s));
        else if (!strcmp(s, "--pooling")) {
            const char *v = cli_value(&a, s);
            if (!strcmp(v, "mean")) o.pooling = ES_POOLING_MEAN;
            else if (!strcmp(v, "last")) o.pooling = ES_POOLING_LAST;
            else if (!strcmp(v, "first")) o.pooling = ES_POOLING_FIRST;
            else if (!strcmp(v, "none")) o.pooling = ES_POOLING_NONE;
            else cli_die("serve: --pooling: expected mean, last, first or none, got '%s'", v);
        } else if (!strcmp(s, "--no-normalize")) o.normalize = 0;
        else if (!strcmp(s, "--no-implicit-bos")) o.bos = ES_BOS_AS_SENT;
        else if (!strcmp(s, "--chat-template"))
            o.chat_template = cli_read_text(cli_value(&a, s), s);
        else if (!strcmp(s, "--rerank-template"))
            o.rerank_template = cli_read_text(cli_value(&a, s), s);
        else if (!strcmp(s, "-t")) threads = (int)cli_int(s, cli_value(&a, s), 1, ES_MAX_THREADS);
        else if (!strcmp(s, "--quiet")) o.quiet = 1;
        else if (cli_stream_flag(&a, s, &so)) continue;
        else cli_unknown(&a, s);
    }
    if (!model) cli_die("serve: no model: give -m MODEL");
    if (o.api_key && key_file) cli_die("serve: give --api-key or --api-key-file, not both");
    char *key = key_file ? read_key(key_file) : NULL;
    if (key) o.api_key = key;
    if (o.api_key && !*o.api_key) cli_die("serve: --api-key is empty");
    char *dflt_name = name ? NULL : default_name(model);
    o.model_name = name ? name : dflt_name;
    if (body) o.max_body_bytes = (size_t)cli_size_bytes("serve: --max-body", body, model, false);
    es_session_params sp = es_session_default_params();
    if (threads) sp.n_threads = threads;
    cli_stream_apply("serve", &so, model, &sp);
    if (req_mem) o.request_mem_bytes = cli_size_bytes("serve: --request-mem", req_mem, model, false);
    else if (sp.mem_budget_bytes) {
        uint64_t r = sp.mem_budget_bytes / 32;
        o.request_mem_bytes = r < (32u << 20) ? 32u << 20 : r > (512u << 20) ? 512u << 20 : r;
    } else o.request_mem_bytes = 1u << 30;

    /* every thread the server makes inherits the blocked signals; one thread takes them */
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    char err[256];
    g_sv = serve_start(&o, err, sizeof(err));
    if (!g_sv) cli_die("serve: %s", err);
    pthread_t st;
    if (pthread_create(&st, NULL, signal_thread, &set)) cli_die("serve: cannot start a thread");
    pthread_detach(st);
    fprintf(stderr, "estream serve: listening on http://%s%s%s:%d/ (loading %s)\n",
            strchr(o.host, ':') ? "[" : "", o.host, strchr(o.host, ':') ? "]" : "",
            serve_port(g_sv), model);

    es_model *m = cli_open_model(model, 0);
    es_tune *tune = cli_stream_tune("serve", &so, m, model, sp.mem_budget_bytes > 0, &sp);
    const es_status rc = serve_attach(g_sv, m, &sp, batch_tokens);
    es_tune_destroy(tune);
    if (rc) cli_die_status(rc, "serve");
    atomic_store(&g_attached, 1);
    fprintf(stderr, "estream serve: ready: model \"%s\", %d threads%s%s\n", o.model_name,
            sp.n_threads, sp.mem_budget_bytes ? ", under --mem " : "",
            sp.mem_budget_bytes ? so.mem : "");
    serve_wait(g_sv);
    serve_stop(g_sv);
    es_model_close(m);
    free(key);
    free(dflt_name);
    free((char *)o.chat_template);
    free((char *)o.rerank_template);
    fprintf(stderr, "estream serve: stopped\n");
    return 0;
}

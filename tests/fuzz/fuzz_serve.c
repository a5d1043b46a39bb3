/*
 * libFuzzer harness for estream serve's request parsers and replies (src/serve/api*.c and the
 * records they build, src/records/), and its HTTP/1.1 wire format (src/serve/http1.c).
 * The first input byte picks what the rest is:
 * - below 0xF0: a request body for an endpoint (the byte modulo 8). A body that parses into a
 *   request gets outputs filled in as the executor would (finite log-probs, ids in the
 *   vocabulary, a NaN here and there), then its reply is built and serialised; an error must
 *   carry an HTTP status of 4xx/5xx and a message. Jansson's allocations are counted
 *   (serve/jmem.h): parsing the body must stay within sv_json_parse_bound, and making the reply
 *   and its text within sv_api_reply_bytes, the bounds the server charges its memory pools.
 * - 0xF0 and above: bytes as a client sends them: a request head (its end found, then parsed:
 *   a request, or a refusal with a 4xx/5xx status and a reason), and when it says chunked, the
 *   body after it, decoded at once and in pieces, which must agree. No model runs.
 *   make fuzz && build-fuzz/fuzz_serve -max_total_time=60 -dict=tests/fuzz/serve.dict \
 *       NEW_DIR tests/fuzz/corpus-serve
 * The model (estream's tiny synthetic OLMoE with Llama's SentencePiece vocabulary from the shared
 * data, else its built-in byte-level BPE, and a ChatML chat template) is written once to TMPDIR
 * in LLVMFuzzerInitialize and opened for the run.
 */
#include "job/record.h"
#include "serve/api.h"
#include "serve/http1.h"
#include "serve/jmem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static es_model *g_model;
static sv_api_env g_env;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("ESTREAM_LOG", "0", 0);
    sv_jmem_install(); /* before any JSON is made */
    const char *tmp = getenv("TMPDIR");
    char path[256];
    snprintf(path, sizeof(path), "%s/fuzz_serve.%d.gguf", tmp && *tmp ? tmp : "/tmp",
             (int)getpid());
    /* Llama's SentencePiece vocabulary when the shared data is there ("yes" and "no" one token
     * each, so reranks run), and a ChatML template, so chats render */
    const char *data = getenv("ESTREAM_DATA");
    char vocab[512];
    snprintf(vocab, sizeof(vocab), "%s/vocab/ggml-vocab-llama-spm.gguf",
             data && *data ? data : "../shared/data");
    const es_synth_opts so = {
        .preset = "tiny", .type = "f32", .seed = 1,
        .vocab_path = access(vocab, R_OK) == 0 ? vocab : NULL,
        .chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                         "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>"
                         "assistant\n{% endif %}"};
    if (es_synth(&so, path) || es_model_open(path, 0, &g_model)) abort();
    unlink(path);
    g_env = (sv_api_env){
        .m = g_model,
        .model_name = "fuzz",
        .pooling = ES_POOLING_MEAN,
        .normalize = 1,
        .max_request_tokens = 1 << 14,
        .max_prompt_tokens = 2048,
        .max_seqs = 64,
        .max_piece_bytes = sv_max_piece_bytes(g_model),
        .created = 1,
    };
    return 0;
}

/* What es_session_run would write: every requested output, deterministic. */
static void fill(es_seq *s, int n_vocab, int n_embd, uint32_t *seed)
{
    for (size_t i = 0; i < s->n_ids; i++) {
        *seed = *seed * 1103515245u + 12345u;
        if (s->token_logprob) s->token_logprob[i] = *seed % 97 ? -(float)(*seed % 1000) / 37 : NAN;
        if (s->token_rank) s->token_rank[i] = (int32_t)(*seed % 5) + 1;
        for (int k = 0; k < s->top_n; k++) {
            s->top_ids[i * (size_t)s->top_n + (size_t)k] = (int32_t)((*seed + (uint32_t)k) %
                                                                      (uint32_t)n_vocab);
            s->top_logprobs[i * (size_t)s->top_n + (size_t)k] = -(float)k;
        }
    }
    for (int k = 0; k < s->next_top_k; k++) {
        s->next_ids[k] = (int32_t)((*seed + (uint32_t)k * 7) % (uint32_t)n_vocab);
        s->next_logprobs[k] = -(float)k - 0.5f;
    }
    for (int k = 0; k < s->n_labels; k++) s->label_logprobs[k] = -(float)(k + 1);
    if (s->embedding) {
        const size_t rows = s->pooling == ES_POOLING_NONE ? s->n_ids : 1;
        for (size_t j = 0; j < rows * (size_t)n_embd; j++) s->embedding[j] = (float)j * 0.25f;
    }
}

static void check_error(const sv_err *e)
{
    if (e->status < 400 || e->status > 599 || !e->msg[0]) abort();
    json_t *b = sv_err_body(e);
    char *s = b ? json_dumps(b, JSON_COMPACT) : NULL;
    free(s);
    json_decref(b);
}

/* Decodes the chunked body p[0..n) at once and, in a copy, as it would arrive in pieces: the
 * two must agree on the outcome, the data and where the body ends. */
static void chunked_both_ways(const char *p, size_t n)
{
    char *a = malloc(n + 1), *b = malloc(n + 1);
    if (!a || !b) abort();
    memcpy(a, p, n);
    memcpy(b, p, n);
    sv_chunked ca = {0}, cb = {0};
    size_t at_a = 0, out_a = 0, at_b = 0, out_b = 0;
    const char *why;
    const int ra = sv_chunked_decode(&ca, a, n, &at_a, &out_a, &why);
    if (ra < 0 && !why) abort();
    int rb = 0;
    for (size_t lim = 0; lim < n && rb == 0;) {
        lim += 1 + (lim * 7 + n) % 13;
        if (lim > n) lim = n;
        rb = sv_chunked_decode(&cb, b, lim, &at_b, &out_b, &why);
        if (out_b > at_b || at_b > lim) abort();
    }
    if (ra != rb || (ra == 1 && (at_a != at_b || out_a != out_b || memcmp(a, b, out_a))))
        abort();
    free(a);
    free(b);
}

static void fuzz_http(const uint8_t *data, size_t size)
{
    char *b = malloc(size + 1);
    if (!b) abort();
    memcpy(b, data, size);
    b[size] = 0;
    size_t end = 0;
    const int st = sv_http_head_end(b, size, &end);
    if (st == 0) {
        if (end > size || end > SV_HEAD_MAX) abort();
        sv_head h;
        char why[200] = "";
        const int ps = sv_http_parse_head(b, end, &h, why, sizeof(why));
        if (ps == 0) {
            if (!h.method || !h.path || (h.chunked && h.has_length)) abort();
            if (h.chunked) chunked_both_ways((const char *)data + end, size - end);
        } else if (ps < 400 || ps > 505 || !why[0]) {
            abort();
        }
    } else if (st != -1 && st != 414 && st != 431) {
        abort();
    }
    char head[512];
    if (!sv_http_reply_head(head, sizeof(head), st > 0 ? st : 200, "application/json", size, "1",
                            "GET", true))
        abort();
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] >= 0xF0) {
        fuzz_http(data + 1, size - 1);
        return 0;
    }
    static const int eps[] = {SV_EP_COMPLETIONS, SV_EP_EMBEDDINGS, SV_EP_SCORE,  SV_EP_CLASSIFY,
                              SV_EP_TOKENIZE,    SV_EP_DETOKENIZE, SV_EP_MODELS, SV_EP_TOKENIZER_INFO,
                              SV_EP_CHAT,        SV_EP_RERANK,     SV_EP_RERANK_TEI};
    const int ep = eps[data[0] % (sizeof(eps) / sizeof(eps[0]))];
    json_error_t je;
    /* the tree and what the parser makes of it stay within the bound the server takes */
    sv_jmem js;
    sv_jmem_begin(&js);
    json_t *body = json_loadb((const char *)data + 1, size - 1, 0, &je);
    if (!body) {
        sv_jmem_end(&js);
        return 0; /* jansson's own parser is not ours to fuzz */
    }
    sv_err e = {0};
    if (ep <= SV_EP_LAST_MODEL) {
        sv_req *q = sv_api_parse(&g_env, ep, body, &e);
        sv_jmem_end(&js);
        const uint64_t bound = sv_json_parse_bound((const char *)data + 1, size - 1);
        if (js.peak > bound) {
            fprintf(stderr, "parsing took %llu bytes, bound %llu\n",
                    (unsigned long long)js.peak, (unsigned long long)bound);
            abort();
        }
        if (!q) {
            check_error(&e);
        } else {
            uint32_t seed = (uint32_t)size;
            int64_t tokens = 0;
            for (int i = 0; i < q->n_units; i++) {
                const rec *r = &q->units[i].r;
                if (r->error || r->n_seqs < 1) abort(); /* sv_check_units lets none through */
                for (int j = 0; j < r->n_seqs; j++) {
                    if (r->seqs[j].n_ids < 1) abort();
                    /* the record's own arrays, as es_session_run would write them */
                    fill((es_seq *)&r->seqs[j], es_model_n_vocab(g_model),
                         es_model_n_embd(g_model), &seed);
                }
                es_record_finish(r->r); /* as es_session_run_records does after a run */
                tokens += r->n_tokens;
            }
            if (tokens != q->n_tokens || tokens > g_env.max_request_tokens || !q->mem_bytes) abort();
            /* the reply, tree and text at once, within the request's charge for it */
            sv_jmem_begin(&js);
            json_t *reply = sv_api_reply(&g_env, q);
            char *s = reply ? json_dumps(reply, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                                    JSON_REAL_PRECISION(9))
                            : NULL;
            sv_jmem_end(&js);
            if (js.peak > sv_api_reply_bytes(&g_env, q)) {
                fprintf(stderr, "the reply took %llu bytes, bound %llu\n",
                        (unsigned long long)js.peak,
                        (unsigned long long)sv_api_reply_bytes(&g_env, q));
                abort();
            }
            free(s);
            json_decref(reply);
            sv_req_free(q);
        }
    } else {
        sv_jmem_end(&js);
        json_t *reply = sv_api_direct(&g_env, ep, body, &e);
        if (!reply) check_error(&e);
        char *s = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
        free(s);
        json_decref(reply);
    }
    json_decref(body);
    return 0;
}

/*
 * estream: fast, memory-bounded prefill of Mixture-of-Experts language models (libestream).
 *
 *     es_model *m;
 *     es_session *s;
 *     if (es_model_open("model.gguf", 0, &m)) return fprintf(stderr, "%s\n", es_last_error()), 1;
 *     es_session_params p = es_session_default_params();
 *     p.mem_budget_bytes = (uint64_t)1 << 30;               // stream the experts under 1 GiB
 *     if (es_session_create(m, &p, &s)) return fprintf(stderr, "%s\n", es_last_error()), 1;
 *     int32_t ids[64];
 *     float lp[64];                                         // lp[i] = log P(ids[i] | ids[<i])
 *     size_t n;
 *     es_tokenize(m, "The cat sat on the mat.", 23, 1, 0, ids, 64, &n); // BOS as the model asks
 *     es_seq q = {.ids = ids, .n_ids = n, .token_logprob = lp};
 *     es_session_run(s, &q, 1);
 *     es_session_destroy(s), es_model_close(m);
 *
 * Conventions, true of every declaration below:
 * - Errors: a function that can fail returns es_status (ES_OK is 0); on failure es_last_error()
 *   holds a one-line message (thread-local, valid until the next failure on the thread) and the
 *   out-parameters are NULL or zero.
 * - Ownership: a handle from an _open or a _create is the caller's until it is passed to the
 *   matching _close or _destroy (which accept NULL). Pointers a function returns into a handle
 *   (names, token pieces, results) are borrowed: valid until that handle is closed or destroyed,
 *   or as the function says. Buffers the caller passes stay the caller's; the library keeps no
 *   pointer after a call returns, except es_seq's output arrays, written during es_session_run.
 *   Static strings (names, versions) live as long as the process.
 * - Names: es_<object>_<verb>. _open/_close for a handle that reads its file for its whole life
 *   (a model maps its file); _create/_destroy for every other handle, whatever makes it;
 *   es_<enum>_name() is an enum value's static name.
 * - Threads: an es_model is read-only after es_model_open and may be shared by threads;
 *   everything a run changes lives in an es_session, used by one thread at a time.
 * - Versions: ES_VERSION_MAJOR changes when this header breaks a caller: a function removed,
 *   renamed or changed, or a struct below changing size or layout. No struct carries a size
 *   field, so a field added to one is a MAJOR change too; with MAJOR the shared library's soname
 *   (libestream.so.MAJOR). New functions and enum values bump MINOR.
 * - estream_tools.h, the helpers of estream's own command line, server, tests and benchmarks,
 *   is not part of this promise and is not installed.
 *
 * Contents: status and errors; models; tokens; chat templates; kernel tables; sessions; batches
 * and outputs;
 * records, batches and sizing for jobs; statistics; packs and output files.
 * Design: docs/notes.md and the README beside this header's source.
 */
#ifndef ESTREAM_H
#define ESTREAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version (see "Versions" above). es_version() is the version of the library
 * running ("2.0.0"), which may differ from the header a caller was compiled with. */
#define ES_VERSION_MAJOR 2
#define ES_VERSION_MINOR 1
#define ES_VERSION_PATCH 0

/* What the shared library exports: only the functions declared with ES_API (the objects are
 * built with -fvisibility=hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define ES_API __attribute__((visibility("default")))
#else
#define ES_API
#endif

ES_API const char *es_version(void);

/* ---- status and errors ------------------------------------------------------------------------ */
typedef enum es_status {
    ES_OK = 0,
    ES_E_INVAL = -1,       /* bad argument: a bug in the caller, or a bad flag          */
    ES_E_NOMEM = -2,       /* allocation failed                                         */
    ES_E_BUDGET = -3,      /* the plan does not fit the memory budget                   */
    ES_E_IO = -4,          /* open/read/write failed; details in es_last_error()         */
    ES_E_FORMAT = -5,      /* not a valid GGUF file, or a corrupt one                    */
    ES_E_UNSUPPORTED = -6, /* valid input, but a feature estream does not have           */
    ES_E_CANCELLED = -7,   /* the abort callback asked to stop; the session stays usable  */
    ES_E_SHORT_BUFFER = -8, /* the caller's buffer is too small: the size needed is returned */
} es_status;

/* Short English name of a status ("format error"). Never NULL. */
ES_API const char *es_status_name(es_status st);
/* The message of the last failure on this thread ("" if none). Valid until the next failure. */
ES_API const char *es_last_error(void);

/* Where the library's log lines go (warnings, and with ESTREAM_LOG=2 or 3 information and
 * debugging). Default (cb NULL): stderr, each line prefixed "estream: ". Otherwise cb gets each
 * line without prefix or newline, with its level (ES_LOG_LEVEL_*), on the thread that logged it,
 * possibly several threads at once; user is passed through. Lines at levels above ESTREAM_LOG's
 * (default 1) are not produced. Process-wide, like llama_log_set; may be called at any time. */
enum { ES_LOG_LEVEL_WARN = 1, ES_LOG_LEVEL_INFO = 2, ES_LOG_LEVEL_DEBUG = 3 };
typedef void (*es_log_fn)(void *user, int level, const char *line);
ES_API void es_log_set(es_log_fn cb, void *user);


/* ---- models ----------------------------------------------------------------------------------- */
typedef struct es_model es_model; /* opaque: a GGUF model (or vocabulary-only file) */

/* Flags for es_model_open(). */
enum {
    ES_OPEN_VOCAB_ONLY = 1 << 0, /* read only the tokenizer; the file may have no weights */
};

/* Opens the GGUF at path: validates the file, reads hyperparameters, tensors and tokenizer.
 * On success *out owns the mapping; release it with es_model_close(). On failure *out is NULL.
 * Errors: ES_E_IO (cannot open), ES_E_FORMAT (malformed), ES_E_UNSUPPORTED (unknown arch),
 * ES_E_NOMEM; es_last_error() names the file. Warnings logged while opening (stderr, see
 * ESTREAM_LOG) are printed only if the open succeeds. */
ES_API es_status es_model_open(const char *path, unsigned flags, es_model **out);
ES_API void es_model_close(es_model *m); /* NULL is a no-op */

/* Architecture name ("olmoe"), vocabulary size, context length. */
ES_API const char *es_model_arch(const es_model *m);
ES_API int es_model_n_vocab(const es_model *m);
ES_API int es_model_n_ctx(const es_model *m);

/* Layers and experts per layer (0 for a vocabulary-only model). */
ES_API int es_model_n_layer(const es_model *m);
ES_API int es_model_n_expert(const es_model *m);

/* Width of the embeddings (n_embd). */
ES_API int es_model_n_embd(const es_model *m);

/* A model's architecture and hyperparameters, as the loader read them. */
typedef struct es_model_desc {
    const char *arch;         /* es_model_arch() */
    const char *family_names; /* the models the family is known by ("OLMoE"); NULL for a
                               * vocabulary-only open */
    int n_vocab;
    int vocab_only;           /* opened with ES_OPEN_VOCAB_ONLY: the fields below are 0 */
    int n_ctx, n_embd, n_layer, n_head, n_head_kv;
    int n_embd_head;          /* key (and query) head size */
    int n_embd_head_v;        /* value head size */
    int n_rot;                /* rotary dimensions per head */
    int n_expert, n_expert_used, n_ff_exp;
    int gating_sigmoid;       /* 1: the router ranks a sigmoid of each logit, 0: a softmax */
    int topk_renorm;          /* 1: the chosen experts' weights are renormalised */
    int n_expert_shared, n_ff_shexp; /* shared experts of every MoE layer and their FFN */
    int n_layer_dense_lead, n_ff;    /* leading layers with a dense FFN, and its size */
    int n_conv_layers, n_conv_taps;  /* short-convolution layers instead of attention */
    int n_lora_kv;            /* MLA's compressed KV row (0: not MLA) */
    int mla_split;            /* MLA: attn_k_b/attn_v_b (1) or one joined attn_kv_b (0) */
    float rope_freq_base, rope_freq_scale, rope_ext_factor; /* scale 1: none; ext 0: not YaRN */
    float attn_scale, rms_eps;
    int expert_layer;         /* the first MoE layer */
    uint64_t expert_bytes;    /* bytes of one expert (gate, up and down) in it */
    const char *expert_types[3]; /* gate, up, down weight type names there */
} es_model_desc;
/* Static strings, or valid until es_model_close(). */
ES_API void es_model_describe(const es_model *m, es_model_desc *out);


/* ---- tokens ----------------------------------------------------------------------------------- */
/* Tokenizes text[0..len) into ids. add_special: add BOS/EOS as the model's tokenizer asks
 * (tokenizer.ggml.add_bos_token), as llama.cpp does. parse_special: recognise special-token
 * text such as "<|endoftext|>". On success *n_out is the number of ids; if it exceeds cap,
 * only cap ids are written and ES_E_SHORT_BUFFER is returned with *n_out set to the number
 * needed. */
ES_API es_status es_tokenize(const es_model *m, const char *text, size_t len, int add_special,
                      int parse_special, int32_t *ids, size_t cap, size_t *n_out);
/* Whether the tokenizer adds a BOS token at the start of a sequence; the BOS and EOS tokens
 * (-1 when the model has none). */
ES_API int es_model_add_bos(const es_model *m);
ES_API int32_t es_model_bos(const es_model *m);
ES_API int32_t es_model_eos(const es_model *m);
/* The text of one token, as detokenization produces it; *len_out its length. NULL if id is out of
 * range. Valid until es_model_close(). */
ES_API const char *es_token_piece(const es_model *m, int32_t id, size_t *len_out);


/* ---- chat templates --------------------------------------------------------------------------
 * A model's chat template (the GGUF key tokenizer.chat_template, Jinja) rendered as Hugging
 * Face's apply_chat_template renders it with Python's jinja2, byte for byte, by an interpreter
 * of the Jinja subset chat templates use (docs/chat.md). Strict: a construct it does not
 * implement is an error naming it and the template line, never a different prompt. */

/* One message. role and content are UTF-8 and NUL-terminated; content NULL is Python's None. */
typedef struct es_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool", ... */
    const char *content; /* NULL: none */
} es_chat_message;

/* The model's chat template, borrowed from its metadata: *len_out bytes, NOT NUL-terminated,
 * valid until es_model_close(). NULL (and *len_out 0) when the model has none. len_out may be
 * NULL. */
ES_API const char *es_model_chat_template(const es_model *m, size_t *len_out);

/* Renders a chat template: tmpl (Jinja source, NUL-terminated; NULL: the model's
 * tokenizer.chat_template) with the variables messages (messages[0..n_messages), each a dict of
 * role then content), add_generation_prompt (a bool), bos_token and eos_token (the text of the
 * model's BOS and EOS tokens, "" when it has none), tools and documents (None), in the
 * environment of Hugging Face's apply_chat_template (trim_blocks, lstrip_blocks, loop controls,
 * raise_exception, strftime_now, tojson as json.dumps with ensure_ascii off).
 * On success the text is in buf[0..cap), NUL-terminated, and *n_out is its length without the
 * NUL. If the text needs more than cap - 1 bytes, returns ES_E_SHORT_BUFFER with *n_out = the
 * text's length (a buffer of *n_out + 1 bytes holds it) and buf holds only "" (if cap > 0).
 * Errors: ES_E_INVAL (NULL m or n_out, n_messages < 0, messages NULL with n_messages > 0, buf
 * NULL with cap > 0, a NULL role, text that is not valid UTF-8), ES_E_UNSUPPORTED (tmpl NULL
 * and the model has no template), ES_E_FORMAT (the template's error: raise_exception's
 * message, an unsupported construct, a syntax error, a limit; es_last_error() says which and on
 * which template line), ES_E_NOMEM. Thread-safe: m is only read. */
ES_API es_status es_chat_render(const es_model *m, const char *tmpl,
                                const es_chat_message *messages, int n_messages,
                                int add_generation_prompt, char *buf, size_t cap, size_t *n_out);


/* ---- kernel tables ---------------------------------------------------------------------------- */
/* The kernel table the fast path uses: "scalar", "avx2", "avxvnni", "avx512" or "amx" on x86-64,
 * "scalar", "asimd", "neon" or "i8mm" on AArch64 (the best this CPU and OS support, or the one
 * ESTREAM_ISA names). */
ES_API const char *es_kernels_name(void);
/* Whether this CPU and OS can run the named kernel table. */
ES_API int es_kernels_available(const char *isa);
/* NULL if this CPU and OS run the named kernel table; otherwise why not, as a static sentence
 * (for "amx": which of AMX-TILE/AMX-INT8 in CPUID, the tile state in XCR0 or the kernel's
 * permission is missing). An unknown name gets a sentence too. */
ES_API const char *es_kernels_why_not(const char *isa);
/* Selects a kernel table ("scalar", "avx2", "avxvnni", "avx512", "amx", "asimd", "neon", "i8mm"; NULL: the best available, or
 * ESTREAM_ISA). ES_E_INVAL for an unknown name, ES_E_UNSUPPORTED for a table this CPU lacks. Not thread-safe:
 * call it while no prefill runs. */
ES_API es_status es_kernels_select(const char *isa);


/* The names of every kernel table (es_kernels_select()), NULL-terminated, static; those this
 * CPU runs pass es_kernels_available(). */
ES_API const char *const *es_kernels_list(void);


/* ---- sessions ---------------------------------------------------------------------------------
 * A session is one user's run state on a model (llama.cpp's context): the thread pool, the
 * kernel table, activation buffers, expert plans and, when experts are streamed, the arena and
 * the loader. The model stays immutable; several sessions may share one model (each from its own
 * thread). A session is used by one thread at a time. */
typedef struct es_session es_session;

/* The most compute threads a prefill can use. */
#define ES_MAX_THREADS 256
#define ES_MAX_BATCH_TOKENS (1 << 22) /* max_tokens: most tokens in one batch */
#define ES_MAX_BATCH_SEQS 4096        /* max_seqs: most sequences in one batch */



/* When the expert loader may start reading a group (docs/design.md §6). */
typedef enum es_policy {
    ES_POLICY_EARLY = 0,         /* as soon as a bank is free, reading ahead into later layers */
    ES_POLICY_AFTER_ROUTING = 1, /* once the layer's routing is known */
    ES_POLICY_ON_DEMAND = 2,     /* only when the compute threads need the group */
} es_policy;
ES_API const char *es_policy_name(es_policy p); /* "early", "after-routing", "on-demand" */

/* The configurator's result for one model on one machine (`estream tune`, docs/design.md §7): the
 * storage figures and one profile per candidate group size, from which a budget's arena (G, B)
 * and queue depth Q are chosen in milliseconds. Stored beside the model as "<model>.tune". */
typedef struct es_tune es_tune;
/* Reads a tune file made for model m (checked: the model file's size and a hash of its
 * header). Errors: ES_E_IO (cannot read), ES_E_FORMAT (not a tune file, damaged, or made for
 * another model: the message says which). */
ES_API es_status es_tune_load(const es_model *m, const char *path, es_tune **out);
ES_API void es_tune_destroy(es_tune *t); /* NULL is a no-op */
/* Whether t's profiles apply to runs with n_threads threads on the kernel table isa (NULL: the
 * default) on this CPU: ES_OK, or ES_E_INVAL with the reason in es_last_error(). */
ES_API es_status es_tune_applies(const es_tune *t, int n_threads, const char *isa);

/* How the expert loader reads the model file. */
typedef enum es_io_backend {
    ES_IO_AUTO = 0,  /* io_uring when a ring can be created (not ENOSYS/EPERM), else pread */
    ES_IO_URING = 1, /* io_uring only (ES_E_UNSUPPORTED where no ring can be made) */
    ES_IO_PREAD = 2, /* one pread worker thread per queue slot */
} es_io_backend;
ES_API const char *es_io_backend_name(es_io_backend b); /* "auto", "io_uring", "pread" */

/* A session's parameters. Start from es_session_default_params() and change what you need;
 * a field documented "0 = chosen" is chosen at creation from the model and the machine. */
typedef struct es_session_params {
    int n_threads;      /* compute threads, 1..ES_MAX_THREADS (default: OMP_NUM_THREADS where it
                         * names a count, else one per physical core among the CPUs this process
                         * may run on (its affinity mask), at most its cgroup's CPU quota rounded
                         * up; at most ES_MAX_THREADS; 0 also means that) */
    int reference;      /* 1 = the plain reference path (single-threaded oracle); default 0 */
    int max_tokens;     /* most tokens in one prefill (a batch: all its sequences together; each
                         * sequence at most the model's context); buffers are sized for it at
                         * creation. 0 (default) = grow on demand to the largest seen */
    int max_seqs;       /* most sequences in one batch, 1..ES_MAX_BATCH_SEQS (default 64; 0 also
                         * means that) */
    int plan_capacity;  /* routes per expert-operator invocation (default 16384); results do
                         * not depend on it (tests set it small to split each layer) */
    const char *kernels; /* "scalar", "avx2", "avxvnni", "avx512", "amx", "asimd", "neon", "i8mm";
                          * NULL (default) = es_kernels_name() at creation */

    /* Memory-bounded runs (expert streaming, docs/design.md §5-6). With mem_budget_bytes set, the
     * session measures the memory everything but the experts needs (M_other: what the process
     * holds now, the activation buffers for max_tokens, the non-expert weights, the logits the
     * caller asked to have accounted), gives the rest to an arena of `banks` x `groups` expert
     * slots (largest G <= 8 with at least 2 banks unless set below) and streams the experts from
     * the model's file (a GGUF or a pack) with O_DIRECT reads, so the process's peak resident
     * memory stays under the budget. A budget too small for any arena is ES_E_BUDGET with the
     * smallest budget that works in es_last_error(); a budget that holds every expert runs
     * resident. stream, groups, banks or queue_depth set without a budget force streaming with
     * that arena (defaults G 8, B 2). The logits are bit-identical to the resident run's. */
    int stream;                 /* 1: stream even without a budget or G/B/Q; default 0 */
    uint64_t mem_budget_bytes;  /* default 0: no budget */
    int groups;                 /* G, experts per bank (0 = chosen) */
    int banks;                  /* B (0 = chosen) */
    int queue_depth;            /* Q, reads in flight (0 = chosen: 4, or the tune file's) */
    es_policy policy;           /* when reads may start (default ES_POLICY_EARLY) */
    double io_limit_bytes_per_s; /* emulate slower storage (token bucket); default 0: none */
    es_io_backend io_backend;   /* default ES_IO_AUTO */
    int direct_io;              /* 1 (default): O_DIRECT reads, so the page cache does not
                                 * grow past the budget; 0: buffered (the budget is then not
                                 * honest) */
    int verify_checksums;       /* 1 (default): check each pack record's XXH3-64 as it is read */
    int max_logits_rows;        /* rows of logits the caller will hold during a prefill, counted
                                 * in M_other (default 1: the last position only) */
    int head_outputs;           /* 1 (default): es_session_run may be asked for outputs computed
                                 * from logits (log-probs, ranks, top, next token, labels, logits),
                                 * and the head's chunk of logit rows is counted in M_other;
                                 * 0: the session runs prefills, perplexities and embeddings only
                                 * (no chunk counted; es_session_run refuses head outputs) */
    uint64_t reserve_bytes;     /* memory the caller will allocate during the session beyond what
                                 * it holds at creation (a server's requests and responses),
                                 * counted in M_other; default 0 */
    const char *trace_path;     /* write a Chrome trace (Perfetto) of each prefill here;
                                 * default NULL: none */
    const es_tune *tune;        /* with a budget and no groups/banks/queue_depth: choose them
                                 * from these profiles (es_tune_applies must hold) instead of the
                                 * default rule; must outlive session creation only. Default
                                 * NULL */

    /* Callbacks, all optional (default NULL), called on the thread that runs the prefill. */
    int (*abort_cb)(void *user);  /* es_session_run checks it before each layer and each chunk of
                                   * the head, es_session_prefill and es_session_perplexity
                                   * before each layer: non-zero stops the call with
                                   * ES_E_CANCELLED (no output is valid; the session stays
                                   * usable) */
    /* es_session_run calls it after each layer and after the head: steps_done of n_steps
     * (n_steps = layers + 1, the head being the last), and the batch's tokens */
    void (*progress_cb)(void *user, int steps_done, int n_steps, int64_t tokens);
    void *cb_user;              /* passed to both */
} es_session_params;

/* The defaults documented field by field above: a thread per physical core this process may use,
 * the fast path, buffers that grow on demand, the default kernel table, no budget; O_DIRECT and
 * checksums on. */
ES_API es_session_params es_session_default_params(void);

/* Creates a session; the kernel table is copied, so a later es_kernels_select() does not affect
 * it. Errors: ES_E_INVAL (bad parameters), ES_E_UNSUPPORTED (kernel table or weight type),
 * ES_E_NOMEM. */
ES_API es_status es_session_create(const es_model *m, const es_session_params *p, es_session **out);
ES_API void es_session_destroy(es_session *s); /* NULL is a no-op */

/* Prefill over ids[0..n): logits [n][n_vocab] if all_logits, else [n_vocab] of the last
 * position. Same checks as es_prefill(); n > max_tokens (when set) is ES_E_INVAL. */
ES_API es_status es_session_prefill(es_session *s, const int32_t *ids, size_t n, int all_logits,
                             float *out);

/* "<model path>.tune" in a malloc'd string the caller frees (NULL when out of memory). */
ES_API char *es_tune_default_path(const char *model_path);
/* Runs the prefill over ids[0..n) on a session made from p (NULL: the defaults) for this one
 * call, with max_tokens n (use a session to run several prompts without rebuilding the pool
 * and buffers). Writes logits to out: [n][n_vocab] if all_logits, else [n_vocab] for the last
 * position. The caller owns out. Ids out of range, n == 0 or n > n_ctx give ES_E_INVAL. */
ES_API es_status es_prefill(es_model *m, const int32_t *ids, size_t n, const es_session_params *p,
                     int all_logits, float *out);

/* Perplexity as es_perplexity(), on this session. */
typedef struct es_ppl_result es_ppl_result;
typedef void (*es_ppl_progress_fn)(void *user, int done, int total, double ppl);
ES_API es_status es_session_perplexity(es_session *s, const int32_t *ids, size_t n, int n_ctx,
                                int max_chunks, es_ppl_progress_fn progress, void *user,
                                es_ppl_result *out);

/* Perplexity with llama.cpp's llama-perplexity convention: the ids (tokenized with BOS when the
 * tokenizer adds one) are cut into non-overlapping chunks of n_ctx; when the model adds BOS, the
 * first id of each chunk is replaced by BOS; only the second half of each chunk is scored
 * (positions n_ctx/2 .. n_ctx-2 predict the next id). Needs n >= 2*n_ctx ids. */
struct es_ppl_result {
    double ppl;       /* exp(mean negative log-likelihood) */
    double nll;       /* mean negative log-likelihood, nats */
    int64_t n_scored; /* predictions scored */
    int chunks;       /* chunks evaluated */
};
/* The progress callback (es_ppl_progress_fn above) is called after each chunk: chunks done,
 * total, perplexity so far. es_perplexity() runs on a session made from p (NULL: the
 * defaults) for the call. */
ES_API es_status es_perplexity(es_model *m, const int32_t *ids, size_t n, int n_ctx, int max_chunks,
                        const es_session_params *p, es_ppl_progress_fn progress, void *user,
                        es_ppl_result *out);


/* ---- batches and their outputs --------------------------------------------------------------
 * es_session_run prefills a batch of independent sequences at once: attention is causal within
 * each sequence, positions restart at 0 in each, and the router and the expert operator run on
 * every row of the batch together, so under a budget each group of experts is read once per
 * batch. Batch invariance: every output of a sequence is bit-identical to the same sequence run
 * alone, whatever else is in the batch and in any order, for any thread count, G, B, Q, policy
 * and source. The outputs are computed from the logits in chunks of rows, never the whole
 * [n][n_vocab] matrix (unless `logits` asks for it). */
typedef enum es_pooling {
    ES_POOLING_NONE = 0,  /* every position's hidden state */
    ES_POOLING_MEAN = 1,  /* the mean over the sequence's positions */
    ES_POOLING_FIRST = 2, /* the first position (a CLS token) */
    ES_POOLING_LAST = 3,  /* the last position (causal models' usual choice) */
} es_pooling;
ES_API const char *es_pooling_name(es_pooling p); /* "none", "mean", "first", "last" */

#define ES_MAX_TOP 100 /* alternatives per position, and the top-K of the next token */

/* One sequence of a batch and the outputs asked of it. Zero-initialise, set ids and the outputs
 * wanted: every output array is caller-owned, NULL means "not wanted". Log-probs are natural
 * logarithms of the model's softmax (all n_vocab tokens). */
typedef struct es_seq {
    const int32_t *ids; /* [n_ids] tokens as given (add BOS yourself: es_model_add_bos) */
    size_t n_ids;       /* 1..n_ctx */

    /* Per-token scores of ids[score_from..n_ids), each given the tokens before it. */
    size_t score_from;       /* first scored position, >= 1 (0 is taken as 1) */
    float *token_logprob;    /* [n_ids]: log P(ids[i] | ids[<i]); NAN before score_from */
    int32_t *token_rank;     /* [n_ids]: 1 + tokens ranked before ids[i] (1 = greedy); 0
                              * before score_from */
    int top_n;               /* 0..ES_MAX_TOP alternatives per scored position */
    int32_t *top_ids;        /* [n_ids][top_n]: the top_n tokens at each scored position, best
                              * first (ties: lower id); rows before score_from untouched */
    float *top_logprobs;     /* [n_ids][top_n]: their log-probs */

    /* The next token, after ids[n_ids - 1]. */
    int next_top_k;          /* 0..ES_MAX_TOP */
    int32_t *next_ids;       /* [next_top_k] best first */
    float *next_logprobs;    /* [next_top_k] */
    const int32_t *labels;   /* [n_labels] candidate next tokens (classification) */
    int n_labels;
    int renormalize;         /* 1: label log-probs renormalised over the labels */
    float *label_logprobs;   /* [n_labels] */

    /* Embeddings: the final hidden state after the output norm. */
    es_pooling pooling;
    int normalize;           /* 1: L2-normalised (llama.cpp's --embd-normalize 2) */
    float *embedding;        /* [n_embd], or [n_ids][n_embd] for ES_POOLING_NONE */

    /* Raw logits (the [n][n_vocab] matrix this API otherwise avoids). */
    int all_logits;          /* 1: every position's row, 0: the last position's */
    float *logits;           /* [n_ids or 1][n_vocab] */
} es_seq;

/* Runs one batch of n_seqs sequences (1..max_seqs; their tokens together at most max_tokens when
 * it is set). Writes each sequence's requested outputs. Errors: ES_E_INVAL (an id out of range,
 * an empty or too long sequence, a bad output request: the message names the sequence),
 * ES_E_CANCELLED (abort_cb), ES_E_IO (a streamed read failed), ES_E_NOMEM. On an error no
 * output is valid. */
ES_API es_status es_session_run(es_session *s, es_seq *seqs, int n_seqs);


/* ---- records, batches and a session sized for a job -------------------------------------------
 * The job layer that estream score and estream embed, estream serve and the Python package share:
 * what a record means (its sequences and the numbers derived from their outputs), how records
 * form batches, and how a session is sized for a job under a memory budget. JSON stays with the
 * clients: a record is given here as plain data.
 *
 * Tokens: the one rule for every client (the CLI, the server, Python; docs/prompts.md):
 * - Text is tokenized with special-token text recognised ("<|endoftext|>" is that token), as
 *   vLLM's OpenAI server and /tokenize do, and without the tokenizer's BOS or EOS: the record
 *   puts BOS where it belongs.
 * - BOS, for a model whose tokenizer adds one (es_model_add_bos): a text (TEXT, the context of
 *   PAIR/CHOICES, the text of LABELS) gets BOS first unless its tokens start with it already
 *   (text that writes the BOS token itself keeps that one). Under ES_BOS_IMPLICIT (the default)
 *   a prompt (PROMPT) or ids (IDS) not starting with BOS are conditioned on one that is not
 *   theirs: the result covers exactly the tokens given, the first scored given BOS; ids that
 *   start with BOS are scored as given (the first has nothing before it).
 * - A context/continuation pair is split as lm-evaluation-harness's _encode_pair: trailing ASCII
 *   whitespace of the context moves to the continuation; whole = tok(context + continuation),
 *   the continuation is whole past len(tok(context)); an empty context is the prefix token alone
 *   (BOS, or EOS for a model without BOS).
 * - ES_RECORD_EMBED text: as llama-embedding tokenizes (BOS/EOS as the tokenizer asks,
 *   special-token text recognised); its ids are used as given. */
typedef enum es_bos_rule {
    ES_BOS_IMPLICIT = 0, /* prompts and ids are conditioned on BOS, which is not theirs */
    ES_BOS_AS_SENT = 1,  /* ids as given; a prompt tokenized with the tokenizer's own BOS and
                          * EOS, which are then its tokens (as before 2.0) */
} es_bos_rule;
typedef enum es_record_kind {
    ES_RECORD_TEXT = 0,    /* per-token log-probs of a text, scored from its second token */
    ES_RECORD_IDS = 1,     /* the same of ids (under the BOS rule) */
    ES_RECORD_PAIR = 2,    /* log P(continuation | context), and whether it is all greedy */
    ES_RECORD_CHOICES = 3, /* a context and choices, each a pair; the choice of each rule */
    ES_RECORD_LABELS = 4,  /* which label continues a text: log-probs renormalised over them */
    ES_RECORD_EMBED = 5,   /* a pooled embedding of a text or of ids */
    ES_RECORD_PROMPT = 6,  /* per-token log-probs of a prompt (its text, or a chat rendered with
                            * the chat template): a completion's prompt */
    ES_RECORD_RERANK = 7,  /* how relevant each document is to a query: P(yes) / (P(yes) +
                            * P(no)) after a rerank prompt of the pair (Qwen3-Reranker's recipe,
                            * or a template given) */
} es_record_kind;
ES_API const char *es_record_kind_name(es_record_kind k); /* "text", "ids", ...; NULL if none */

/* A string of len UTF-8 bytes (not NUL-terminated; ptr may be NULL when len is 0). */
typedef struct es_str {
    const char *ptr;
    size_t len;
} es_str;

/* What a record asks. Zero-initialise, set kind and the fields it uses. */
typedef struct es_record_spec {
    es_record_kind kind;
    es_str text;            /* TEXT, PROMPT, LABELS; EMBED when ids is NULL */
    es_str context;         /* PAIR, CHOICES */
    es_str continuation;    /* PAIR */
    const es_str *items;    /* CHOICES: the choices; LABELS: the labels ([n_items]) */
    int n_items;            /* 1..ES_MAX_BATCH_SEQS */
    int gold;               /* CHOICES: the right choice's index, or -1 for none */
    const int32_t *ids;     /* IDS, and EMBED instead of text ([n_ids]) */
    size_t n_ids;
    int top;                /* TEXT, IDS, PROMPT: alternatives per scored position, 0..ES_MAX_TOP */
    int next_top;           /* TEXT, IDS, PROMPT: the best next tokens after the last, 0..100 */
    es_bos_rule bos;        /* IDS, PROMPT (default ES_BOS_IMPLICIT) */
    /* a chat instead of text (PROMPT, LABELS): rendered with the chat template and the
     * generation prompt; its BOS as a text's (the template's own bos_token counts) */
    const es_chat_message *messages; /* [n_messages] */
    int n_messages;                  /* > 0: use messages */
    const char *template_text;       /* Jinja source, NUL-terminated: the chat template (NULL:
                                      * the model's); RERANK: the rerank prompt, with the
                                      * variables query, document, instruction, bos_token and
                                      * eos_token (NULL: es_rerank_default_template()) */
    es_str query;                    /* RERANK; its documents are items */
    es_str instruction;              /* RERANK (empty: ES_RERANK_INSTRUCTION) */
    es_str rerank_labels[2];         /* RERANK: the one-token answers for relevant and not
                                      * (empty: "yes", "no") */
    es_pooling pooling;     /* EMBED */
    int normalize;          /* EMBED: 1 L2-normalised */
} es_record_spec;

/* The default rerank prompt: Qwen3-Reranker's published recipe (a system message asking for
 * "yes" or "no", the instruction, query and document as the user's turn, an empty thinking
 * block as the assistant's start), and its default instruction. */
ES_API const char *es_rerank_default_template(void);
#define ES_RERANK_INSTRUCTION \
    "Given a web search query, retrieve relevant passages that answer the query"

/* A record made from a spec: its sequences with their output arrays, owned by it. */
typedef struct es_record es_record;

/* Makes the record of spec for model m (the strings and ids are copied or tokenized: spec's
 * memory may go at once). Errors: ES_E_INVAL for a record that cannot run (the message says
 * why, in the words of estream score's record errors: "the text has 5000 tokens, more than the
 * model's context of 4096", "choice 2: the continuation has no tokens", ...), ES_E_NOMEM. */
ES_API es_status es_record_create(const es_model *m, const es_record_spec *spec, es_record **out);
ES_API void es_record_destroy(es_record *r); /* NULL is a no-op */
/* Its sequences (1..ES_MAX_BATCH_SEQS) and their tokens: a batch holds a record whole. */
ES_API int es_record_n_seqs(const es_record *r);
ES_API int64_t es_record_n_tokens(const es_record *r);
/* Its sequences themselves, read-only (ids, score_from, the outputs asked and, once it has run,
 * their values): valid until es_record_destroy(). es_record_result_get is the usual way in. */
ES_API const es_seq *es_record_seqs(const es_record *r);

/* Runs records[0..n) as one batch of s (es_session_run on their sequences together: they must
 * fit its max_tokens and max_seqs). The outputs of each record do not depend on the others. On
 * an error no record has run. */
ES_API es_status es_session_run_records(es_session *s, es_record *const *records, int n);

#define ES_RECORD_RULES 3 /* CHOICES: by log-prob, by log-prob per token, per byte */

/* A record's results once it has run. Pointers are borrowed from the record: valid until
 * es_record_destroy(). Sums are in double over the float32 log-probs, in order; argmax rules
 * take the first maximum (ties go to the lowest index). */
typedef struct es_record_result {
    es_record_kind kind;
    /* TEXT, IDS, PROMPT: every position's score from first_scored on (a position before it
     * has nothing before it: NaN and rank 0) */
    const int32_t *ids;          /* [n_ids] the tokens scored: a text's with its BOS first, the
                                  * ids or the prompt's tokens as given (an implicit BOS is not
                                  * among them) */
    size_t n_ids;
    size_t first_scored;         /* 1, or 0 when an implicit BOS conditions ids[0] */
    const float *logprobs;       /* [n_ids] log P(ids[i] | ids[<i]) */
    const int32_t *ranks;        /* [n_ids] 1 + tokens ranked before ids[i] (1: greedy) */
    int top;                     /* alternatives per position */
    const int32_t *top_ids;      /* [n_ids][top], best first (rows before first_scored
                                  * untouched) */
    const float *top_logprobs;   /* [n_ids][top] */
    int next_top;
    const int32_t *next_ids;     /* [next_top] the best next tokens after the last */
    const float *next_logprobs;  /* [next_top] */
    /* TEXT, IDS, PROMPT: the sum of logprobs[first_scored..]; PAIR: the continuation's */
    double sum;
    int greedy;                  /* PAIR: every continuation token greedy */
    int64_t n_tokens;            /* PAIR: the continuation's tokens; EMBED: the sequence's */
    /* CHOICES, LABELS, RERANK */
    int n_items;
    const double *item_logprobs; /* [n_items] CHOICES: each continuation's sum; LABELS: each
                                  * label's log-prob (one-token labels: the next token's);
                                  * RERANK: each document's log P(yes) */
    const int64_t *item_tokens;  /* CHOICES: [n_items] each continuation's tokens */
    const int64_t *item_bytes;   /* CHOICES: [n_items] each choice's UTF-8 bytes */
    int chosen[ES_RECORD_RULES]; /* CHOICES: argmax of logprob, logprob/tokens, logprob/bytes
                                  * (a choice of 0 bytes: logprob) */
    int gold;                    /* CHOICES: as given (-1: none) */
    const double *probs;         /* LABELS: [n_items] item_logprobs renormalised (softmax);
                                  * RERANK: each document's P(yes) / (P(yes) + P(no)) */
    int label;                   /* LABELS: argmax of item_logprobs; RERANK: of probs */
    const int *ranking;          /* RERANK: [n_items] the documents by decreasing probs (ties:
                                  * the lower index first) */
    /* EMBED */
    const float *embedding;      /* [n_embd], or [n_tokens][n_embd] with ES_POOLING_NONE */
    int n_embd;
} es_record_result;
/* Fills *out from r. ES_E_INVAL when r has not run (es_session_run_records). */
ES_API es_status es_record_result_get(const es_record *r, es_record_result *out);

/* The next batch from units waiting in order: n_tokens[i] and n_seqs[i] of units 0..n_units-1.
 * The first unit is always taken (so nothing waits forever, and a unit larger than the budget
 * runs alone); after it each unit that still fits the tokens and sequences left is taken in
 * order, and a unit too large for the room left stays, shorter ones behind it filling the batch
 * (under a budget a fuller batch reads each expert for more tokens). Writes the indexes taken
 * to pick[] in increasing order and returns their count (0 when n_units is 0). */
ES_API int es_batch_pick(const int64_t *n_tokens, const int *n_seqs, int n_units,
                         int64_t batch_tokens, int max_seqs, int *pick);

/* A job's shape, for sizing its session. */
typedef struct es_job_shape {
    int64_t longest;      /* tokens of its longest unit (0: the model's context) */
    int most_seqs;        /* most sequences of one unit (0: 1) */
    int64_t total_tokens; /* all its tokens (0: not known, a service) */
    int batch_tokens;     /* a batch budget to use (0: chosen) */
    int head_outputs;     /* 1: the units ask for log-probs or labels; 0: embeddings only */
} es_job_shape;
/* What the sizing chose. */
typedef struct es_job_size {
    int batch_tokens;     /* tokens per batch (a longer unit runs alone) */
    int max_seqs;         /* sequences per batch */
    int max_tokens;       /* the session's capacity: the larger of batch_tokens and longest */
} es_job_size;
/* Creates a session for a job from p (threads, budget, streaming, callbacks; its max_tokens,
 * max_seqs and head_outputs are chosen here). The batch budget is job->batch_tokens when given;
 * otherwise 2048 without a memory budget, and under one the largest of 4096, 2048, 1024, 512,
 * then halving down to the longest unit, whose session fits; never more than the job's total
 * tokens. Sequences per batch: one per 32 tokens of the budget, at least 64 from 512 tokens on
 * (each costs attention a padded block of values), and at least most_seqs. A budget that not
 * even one unit alone fits is ES_E_BUDGET with the smallest budget that works. */
ES_API es_status es_session_create_for_job(const es_model *m, const es_session_params *p,
                                           const es_job_shape *job, es_session **out,
                                           es_job_size *size);

/* The memory this process may use: MemTotal, or its cgroup's lower limit (cgroup v2 memory.max,
 * v1 memory.limit_in_bytes, the lowest up the hierarchy: what docker --memory, Kubernetes and
 * Slurm set), or ESTREAM_MEM_LIMIT (bytes) where set; 0 if unknown. *source (if source) names
 * which: "MemTotal", "cgroup", "ESTREAM_MEM_LIMIT" or "". Read once per process. */
ES_API uint64_t es_memory_limit(const char **source);

/* A memory budget (mem_budget_bytes) as `--mem` and Python's mem= write it: bytes with an
 * optional unit K, M, G, T (powers of 1024; also KiB.., B): "600M", "1.5G", "2048"; a share of
 * the model file at model_path: "25%"; or "auto": ES_MEM_AUTO_PERCENT % of es_memory_limit()
 * when the model file is larger than that, else 0 (no budget: every expert resident, as without
 * one). ES_E_INVAL with the reason in es_last_error() (a malformed size, a unit, over 100 % of
 * the file, auto where the memory is unknown); ES_E_IO when the file's size cannot be read. */
#define ES_MEM_AUTO_PERCENT 80
ES_API es_status es_mem_budget_parse(const char *spec, const char *model_path, uint64_t *bytes);


/* ---- statistics ------------------------------------------------------------------------------- */
/* What the last request did. */
typedef struct es_run_stats {
    double seconds;          /* wall time of the last request */
    uint64_t peak_rss_bytes; /* the process's peak resident memory (VmHWM) so far */
    const char *kernels;     /* the session's kernel table, or "reference" */
    int n_threads;
    /* memory-bounded runs (all zero / NULL when every expert is resident) */
    int streaming;           /* experts came through the arena */
    uint64_t budget_bytes;   /* the budget asked for (0: none) */
    uint64_t other_bytes;    /* M_other: memory estimated for everything but the arena */
    uint64_t min_budget_bytes; /* the smallest budget that would have worked */
    uint64_t arena_bytes;    /* B x bank bytes */
    int groups, banks, queue_depth;
    const char *policy;      /* es_policy_name() */
    const char *io_backend;  /* "io_uring" or "pread" */
    int direct;              /* reads bypassed the page cache */
    uint64_t bytes_read;     /* expert bytes read in the last request */
    double read_seconds;     /* seconds with a read in flight */
    double read_bytes_per_second; /* bytes_read / read_seconds */
    double wait_seconds;     /* seconds the compute threads waited for experts */
    double bubble_rate;      /* wait_seconds / seconds */
    int64_t groups_read, groups_skipped;
    int tuned;                  /* G/B/Q came from es_session_params.tune */
    double predicted_seconds;   /* the configurator's prediction for its calibration prompt */
    double tune_select_seconds; /* time the choice from the profiles took */
} es_run_stats;
ES_API void es_session_stats(const es_session *s, es_run_stats *out);


/* ---- packs and output files ------------------------------------------------------------------- */
/* Output files. Every file the library writes (es_pack, es_tune_save, es_synth) is made this way:
 * - A regular file, new or replacing an old one, is written to a new temporary file beside it,
 *   "<path>.tmp.XXXXXXXXXXXX" (random, created exclusively: no existing file is ever touched;
 *   mode 0666 less the umask), fsync'ed and renamed over path only when complete. Any failure
 *   removes the temporary file and leaves path as it was.
 * - A symbolic link to a regular file: its target is replaced that way (temporary file in the
 *   target's directory); the link stays. A dangling link is refused.
 * - A FIFO or character device (/dev/stdout, /dev/null), directly or through a link, is written in
 *   place, without seeking; opening a FIFO waits for a reader.
 * - A directory, socket or block device is refused before anything is written.
 *
 * Removes every temporary file that an output in progress (on any thread) has created, so that a
 * process killed by a signal leaves none behind. Async-signal-safe: it only reads lock-free
 * atomics and calls unlink(), and it preserves errno. Meant for a SIGINT/SIGTERM/SIGHUP handler
 * that then re-raises the signal with the default action (the estream CLI does this); outputs in
 * progress in a process that goes on fail at their rename with ES_E_IO. Limits: if a random
 * temporary name is found taken (odds about 2^-71) and the signal lands in the instant before
 * the next name is tried, that file is removed; with two outputs finishing and starting on other
 * threads at the moment of the signal, one path may be read torn. */
ES_API void es_cleanup_temp_files(void);
/* Packs: the execution-ready file the expert streamer reads. A pack is a GGUF file with every
 * key and non-expert tensor of the source, plus, per sparse layer, the experts' gate, up and
 * down matrices regrouped as one record per expert (in expert order, each record a multiple of
 * 4 KiB at a 4 KiB-aligned file offset, with an XXH3-64 checksum per record in the metadata),
 * so that G consecutive experts are one contiguous aligned read. The weights keep their source
 * bytes. Format: src/pack/pack.h and docs/notes.md. */
typedef struct es_pack_opts {
    /* progress (may be NULL): work done and total, in bytes; the total counts the records'
     * bytes twice (checksum pass, then write pass) plus the other tensors' bytes. Called
     * from the calling thread, ending with done == total on success. */
    void (*progress)(void *user, uint64_t done, uint64_t total);
    void *user;
} es_pack_opts;

/* What es_pack() wrote. */
typedef struct es_pack_result {
    int n_layers;          /* sparse layers packed */
    int64_t n_records;     /* expert records, all layers */
    uint64_t record_bytes; /* bytes of one record in the first sparse layer */
    uint64_t expert_bytes; /* bytes of all records, padding included */
    uint64_t file_bytes;   /* size of the pack */
    uint64_t source_bytes; /* size of the source */
} es_pack_result;

/* Writes the pack of the GGUF model src to dst (atomically: on failure nothing is left at dst).
 * opts and result may be NULL. Errors: ES_E_INVAL (src is already a pack, dst is src),
 * ES_E_UNSUPPORTED (no expert tensors), ES_E_FORMAT (a bad file, or inconsistent expert
 * tensors: the message names the tensor), ES_E_IO, ES_E_NOMEM. */
ES_API es_status es_pack(const char *src, const char *dst, const es_pack_opts *opts,
                  es_pack_result *result);


#ifdef __cplusplus
}
#endif
#endif

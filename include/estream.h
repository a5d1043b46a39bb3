/*
 * estream: fast, memory-bounded prefill of Mixture-of-Experts language models.
 *
 * The only public header. Handles are opaque; every function that can fail returns es_status
 * and leaves a one-line description in es_last_error() (thread-local).
 *
 * Thread-safety: an es_model is read-only after es_model_open() and may be shared by threads;
 * everything a prefill changes lives in an es_session, used by one thread at a time.
 */
#ifndef ESTREAM_H
#define ESTREAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version. MAJOR follows this header: a change that breaks a caller (a function
 * or field removed or changed, a struct reordered) bumps it, and with it the shared library's
 * soname (libestream.so.MAJOR); additions bump MINOR. es_version() is the version the library
 * running was built as ("1.1.0"), which may differ from the header a caller was compiled with. */
#define ES_VERSION_MAJOR 1
#define ES_VERSION_MINOR 2
#define ES_VERSION_PATCH 0

/* What the shared library exports: only the functions declared with ES_API (the objects are
 * built with -fvisibility=hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define ES_API __attribute__((visibility("default")))
#else
#define ES_API
#endif

ES_API const char *es_version(void);

typedef enum es_status {
    ES_OK = 0,
    ES_E_INVAL = -1,       /* bad argument: a bug in the caller, or a bad flag          */
    ES_E_NOMEM = -2,       /* allocation failed                                         */
    ES_E_BUDGET = -3,      /* the plan does not fit the memory budget                   */
    ES_E_IO = -4,          /* open/read/write failed; details in es_last_error()         */
    ES_E_FORMAT = -5,      /* not a valid GGUF file, or a corrupt one                    */
    ES_E_UNSUPPORTED = -6, /* valid input, but a feature estream does not have           */
    ES_E_CANCELLED = -7,   /* the abort callback asked to stop; the session stays usable  */
} es_status;

/* Short English name of a status ("format error"). Never NULL. */
ES_API const char *es_status_str(es_status st);
/* The message of the last failure on this thread ("" if none). Valid until the next failure. */
ES_API const char *es_last_error(void);

typedef struct es_model es_model; /* opaque: a GGUF model (or vocabulary-only file) */

/* Flags for es_model_open(). */
enum {
    ES_OPEN_VOCAB_ONLY = 1 << 0, /* read only the tokenizer; the file may have no weights */
};

/* Where the library's log lines go (warnings, and with ESTREAM_LOG=2 or 3 information and
 * debugging). Default (cb NULL): stderr, each line prefixed "estream: ". Otherwise cb gets each
 * line without prefix or newline, with its level (ES_LOG_LEVEL_*), on the thread that logged it,
 * possibly several threads at once; user is passed through. Lines at levels above ESTREAM_LOG's
 * (default 1) are not produced. Process-wide, like llama_log_set; may be called at any time. */
enum { ES_LOG_LEVEL_WARN = 1, ES_LOG_LEVEL_INFO = 2, ES_LOG_LEVEL_DEBUG = 3 };
typedef void (*es_log_fn)(void *user, int level, const char *line);
ES_API void es_log_set(es_log_fn cb, void *user);

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

/* Tokenizes text[0..len) into ids. add_special: add BOS/EOS as the model's tokenizer asks
 * (tokenizer.ggml.add_bos_token), as llama.cpp does. parse_special: recognise special-token
 * text such as "<|endoftext|>". On success *n_out is the number of ids; if it exceeds cap,
 * only cap ids are written and ES_E_INVAL is returned with *n_out set to the number needed. */
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

/* The most compute threads a prefill can use. */
#define ES_MAX_THREADS 256
#define ES_MAX_BATCH_TOKENS (1 << 22) /* max_tokens: most tokens in one batch */
#define ES_MAX_BATCH_SEQS 4096        /* max_seqs: most sequences in one batch */


/* The kernel table the fast path uses: "scalar", "avx2", "avxvnni", "avx512" or "amx" on x86-64,
 * "scalar", "asimd", "neon" or "i8mm" on AArch64 (the best this CPU and OS support, or the one
 * ESTREAM_ISA names). */
ES_API const char *es_kernels_name(void);
/* Whether this CPU and OS can run the named kernel table. */
ES_API int es_kernels_available(const char *isa);
/* NULL if this CPU and OS run the named kernel table; otherwise why not, as a static sentence
 * (for "amx": which of AMX-TILE/AMX-INT8 in CPUID, the tile state in XCR0 or the kernel's
 * permission is missing). An unknown name gets a sentence too. (Since 1.2.0.) */
ES_API const char *es_kernels_why_not(const char *isa);
/* Selects a kernel table ("scalar", "avx2", "avxvnni", "avx512", "amx", "asimd", "neon", "i8mm"; NULL: the best available, or
 * ESTREAM_ISA). ES_E_INVAL for an unknown name, ES_E_UNSUPPORTED for a table this CPU lacks. Not thread-safe:
 * call it while no prefill runs. */
ES_API es_status es_kernels_select(const char *isa);


/* Layers and experts per layer (0 for a vocabulary-only model). */
ES_API int es_model_n_layer(const es_model *m);
ES_API int es_model_n_expert(const es_model *m);

/* ---- sessions -------------------------------------------------------------------------------
 * A session is one user's run state on a model (llama.cpp's context): the thread pool, the
 * kernel table, activation buffers, expert plans and, when experts are streamed, the arena and
 * the loader. The model stays immutable; several sessions may share one model (each from its own
 * thread). A session is used by one thread at a time. */
typedef struct es_session es_session;

/* When the expert loader may start reading a group (DESIGN §6). */
typedef enum es_policy {
    ES_POLICY_EARLY = 0,         /* as soon as a bank is free, reading ahead into later layers */
    ES_POLICY_AFTER_ROUTING = 1, /* once the layer's routing is known */
    ES_POLICY_ON_DEMAND = 2,     /* only when the compute threads need the group */
} es_policy;
ES_API const char *es_policy_name(es_policy p); /* "early", "after-routing", "on-demand" */

/* The configurator's result for one model on one machine (`estream tune`, DESIGN §7): the
 * storage figures and one profile per candidate group size, from which a budget's arena (G, B)
 * and queue depth Q are chosen in milliseconds. Stored beside the model as "<model>.tune". */
typedef struct es_tune es_tune;
/* Reads a tune file made for model m (checked: the model file's size and a hash of its
 * header). Errors: ES_E_IO (cannot read), ES_E_FORMAT (not a tune file, damaged, or made for
 * another model: the message says which). */
ES_API es_status es_tune_load(const es_model *m, const char *path, es_tune **out);
ES_API void es_tune_free(es_tune *t); /* NULL is a no-op */
/* The default calibration text of `estream tune`: English prose written for estream, to be
 * repeated until the prompt is long enough. Never NULL; static. */
ES_API const char *es_tune_calib_text(void);
/* Whether t's profiles apply to runs with n_threads threads on the kernel table isa (NULL: the
 * default) on this CPU: ES_OK, or ES_E_INVAL with the reason in es_last_error(). */
ES_API es_status es_tune_applies(const es_tune *t, int n_threads, const char *isa);

/* How the expert loader reads the model file. */
typedef enum es_io_backend {
    ES_IO_AUTO = 0,  /* io_uring when a ring can be created (not ENOSYS/EPERM), else pread */
    ES_IO_URING = 1, /* io_uring only (ES_E_UNSUPPORTED where no ring can be made) */
    ES_IO_PREAD = 2, /* one pread worker thread per queue slot */
} es_io_backend;
ES_API const char *es_io_backend_str(es_io_backend b); /* "auto", "io_uring", "pread" */

/* A session's parameters. Start from es_session_default_params() and change what you need;
 * a field documented "0 = chosen" is chosen at creation from the model and the machine. */
typedef struct es_session_params {
    int n_threads;      /* compute threads, 1..ES_MAX_THREADS (default: online CPUs, at most
                         * ES_MAX_THREADS; 0 also means that) */
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

    /* Memory-bounded runs (expert streaming, DESIGN §5-6). With mem_budget_bytes set, the
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

/* The defaults documented field by field above: all online CPUs, the fast path, buffers that
 * grow on demand, the default kernel table, no budget; O_DIRECT and checksums on. */
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

/* Width of the embeddings (n_embd). */
ES_API int es_model_n_embd(const es_model *m);

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

/* Routes each expert of layer il received in the session's last fast-path prefill:
 * counts[0..n_expert). ES_E_INVAL if none has run, il is out of range or cap < n_expert. */
ES_API es_status es_session_route_counts(const es_session *s, int il, int64_t *counts, int cap);

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

/* Where the last request's time went, phase by phase (fast path; since 1.1). The calling
 * thread's clock is split at each step of the forward pass; the expert operator's share is
 * split by what its threads did in it (the mean over threads of each sub-phase's time), so
 * seconds[] sums to the request's wall time. Work counts are what the phase computed and read:
 * int_ops (2 per integer multiply-add: quantized weights), float_ops (2 per float multiply-add:
 * float weights, attention scores and values) and weight_bytes (bytes of weights the matrix
 * products read, once per product; an expert is read once per block of its rows). */
typedef enum es_phase {
    ES_PHASE_NORM = 0,         /* embedding rows, norms, RoPE, residual adds */
    ES_PHASE_ACT_QUANT,        /* activations quantized for the kernels (dense and expert) */
    ES_PHASE_ATTN_PROJ,        /* attention (or convolution) block projections: Q, K, V, O */
    ES_PHASE_ATTN,             /* attention scores, softmax and values (short convolutions) */
    ES_PHASE_ROUTER,           /* router logits, top-k and the sort by expert */
    ES_PHASE_EXPERT_GATE_UP,   /* the experts' gate and up products */
    ES_PHASE_SWIGLU,           /* silu(gate) * up */
    ES_PHASE_EXPERT_DOWN,      /* the experts' down products */
    ES_PHASE_SCATTER_ADD,      /* the weighted sum of the experts' rows into the tokens' */
    ES_PHASE_BARRIER,          /* threads waiting for each other inside the expert operator */
    ES_PHASE_EXPERT_WAIT,      /* waiting for streamed experts to arrive */
    ES_PHASE_DENSE_FFN,        /* dense FFNs and shared experts */
    ES_PHASE_HEAD,             /* the output head and the outputs computed from its logits */
    ES_PHASE_OTHER,            /* the rest: buffers, setup */
    ES_PHASE_COUNT
} es_phase;
ES_API const char *es_phase_name(es_phase p); /* "norm", "act_quant", ..., NULL out of range */
typedef struct es_phase_profile {
    double seconds;                     /* the request's wall time */
    double phase_seconds[ES_PHASE_COUNT];
    double int_ops[ES_PHASE_COUNT];
    double float_ops[ES_PHASE_COUNT];
    double weight_bytes[ES_PHASE_COUNT];
    int64_t tokens;                     /* rows of the request */
} es_phase_profile;
/* The profile of the session's last request. ES_E_INVAL: no request has run, or the session
 * runs the reference path. */
ES_API es_status es_session_profile(const es_session *s, es_phase_profile *out);

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

/* Synthetic models: random weights with the tensor names, shapes and metadata of llama.cpp's
 * architecture, so llama.cpp loads the same file. */
typedef struct es_synth_opts {
    const char *arch;       /* NULL, or the preset's architecture (checked) */
    const char *preset;     /* "tiny", "mini", "olmoe-1b-7b", "tiny-qwen3moe", ... (es_synth_presets) */
    const char *type;       /* weight type: "f32", "f16", "q8_0", "q4_0" */
    uint64_t seed;
    const char *vocab_path; /* NULL: estream's built-in byte-level BPE; else copy its tokenizer */
    /* progress: bytes written, total (may be NULL) */
    void (*progress)(void *user, uint64_t done, uint64_t total);
    void *user;
} es_synth_opts;
/* Writes the model to path as described under "Output files" below: a regular file appears only
 * when complete, a FIFO or character device is written in place. */
ES_API es_status es_synth(const es_synth_opts *opts, const char *path);
/* Names of the presets, NULL-terminated. */
ES_API const char *const *es_synth_presets(void);

/* Output files. Every file the library writes (es_synth, the GGUF writer) is made this way:
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

/* ---- making and reading a tuning (estream tune) ---------------------------------------------
 * es_tune_run() measures the storage and profiles one request per candidate group size G;
 * es_tune_choose() picks (G, B, Q) for a budget from the profiles in milliseconds and keeps the
 * choice; es_tune_save() writes the lot to "<model>.tune", which es_tune_load() reads back. The
 * model behind it: src/tune/tune.h (DESIGN §7). */
#define ES_TUNE_MAX_G 8    /* candidate group sizes in one tuning */
#define ES_TUNE_N_DEPTHS 4 /* queue depths the storage is characterized at (es_tune_desc.depths) */

typedef struct es_tune_run_params {
    const int32_t *ids;    /* the calibration prompt (es_tune_calib_text() tokenized, say) */
    size_t n_ids;          /* >= 1 */
    const int *groups;     /* candidate G, each 1..n_expert, no repeats */
    int n_groups;          /* 1..ES_TUNE_MAX_G */
    int n_threads;         /* > 0: the tuning applies to runs with this many threads */
    const char *kernels;   /* NULL: the default table */
    es_io_backend io_backend; /* as es_session_params (ES_IO_AUTO: io_uring, else pread) */
    int direct_io;         /* 1: O_DIRECT reads, as runs under a budget make them; 0 (what a
                            * zeroed struct has): buffered */
    int no_cache;          /* 1: measure the storage even if ~/.cache/estream has it */
    /* progress (may be NULL): phase "storage" or "profile", steps done of total; done ==
     * total when the phase ends. Called from the calling thread. */
    void (*progress)(void *user, const char *phase, int done, int total);
    void *user;
} es_tune_run_params;

/* Characterizes the storage (cached per device and file system in ~/.cache/estream) and runs
 * one profiling request per candidate G on m; *out is a new tuning with no choices yet (free it
 * with es_tune_free()). Errors: ES_E_INVAL (bad params), ES_E_IO, ES_E_NOMEM, and those of
 * es_session_create(). */
ES_API es_status es_tune_run(const es_model *m, const es_tune_run_params *p, es_tune **out);

/* The arena and depth chosen for one budget. */
typedef struct es_tune_choice {
    uint64_t budget;     /* the memory budget, bytes */
    double io_limit;     /* the storage regime, bytes/s (0 = the device as it is) */
    int groups, banks, qd; /* G experts per bank, B banks, Q reads in flight (0 if none fits) */
    double predicted;    /* the model's seconds for the calibration request */
    uint64_t min_budget; /* the smallest budget with one bank of some G, bytes */
} es_tune_choice;

/* Chooses (G, B, Q) for budget and io_limit (bytes/s, 0 = none) as estream tune does: M_other
 * the larger of the measured and the estimated (es_tune_desc.select_other_bytes), reads as
 * early as possible, records checksummed. On success *out is the choice, and t keeps it (up to
 * 63 choices; es_tune_save() writes them). Errors: ES_E_BUDGET when not one bank of any G fits
 * (*out then has budget, io_limit and min_budget; nothing is kept; es_last_error() says the
 * smallest budget that works), ES_E_INVAL for a tuning without profiles. */
ES_API es_status es_tune_choose(es_tune *t, uint64_t budget, double io_limit, es_tune_choice *out);

/* B_max: the most banks of `groups` experts worth having under budget (bytes) with the M_other
 * es_tune_choose() assumes: at most one per routed group of the profile request and the
 * streamer's limit; 0 when not one bank fits or t has no profile of that G. */
ES_API int64_t es_tune_bank_limit(const es_tune *t, int groups, uint64_t budget);

/* One candidate G of a tuning. */
typedef struct es_tune_profile_desc {
    int groups;                  /* G */
    uint64_t bank_bytes;         /* bytes of one bank of G experts */
    double seconds;              /* the profiling request, measured */
    double bytes_per_second[ES_TUNE_N_DEPTHS]; /* grouped reads at each of desc.depths */
} es_tune_profile_desc;

/* What a tuning holds. Pointers are borrowed from t: valid until es_tune_free(), and choices
 * until the next es_tune_choose(). */
typedef struct es_tune_desc {
    const char *cpu;             /* the CPU it was made on */
    const char *kernels;         /* the kernel table of its profiles */
    int n_threads;               /* the thread count of its profiles */
    int calib_tokens;            /* the calibration prompt's length */
    int q0;                      /* the storage's depth: the smallest within 5 % of the best */
    int depths[ES_TUNE_N_DEPTHS]; /* the depths characterized: 1, 2, 4, 8 */
    uint64_t other_bytes;        /* M_other measured on the smallest G's profile run */
    uint64_t other_estimate_bytes; /* the session's estimate of M_other for that run */
    uint64_t select_other_bytes; /* the M_other es_tune_choose() assumes: the larger */
    double profile_seconds;      /* storage characterization and profiles, wall time */
    int n_profiles;              /* in the order the candidates were given */
    es_tune_profile_desc profiles[ES_TUNE_MAX_G];
    int n_choices;
    const es_tune_choice *choices; /* [n_choices] */
} es_tune_desc;
/* Fills *out from t; allocates nothing. Safe alongside other readers of t. */
ES_API void es_tune_describe(const es_tune *t, es_tune_desc *out);

/* One sparse layer in es_tune_explain(). */
typedef struct es_tune_layer_times {
    double predicted_seconds; /* the layer's last group done, from the request's start */
    double measured_seconds;  /* the same, measured (0 if the layer had no routed group) */
    double model_read_seconds;   /* its routed groups' bytes at the modelled bandwidth */
    double profile_read_seconds; /* their read times in the profiling run */
} es_tune_layer_times;
typedef struct es_tune_explain_result {
    double predicted_seconds; /* c->predicted */
    double measured_seconds;  /* the request's wall time */
    double bubble_rate;       /* es_run_stats.bubble_rate of the run */
} es_tune_explain_result;
/* estream tune --explain: runs the calibration prompt ids[0..n) once with c's arena and depth
 * (c->groups, c->banks, c->qd, c->io_limit; no budget check: the choice applied it) on
 * n_threads threads, and sets, per sparse layer (at most cap of them: layers[0..*n_layers),
 * cap >= es_model_n_layer(m) holds them all), the completion time the model predicts against
 * the one measured, and the layer's read times. result (may be NULL) gets the request's totals.
 * Errors: ES_E_INVAL (t has no profile of c->groups), ES_E_NOMEM, and those of
 * es_session_create() and es_session_prefill(). */
ES_API es_status es_tune_explain(const es_model *m, const es_tune *t, const es_tune_choice *c,
                          const int32_t *ids, size_t n, int n_threads, es_tune_layer_times *layers,
                          int cap, int *n_layers, es_tune_explain_result *result);

/* "<model path>.tune" in a malloc'd string the caller frees (NULL when out of memory). */
ES_API char *es_tune_default_path(const char *model_path);
/* Writes t (profiles and choices) to path as described under "Output files". ES_E_IO,
 * ES_E_NOMEM. */
ES_API es_status es_tune_save(const es_tune *t, const char *path);

/* ---- file inspection (estream info) ---------------------------------------------------------
 * What a GGUF file holds, model or pack or vocabulary, as plain data: the header, a few
 * metadata strings, the tensor index and, for a pack, its layout per layer. Nothing is
 * computed and no weight is read. */

/* One tensor of the index. */
typedef struct es_file_tensor {
    const char *name;  /* NUL-terminated copy */
    const char *type;  /* "f32", "q4_K", ...; "?" for a type estream does not know */
    int n_dims;        /* at most 4 */
    int64_t ne[4];     /* ne[0] is the row length; unused dimensions are 1 */
    uint64_t bytes;
} es_file_tensor;

/* One sparse layer of a pack: its expert records. */
typedef struct es_file_pack_layer {
    int layer;             /* the layer's index in the model */
    const char *error;     /* NULL, or why its records do not validate (then only layer is set) */
    int64_t n_records;     /* one per expert */
    uint64_t record_bytes; /* a multiple of 4 KiB */
    uint64_t file_offset;  /* of record 0 */
    const char *types[3];  /* gate, up, down: weight type names */
    uint64_t offsets[3];   /* each matrix's byte offset inside a record (gate: 0) */
    int tiles[3];          /* 1: the matrix is in the kernels' tile order, 0: in rows */
} es_file_pack_layer;

typedef struct es_file_desc {
    uint32_t gguf_version;
    int64_t n_kv, n_tensors;
    uint64_t file_bytes;
    const char *name;          /* general.name, NULL when absent */
    const char *arch;          /* general.architecture, NULL when absent */
    const char *tok_model;     /* tokenizer.ggml.model, NULL when absent */
    const char *tok_pre;       /* tokenizer.ggml.pre, NULL when absent */
    es_file_tensor *tensors;   /* [n_tensors], in file order */
    int is_pack;               /* an estream pack: it has the key estream.pack.version */
    /* a pack only: */
    const char *pack_error;    /* NULL, or why the pack-wide keys do not validate (then the
                                * fields below are zero) */
    uint32_t pack_version;
    const char *pack_layout;   /* the version's layout name ("gguf-rows", "tiles-v2") */
    const char *pack_source;   /* the source model's file name */
    uint64_t pack_source_bytes;
    int n_pack_layers;         /* sparse layers, in increasing order */
    es_file_pack_layer *pack_layers;
} es_file_desc;

/* Reads the GGUF at path (header, metadata and tensor index; validated as es_model_open() does)
 * into a new *out, which the caller releases with es_file_desc_free(); every string in it is
 * owned by it. Errors: ES_E_IO (cannot open), ES_E_FORMAT (not a valid GGUF; the message names
 * the file), ES_E_NOMEM. A pack that does not validate is not an error: see pack_error and the
 * layers' error. */
ES_API es_status es_file_describe(const char *path, es_file_desc **out);
/* The same for the file m was opened from, without reading it again. ES_E_NOMEM. */
ES_API es_status es_model_describe_file(const es_model *m, es_file_desc **out);
ES_API void es_file_desc_free(es_file_desc *d); /* NULL is a no-op */

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

/* ---- this machine and this process ----------------------------------------------------------- */
typedef struct es_cpu_desc {
    char brand[64];          /* "Intel(R) Xeon(R) ..."; AArch64: the part, or "aarch64" */
    char features[512];      /* the detected features, space-separated ("avx2 fma ...") */
    size_t l1d_bytes, l2_bytes, l3_bytes; /* per core (L3: 0 if none) */
    int cache_from_cpuid;    /* 0: the cache sizes are defaults */
} es_cpu_desc;
/* This CPU as estream detected it (a feature counts only if the OS enabled it too). */
ES_API void es_cpu_describe(es_cpu_desc *out);
/* The names of every kernel table (es_kernels_select()), NULL-terminated, static; those this
 * CPU runs pass es_kernels_available(). */
ES_API const char *const *es_kernels_list(void);

/* The process's peak resident memory (VmHWM) in bytes, 0 if unknown. */
ES_API size_t es_peak_rss_bytes(void);
/* Resets the peak to the current resident size (/proc/self/clear_refs), so that a later
 * es_peak_rss_bytes() is the peak since now. ES_E_UNSUPPORTED where the kernel refuses. */
ES_API es_status es_peak_rss_reset(void);

/* ---- measurements (estream bench) ------------------------------------------------------------ */
/* The raw read bandwidth of m's experts in bytes/s: the streamer's reads of `groups` experts
 * each (the same extents in the same order), queue_depth in flight (0 = 4), with p's
 * io_backend, direct_io and io_limit_bytes_per_s (NULL: the defaults), no compute and no
 * checksums, over at most max_bytes (0 = one whole request). The disk bound of a streaming
 * run. Errors: ES_E_INVAL (no experts, bad groups), ES_E_IO, ES_E_UNSUPPORTED, ES_E_NOMEM. */
ES_API es_status es_stream_measure_bandwidth(const es_model *m, const es_session_params *p,
                                      int groups, int queue_depth, uint64_t max_bytes,
                                      double *bytes_per_s);

/* Writes data[0..bytes) to path as described under "Output files". ES_E_IO, ES_E_NOMEM. */
ES_API es_status es_outfile_save(const char *path, const void *data, size_t bytes);

/* One line of a chart: n points (x[i], y[i]); the arrays are borrowed for the call. */
typedef struct es_plot_series {
    const char *name; /* legend text; NULL is "" */
    int n;
    const double *x, *y;
} es_plot_series;
/* Writes a line chart of s[0..n_series) to path as a standalone SVG file (as described under
 * "Output files"). Points with a coordinate that is NaN, infinite or larger than 1e300 in
 * magnitude are skipped; each series' remaining points are joined in increasing x (a polyline
 * when it has 2 or more, markers always), and every series has a legend entry, even with no
 * point left. The x axis spans the data; the y axis spans the data and 0. A single value (all x
 * or all y equal) gets a range around it. Text (title, labels, names; NULL is "") is
 * XML-escaped. Errors: ES_E_INVAL (n_series < 0, s NULL with n_series > 0, a series with n < 0
 * or NULL arrays with n > 0, path NULL), ES_E_IO, ES_E_NOMEM. */
ES_API es_status es_plot_svg_write(const char *path, const char *title, const char *x_label,
                            const char *y_label, const es_plot_series *s, int n_series);

#ifdef __cplusplus
}
#endif
#endif

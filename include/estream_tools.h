/*
 * estream_tools.h: the helpers estream's own clients use beside include/estream.h: the command
 * line (src/cli), the server (src/serve), the tests, the benchmarks and the fuzz targets. They
 * are in libestream.a (hidden in libestream.so), are not installed, and are outside estream.h's
 * ABI promise: they change with the tree. A program outside this tree uses estream.h alone
 * (tools/check-layers.sh and tools/check-symbols.sh check both).
 *
 * Contents: diagnostics of a session (route counts, the phase profile); synthetic models;
 * making a tuning (estream tune); file inspection (estream info); this machine and this process;
 * measurements (estream bench); output files and charts.
 */
#ifndef ESTREAM_TOOLS_H
#define ESTREAM_TOOLS_H

#include "estream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- diagnostics of a session ----------------------------------------------------------------- */
/* Routes each expert of layer il received in the session's last fast-path prefill:
 * counts[0..n_expert). ES_E_INVAL if none has run, il is out of range or cap < n_expert. */
es_status es_session_route_counts(const es_session *s, int il, int64_t *counts, int cap);

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
const char *es_phase_name(es_phase p); /* "norm", "act_quant", ..., NULL out of range */
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
es_status es_session_profile(const es_session *s, es_phase_profile *out);


/* ---- synthetic models ------------------------------------------------------------------------- */
/* Synthetic models: random weights with the tensor names, shapes and metadata of llama.cpp's
 * architecture, so llama.cpp loads the same file. */
typedef struct es_synth_opts {
    const char *arch;       /* NULL, or the preset's architecture (checked) */
    const char *preset;     /* "tiny", "mini", "olmoe-1b-7b", "tiny-qwen3moe", ... (es_synth_presets) */
    const char *type;       /* weight type: "f32", "f16", "q8_0", "q4_0" */
    uint64_t seed;
    const char *vocab_path; /* NULL: estream's built-in byte-level BPE; else copy its tokenizer */
    const char *chat_template; /* NULL: none (or the vocabulary file's); else this Jinja text as
                                * tokenizer.chat_template */
    /* progress: bytes written, total (may be NULL) */
    void (*progress)(void *user, uint64_t done, uint64_t total);
    void *user;
} es_synth_opts;
/* Writes the model to path as described under "Output files" below: a regular file appears only
 * when complete, a FIFO or character device is written in place. */
es_status es_synth(const es_synth_opts *opts, const char *path);
/* Names of the presets, NULL-terminated. */
const char *const *es_synth_presets(void);


/* ---- making a tuning (estream tune; es_tune_load and es_tune_applies are in estream.h) ------
 * es_tune_run() measures the storage and profiles one request per candidate group size G;
 * es_tune_choose() picks (G, B, Q) for a budget from the profiles in milliseconds and keeps the
 * choice; es_tune_save() writes the lot to "<model>.tune", which es_tune_load() reads back. The
 * model behind it: src/tune/tune.h (docs/design.md §7). */
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
 * one profiling request per candidate G on m; *out is a new tuning with no choices yet (release
 * it with es_tune_destroy()). Errors: ES_E_INVAL (bad params), ES_E_IO, ES_E_NOMEM, and those of
 * es_session_create(). */
es_status es_tune_run(const es_model *m, const es_tune_run_params *p, es_tune **out);

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
es_status es_tune_choose(es_tune *t, uint64_t budget, double io_limit, es_tune_choice *out);

/* B_max: the most banks of `groups` experts worth having under budget (bytes) with the M_other
 * es_tune_choose() assumes: at most one per routed group of the profile request and the
 * streamer's limit; 0 when not one bank fits or t has no profile of that G. */
int64_t es_tune_bank_limit(const es_tune *t, int groups, uint64_t budget);

/* One candidate G of a tuning. */
typedef struct es_tune_profile_desc {
    int groups;                  /* G */
    uint64_t bank_bytes;         /* bytes of one bank of G experts */
    double seconds;              /* the profiling request, measured */
    double bytes_per_second[ES_TUNE_N_DEPTHS]; /* grouped reads at each of desc.depths */
} es_tune_profile_desc;

/* What a tuning holds. Pointers are borrowed from t: valid until es_tune_destroy(), and choices
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
    uint64_t select_other_bytes; /* the M_other es_tune_choose() assumes: the larger, plus
                                  * 2 MiB for the arena's rounding to huge pages */
    double profile_seconds;      /* storage characterization and profiles, wall time */
    int n_profiles;              /* in the order the candidates were given */
    es_tune_profile_desc profiles[ES_TUNE_MAX_G];
    int n_choices;
    const es_tune_choice *choices; /* [n_choices] */
} es_tune_desc;
/* Fills *out from t; allocates nothing. Safe alongside other readers of t. */
void es_tune_describe(const es_tune *t, es_tune_desc *out);

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
es_status es_tune_explain(const es_model *m, const es_tune *t, const es_tune_choice *c,
                          const int32_t *ids, size_t n, int n_threads, es_tune_layer_times *layers,
                          int cap, int *n_layers, es_tune_explain_result *result);

/* The default calibration text of `estream tune`: English prose written for estream, to be
 * repeated until the prompt is long enough. Never NULL; static. */
const char *es_tune_calib_text(void);
/* Writes t (profiles and choices) to path as described under "Output files". ES_E_IO,
 * ES_E_NOMEM. */
es_status es_tune_save(const es_tune *t, const char *path);


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
    uint64_t file_bytes;       /* all its files' bytes */
    uint32_t n_files;          /* 1, or the parts of a split model (gguf-split) */
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
 * into a new *out, which the caller releases with es_file_desc_destroy(); every string in it is
 * owned by it. Errors: ES_E_IO (cannot open), ES_E_FORMAT (not a valid GGUF; the message names
 * the file), ES_E_NOMEM. A pack that does not validate is not an error: see pack_error and the
 * layers' error. */
es_status es_file_describe(const char *path, es_file_desc **out);
/* The same for the file m was opened from, without reading it again. ES_E_NOMEM. */
es_status es_model_describe_file(const es_model *m, es_file_desc **out);
void es_file_desc_destroy(es_file_desc *d); /* NULL is a no-op */

/* What `estream info` prints beyond es_model_desc: how estream read the router and attention of
 * the file (a model opened for its vocabulary only has every field 0 or NULL). */
typedef struct es_model_details {
    const char *gating;        /* "softmax", "sigmoid" or "softmax over the chosen" */
    int by_logit;              /* the choice ranks the logits themselves (Llama 4) */
    float router_scale;        /* the weights are multiplied by it (0 or 1: not at all) */
    int n_group, n_group_used; /* expert groups and how many are eligible (0: none) */
    int selection_bias;        /* exp_probs_b added for the choice (in the first MoE layer) */
    int router_bias;           /* ffn_gate_inp.bias added to the logits */
    int fused_qkv;             /* q, k and v are views of one attn_qkv (first attention layer) */
    int qkv_bias;              /* q/k/v biases there */
    const char *qk_norm;       /* "per head", "whole projections" or NULL: none */
    int qk_norm_after_rope;
    int n_swa, swa_period;     /* a sliding window (0: none) on the layers il % period <
                                * period - 1 (period 0: every layer) */
    int swa_chunked;           /* the window is the position's own chunk of n_swa (Llama 4) */
    int n_layer_no_rope;       /* layers that turn no RoPE */
    int nope_temperature;      /* their queries are temperature-scaled (Llama 4) */
    int qk_norm_unweighted;    /* the RoPE layers RMS-normalise q and k per head after RoPE,
                                * without a weight (Llama 4) */
    int mla;                   /* multi-head latent attention (es_model_desc's n_lora_kv) */
    int n_layer_nextn;         /* multi-token-prediction blocks in the file, not run */
    int rope_sections[4];      /* interleaved multimodal RoPE's sections (Qwen3-VL; all 0:
                                * none): a text token turns by its position on the first three
                                * axes' pairs and by 0 on the fourth's */
    float embd_scale, resid_scale, logit_mul; /* muP's multipliers (0: not applied) */
    int norm_bias;             /* the RMS norms add a bias after their weight (Phi-3.5-MoE) */
    int output_bias;           /* the head adds output.bias to the logits */
    int q_prescale;            /* the queries are scaled by 1/sqrt(head) before q.k */
    int longrope_ctx;          /* LongRoPE: sequences longer than this turn by the long factors,
                                * the others by the short ones (0: not LongRoPE) */
    int longrope_short, longrope_long; /* whether the file has each set of factors */
    float rope_cs_scale;       /* the factor on every RoPE cos and sin (attn_factor, YaRN's
                                * magnitude; 1: none) */
} es_model_details;
void es_model_describe_details(const es_model *m, es_model_details *out);


/* ---- this machine and this process ------------------------------------------------------------ */
typedef struct es_cpu_desc {
    char brand[64];          /* "Intel(R) Xeon(R) ..."; AArch64: the part, or "aarch64" */
    char features[512];      /* the detected features, space-separated ("avx2 fma ...") */
    size_t l1d_bytes, l2_bytes, l3_bytes; /* per core (L3: 0 if none) */
    int cache_from_cpuid;    /* 0: the cache sizes are defaults */
    int cpus_online;         /* CPUs online */
    int cpus_allowed;        /* of them, those this process may run on (its affinity mask) */
    int cores;               /* the physical cores those belong to */
    double cpu_quota;        /* its cgroup's CPU limit in CPUs (0: none) */
    int default_threads;     /* the default thread count (es_session_default_params) */
    int omp_threads;         /* OMP_NUM_THREADS's count (0: unset; -1: not a count, ignored) */
    int perf_cores, eff_cpus; /* a hybrid CPU's allowed P-cores and E-core CPUs (else 0, 0) */
    uint64_t mem_total;      /* the machine's memory (MemTotal); 0 if unknown */
    uint64_t mem_cgroup;     /* the cgroup's memory limit (0: none) */
    uint64_t mem_bytes;      /* what this process may use: the lower (or ESTREAM_MEM_LIMIT's) */
    char mem_source[24];     /* what set mem_bytes: "MemTotal", "cgroup", "ESTREAM_MEM_LIMIT" */
} es_cpu_desc;
/* This CPU as estream detected it (a feature counts only if the OS enabled it too). */
void es_cpu_describe(es_cpu_desc *out);
/* The process's peak resident memory (VmHWM) in bytes, 0 if unknown. */
size_t es_peak_rss_bytes(void);
/* Resets the peak to the current resident size (/proc/self/clear_refs), so that a later
 * es_peak_rss_bytes() is the peak since now. ES_E_UNSUPPORTED where the kernel refuses. */
es_status es_peak_rss_reset(void);


/* ---- measurements (estream bench) ------------------------------------------------------------ */
/* The raw read bandwidth of m's experts in bytes/s: the streamer's reads of `groups` experts
 * each (the same extents in the same order), queue_depth in flight (0 = 4), with p's
 * io_backend, direct_io and io_limit_bytes_per_s (NULL: the defaults), no compute and no
 * checksums, over at most max_bytes (0 = one whole request). The disk bound of a streaming
 * run. Errors: ES_E_INVAL (no experts, bad groups), ES_E_IO, ES_E_UNSUPPORTED, ES_E_NOMEM. */
es_status es_stream_measure_bandwidth(const es_model *m, const es_session_params *p,
                                      int groups, int queue_depth, uint64_t max_bytes,
                                      double *bytes_per_s);


/* ---- output files and charts ------------------------------------------------------------------ */
/* Writes data[0..bytes) to path as described under "Output files". ES_E_IO, ES_E_NOMEM. */
es_status es_outfile_save(const char *path, const void *data, size_t bytes);

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
es_status es_plot_svg_write(const char *path, const char *title, const char *x_label,
                            const char *y_label, const es_plot_series *s, int n_series);


#ifdef __cplusplus
}
#endif
#endif

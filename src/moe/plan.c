/* The fused expert operator (see plan.h for the design and the determinism argument). */
#include "moe/plan.h"

#include "quant/kern.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum {
    ROW_BLOCK = 512, /* RB: routed rows per gate/up -> down pass; bounds the SwiGLU block */
    CHUNK = 128,     /* columns per gate/up or down work item (a multiple of ES_TILE_ROWS) */
    /* Waves (invoke_worker): blocks of at most WAVE_ROWS rows (each quantized by one thread),
     * consecutive in expert order and together at most ROW_BLOCK rows */
    WAVE_ROWS = 128,
};
_Static_assert(CHUNK % ES_TILE_ROWS == 0, "tile chunks");

/* Columns per work item over n columns. The pool's threads share a block's items and the next
 * phase waits for the last of them, so the busiest thread takes ceil(ceil(n / w) / threads)
 * items of w columns: the width w of at most CHUNK (a multiple of ES_TILE_ROWS, which keeps each
 * SwiGLU chunk hot) that makes that the fewest columns, the widest of equals (fewer calls). At 2
 * threads that is CHUNK for an FFN of 512, 768 or 1,024 columns (1,408: 64, 704 columns each
 * instead of 768); at 16 threads Ling-mini-2.0's 512 take items of 32, where CHUNK's four would
 * leave 12 threads waiting in every expert's gate/up, and OLMoE's 1,024 items of 64. Results do
 * not depend on it (kern.h, determinism). A table whose calls pack their token rows first
 * (es_kern.wide_calls) takes an even share of the columns per thread (at least CHUNK, a multiple
 * of ES_TILE_ROWS), since each call packs the block's rows again: on the Intel Xeon of
 * bench/README.md the amx table without its matrix unit did 5-16 % less work relative to avx512
 * at 1,024 tokens this way (bench_amx_bound, Q4_0 and Q4_K, 1 and 2 threads), while the avx512
 * table got no faster with such chunks (0-4 % slower). */
static int64_t chunk_cols(const es_kern *k, int64_t n, int n_threads)
{
    if (k->wide_calls) {
        const int64_t share = (n + n_threads - 1) / n_threads;
        const int64_t c = (share + ES_TILE_ROWS - 1) / ES_TILE_ROWS * ES_TILE_ROWS;
        return c > CHUNK ? c : CHUNK;
    }
    int64_t best = CHUNK, best_cols = INT64_MAX;
    for (int64_t w = CHUNK; w >= ES_TILE_ROWS; w -= ES_TILE_ROWS) {
        const int64_t items = (n + w - 1) / w, rounds = (items + n_threads - 1) / n_threads;
        /* the busiest thread's columns; the last item (n's tail) may be short, and is its
         * alone when it starts a round of its own */
        const int64_t tail = n - (items - 1) * w;
        const int64_t cols = (items - 1) % n_threads == 0 ? (rounds - 1) * w + tail : rounds * w;
        if (cols < best_cols) best = w, best_cols = cols;
    }
    return best;
}

/* One block of at most ROW_BLOCK routed rows of one expert. */
typedef struct plan_block {
    int32_t slot;
    int32_t first; /* index into the CSR arrays */
    int32_t n;
    /* the first block after this one's wave (this one + 1: no wave), set on a wave's first
     * block; off: the block's first row in the wave's g, u and h_act rows (0 outside waves) */
    int32_t wave_end, off;
} plan_block;

typedef struct thread_buf {
    void *scratch;     /* es_gemm scratch, sized for the larger K */
    float *tile;       /* [ROW_BLOCK][out_chunk] down outputs before the weighted scatter-add */
    uint64_t ns[ES_PHASE_COUNT]; /* time in each sub-phase (es_plan_take_profile) */
} thread_buf;

struct es_plan {
    es_expert_shape shape;
    const es_kern *k;    /* the session's kernel table: every act buffer below is in its format */
    size_t x_gate_bytes, x_up_bytes, h_act_bytes, scratch_bytes; /* as allocated, for the frees */
    int capacity, t_max, n_slots, n_threads;
    int64_t ff_chunk, out_chunk; /* columns per gate/up and per down work item (chunk_cols) */
    es_pool *pool;
    /* input X, prepared once per layer for the gate (and up, if its type differs) kernels */
    void *x_gate, *x_up;
    int64_t T;
    /* CSR by slot: slot_start[P+1], routes' tokens and weights in slot order */
    int32_t *slot_count; /* [P + 1] */
    int32_t *slot_owner; /* [P] expert held by the slot in this invocation, -1 none */
    int32_t *csr_token;  /* [C] */
    float *csr_weight;   /* [C] */
    plan_block *blocks;  /* [n_expert + C / ROW_BLOCK + 1] */
    atomic_int *chunks_left; /* [same]: per block of a wave, its gate/up chunks not yet done */
    int n_blocks;
    /* per block: gate outputs then SwiGLU (g), up outputs (u), SwiGLU quantized for down */
    float *g, *u;        /* [ROW_BLOCK][n_ff] */
    void *h_act;         /* es_act_bytes(p->k, down_type, ROW_BLOCK, n_ff) */
    thread_buf *tb;      /* [n_threads] */
    es_expert_extras extras; /* es_plan_set_extras */
    /* invocation arguments for the job */
    const es_expert_slot *slots;
    float *Y;
    int64_t ldy;
    es_pool_counter next_ff, next_out;
    long n_waves; /* waves run since es_plan_create (es_plan_waves) */
    /* the work of the invocations since es_plan_take_profile: per es_phase */
    double int_ops[ES_PHASE_COUNT], float_ops[ES_PHASE_COUNT], weight_bytes[ES_PHASE_COUNT];
};

static size_t big_bytes(size_t n) { return es_align_up(n ? n : 1, 64); }

es_status es_plan_create(const es_expert_shape *shape, int capacity, int t_max, int n_slots,
                         es_pool *pool, const es_kern *k, es_plan **out)
{
    *out = NULL;
    const int64_t d = shape->n_embd, ff = shape->n_ff;
    if (capacity < 1 || t_max < 1 || n_slots < 1 || shape->n_expert < 1 || d < 1 || ff < 1 ||
        !pool)
        return es_fail(ES_E_INVAL, "expert plan: bad capacities");
    if (!es_kern_supports(k, shape->gate_type) || !es_kern_supports(k, shape->up_type) ||
        !es_kern_supports(k, shape->down_type))
        return es_fail(ES_E_UNSUPPORTED, "expert plan: no kernel for weight types %s/%s/%s",
                       es_qtype_name(shape->gate_type), es_qtype_name(shape->up_type),
                       es_qtype_name(shape->down_type));
    const uint32_t types[3] = {shape->gate_type, shape->up_type, shape->down_type};
    for (int i = 0; i < 8; i++) {
        if (i >= 3 ? shape->layout[i] != 0 : shape->layout[i] >= ES_LAYOUT_COUNT)
            return es_fail(ES_E_INVAL, "expert plan: bad layout id %u at %d", shape->layout[i], i);
        if (i < 3 && shape->layout[i] == ES_LAYOUT_TILES && !es_kern_supports_tiled(k, types[i]))
            return es_fail(ES_E_UNSUPPORTED, "expert plan: no tiled kernel for weight type %s",
                           es_qtype_name(types[i]));
    }
    es_plan *p = calloc(1, sizeof(*p));
    if (!p) return es_fail(ES_E_NOMEM, "out of memory");
    p->shape = *shape;
    p->k = k;
    p->capacity = capacity;
    p->t_max = t_max;
    p->n_slots = n_slots;
    p->pool = pool;
    p->n_threads = es_pool_size(pool);
    p->ff_chunk = chunk_cols(k, ff, p->n_threads);
    p->out_chunk = chunk_cols(k, d, p->n_threads);
    const int max_blocks = shape->n_expert + capacity / ROW_BLOCK + 1;
    p->x_gate_bytes = es_act_bytes(k, shape->gate_type, t_max, d);
    p->x_gate = es_alloc_big(p->x_gate_bytes);
    if (shape->up_type != shape->gate_type) {
        p->x_up_bytes = es_act_bytes(k, shape->up_type, t_max, d);
        p->x_up = es_alloc_big(p->x_up_bytes);
    }
    p->slot_count = calloc((size_t)n_slots + 1, sizeof(int32_t));
    p->slot_owner = calloc((size_t)n_slots, sizeof(int32_t));
    p->csr_token = calloc((size_t)capacity, sizeof(int32_t));
    p->csr_weight = calloc((size_t)capacity, sizeof(float));
    p->blocks = calloc((size_t)max_blocks, sizeof(plan_block));
    p->chunks_left = calloc((size_t)max_blocks, sizeof(atomic_int));
    p->g = es_alloc_big(sizeof(float) * ROW_BLOCK * (size_t)ff);
    p->u = es_alloc_big(sizeof(float) * ROW_BLOCK * (size_t)ff);
    p->h_act_bytes = es_act_bytes(k, shape->down_type, ROW_BLOCK, ff);
    p->h_act = es_alloc_big(p->h_act_bytes);
    p->tb = calloc((size_t)p->n_threads, sizeof(thread_buf));
    bool ok = p->x_gate && (p->x_up || shape->up_type == shape->gate_type) && p->slot_count &&
              p->slot_owner && p->csr_token && p->csr_weight && p->blocks && p->chunks_left &&
              p->g && p->u && p->h_act && p->tb;
    size_t sb = es_gemm_scratch_bytes(k, shape->gate_type, d);
    sb = sb > es_gemm_scratch_bytes(k, shape->up_type, d) ? sb : es_gemm_scratch_bytes(k, shape->up_type, d);
    sb = sb > es_gemm_scratch_bytes(k, shape->down_type, ff) ? sb : es_gemm_scratch_bytes(k, shape->down_type, ff);
    p->scratch_bytes = big_bytes(sb);
    for (int i = 0; ok && i < p->n_threads; i++) {
        p->tb[i].scratch = es_alloc_big(p->scratch_bytes);
        p->tb[i].tile = es_alloc_big(sizeof(float) * ROW_BLOCK * (size_t)p->out_chunk);
        ok = p->tb[i].scratch && p->tb[i].tile;
    }
    if (!ok) {
        es_plan_destroy(p);
        return es_fail(ES_E_NOMEM, "expert plan: out of memory");
    }
    *out = p;
    return ES_OK;
}

void es_plan_destroy(es_plan *p)
{
    if (!p) return;
    const es_expert_shape *s = &p->shape;
    es_free_big(p->x_gate, p->x_gate_bytes);
    es_free_big(p->x_up, p->x_up_bytes);
    free(p->slot_count);
    free(p->slot_owner);
    free(p->csr_token);
    free(p->csr_weight);
    free(p->blocks);
    free(p->chunks_left);
    es_free_big(p->g, sizeof(float) * ROW_BLOCK * (size_t)s->n_ff);
    es_free_big(p->u, sizeof(float) * ROW_BLOCK * (size_t)s->n_ff);
    es_free_big(p->h_act, p->h_act_bytes);
    if (p->tb) {
        for (int i = 0; i < p->n_threads; i++) {
            es_free_big(p->tb[i].scratch, p->scratch_bytes);
            es_free_big(p->tb[i].tile, sizeof(float) * ROW_BLOCK * (size_t)p->out_chunk);
        }
        free(p->tb);
    }
    free(p);
}

int es_plan_capacity(const es_plan *p) { return p->capacity; }

long es_plan_waves(const es_plan *p) { return p->n_waves; }

void es_plan_set_extras(es_plan *p, const es_expert_extras *x)
{
    p->extras = x ? *x : (es_expert_extras){0};
}

/* The GLU of rows [off, off + n_rows) of columns [j0, j1) of the gate (g) and up (u) blocks,
 * of expert e, their biases first where the extras have them (axpy with 1: exactly y + b); g
 * receives the result. */
static void glu_rows(const es_plan *p, int32_t e, int64_t off, int64_t n_rows, int64_t j0,
                     int64_t j1)
{
    const es_expert_extras *x = &p->extras;
    const int64_t ff = p->shape.n_ff, n = j1 - j0;
    for (int64_t r = off; r < off + n_rows; r++) {
        float *g = p->g + r * ff + j0, *u = p->u + r * ff + j0;
        if (x->gate_b) p->k->axpy(g, 1.0f, x->gate_b + (size_t)e * (size_t)ff + (size_t)j0, n);
        if (x->up_b) p->k->axpy(u, 1.0f, x->up_b + (size_t)e * (size_t)ff + (size_t)j0, n);
        if (x->glu == ES_GLU_OAI)
            p->k->glu_oai(g, u, n);
        else if (x->glu == ES_GLU_RELU)
            for (int64_t i = 0; i < n; i++) g[i] = g[i] > 0.0f ? g[i] * u[i] : 0.0f;
        else
            p->k->swiglu(g, u, n);
    }
}

typedef struct prep_job { es_plan *p; const float *x; int64_t ldx, T; } prep_job;

static void prep_worker(void *arg, int ith, int nth)
{
    prep_job *j = arg;
    es_plan *p = j->p;
    const int64_t d = p->shape.n_embd;
    const int64_t r0 = j->T * ith / nth, r1 = j->T * (ith + 1) / nth;
    if (r1 <= r0) return;
    const size_t rbg = es_act_row_bytes(p->k, p->shape.gate_type, d);
    es_act_prepare(p->k, p->shape.gate_type, j->x + r0 * j->ldx, j->ldx, r1 - r0, d,
                   (uint8_t *)p->x_gate + (size_t)r0 * rbg);
    if (p->x_up) {
        const size_t rbu = es_act_row_bytes(p->k, p->shape.up_type, d);
        es_act_prepare(p->k, p->shape.up_type, j->x + r0 * j->ldx, j->ldx, r1 - r0, d,
                       (uint8_t *)p->x_up + (size_t)r0 * rbu);
    }
}

void es_plan_set_input(es_plan *p, const float *x, int64_t ldx, int64_t T)
{
    ES_ASSERT(T >= 1 && T <= p->t_max);
    prep_job j = {p, x, ldx, T};
    p->T = T;
    es_pool_run(p->pool, prep_worker, &j);
}

/* es_gemm() or es_gemm_tiled() on matrix i (0 gate, 1 up, 2 down) of N rows of K weights,
 * as the shape's layout says; both give the same Y bit for bit (kern.h). */
static inline void mat_gemm(const es_plan *p, int i, uint32_t type, const void *W, int64_t K,
                            int64_t N, int64_t n0, int64_t n1, const void *act,
                            const int32_t *rows, int64_t n, float *Y, int64_t ldy, void *scratch)
{
    if (p->shape.layout[i] == ES_LAYOUT_TILES)
        es_gemm_tiled(p->k, type, W, K, N, n0, n1, act, rows, n, Y, ldy, 0, scratch);
    else
        es_gemm(p->k, type, W, K, n0, n1, act, rows, n, Y, ldy, 0, scratch);
}

/* The sub-phase clock of a worker: the time since *t goes to tb->ns[phase]. */
static inline void clock_to(thread_buf *tb, uint64_t *t, int phase)
{
    const uint64_t now = es_now_ns();
    tb->ns[phase] += now - *t;
    *t = now;
}

/* The end of the chunk of `chunk` columns starting at c0, of n. */
static inline int64_t chunk_end(int64_t c0, int64_t chunk, int64_t n)
{
    return c0 + chunk < n ? c0 + chunk : n;
}

/* Gate and up of a block's columns [j0, j1) into its rows [off, off + n) of g and u, and the GLU
 * of that chunk while it is hot. */
static void gate_up_chunk(es_plan *p, const plan_block *blk, int64_t j0, int64_t j1,
                          thread_buf *tb, uint64_t *t)
{
    const es_expert_shape *s = &p->shape;
    const int64_t d = s->n_embd, ff = s->n_ff, off = blk->off;
    const es_expert_slot *slot = &p->slots[blk->slot];
    const int32_t *rows = p->csr_token + blk->first;
    mat_gemm(p, 0, s->gate_type, slot->gate, d, ff, j0, j1, p->x_gate, rows, blk->n,
             p->g + off * ff, ff, tb->scratch);
    mat_gemm(p, 1, s->up_type, slot->up, d, ff, j0, j1, p->x_up ? p->x_up : p->x_gate, rows,
             blk->n, p->u + off * ff, ff, tb->scratch);
    clock_to(tb, t, ES_PHASE_EXPERT_GATE_UP);
    glu_rows(p, p->slot_owner[blk->slot], off, blk->n, j0, j1);
    clock_to(tb, t, ES_PHASE_SWIGLU);
}

/* Down of a block's quantized GLU rows (h_act rows [off, off + n)) over hidden columns
 * [c0, c1) into the thread's tile, then scaled by each route's weight and added to its Y row. */
static void down_chunk(es_plan *p, const plan_block *blk, int64_t c0, int64_t c1, thread_buf *tb,
                       uint64_t *t)
{
    const es_expert_shape *s = &p->shape;
    const int64_t d = s->n_embd, ff = s->n_ff, n = blk->n, off = blk->off;
    const size_t h_row = es_act_row_bytes(p->k, s->down_type, ff);
    const int32_t *rows = p->csr_token + blk->first;
    const float *w = p->csr_weight + blk->first;
    /* tile - c0: es_gemm writes absolute columns [c0, c1) of a row of stride out_chunk */
    mat_gemm(p, 2, s->down_type, p->slots[blk->slot].down, ff, d, c0, c1,
             (const uint8_t *)p->h_act + (size_t)off * h_row, NULL, n, tb->tile - c0,
             p->out_chunk, tb->scratch);
    clock_to(tb, t, ES_PHASE_EXPERT_DOWN);
    const float *bd = p->extras.down_b; /* llama.cpp: (down + bias) * weight */
    for (int64_t r = 0; bd && r < n; r++)
        p->k->axpy(tb->tile + r * p->out_chunk, 1.0f,
                   bd + (size_t)p->slot_owner[blk->slot] * (size_t)d + (size_t)c0, c1 - c0);
    for (int64_t r = 0; r < n; r++)
        p->k->axpy(p->Y + (int64_t)rows[r] * p->ldy + c0, w[r], tb->tile + r * p->out_chunk,
                   c1 - c0);
    clock_to(tb, t, ES_PHASE_SCATTER_ADD);
}

/* Quantizes rows [r0, r1) of the GLU block g into h_act for the down kernel. */
static void quantize_rows(es_plan *p, int64_t r0, int64_t r1)
{
    const int64_t ff = p->shape.n_ff;
    const size_t h_row = es_act_row_bytes(p->k, p->shape.down_type, ff);
    if (r1 > r0)
        es_act_prepare(p->k, p->shape.down_type, p->g + r0 * ff, ff, r1 - r0, ff,
                       (uint8_t *)p->h_act + (size_t)r0 * h_row);
}

static void barrier(es_plan *p, thread_buf *tb, uint64_t *t)
{
    es_pool_barrier(p->pool);
    clock_to(tb, t, ES_PHASE_BARRIER);
}

/* One block: gate/up (+GLU) with the threads splitting the FFN columns, quantize with the
 * threads splitting the rows, down (+weighted scatter-add) with the threads splitting the hidden
 * columns: three barriers. */
static void run_block(es_plan *p, const plan_block *blk, int ith, int nth, thread_buf *tb,
                      uint64_t *t)
{
    const int64_t d = p->shape.n_embd, ff = p->shape.n_ff, n = blk->n;
    for (long j0; (j0 = es_pool_counter_next(&p->next_ff, p->ff_chunk)) < ff;)
        gate_up_chunk(p, blk, j0, chunk_end(j0, p->ff_chunk, ff), tb, t);
    barrier(p, tb, t);
    if (ith == 0) es_pool_counter_set(&p->next_out, 0); /* nobody uses it in this phase */
    quantize_rows(p, n * ith / nth, n * (ith + 1) / nth);
    clock_to(tb, t, ES_PHASE_ACT_QUANT);
    barrier(p, tb, t);
    if (ith == 0) es_pool_counter_set(&p->next_ff, 0);
    /* a thread owns its columns of every Y row it touches */
    for (long c0; (c0 = es_pool_counter_next(&p->next_out, p->out_chunk)) < d;)
        down_chunk(p, blk, c0, chunk_end(c0, p->out_chunk, d), tb, t);
    barrier(p, tb, t);
}

/* A wave of small blocks [b0, b1) (their rows at blk->off in g, u and h_act): the threads take
 * the gate/up (+GLU) column chunks of all its blocks as they come, and the thread that finishes
 * a block's last chunk quantizes the block; then down over the hidden columns, each thread
 * taking the columns of every block of the wave in block order. Two barriers for the wave,
 * where run_block takes three per block, each waiting for the slowest thread's last chunk (at
 * 16 rows an expert, 3-6 % of a prefill on 2 threads). Every Y element still receives its
 * contributions in block (expert) order. */
static void run_wave(es_plan *p, int b0, int b1, int ith, thread_buf *tb, uint64_t *t)
{
    const int64_t d = p->shape.n_embd, ff = p->shape.n_ff;
    const long per_block = (long)((ff + p->ff_chunk - 1) / p->ff_chunk), n = per_block * (b1 - b0);
    /* nobody uses next_out before the barrier below; run_block and the waves leave next_ff 0 */
    if (ith == 0) es_pool_counter_set(&p->next_out, 0);
    for (long i; (i = es_pool_counter_next(&p->next_ff, 1)) < n;) {
        const int b = b0 + (int)(i / per_block);
        const plan_block *blk = &p->blocks[b];
        const int64_t j0 = i % per_block * p->ff_chunk;
        gate_up_chunk(p, blk, j0, chunk_end(j0, p->ff_chunk, ff), tb, t);
        /* acq_rel: the last one sees every other chunk's g */
        if (atomic_fetch_sub_explicit(&p->chunks_left[b], 1, memory_order_acq_rel) == 1) {
            quantize_rows(p, blk->off, blk->off + blk->n);
            clock_to(tb, t, ES_PHASE_ACT_QUANT);
        }
    }
    barrier(p, tb, t);
    if (ith == 0) es_pool_counter_set(&p->next_ff, 0);
    for (long c0; (c0 = es_pool_counter_next(&p->next_out, p->out_chunk)) < d;)
        for (int b = b0; b < b1; b++)
            down_chunk(p, &p->blocks[b], c0, chunk_end(c0, p->out_chunk, d), tb, t);
    barrier(p, tb, t);
}

/* Runs every block in order, a wave or one block at a time. */
static void invoke_worker(void *arg, int ith, int nth)
{
    es_plan *p = arg;
    thread_buf *tb = &p->tb[ith];
    uint64_t t = es_now_ns();
    for (int b = 0; b < p->n_blocks; b = p->blocks[b].wave_end) {
        if (p->blocks[b].wave_end > b + 1)
            run_wave(p, b, p->blocks[b].wave_end, ith, tb, &t);
        else
            run_block(p, &p->blocks[b], ith, nth, tb, &t);
    }
}

/* Groups consecutive small blocks into waves (plan_block.wave_end, .off; chunks_left): as many
 * as fit ROW_BLOCK rows, two at least. */
static void form_waves(es_plan *p)
{
    const int per_block = (int)((p->shape.n_ff + p->ff_chunk - 1) / p->ff_chunk);
    for (int b = 0; b < p->n_blocks;) {
        int e = b, rows = 0;
        while (e < p->n_blocks && p->blocks[e].n <= WAVE_ROWS &&
               rows + p->blocks[e].n <= ROW_BLOCK) {
            p->blocks[e].off = rows;
            rows += p->blocks[e].n;
            atomic_init(&p->chunks_left[e], per_block);
            e++;
        }
        if (e - b < 2) { /* no wave: block b alone */
            p->blocks[b].off = 0;
            p->blocks[b].wave_end = b + 1;
            b++;
        } else {
            p->blocks[b].wave_end = e;
            p->n_waves++;
            b = e;
        }
    }
}

/* The work of the blocks about to run, for es_plan_take_profile. */
static void count_work(es_plan *p)
{
    const es_expert_shape *s = &p->shape;
    const double d = (double)s->n_embd, ff = (double)s->n_ff;
    const uint32_t types[3] = {s->gate_type, s->up_type, s->down_type};
    const double K[3] = {d, d, ff}, N[3] = {ff, ff, d};
    for (int b = 0; b < p->n_blocks; b++)
        for (int i = 0; i < 3; i++) {
            const int ph = i < 2 ? ES_PHASE_EXPERT_GATE_UP : ES_PHASE_EXPERT_DOWN;
            const double ops = 2.0 * p->blocks[b].n * K[i] * N[i];
            if (es_qtype_is_float(types[i]))
                p->float_ops[ph] += ops;
            else
                p->int_ops[ph] += ops;
            p->weight_bytes[ph] += (double)es_qtype_row_bytes(types[i], (int64_t)K[i]) * N[i];
        }
}

void es_plan_take_profile(es_plan *p, double *ns, double *int_ops, double *float_ops,
                          double *weight_bytes)
{
    for (int ph = 0; ph < ES_PHASE_COUNT; ph++) {
        uint64_t sum = 0;
        for (int i = 0; i < p->n_threads; i++) {
            sum += p->tb[i].ns[ph];
            p->tb[i].ns[ph] = 0;
        }
        ns[ph] += (double)sum / p->n_threads;
        int_ops[ph] += p->int_ops[ph];
        float_ops[ph] += p->float_ops[ph];
        weight_bytes[ph] += p->weight_bytes[ph];
        p->int_ops[ph] = p->float_ops[ph] = p->weight_bytes[ph] = 0;
    }
}

es_status es_plan_invoke(es_plan *p, const es_route *routes, int R, const int32_t *phi,
                         const es_expert_slot *slots, float *Y, int64_t ldy)
{
    const int E = p->shape.n_expert, P = p->n_slots;
    if (R < 0 || R > p->capacity)
        return es_fail(ES_E_INVAL, "expert plan: %d routes exceed the capacity %d", R, p->capacity);
    if (R == 0) return ES_OK;
    /* CSR by slot: count, prefix sum, place. Slots are then visited in increasing order of the
     * expert they hold, so contributions reach Y in expert order whatever the placement. */
    memset(p->slot_count, 0, sizeof(int32_t) * ((size_t)P + 1));
    for (int s = 0; s < P; s++) p->slot_owner[s] = -1;
    for (int i = 0; i < R; i++) {
        const es_route *r = &routes[i];
        if (r->token < 0 || r->token >= p->T || r->expert < 0 || r->expert >= E)
            return es_fail(ES_E_INVAL, "expert plan: route %d (token %d, expert %d) out of range",
                           i, r->token, r->expert);
        const int32_t s = phi[r->expert];
        if (s < 0 || s >= P)
            return es_fail(ES_E_INVAL, "expert plan: expert %d placed in slot %d of %d",
                           r->expert, s, P);
        if (p->slot_owner[s] >= 0 && p->slot_owner[s] != r->expert)
            return es_fail(ES_E_INVAL, "expert plan: experts %d and %d share slot %d",
                           p->slot_owner[s], r->expert, s);
        p->slot_owner[s] = r->expert;
        p->slot_count[s + 1]++;
    }
    for (int s = 0; s < P; s++) p->slot_count[s + 1] += p->slot_count[s];
    /* place: slot_count[s] walks from the start of slot s's segment to its end */
    for (int i = 0; i < R; i++) {
        const int32_t at = p->slot_count[phi[routes[i].expert]]++;
        p->csr_token[at] = routes[i].token;
        p->csr_weight[at] = routes[i].weight;
    }
    /* now slot_count[s] is the end of segment s; its start is slot_count[s-1] (0 for s = 0) */
    p->n_blocks = 0;
    for (int e = 0; e < E; e++) {
        const int32_t s = phi[e];
        if (s < 0 || s >= P || p->slot_owner[s] != e) continue;
        const int32_t start = s ? p->slot_count[s - 1] : 0, end = p->slot_count[s];
        for (int32_t f = start; f < end; f += ROW_BLOCK)
            p->blocks[p->n_blocks++] =
                (plan_block){s, f, end - f < ROW_BLOCK ? end - f : ROW_BLOCK, 0, 0};
    }
    form_waves(p);
    p->slots = slots;
    p->Y = Y;
    p->ldy = ldy;
    es_pool_counter_set(&p->next_ff, 0);
    es_pool_counter_set(&p->next_out, 0);
    count_work(p);
    es_pool_run(p->pool, invoke_worker, p);
    return ES_OK;
}

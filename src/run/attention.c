/* Blocked causal attention with an online softmax (see attention.h). */
#include "run/attention.h"

#include "quant/kern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct attn_thread {
    void *q_act;    /* ATTN_BQ prepared query rows (dk) */
    void *p_act;    /* ATTN_BQ prepared probability rows (ATTN_BK) */
    float *s;       /* [ATTN_BQ][ATTN_BK] scores, then probabilities */
    float *o;       /* [ATTN_BQ][dv] unnormalised output */
    float *m, *l;   /* [ATTN_BQ] running max and sum */
    void *scratch;  /* es_gemm scratch */
} attn_thread;

struct es_attn {
    const es_kern *k; /* the session's kernel table */
    size_t q_act_bytes, p_act_bytes; /* as allocated, for the frees */
    int64_t t_max;
    int n_head, n_kv, n_kv_v, dk, dv, n_threads;
    es_pool *pool;
    /* Both in the F32 tile layout (quant/tiles.h), which the kernels read without transposing
     * (rows would be transposed again for every query block that reads them):
     * kh: [n_kv][t_max][dk]: each head's keys of sequence i, rows [seq_start[i], seq_start[i+1]),
     *     as a tiled matrix of those rows (tiles of 32 keys from the sequence's first, [dk][32]).
     * vtb: [n_kv_v][n_blocks][dv][ATTN_BK]: V per key block, a tiled matrix of dv rows of
     *     ATTN_BK keys (tiles of 32 value dims, [ATTN_BK keys][32]), keys past the sequence's
     *     end zero; blocks start at each sequence's first row, so a sequence's last block may
     *     be partial: n_blocks = t_max / ATTN_BK rounded up, plus one per sequence. */
    float *kh;
    float *vtb;
    int64_t n_blocks;
    int max_seqs;
    int64_t *vblock0;  /* [max_seqs]: the running batch's first V block of each sequence */
    int64_t *qitems;   /* [t_max / ATTN_BQ + max_seqs]: (sequence << 32 | query block), the
                        * blocks with the most keys first */
    int64_t n_qitems;
    attn_thread *th;
    size_t scratch_bytes;
    /* arguments of the running job */
    const float *q;
    float *out;
    const int64_t *seq_start; /* [n_seq + 1] */
    int n_seq;
    float scale;
    int64_t window;      /* keys a query sees, its own included (0: all before it) */
    bool chunked;        /* window is a chunk: a query sees the keys of its own chunk */
    const float *sinks;  /* [n_head] sink logits, or NULL */
    es_pool_counter next;
};

es_status es_attn_create(int64_t t_max, int max_seqs, int n_head, int n_kv, int dk, int n_kv_v,
                         int dv, es_pool *pool, const es_kern *k, es_attn **out)
{
    *out = NULL;
    ES_ASSERT(es_kern_supports_tiled(k, ES_QTYPE_F32)); /* every table has F32 tiles */
    es_attn *a = calloc(1, sizeof(*a));
    if (!a) return es_fail(ES_E_NOMEM, "out of memory");
    a->k = k;
    a->t_max = t_max;
    a->n_head = n_head;
    a->n_kv = n_kv;
    a->n_kv_v = n_kv_v;
    a->dk = dk;
    a->dv = dv;
    a->pool = pool;
    a->n_threads = es_pool_size(pool);
    a->max_seqs = max_seqs;
    a->n_blocks = (t_max + ATTN_BK - 1) / ATTN_BK + max_seqs;
    a->vblock0 = calloc((size_t)max_seqs, sizeof(int64_t));
    a->qitems = calloc((size_t)((t_max + ATTN_BQ - 1) / ATTN_BQ + max_seqs), sizeof(int64_t));
    a->kh = es_alloc_big(sizeof(float) * (size_t)n_kv * (size_t)t_max * (size_t)dk);
    a->vtb = es_alloc_big(sizeof(float) * (size_t)n_kv_v * (size_t)a->n_blocks * (size_t)dv * ATTN_BK);
    a->th = calloc((size_t)a->n_threads, sizeof(attn_thread));
    size_t sb = es_gemm_scratch_bytes(a->k, ES_QTYPE_F32, dk);
    const size_t sb2 = es_gemm_scratch_bytes(a->k, ES_QTYPE_F32, ATTN_BK);
    a->scratch_bytes = es_align_up((sb > sb2 ? sb : sb2) + 64, 64);
    a->q_act_bytes = es_act_bytes(k, ES_QTYPE_F32, ATTN_BQ, dk);
    a->p_act_bytes = es_act_bytes(k, ES_QTYPE_F32, ATTN_BQ, ATTN_BK);
    bool ok = a->kh && a->vtb && a->th && a->vblock0 && a->qitems;
    for (int i = 0; ok && i < a->n_threads; i++) {
        attn_thread *t = &a->th[i];
        t->q_act = es_alloc_big(a->q_act_bytes);
        t->p_act = es_alloc_big(a->p_act_bytes);
        t->s = es_alloc_big(sizeof(float) * ATTN_BQ * ATTN_BK);
        t->o = es_alloc_big(sizeof(float) * ATTN_BQ * (size_t)dv);
        t->m = es_alloc_big(sizeof(float) * ATTN_BQ * 2);
        t->scratch = es_alloc_big(a->scratch_bytes);
        ok = t->q_act && t->p_act && t->s && t->o && t->m && t->scratch;
        if (ok) t->l = t->m + ATTN_BQ;
    }
    if (!ok) {
        es_attn_destroy(a);
        return es_fail(ES_E_NOMEM, "attention: out of memory for %lld tokens", (long long)t_max);
    }
    *out = a;
    return ES_OK;
}

void es_attn_destroy(es_attn *a)
{
    if (!a) return;
    const size_t dk = (size_t)a->dk, dv = (size_t)a->dv;
    es_free_big(a->kh, sizeof(float) * (size_t)a->n_kv * (size_t)a->t_max * dk);
    es_free_big(a->vtb, sizeof(float) * (size_t)a->n_kv_v * (size_t)a->n_blocks * dv * ATTN_BK);
    if (a->th)
        for (int i = 0; i < a->n_threads; i++) {
            attn_thread *t = &a->th[i];
            es_free_big(t->q_act, a->q_act_bytes);
            es_free_big(t->p_act, a->p_act_bytes);
            es_free_big(t->s, sizeof(float) * ATTN_BQ * ATTN_BK);
            es_free_big(t->o, sizeof(float) * ATTN_BQ * dv);
            es_free_big(t->m, sizeof(float) * ATTN_BQ * 2);
            es_free_big(t->scratch, a->scratch_bytes);
        }
    free(a->th);
    free(a->vblock0);
    free(a->qitems);
    free(a);
}

int64_t es_attn_t_max(const es_attn *a) { return a->t_max; }
int es_attn_max_seqs(const es_attn *a) { return a->max_seqs; }

/* Key blocks of ATTN_BK rows a sequence of n rows needs (the last may be partial). */
static int64_t n_kblocks(int64_t n) { return (n + ATTN_BK - 1) / ATTN_BK; }

typedef struct kv_job { es_attn *a; const float *k, *v; int64_t nb; } kv_job;

/* The sequence whose V blocks hold global block g (vblock0 is increasing). */
static int seq_of_block(const es_attn *a, int64_t g)
{
    int lo = 0, hi = a->n_seq - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (a->vblock0[mid] <= g) lo = mid; else hi = mid - 1;
    }
    return lo;
}

static void kv_worker(void *arg, int ith, int nth)
{
    kv_job *j = arg;
    es_attn *a = j->a;
    const int dk = a->dk, dv = a->dv;
    const int64_t ldk = (int64_t)a->n_kv * dk, ldv = (int64_t)a->n_kv_v * dv;
    const int64_t nb = j->nb;
    const int n_heads = a->n_kv > a->n_kv_v ? a->n_kv : a->n_kv_v;
    /* items: (head, key block): key head h where h < n_kv, value head h where h < n_kv_v */
    for (int64_t it = ith; it < n_heads * nb; it += nth) {
        const int h = (int)(it / nb);
        const int64_t g = it % nb;
        const int sq = seq_of_block(a, g);
        const int64_t r0 = a->seq_start[sq], r_end = a->seq_start[sq + 1];
        const int64_t s0 = r0 + (g - a->vblock0[sq]) * ATTN_BK; /* the block's first row */
        /* the block's key tiles in the sequence's matrix of T keys: key s is row s - r0 */
        const int64_t T = r_end - r0;
        float *kseq = a->kh + ((size_t)h * (size_t)a->t_max + (size_t)r0) * (size_t)dk;
        for (int64_t n0 = s0 - r0; h < a->n_kv && n0 < s0 - r0 + ATTN_BK && n0 < T;
             n0 += ES_TILE_ROWS) {
            const int nt = es_tile_rows(T, n0);
            float *tile = kseq + n0 * dk;
            for (int jj = 0; jj < nt; jj++) {
                const float *kr = j->k + (r0 + n0 + jj) * ldk + h * dk;
                for (int i = 0; i < dk; i++) tile[i * nt + jj] = kr[i];
            }
        }
        /* the block's values: value dims [i0, i0 + nt) of key jj are nt consecutive floats */
        float *vt = a->vtb + (((size_t)h * (size_t)a->n_blocks + (size_t)g) * (size_t)dv) * ATTN_BK;
        for (int i0 = 0; h < a->n_kv_v && i0 < dv; i0 += ES_TILE_ROWS) {
            const int nt = es_tile_rows(dv, i0);
            float *tile = vt + (size_t)i0 * ATTN_BK;
            for (int64_t jj = 0; jj < ATTN_BK; jj++) {
                const int64_t s = s0 + jj;
                if (s < r_end)
                    memcpy(tile + jj * nt, j->v + s * ldv + h * dv + i0, sizeof(float) * (size_t)nt);
                else
                    memset(tile + jj * nt, 0, sizeof(float) * (size_t)nt);
            }
        }
    }
}

/* Checks the batch's sequence starts and lays out its blocks: vblock0, and the query items in
 * decreasing order of their keys (counting sort by query block, sequence order within one). */
static void set_batch(es_attn *a, const int64_t *seq_start, int n_seq)
{
    ES_ASSERT(n_seq >= 1 && n_seq <= a->max_seqs && seq_start[0] == 0 &&
              seq_start[n_seq] <= a->t_max);
    a->seq_start = seq_start;
    a->n_seq = n_seq;
    int64_t g = 0, max_qb = 0;
    for (int i = 0; i < n_seq; i++) {
        const int64_t n = seq_start[i + 1] - seq_start[i];
        ES_ASSERT(n >= 1);
        a->vblock0[i] = g;
        g += n_kblocks(n);
        const int64_t nqb = (n + ATTN_BQ - 1) / ATTN_BQ;
        if (nqb > max_qb) max_qb = nqb;
    }
    ES_ASSERT(g <= a->n_blocks);
    int64_t k = 0;
    for (int64_t qb = max_qb - 1; qb >= 0; qb--)
        for (int i = 0; i < n_seq; i++)
            if (qb * ATTN_BQ < seq_start[i + 1] - seq_start[i])
                a->qitems[k++] = (int64_t)i << 32 | qb;
    a->n_qitems = k;
}

void es_attn_set_kv(es_attn *a, const float *k, const float *v, const int64_t *seq_start,
                    int n_seq)
{
    set_batch(a, seq_start, n_seq);
    kv_job j = {a, k, v, a->vblock0[n_seq - 1] + n_kblocks(seq_start[n_seq] - seq_start[n_seq - 1])};
    es_pool_run(a->pool, kv_worker, &j);
}

/* The first key query q sees (positions from its sequence's start; keys up to q). */
static int64_t first_key_of(const es_attn *a, int64_t q)
{
    const int64_t W = a->window;
    if (W == 0) return 0;
    if (a->chunked) return q - q % W;
    return q - W + 1 > 0 ? q - W + 1 : 0;
}

/* Query block q0 (rows q0.. of sequence sq, counted from its start) of head h. */
static void attn_item(es_attn *a, attn_thread *t, int sq, int h, int64_t q0)
{
    const int dk = a->dk, dv = a->dv, hk = h / (a->n_head / a->n_kv);
    const int hv = h / (a->n_head / a->n_kv_v);
    const int64_t r0 = a->seq_start[sq], T = a->seq_start[sq + 1] - r0;
    const int64_t nq = T - q0 < ATTN_BQ ? T - q0 : ATTN_BQ;
    const int64_t ldq = (int64_t)a->n_head * dk, ldo = (int64_t)a->n_head * dv;
    es_act_prepare(a->k, ES_QTYPE_F32, a->q + (r0 + q0) * ldq + h * dk, ldq, nq, dk, t->q_act);
    for (int64_t i = 0; i < nq; i++) {
        t->m[i] = -INFINITY;
        t->l[i] = 0.0f;
    }
    memset(t->o, 0, sizeof(float) * (size_t)(nq * dv));
    /* the sequence's keys: its rows of the head's key matrix, numbered from its start */
    const float *kh = a->kh + ((size_t)hk * (size_t)a->t_max + (size_t)r0) * (size_t)dk;
    const int64_t last_q = q0 + nq - 1;
    /* with a window or chunks, the first key block any row of this query block sees */
    const int64_t first_key = first_key_of(a, q0);
    for (int64_t s0 = first_key / ATTN_BK * ATTN_BK; s0 <= last_q; s0 += ATTN_BK) {
        const int64_t s1 = s0 + ATTN_BK; /* padded keys beyond T are masked below */
        const int64_t s_end = s1 < T ? s1 : T;
        es_gemm_tiled(a->k, ES_QTYPE_F32, kh, dk, T, s0, s_end, t->q_act, NULL, nq, t->s - s0,
                      ATTN_BK, 0, t->scratch);
        for (int64_t i = 0; i < nq; i++) {
            float *srow = t->s + i * ATTN_BK;
            const int64_t q = q0 + i, hi = (q + 1 < s_end ? q + 1 : s_end) - s0;
            const int64_t fk = first_key_of(a, q), lo = fk > s0 ? fk - s0 : 0;
            if (lo >= hi) { /* none of this block's keys: the row's state stays */
                memset(srow, 0, sizeof(float) * ATTN_BK);
                continue;
            }
            const float bmx = a->k->scale_max(srow + lo, a->scale, hi - lo);
            const float mx = bmx > t->m[i] ? bmx : t->m[i];
            const float alpha = expf(t->m[i] - mx); /* 0 on the row's first block (m = -inf) */
            const float sum = a->k->exp_sum(srow + lo, mx, hi - lo);
            for (int64_t j = 0; j < lo; j++) srow[j] = 0.0f;
            for (int64_t j = hi; j < ATTN_BK; j++) srow[j] = 0.0f;
            t->l[i] = t->l[i] * alpha + sum;
            t->m[i] = mx;
            float *orow = t->o + i * dv;
            (void)a->k->scale_max(orow, alpha, dv); /* rescale the partial output */
        }
        es_act_prepare(a->k, ES_QTYPE_F32, t->s, ATTN_BK, nq, ATTN_BK, t->p_act);
        const float *vt = a->vtb + (((size_t)hv * (size_t)a->n_blocks +
                                     (size_t)(a->vblock0[sq] + s0 / ATTN_BK)) * (size_t)dv) * ATTN_BK;
        es_gemm_tiled(a->k, ES_QTYPE_F32, vt, ATTN_BK, dv, 0, dv, t->p_act, NULL, nq, t->o, dv, 1,
                      t->scratch);
    }
    for (int64_t i = 0; i < nq; i++) {
        float inv = 1.0f / t->l[i];
        if (a->sinks) { /* the sink joins the denominator (ggml's soft_max with sinks) */
            const float sk = a->sinks[h], mx = sk > t->m[i] ? sk : t->m[i];
            const float alpha = expf(t->m[i] - mx);
            inv = alpha / (t->l[i] * alpha + expf(sk - mx));
        }
        float *dst = a->out + (r0 + q0 + i) * ldo + h * dv;
        for (int k = 0; k < dv; k++) dst[k] = t->o[i * dv + k] * inv;
    }
}

static void attn_worker(void *arg, int ith, int nth)
{
    (void)nth;
    es_attn *a = arg;
    const int64_t items = a->n_qitems * a->n_head;
    /* Largest query blocks (most keys) first, so the tail of the job is short items. */
    for (long it; (it = es_pool_counter_next(&a->next, 1)) < items;) {
        const int64_t qi = a->qitems[it / a->n_head];
        attn_item(a, &a->th[ith], (int)(qi >> 32), (int)(it % a->n_head),
                  (qi & 0xffffffff) * ATTN_BQ);
    }
}

void es_attn_run(es_attn *a, const float *q, float *out, const int64_t *seq_start, int n_seq,
                 float scale, int64_t window, bool chunked, const float *sinks)
{
    ES_ASSERT(seq_start == a->seq_start && n_seq == a->n_seq); /* es_attn_set_kv's batch */
    ES_ASSERT(window >= 0);
    a->q = q;
    a->out = out;
    a->scale = scale;
    a->window = window;
    a->chunked = chunked;
    a->sinks = sinks;
    es_pool_counter_set(&a->next, 0);
    es_pool_run(a->pool, attn_worker, a);
}

/*
 * The expert plan: the fused expert operator of docs/design.md §4 for one shape class.
 *
 * DESIGN: es_plan_create() is called once per shape class (hidden size, FFN size, weight types)
 * with capacities C (routes per invocation) and T_max (tokens), and allocates every buffer the
 * operator will ever use: CSR arrays, the SwiGLU block, its quantized form and the per-thread
 * tiles. es_plan_invoke() allocates nothing. It receives the routes (token, expert, weight) and
 * the placement map phi (expert -> physical slot), builds the CSR-by-slot descriptors with a
 * counting sort in O(P + R), then walks the slots in increasing order of the expert they hold
 * (consecutive small blocks together, as a wave: plan.c's run_wave, two barriers a wave instead
 * of three a block): for each block of at most RB routed rows it runs gate and up over the
 * gathered rows (threads split the FFN columns in chunks of 32 to 128, as wide as keeps every
 * thread busy (plan.c's chunk_cols), or an even share each for a table whose calls pack their
 * rows: es_kern.wide_calls), applies SwiGLU while the tiles are hot, quantizes the block once,
 * and runs down (threads split the hidden columns alike) into a per-thread tile that is
 * scaled by the router weight and added into Y[token]. No two threads write the same Y element,
 * and every Y element receives its expert contributions in increasing expert id, each a dot
 * product reduced in a fixed order: Y is bit-identical for any thread count, route order,
 * placement or C.
 *
 * In the all-resident configuration phi maps every expert to a slot that points into the model;
 * with streaming, the loader fills arena slots and the residency table provides phi. The plan
 * does not care who filled a slot.
 */
#ifndef ES_PLAN_H
#define ES_PLAN_H

#include "core/util.h"
#include "quant/kern.h"
#include "core/pool.h"

typedef struct es_route {
    int32_t token;  /* row of X and Y */
    int32_t expert; /* logical expert id */
    float weight;   /* router probability */
} es_route;

/* Experts of one shape class: all share sizes, weight types and layouts. Plans are looked up by
 * comparing whole shapes with memcmp, so the struct has no padding (checked below) and unused
 * bytes must be zero: initialize with = {...} and set only the fields. */
typedef struct es_expert_shape {
    int64_t n_embd;     /* hidden size: gate/up row length, down output rows */
    int64_t n_ff;       /* expert FFN size */
    uint32_t gate_type, up_type, down_type;
    int n_expert;       /* logical experts per layer */
    /* layout[0..2]: ES_LAYOUT_ROWS or ES_LAYOUT_TILES (quant/tiles.h) of gate, up and down, in
     * the order of pack.h's ES_PACK_GATE/UP/DOWN; 0 (rows) by default. layout[3..7]: zero. */
    uint8_t layout[8];
} es_expert_shape;
_Static_assert(sizeof(es_expert_shape) == 40, "es_expert_shape must have no padding");

/* A physical slot: where one expert's three matrices are. gate, up: n_ff rows of n_embd;
 * down: n_embd rows of n_ff, each in the layout the shape gives it (GGUF rows or tiles). */
typedef struct es_expert_slot {
    const void *gate, *up, *down;
} es_expert_slot;

typedef struct es_plan es_plan;

/* capacity: C, the most routes one invocation takes; t_max: most tokens (rows of X and Y);
 * n_slots: P, the physical slots phi may point to. pool: the threads that run invocations.
 * k: the kernel table every invocation uses (borrowed; must outlive the plan). */
es_status es_plan_create(const es_expert_shape *shape, int capacity, int t_max, int n_slots,
                         es_pool *pool, const es_kern *k, es_plan **out);
void es_plan_destroy(es_plan *p); /* NULL is a no-op */
int es_plan_capacity(const es_plan *p);
/* The waves of small blocks (plan.c) the invocations since es_plan_create ran: for tests. */
long es_plan_waves(const es_plan *p);

/* What each expert computes besides its three products, the same for a whole layer: the GLU
 * between gate and up, and biases added to its gate, up and down outputs (gpt-oss). Zero
 * (es_plan_set_extras(p, NULL)): SwiGLU and no biases. */
typedef enum es_glu {
    ES_GLU_SWIGLU, /* silu(g) u */
    ES_GLU_OAI,    /* gpt-oss's clamped one (the kernel table's glu_oai) */
    ES_GLU_RELU,   /* relu(g) u as ggml's reglu: g > 0 ? g u : 0 (exact in any table) */
} es_glu;
typedef struct es_expert_extras {
    es_glu glu;
    const float *gate_b, *up_b; /* [n_expert][n_ff] rows added to gate and up outputs, or NULL */
    const float *down_b;        /* [n_expert][n_embd] row added to down's output, or NULL */
} es_expert_extras;

/* The extras of the following invocations (copied; x NULL: none), until the next call. */
void es_plan_set_extras(es_plan *p, const es_expert_extras *x);

/* Prepares X [T][n_embd] (row stride ldx floats) once per layer in the form the gate/up kernels
 * read; every later invocation on this X gathers its rows from it. T <= t_max. */
void es_plan_set_input(es_plan *p, const float *x, int64_t ldx, int64_t T);

/* Y[t] += sum over routes r with token t of weight_r * down_e(silu(gate_e x_t) * up_e x_t)
 * (with the extras of es_plan_set_extras: weight_r * (down_e(glu(gate_e x_t + bg_e, up_e x_t +
 * bu_e)) + bd_e)).
 * routes[0..R) with R <= capacity; phi[e] in [0, n_slots) is the slot of expert e (entries of
 * experts without routes are not read); slots[phi[e]] holds its weights. Y: [T][ldy] floats.
 * Returns ES_E_INVAL for R > capacity or a route whose token or expert is out of range. */
es_status es_plan_invoke(es_plan *p, const es_route *routes, int R, const int32_t *phi,
                         const es_expert_slot *slots, float *Y, int64_t ldy);

/* What the invocations since the last call did, added to the caller's arrays (indexed by
 * es_phase) and then cleared: ns the mean over the plan's threads of the nanoseconds each spent
 * in ES_PHASE_EXPERT_GATE_UP, SWIGLU, ACT_QUANT, EXPERT_DOWN, SCATTER_ADD and BARRIER; the work
 * counts of the products (estream.h es_phase_profile). */
void es_plan_take_profile(es_plan *p, double *ns, double *int_ops, double *float_ops,
                          double *weight_bytes);

#endif

/*
 * What es_model_open (model.c) needs of hparams.c: the hyperparameters' reading, and each
 * layer's KV head count (0: a short-convolution layer) when the tensors are bound. Internal to
 * model/.
 */
#ifndef ES_HPARAMS_H
#define ES_HPARAMS_H

#include "model/model.h"

/* Reads and checks m->arch's hyperparameters into m->hp (m->gguf, m->family and m->hp.n_vocab
 * set). Errors: ES_E_FORMAT (a missing or out-of-range key, named), ES_E_UNSUPPORTED. */
es_status es_hparams_read(es_model *m);
/* attention.head_count_kv of layer il (after es_hparams_read). */
int es_hparams_head_count_kv(const es_model *m, int il);
/* Whether layer il attends through a sliding window (families with swa or irope, after
 * es_hparams_read): llama.cpp's set_swa_pattern over attention.sliding_window_pattern. */
bool es_hparams_layer_slides(const es_model *m, int il);
/* Whether layer il turns no RoPE: Llama 4's every 4th layer, or with rope_swa_only the layers
 * llama.cpp leaves unrotated (EXAONE: those without a window; SmallThinker: il % 4 == 0). */
bool es_hparams_layer_no_rope(const es_model *m, int il);

#endif

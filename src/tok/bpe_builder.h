/* estream's default byte-level BPE vocabulary for synthetic models (see bpe_builder.c). */
#ifndef ES_BPE_BUILDER_H
#define ES_BPE_BUILDER_H

#include "core/util.h"

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum {
    ES_TOKEN_TYPE_NORMAL = 1,
    ES_TOKEN_TYPE_UNKNOWN = 2,
    ES_TOKEN_TYPE_CONTROL = 3,
    ES_TOKEN_TYPE_USER_DEFINED = 4,
    ES_TOKEN_TYPE_UNUSED = 5,
    ES_TOKEN_TYPE_BYTE = 6,
};

typedef struct es_bpe_vocab {
    char **tokens;   /* [n_tokens] UTF-8, GPT-2 byte mapping */
    int32_t *types;  /* [n_tokens] */
    char **merges;   /* [n_merges] "left right" */
    int n_tokens, n_merges;
    int bos_id, eos_id;
} es_bpe_vocab;

/* Builds the vocabulary with exactly n_vocab (>= 258) tokens. Free with es_bpe_vocab_free. */
es_status es_bpe_vocab_build(int n_vocab, es_bpe_vocab *v);
void es_bpe_vocab_free(es_bpe_vocab *v);

#endif

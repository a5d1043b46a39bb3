/*
 * Tokenizer built from GGUF metadata (tokenizer.ggml.*): byte-level BPE ("gpt2") and
 * SentencePiece-style ("llama"). Reproduces llama.cpp's llama_tokenize() ids.
 *
 * DESIGN: es_tok_create() copies the vocabulary out of the GGUF, validates it (duplicates,
 * unknown merge parts, special ids out of range: ES_E_FORMAT naming the key) and builds every
 * table the encoder needs: a text->id hash map, a merge-pair hash map, the special-token list
 * and the detokenized piece of every token. After that the handle is read-only: any number of
 * threads may call the functions below on one es_tok at the same time.
 *
 * Encoding follows llama.cpp step by step:
 *   1. special-token partition: special tokens (CONTROL, USER_DEFINED, UNKNOWN types), longest
 *      first, are cut out of the text; CONTROL/UNKNOWN ones only when parse_special is true,
 *      USER_DEFINED ones always (llama.cpp's tokenizer_st_partition);
 *   2. each remaining fragment: BPE = pre-tokenizer regexes (PCRE2), GPT-2 byte mapping,
 *      merges by rank; SPM = spaces -> U+2581, bigram merges by score, <0xXX> byte fallback;
 *   3. BOS/EOS around the result when add_special and the vocabulary asks for them.
 */
#ifndef ES_TOK_H
#define ES_TOK_H

#include "gguf/gguf.h"
#include <stdbool.h>

typedef struct es_tok es_tok;

/* Vocabulary limits, checked by es_tok_create() before anything is sized from the file (a
 * vocabulary past one of them is refused with ES_E_FORMAT naming the file and the token).
 * Real vocabularies are far inside them: 32K-262K tokens; the longest token text we know is
 * 1,024 bytes (gpt-neox's run of spaces; most vocabularies stop at 128-256); all texts
 * together take 0.2-4 MiB. The limits leave 16x-64x of room over that and keep every table
 * built from a vocabulary a small, linear multiple of the file: a few hundred MiB at worst.
 *   ES_TOK_MAX_TOKENS       tokens in tokenizer.ggml.tokens
 *   ES_TOK_MAX_TOKEN_BYTES  bytes of one token text (also bounds one SPM/BPE symbol lookup)
 *   ES_TOK_MAX_TEXT_BYTES   bytes of all token texts together (empty ones count as 32)
 *   ES_TOK_MAX_PIECE_BYTES  bytes of all detokenized pieces together (es_tok_piece) */
#define ES_TOK_MAX_TOKENS (1 << 24)
#define ES_TOK_MAX_TOKEN_BYTES ((size_t)64 << 10)
#define ES_TOK_MAX_TEXT_BYTES ((size_t)64 << 20)
#define ES_TOK_MAX_PIECE_BYTES ((size_t)64 << 20)

/* Reads tokenizer.ggml.* keys of g; copies what it keeps (g may be closed afterwards). Time and
 * memory are linear in the vocabulary's size.
 * Errors: ES_E_FORMAT (missing or malformed key, or a limit above passed, named in
 * es_last_error()), ES_E_UNSUPPORTED
 * (tokenizer model other than "gpt2" and "llama"), ES_E_NOMEM. *out is NULL on failure. */
es_status es_tok_create(const es_gguf *g, es_tok **out);
void es_tok_destroy(es_tok *t); /* NULL is a no-op */

/* Tokenizes text[0..len) (any bytes; invalid UTF-8 is handled as llama.cpp does). add_special:
 * add BOS/EOS where the vocabulary asks for them; parse_special: recognise the text of
 * CONTROL tokens such as "<|endoftext|>". On success *ids is malloc'd (never NULL, caller
 * frees) and holds *n_ids ids. Errors: ES_E_NOMEM, ES_E_UNSUPPORTED (regex engine limit). */
es_status es_tok_encode(const es_tok *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **ids, size_t *n_ids);

int32_t es_tok_n_vocab(const es_tok *t);
int32_t es_tok_bos(const es_tok *t); /* -1 if none */
int32_t es_tok_eos(const es_tok *t); /* -1 if none */
bool es_tok_add_bos(const es_tok *t);
bool es_tok_add_eos(const es_tok *t);

/* Detokenized bytes of one token, as llama.cpp's token_to_piece(special = true) renders it:
 * special tokens as their text, byte-level BPE text mapped back to bytes, SPM U+2581 -> space,
 * <0xXX> -> that byte. One difference: a byte-level BPE character outside the GPT-2 mapping
 * renders as "[UNK_BYTE_0x<its UTF-8 in hex>]"; llama.cpp appends the whole token text inside
 * the brackets, which makes a token's piece grow with the square of its length. Not NUL-terminated. NULL if id is out of range. Valid until
 * es_tok_destroy(). */
const char *es_tok_piece(const es_tok *t, int32_t id, size_t *len);

/* Concatenates the pieces of ids[0..n) into a malloc'd, NUL-terminated *text (*len bytes, not
 * counting the NUL). Like llama.cpp's detokenize with special tokens rendered, including the
 * removal of the one leading space an SPM vocabulary adds, but without its optional
 * "clean up spaces" pass, so that decode(encode(s)) == s wherever encoding is lossless.
 * ES_E_INVAL if an id is out of range. */
es_status es_tok_decode(const es_tok *t, const int32_t *ids, size_t n, char **text, size_t *len);

#endif

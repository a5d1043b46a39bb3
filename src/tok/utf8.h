/*
 * UTF-8 helpers for the tokenizer: decoding with llama.cpp's leniency, encoding, and GPT-2's
 * byte-to-character mapping used by byte-level BPE vocabularies.
 *
 * DESIGN: tokenizers must reproduce llama.cpp's ids exactly, so decoding follows llama.cpp's
 * rules rather than strict UTF-8: a lead byte announces the sequence length, continuation bytes
 * are checked, but overlong forms and surrogates are accepted as decoded. A byte that cannot
 * start a valid sequence decodes to U+FFFD and consumes one byte.
 */
#ifndef ES_TOK_UTF8_H
#define ES_TOK_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define ES_UTF8_REPLACEMENT 0xFFFDu

/* Length of the sequence that lead byte c announces (1..4); continuation bytes give 1. */
static inline size_t es_utf8_len(uint8_t c)
{
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

/* Decodes one code point from s[0..n) (n > 0) and returns it; *used gets the bytes consumed.
 * Invalid input gives U+FFFD with *used = 1. The result may be a surrogate or above U+10FFFF
 * (up to 0x1FFFFF), as llama.cpp's decoder allows. */
uint32_t es_utf8_decode(const uint8_t *s, size_t n, size_t *used);

/* Writes the UTF-8 form of cp (<= 0x10FFFF) to out (4 bytes of room); returns its length. */
size_t es_utf8_encode(uint32_t cp, uint8_t *out);

/* GPT-2 byte-level mapping: every byte has a printable code point. Printable Latin-1 bytes map
 * to themselves; the 68 others map, in byte order, to U+0100 .. U+0143. */
uint32_t es_gpt2_byte_to_cp(uint8_t b);
/* Inverse of es_gpt2_byte_to_cp: the byte for cp, or -1 if cp is not in the mapping. */
int es_gpt2_cp_to_byte(uint32_t cp);

#endif

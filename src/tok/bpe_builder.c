/*
 * Builds estream's default byte-level BPE vocabulary (GPT-2 style) for synthetic models: the 256
 * byte tokens, merges learned by plain BPE training on a small built-in English text, one
 * control token "<|endoftext|>" (BOS and EOS), and "<|unused_N|>" padding up to the requested
 * size. Deterministic: the same n_vocab always gives the same vocabulary.
 *
 * Token strings use GPT-2's byte-to-unicode mapping (printable bytes map to themselves, the
 * rest to U+0100 and up), so the result reads like any gpt2-model GGUF vocabulary and both
 * estream and llama.cpp tokenize with it (pre-tokenizer "gpt-2").
 */
#include "tok/bpe_builder.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char corpus[] =
    "The river runs past the old mill and under the stone bridge, where the children of the "
    "village gather in the evening to watch the water. In the summer the current is slow and "
    "warm; in the winter it freezes at the edges, and the mill wheel stands still until the "
    "spring. People say that the mill was built more than three hundred years ago, in 1712, by "
    "a family of carpenters who came from the north with their tools and their songs. "
    "A model that reads a long text must first split it into tokens. Each token is a piece of a "
    "word, a whole word, a number or a mark of punctuation. The tokens are then turned into "
    "vectors, and the vectors pass through many layers, each of which mixes information between "
    "the positions and then transforms every position on its own. In a mixture of experts, that "
    "second step is done by a few experts chosen for each token by a small router network. "
    "Only the chosen experts run, so the model can be large while each token costs little. "
    "The experts are stored on disk and read into memory when they are needed, group by group, "
    "while the processor computes with the groups that have already arrived. "
    "She opened the window, looked at the garden and said: \"It will rain before noon.\" "
    "He did not believe her, but he took his coat anyway. By eleven o'clock the sky had turned "
    "grey, and at a quarter to twelve the first drops fell on the table outside. "
    "Numbers such as 3.14, 2048, 1,000,000 and 42 appear in many documents, together with "
    "dates like 30 November 2026 and times like 12:45. Lists are common too: apples, pears, "
    "plums, cherries and grapes; red, green, blue and yellow; north, south, east and west. "
    "Questions, answers and explanations follow one another in every language. What is the "
    "capital of France? Paris is the capital of France. Why is the sky blue? Because the air "
    "scatters blue light more than red light. How many days are there in a week? There are "
    "seven days in a week, and there are twelve months in a year. "
    "The history of the region is long and complicated. Its towns were founded by traders, "
    "its roads were built by soldiers, and its laws were written by judges who had studied in "
    "distant cities. Today it is known for its cheese, its wine and its quiet mountain lakes. "
    "Computers store text as bytes. A byte has eight bits and can hold one of 256 values. "
    "Letters, digits, spaces and symbols each have their own codes, and characters from other "
    "scripts take two, three or four bytes each. ";

/* GPT-2's byte -> code point mapping. */
static unsigned byte_to_cp(unsigned b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    unsigned n = 0; /* index among the remapped bytes */
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) n++;
    return 256 + n;
}

static size_t put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* byte_to_cp never exceeds U+0143 */
}

typedef struct word { int *sym; int n; int count; } word;

/* Splits like the gpt-2 pre-tokenizer does on ASCII text: optional leading space followed by a
 * run of letters, of digits or of other non-space characters, or a run of spaces. */
static size_t next_piece(const char *s, size_t i, size_t n)
{
    size_t j = i;
    if (s[j] == ' ' && j + 1 < n && s[j + 1] != ' ') j++;
    int cls = isalpha((unsigned char)s[j]) ? 1 : isdigit((unsigned char)s[j]) ? 2 : s[j] == ' ' ? 3 : 4;
    while (j < n) {
        int c = isalpha((unsigned char)s[j]) ? 1 : isdigit((unsigned char)s[j]) ? 2 : s[j] == ' ' ? 3 : 4;
        if (c != cls) break;
        j++;
    }
    return j > i ? j : i + 1;
}

void es_bpe_vocab_free(es_bpe_vocab *v)
{
    if (!v) return;
    for (int i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof(*v));
}

static int find_token(const es_bpe_vocab *v, const char *s)
{
    for (int i = 0; i < v->n_tokens; i++)
        if (strcmp(v->tokens[i], s) == 0) return i;
    return -1;
}

es_status es_bpe_vocab_build(int n_vocab, es_bpe_vocab *v)
{
    memset(v, 0, sizeof(*v));
    if (n_vocab < 258) return es_fail(ES_E_INVAL, "a byte-level vocabulary needs at least 258 tokens");
    v->tokens = calloc((size_t)n_vocab, sizeof(char *));
    v->types = calloc((size_t)n_vocab, sizeof(int32_t));
    v->merges = calloc((size_t)n_vocab, sizeof(char *));
    if (!v->tokens || !v->types || !v->merges) goto nomem;
    for (unsigned b = 0; b < 256; b++) {
        char buf[4] = {0};
        put_utf8(buf, byte_to_cp(b));
        if (!(v->tokens[b] = strdup(buf))) goto nomem;
        v->types[b] = ES_TOKEN_TYPE_NORMAL;
    }
    v->n_tokens = 256;

    /* unique words with counts */
    const size_t n = sizeof(corpus) - 1;
    word *words = calloc(n, sizeof(word));
    int n_words = 0;
    int *pair_count = NULL;
    if (!words) goto nomem;
    for (size_t i = 0; i < n;) {
        size_t j = next_piece(corpus, i, n);
        int w;
        for (w = 0; w < n_words; w++) {
            if ((size_t)words[w].n != j - i) continue;
            int k = 0;
            while (k < words[w].n && words[w].sym[k] == (unsigned char)corpus[i + (size_t)k]) k++;
            if (k == words[w].n) break;
        }
        if (w == n_words) {
            words[w].sym = malloc(sizeof(int) * (j - i));
            if (!words[w].sym) { n_words++; goto nomem_words; }
            for (size_t k = i; k < j; k++) words[w].sym[k - i] = (unsigned char)corpus[k];
            words[w].n = (int)(j - i);
            n_words++;
        }
        words[w].count++;
        i = j;
    }

    /* merges until the vocabulary is full (one slot kept for <|endoftext|>) or no pair repeats */
    const int room = n_vocab - 1;
    while (v->n_tokens < room) {
        const int nt = v->n_tokens;
        free(pair_count);
        pair_count = calloc((size_t)nt * (size_t)nt, sizeof(int));
        if (!pair_count) goto nomem_words;
        for (int w = 0; w < n_words; w++)
            for (int k = 0; k + 1 < words[w].n; k++)
                pair_count[words[w].sym[k] * nt + words[w].sym[k + 1]] += words[w].count;
        int best = -1;
        for (int p = 0; p < nt * nt; p++)
            if (pair_count[p] >= 2 && (best < 0 || pair_count[p] > pair_count[best])) best = p;
        if (best < 0) break;
        const int a = best / nt, b = best % nt;
        size_t la = strlen(v->tokens[a]), lb = strlen(v->tokens[b]);
        char *merged = malloc(la + lb + 1), *rule = malloc(la + lb + 2);
        if (!merged || !rule) { free(merged); free(rule); goto nomem_words; }
        memcpy(merged, v->tokens[a], la);
        memcpy(merged + la, v->tokens[b], lb + 1);
        memcpy(rule, v->tokens[a], la);
        rule[la] = ' ';
        memcpy(rule + la + 1, v->tokens[b], lb + 1);
        int id = find_token(v, merged);
        if (id < 0) {
            id = v->n_tokens++;
            v->tokens[id] = merged;
            v->types[id] = ES_TOKEN_TYPE_NORMAL;
        } else {
            free(merged);
        }
        v->merges[v->n_merges++] = rule;
        for (int w = 0; w < n_words; w++) { /* apply the merge left to right */
            int o = 0;
            for (int k = 0; k < words[w].n; k++) {
                if (k + 1 < words[w].n && words[w].sym[k] == a && words[w].sym[k + 1] == b) {
                    words[w].sym[o++] = id;
                    k++;
                } else {
                    words[w].sym[o++] = words[w].sym[k];
                }
            }
            words[w].n = o;
        }
        if (v->n_merges >= n_vocab) break; /* merges array is n_vocab long */
    }
    free(pair_count);
    for (int w = 0; w < n_words; w++) free(words[w].sym);
    free(words);

    v->eos_id = v->bos_id = v->n_tokens;
    if (!(v->tokens[v->n_tokens] = strdup("<|endoftext|>"))) goto nomem;
    v->types[v->n_tokens++] = ES_TOKEN_TYPE_CONTROL;
    while (v->n_tokens < n_vocab) {
        char buf[32];
        snprintf(buf, sizeof(buf), "<|unused_%d|>", v->n_tokens);
        if (!(v->tokens[v->n_tokens] = strdup(buf))) goto nomem;
        v->types[v->n_tokens++] = ES_TOKEN_TYPE_UNUSED;
    }
    return ES_OK;
nomem_words:
    free(pair_count);
    for (int w = 0; w < n_words; w++) free(words[w].sym);
    free(words);
nomem:
    es_bpe_vocab_free(v);
    return es_fail(ES_E_NOMEM, "out of memory building the default vocabulary");
}

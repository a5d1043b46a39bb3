/* estream tokenize: token ids of a text, space-separated on one line. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: estream tokenize -m MODEL (-p TEXT | -f FILE) [--bos] [--no-parse-special]\n"
    "\n"
    "Prints the token ids of the text, space-separated, on one line. Works on vocabulary-only\n"
    "GGUF files too. Nothing is added unless --bos: then the BOS token starts the ids (and EOS\n"
    "ends them where the tokenizer's metadata asks for one). Special-token text such as\n"
    "<|endoftext|> is recognised unless --no-parse-special.\n";

int cmd_tokenize(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "tokenize"};
    const char *model = NULL, *text = NULL, *file = NULL;
    bool bos = false, parse_special = true;
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) { fputs(help, stdout); return 0; }
        else if (!strcmp(s, "-m") || !strcmp(s, "--model")) model = cli_value(&a, s);
        else if (!strcmp(s, "-p") || !strcmp(s, "--prompt")) text = cli_value(&a, s);
        else if (!strcmp(s, "-f") || !strcmp(s, "--file")) file = cli_value(&a, s);
        else if (!strcmp(s, "--bos")) bos = true;
        else if (!strcmp(s, "--no-parse-special")) parse_special = false;
        else cli_unknown(&a, s);
    }
    size_t len;
    char *prompt = cli_prompt(text, file, &len);
    es_model *m = cli_open_model(model, ES_OPEN_VOCAB_ONLY);
    size_t n;
    int32_t *ids = cli_tokenize(m, prompt, len, bos, parse_special, &n);
    /* --bos means a BOS token even where the tokenizer would not add one by itself. */
    const bool prepend = bos && es_model_bos(m) >= 0 && (n == 0 || ids[0] != es_model_bos(m));
    if (prepend) printf("%d", es_model_bos(m));
    for (size_t i = 0; i < n; i++) printf(i || prepend ? " %d" : "%d", ids[i]);
    putchar('\n');
    free(ids);
    free(prompt);
    es_model_close(m);
    return fflush(stdout) == 0 ? 0 : 1;
}

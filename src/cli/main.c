/* estream command-line tool: dispatch to the subcommands (their shared helpers are cli.c's). */
#include "cli/cli.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "estream: fast, memory-bounded prefill of Mixture-of-Experts models (GGUF)\n"
    "\n"
    "usage: estream COMMAND [options]      (estream COMMAND --help for details)\n"
    "\n"
    "commands:\n"
    "  info      -m MODEL                      architecture, hyperparameters, tensors\n"
    "  tokenize  -m MODEL (-p TEXT | -f FILE)  token ids of a text\n"
    "  synth     --preset P --type T -o FILE   write a synthetic model\n"
    "  prefill   -m MODEL (-p|-f|--ids)        run the prefill, print the next-token top-k\n"
    "  ppl       -m MODEL -f TEXT [-c CTX]     perplexity (llama-perplexity convention)\n"
    "  bench     -m MODEL [-p 128,512,...]     prompt-processing speed (like llama-bench)\n"
    "  pack      -m MODEL -o OUT.pack          write the pack the expert streamer reads\n"
    "  tune      -m MODEL --mem BUDGETS        choose the arena for memory budgets (MODEL.tune)\n"
    "  score     -m MODEL -f IN.jsonl          log-probs, choices, labels, chats, reranking\n"
    "  embed     -m MODEL -f IN.jsonl          pooled embeddings (JSONL or .npy)\n"
    "  serve     -m MODEL [--port N]           HTTP service: OpenAI completions, chat, embeddings;\n"
    "                                          rerank, score, classify\n"
    "\n"
    "environment: ESTREAM_LOG=0..3 (log level), ESTREAM_ISA=scalar|avx2|avxvnni|avx512|amx|asimd|neon|i8mm\n";

/* SIGINT, SIGTERM, SIGHUP, SIGPIPE: remove the temporary files of outputs in progress, then die
 * of the same signal (SA_RESETHAND restored the default action; the raised signal is blocked
 * until the handler returns, then kills), so the exit status says which signal it was. */
static void on_fatal_signal(int sig)
{
    es_cleanup_temp_files(); /* async-signal-safe */
    raise(sig);
}

/* Installs on_fatal_signal, except for signals ignored when we started (nohup, a background job
 * of a non-interactive shell): those stay ignored. SIGXFSZ is ignored so that a file size limit
 * makes write() fail with EFBIG, which is reported and cleaned up, instead of dumping core. */
static void install_signal_handlers(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    struct sigaction sa = {.sa_handler = on_fatal_signal, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < CLI_LEN(sigs); i++) sigaddset(&sa.sa_mask, sigs[i]);
    for (size_t i = 0; i < CLI_LEN(sigs); i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGXFSZ, SIG_IGN);
}

int main(int argc, char **argv)
{
    install_signal_handlers();
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "prefill")) return cmd_prefill(argc - 1, argv + 1);
    if (!strcmp(cmd, "ppl")) return cmd_ppl(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "pack")) return cmd_pack(argc - 1, argv + 1);
    if (!strcmp(cmd, "tune")) return cmd_tune(argc - 1, argv + 1);
    if (!strcmp(cmd, "score")) return cmd_score(argc - 1, argv + 1);
    if (!strcmp(cmd, "embed")) return cmd_embed(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    cli_die("unknown command '%s' (run estream --help)", cmd);
}

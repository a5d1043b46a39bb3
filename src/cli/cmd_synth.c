/* estream synth: write a synthetic model. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: estream synth --preset NAME [--type f32|f16|q8_0|q4_0|q4_1|q5_1|mxfp4] [--seed N]\n"
    "                     [--vocab VOCAB.gguf]\n"
    "                     [--chat-template FILE]\n"
    "                     [--arch ARCH] -o FILE\n"
    "\n"
    "Writes a model with random weights and llama.cpp's tensor names, shapes and metadata for the\n"
    "preset's architecture, so llama.cpp loads the same file. Presets:\n"
    "  olmoe (OLMoE):\n"
    "  tiny           hidden 64, 2 layers, 4 heads, 8 experts, top-2, expert FFN 64 (tests)\n"
    "  tiny-gqa       tiny with 2 KV heads (grouped-query attention; llama.cpp's olmoe cannot\n"
    "                 load it: it wants attn_k_norm over the whole hidden size)\n"
    "  small          hidden 320, 2 layers, 5 heads, 8 experts, top-4, expert FFN 288 (tests)\n"
    "  mini           hidden 512, 4 layers, 8 heads, 32 experts, top-4, expert FFN 512\n"
    "  olmoe-1b-7b    OLMoE-1B-7B's shape: hidden 2048, 16 layers, 16 heads, 64 experts, top-8,\n"
    "                 expert FFN 1024, vocab 50304, context 4096\n"
    "  qwen3moe (Qwen3-MoE):\n"
    "  tiny-qwen3moe  hidden 64, 2 layers, 4 heads of 32 (2 KV), 8 experts, top-2, tied output\n"
    "  tiny-qwen3moe-vocab  tiny-qwen3moe with Qwen3's vocabulary of 151936 and context 4096\n"
    "  qwen3-30b-a3b  Qwen3-30B-A3B's shape: hidden 2048, 48 layers, 32 heads of 128 (4 KV),\n"
    "                 128 experts, top-8, expert FFN 768, vocab 151936 (about 17 GB in q4_0)\n"
    "  qwen3vlmoe (Qwen3-VL-MoE's language model: interleaved multimodal RoPE):\n"
    "  tiny-qwen3vlmoe  tiny-qwen3moe's shape, RoPE sections [6, 4, 4, 2], 2 deepstack layers\n"
    "  llama with experts (Mixtral):\n"
    "  tiny-mixtral   hidden 64, 2 layers, 4 heads (2 KV), 8 experts, top-2, expert FFN 64\n"
    "  mixtral-8x7b   Mixtral-8x7B's shape: hidden 4096, 32 layers, 32 heads (8 KV), 8 experts,\n"
    "                 top-2, expert FFN 14336, vocab 32000 (about 26 GB in q4_0)\n"
    "  deepseek (DeepSeek-MoE):\n"
    "  tiny-deepseek  hidden 64, 3 layers (the first dense, FFN 128), 4 heads, 8 experts of 32,\n"
    "                 top-2 scaled by 1.5, 2 shared experts\n"
    "  deepseek-moe-16b  DeepSeek-MoE-16B's shape: hidden 2048, 28 layers (the first dense, FFN\n"
    "                 10944), 16 heads, 64 experts of 1408, top-6, 2 shared, vocab 102400\n"
    "  lfm2moe (LFM2-MoE):\n"
    "  tiny-lfm2moe   hidden 64, 4 layers (short convolution, attention, convolution,\n"
    "                 attention; the first dense, FFN 128), 4 heads (2 KV), 8 experts, top-2\n"
    "                 by sigmoid with an expert bias, tied output\n"
    "  lfm2-8b-a1b    LFM2-8B-A1B's shape: hidden 2048, 24 layers (18 short convolutions, 6\n"
    "                 attention, the first 2 dense, FFN 7168), 32 heads (8 KV), 32 experts of\n"
    "                 1792, top-4, vocab 65536, tied output (about 4.7 GB in q4_0)\n"
    "  deepseek2 (DeepSeek-V2/V3: multi-head latent attention, YaRN x40 of 4096):\n"
    "  tiny-deepseek2 hidden 64, 3 layers (the first dense), 4 heads of 32 + 16 rotary, latent\n"
    "                 64, values of 32, 8 experts of 32, top-2, 2 shared experts\n"
    "  tiny-deepseek2-joined  the same in the older layout (one attn_kv_b per layer)\n"
    "  deepseek-v2-lite  DeepSeek-V2-Lite's shape: hidden 2048, 27 layers (the first dense, FFN\n"
    "                 10944), 16 heads of 128 + 64 rotary, latent 512, values of 128, 64 experts\n"
    "                 of 1408, top-6, 2 shared, vocab 102400 (about 9 GB in q4_0)\n"
    "  tiny-deepseek3 DeepSeek-V3's kind: tiny-deepseek2 with q LoRA (rank 64), 16 experts, top-4\n"
    "                 by sigmoid with a selection bias from the best 2 of 4 groups, 1 shared\n"
    "  moonlight-16b-a3b  Moonlight-16B-A3B's shape: DeepSeek-V2-Lite's with a sigmoid router\n"
    "                 and selection bias, dense FFN 11264, vocab 163840 (about 9 GB in q4_0)\n"
    "  qwen2moe (Qwen2-MoE: q/k/v biases, a shared expert gated by a sigmoid):\n"
    "  tiny-qwen2moe  hidden 64, 2 layers, 4 heads (2 KV), 8 experts of 32, top-2, shared FFN 96\n"
    "  qwen1.5-moe-a2.7b  Qwen1.5-MoE-A2.7B's shape: hidden 2048, 24 layers, 16 heads, 60\n"
    "                 experts of 1408, top-4, shared FFN 5632, vocab 151936 (about 8 GB in q4_0)\n"
    "  gpt-oss (gpt-oss: attention sinks, sliding windows on every other layer, biased experts):\n"
    "  tiny-gptoss    hidden 64, 3 layers, 4 heads of 32 (2 KV), windows of 40, YaRN x4 of 128,\n"
    "                 8 experts of 64, top-2\n"
    "  small-gptoss   hidden 320, 2 layers, 4 heads of 64 (2 KV), 8 experts of 288 (tests)\n"
    "  gpt-oss-20b    gpt-oss-20b's shape: hidden 2880, 24 layers, 64 heads of 64 (8 KV), windows\n"
    "                 of 128, 32 experts of 2880, top-4, vocab 201088, YaRN x32 of 4096 (about\n"
    "                 12 GB in q4_0)\n"
    "  glm4moe (GLM-4.5/4.6: q/k/v biases, RoPE on part of each head, a sigmoid router):\n"
    "  tiny-glm4moe   hidden 64, 3 layers and one MTP block, 4 heads of 32 (2 KV), RoPE on 16,\n"
    "                 a dense first layer, 8 experts of 32, top-2, 1 shared, weights x2.5\n"
    "  small-glm4moe  hidden 256, heads of 64 with q/k norms (GLM-4.5's), experts of 256 (tests)\n"
    "  glm-4.5-air    GLM-4.5-Air's shape: hidden 4096, 46 layers and one MTP block, 96 heads of\n"
    "                 128 (8 KV), RoPE on 64, 128 experts of 1408, top-8, 1 shared, vocab 151552\n"
    "                 (about 62 GB in q4_0)\n"
    "  ernie4_5-moe (ERNIE-4.5: a softmax router with a selection bias, a shared expert):\n"
    "  tiny-ernie     hidden 64, 3 layers, 4 heads (2 KV), a dense first layer, 8 experts of 32,\n"
    "                 top-2, shared FFN 64\n"
    "  ernie-4.5-21b-a3b  ERNIE-4.5-21B-A3B's shape: hidden 2560, 28 layers, 20 heads of 128 (4\n"
    "                 KV), 64 experts of 1536, top-6, shared FFN 3072, vocab 103424 (about 12 GB\n"
    "                 in q4_0)\n"
    "  llama4 (Llama 4: NoPE and chunked layers, the router weight on the expert's input):\n"
    "  tiny-llama4    hidden 64, 8 layers, 4 heads of 32 (2 KV), experts on every other layer (8\n"
    "                 of 64, top-1, 1 shared), dense FFNs of 128 between, llama3 RoPE factors\n"
    "  llama-4-scout  Llama-4-Scout-17B-16E's shape: hidden 5120, 48 layers, 40 heads of 128 (8\n"
    "                 KV), 16 experts of 8192, top-1, 1 shared, vocab 202048, llama3 RoPE x16\n"
    "                 (about 61 GB in q4_0)\n"
    "  granitemoe (Granite MoE: muP's embedding, residual, attention and logit multipliers):\n"
    "  tiny-granitemoe  hidden 64, 3 layers, 4 heads of 16 (2 KV), 8 experts of 32, top-3\n"
    "  tiny-granitemoe-shared  the same with a shared expert of 64 (GraniteMoeShared)\n"
    "  granite-3.1-3b-a800m  granite-3.1-3b-a800m's shape: hidden 1536, 32 layers, 24 heads of 64\n"
    "                 (8 KV), 40 experts of 512, top-8, vocab 49155 (about 2 GB in q4_0)\n"
    "  hunyuan-moe (Hunyuan-MoE: q/k norms after RoPE, a shared expert on every layer):\n"
    "  tiny-hunyuan   hidden 64, 3 layers, 4 heads of 16 (2 KV), 8 experts of 32, top-2, shared\n"
    "                 FFN 64\n"
    "  hunyuan-a13b   Hunyuan-A13B's shape: hidden 4096, 32 layers, 32 heads of 128 (8 KV), 64\n"
    "                 experts of 3072, top-8, shared FFN 3072, vocab 128167 (about 45 GB in q4_0)\n"
    "  phimoe (Phi-3.5-MoE: biased norms and head, LongRoPE by each sequence's length):\n"
    "  tiny-phimoe    hidden 64, 2 layers, 4 heads of 16 (2 KV), 8 experts of 64, top-2,\n"
    "                 LongRoPE from 256 to 1024 positions\n"
    "  phi-3.5-moe    Phi-3.5-MoE's shape: hidden 4096, 32 layers, 32 heads of 128 (8 KV), 16\n"
    "                 experts of 6400, top-2, vocab 32064 (about 23 GB in q4_0)\n"
    "  bailingmoe (Ling 1.x: q, k and v fused, shared experts, a softmax router):\n"
    "  tiny-bailingmoe  hidden 64, 2 layers, 4 heads of 32 (2 KV), 8 experts of 32, top-2\n"
    "                 renormalised, 2 shared\n"
    "  bailingmoe2 (Ling 2.0: a fused attn_qkv, half-RoPE, grouped sigmoid routing):\n"
    "  tiny-bailingmoe2  hidden 64, 3 layers, 4 heads of 16 (2 KV), 16 experts of 32 in 4 groups,\n"
    "                 top-4, 2 shared, 1 dense\n"
    "  ling-mini-2.0  Ling-mini-2.0's shape: hidden 2048, 20 layers, 16 heads of 128 (4 KV), 256\n"
    "                 experts of 512 in 8 groups, top-8, 1 shared, vocab 157184 (about 9 GB in\n"
    "                 q4_0)\n"
    "  dots1 (dots.llm1: Qwen3's attention, DeepSeek-V3's experts):\n"
    "  tiny-dots1     hidden 64, 3 layers, 4 heads of 16, 8 experts of 32, top-2, 2 shared, 1 dense\n"
    "  minimax-m2 (MiniMax-M2: q/k norms over the whole projections, half-RoPE, sigmoid routing):\n"
    "  tiny-minimax-m2  hidden 64, 3 layers, 4 heads of 32 (2 KV), 16 experts of 32, top-4\n"
    "  minimax-m2     MiniMax-M2's shape: hidden 3072, 62 layers, 48 heads of 128 (8 KV), 256\n"
    "                 experts of 1536, top-8, vocab 200064 (about 125 GB in q4_0)\n"
    "  exaone-moe (EXAONE-MoE: RoPE on the sliding-window layers only):\n"
    "  tiny-exaone-moe  hidden 64, 4 layers (3 sliding, 1 global), 4 heads of 16 (2 KV), 8 experts\n"
    "                 of 32, top-2, a shared FFN of 64, 1 dense\n"
    "  smallthinker (SmallThinker: the router before attention, ReGLU experts):\n"
    "  tiny-smallthinker  hidden 64, 4 layers (3 sliding, 1 global), 4 heads of 16 (2 KV), 8\n"
    "                 experts of 32, top-2, tied output\n"
    "  small-qwen3moe, small-mixtral, small-deepseek, small-lfm2moe, small-deepseek2: hidden 256\n"
    "                 and FFNs of 256 or 512 (tests of the K-quant mixes llama-quantize writes:\n"
    "                 rows of 256)\n"
    "  tiny-qwen3moe-yarn  tiny-qwen3moe with YaRN rope scaling x4 of 64 positions\n"
    "  tiny-mixtral-l3  tiny-mixtral with llama3's RoPE frequency factors (rope_freqs.weight)\n"
    "  tiny-qwen2moe-qkv  tiny-qwen2moe with q, k and v fused in one attn_qkv (the same values)\n"
    "--arch, if given, must be the preset's architecture.\n"
    "Type defaults to f32; q4_0, q4_1 and q5_1 keep the output head in q6_k as llama-quantize\n"
    "does; mxfp4 is llama-quantize's MXFP4_MOE mix (the experts and other 3-D tensors mxfp4, the\n"
    "rest q8_0). The tokenizer is estream's built-in byte-level BPE unless --vocab copies one from\n"
    "a GGUF file; --chat-template FILE puts that Jinja text in tokenizer.chat_template.\n"
    "FILE is written atomically: a temporary file beside it is renamed over it when complete; a\n"
    "failure or an interrupt (Ctrl-C, SIGTERM) leaves neither FILE nor the temporary file. A\n"
    "symbolic link's target is replaced (the link stays). A FIFO or character device is\n"
    "written in place; '-o -' writes to stdout.\n";

/* On a terminal one line redrawn in place; otherwise a line per 10%. */
static void progress(void *user, uint64_t done, uint64_t total)
{
    int *last_tenth = user;
    if (total < ((uint64_t)64 << 20)) return;
    const double pct = 100.0 * (double)done / (double)total;
    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\rsynth: %5.1f%% of %.2f GiB", pct, (double)total / (1u << 30));
        if (done == total) fputc('\n', stderr);
    } else if ((int)(pct / 10) > *last_tenth) {
        *last_tenth = (int)(pct / 10);
        fprintf(stderr, "synth: %3.0f%% of %.2f GiB\n", pct, (double)total / (1u << 30));
    }
}

int cmd_synth(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "synth"};
    es_synth_opts o = {.type = "f32", .seed = 1};
    const char *out = NULL, *tmpl_path = NULL;
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) { fputs(help, stdout); return 0; }
        else if (!strcmp(s, "--arch")) o.arch = cli_value(&a, s);
        else if (!strcmp(s, "--preset")) o.preset = cli_value(&a, s);
        else if (!strcmp(s, "--type")) o.type = cli_value(&a, s);
        else if (!strcmp(s, "--seed")) o.seed = (uint64_t)cli_int(s, cli_value(&a, s), 0, INT64_MAX);
        else if (!strcmp(s, "--vocab")) o.vocab_path = cli_value(&a, s);
        else if (!strcmp(s, "--chat-template")) tmpl_path = cli_value(&a, s);
        else if (!strcmp(s, "-o") || !strcmp(s, "--output")) out = cli_value(&a, s);
        else cli_unknown(&a, s);
    }
    if (!o.preset) cli_die("synth: give --preset NAME (see estream synth --help)");
    if (!out) cli_die("synth: give the output file with -o FILE");
    const char *shown = out;
    if (!strcmp(out, "-")) out = "/dev/stdout"; /* written in place, or replaced if a file */
    int last_tenth = 0;
    o.progress = progress;
    o.user = &last_tenth;
    char *tmpl = tmpl_path ? cli_read_text(tmpl_path, "--chat-template") : NULL;
    o.chat_template = tmpl;
    es_status st = es_synth(&o, out);
    free(tmpl);
    if (st) cli_die_status(st, "synth");
    fprintf(stderr, "synth: wrote %s (preset %s, %s, seed %llu)\n", shown, o.preset,
            o.type, (unsigned long long)o.seed);
    return 0;
}

/* estream score: log-probabilities of texts, continuations, multiple choices and labels from a
 * JSONL file, one output line per record. What a record means (kinds, tokenization, sums and
 * rules) is the library's (src/job/record.c), read from JSON by src/records/score_rec.c; the job
 * driver is jsonl.c.
 */
#include "cli/cli.h"

#include <jansson.h>
#include <string.h>

static const char help[] =
    "usage: estream score -m MODEL -f IN.jsonl [-o OUT.jsonl] [--top N] [--batch-tokens N]\n"
    "                     [--no-implicit-bos] [--chat-template FILE] [--rerank-template FILE]\n"
    "                     [--on-error stop|skip] [--shard I/N | --shard-range I/N] [--json]\n"
    "                     [-t THREADS] [--mem BUDGET] [streaming options]\n"
    "\n"
    "Scores each input record with the model and writes one JSON line per record, in input\n"
    "order: {\"line\": N (1-based input line), \"id\": ... (copied when the record has one), ...}.\n"
    "Records hold no timings, so two runs give identical files. Text is tokenized with\n"
    "special-token text recognised (\"<|endoftext|>\" is that token), as vLLM does; BOS is put\n"
    "first when the model's tokenizer adds one, and not twice (docs/prompts.md).\n"
    "Log-probs are natural logarithms of the model's softmax over the whole vocabulary.\n"
    "\n"
    "record kinds:\n"
    "  {\"text\": S} or {\"ids\": [..]}  every token given the ones before it. Output \"ids\" (the\n"
    "      tokens scored: BOS + the text's tokens; the ids as given), \"logprobs\" (one per id;\n"
    "      null for a first token with nothing before it), \"sum\", \"greedy\" (per id: true\n"
    "      when it is the model's top token) and with --top N \"top\" (per position the N best\n"
    "      [id, logprob] pairs, best first). For a model that adds BOS, ids that do not start\n"
    "      with it are conditioned on one that is not theirs: the output covers the ids given,\n"
    "      the first scored given BOS (lm-evaluation-harness's token requests); ids starting\n"
    "      with BOS are scored as given\n"
    "  {\"context\": C, \"continuation\": X}  log P(X | C) with lm-evaluation-harness's\n"
    "      tokenization: trailing whitespace of C moves to the front of X, the sequence is BOS +\n"
    "      tok(C + X) and the continuation its tokens past len(tok(C)); an empty C has BOS (EOS\n"
    "      without one) as its prefix. Output \"logprob\" (the continuation's sum), \"greedy\"\n"
    "      (every continuation token is the top token), \"n_tokens\"\n"
    "  {\"context\": C, \"choices\": [X1, ..], \"gold\": G (optional index)}  each choice scored as\n"
    "      a continuation. Output \"logprobs\" (per choice), \"n_tokens\", \"n_bytes\" (UTF-8\n"
    "      bytes of the choice), \"chosen\" (argmax of the sum: lm-eval's acc),\n"
    "      \"chosen_norm_tokens\" (argmax of sum/n_tokens), \"chosen_norm_bytes\" (argmax of\n"
    "      sum/n_bytes: lm-eval's acc_norm); ties go to the lowest index. With \"gold\":\n"
    "      \"correct\": {\"chosen\": b, \"chosen_norm_tokens\": b, \"chosen_norm_bytes\": b}, and the\n"
    "      summary gives the accuracy of each rule (acc, acc_norm_tokens, acc_norm_bytes)\n"
    "  {\"text\": S, \"labels\": [L1, ..]}  which label continues the text. When every label is\n"
    "      one token (tokenized alone, as given: \" yes\" and \"yes\" differ), the next-token\n"
    "      log-probs of the labels after the text; otherwise each label is scored as a\n"
    "      continuation. Output \"label_logprobs\" (log P of each label under the model),\n"
    "      \"probs\" (renormalised over the labels) and \"label\" (index of the best)\n"
    "  {\"messages\": [{\"role\", \"content\"}, ..]}  a chat (OpenAI's shape; roles system,\n"
    "      developer, user, assistant, tool) rendered with the model's chat template (or\n"
    "      --chat-template FILE) and its generation prompt: the next token's distribution, as a\n"
    "      judge reads it. Output \"n_tokens\" (of the rendered prompt) and \"next\" (the N best\n"
    "      [id, logprob] pairs, N = --top or 10). With \"labels\": which label follows the\n"
    "      rendered prompt, as for a text (\"label_logprobs\", \"probs\", \"label\")\n"
    "  {\"query\": Q, \"documents\": [D, ..], \"instruction\": I (optional)}  how relevant each\n"
    "      document is: P(yes) / (P(yes) + P(no)) as the next token after a rerank prompt of\n"
    "      the pair (Qwen3-Reranker's recipe, or --rerank-template FILE: Jinja with query,\n"
    "      document, instruction). Output \"scores\" (per document) and \"ranking\" (the\n"
    "      documents by decreasing score)\n"
    "Other members (metadata) are ignored. A bad record is {\"line\", \"id\", \"error\"} with\n"
    "--on-error skip.\n"
    "\n"
    "  --top N            alternatives per position for text records, 0.." CLI_XSTR(SCORE_MAX_TOP)
    " (default 0)\n"
    "  --no-implicit-bos  ids records scored exactly as given, without a BOS before them\n"
    "  --chat-template FILE    a Jinja chat template for {\"messages\"} records instead of the\n"
    "                     model's tokenizer.chat_template (docs/chat.md)\n"
    "  --rerank-template FILE  a Jinja prompt for {\"query\", \"documents\"} records instead of\n"
    "                     Qwen3-Reranker's (variables query, document, instruction)\n"
    "summary (stderr): records, errors, tokens, seconds, tokens/s, accuracy when records have\n"
    "gold (over every record with \"gold\", resumed ones included: acc, acc_norm_tokens,\n"
    "acc_norm_bytes, and gold_records in --json).\n";

typedef struct score_ctx {
    score_opts o;
    score_tally t;
} score_ctx;

static void parse(cli_job *j, json_t *o, rec *r)
{
    score_ctx *c = j->ctx;
    score_rec_parse(j->m, &c->o, o, r);
}

static bool emit(cli_job *j, const rec *r, json_t *o)
{
    score_ctx *c = j->ctx;
    return score_rec_emit(j->m, &c->o, r, o, &c->t);
}

static void restat(cli_job *j, const json_t *out_record)
{
    score_ctx *c = j->ctx;
    score_tally_add_record(&c->t, out_record);
}

static void summary(cli_job *j, json_t *sum)
{
    score_ctx *c = j->ctx;
    score_tally_summary(&c->t, sum);
}

static const cli_job_ops ops = {parse, emit, restat, summary};

int cmd_score(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "score"};
    score_ctx c = {0};
    cli_job j = {.cmd = "score", .ops = &ops, .ctx = &c};
    const char *chat_path = NULL, *rerank_path = NULL;
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            fputs(cli_job_help, stdout);
            fputs(cli_stream_help, stdout);
            return 0;
        } else if (cli_job_flag(&a, s, &j)) continue;
        else if (!strcmp(s, "--top")) c.o.top = (int)cli_int(s, cli_value(&a, s), 0, SCORE_MAX_TOP);
        else if (!strcmp(s, "--no-implicit-bos")) c.o.bos = ES_BOS_AS_SENT;
        else if (!strcmp(s, "--chat-template")) chat_path = cli_value(&a, s);
        else if (!strcmp(s, "--rerank-template")) rerank_path = cli_value(&a, s);
        else cli_unknown(&a, s);
    }
    char *chat = chat_path ? cli_read_text(chat_path, "--chat-template") : NULL;
    char *rerank = rerank_path ? cli_read_text(rerank_path, "--rerank-template") : NULL;
    c.o.chat_template = chat;
    c.o.rerank_template = rerank;
    c.o.chat_top = c.o.top;
    /* what changes the records (OUT.meta); --on-error does not: a job stopped on a bad record
     * may go on with skip and keep what it wrote. Templates by their text's hash. */
    j.options = json_pack("{s:i,s:b,s:o,s:o}", "top", c.o.top, "implicit_bos",
                          c.o.bos == ES_BOS_IMPLICIT, "chat_template", cli_text_hash(chat),
                          "rerank_template", cli_text_hash(rerank));
    cli_job_run(&j);
    json_decref(j.options);
    free(chat);
    free(rerank);
    es_model_close(j.m);
    return 0;
}

/* main.c - the v4fleet binary: dispatch to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "fleet/fleet.h"
#include "tools/commands.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} subcommand;

static const subcommand commands[] = {
    {"logits", v4_cmd_logits, "feed token ids one position at a time, write f32 logits (+ trace)"},
    {"generate", v4_cmd_generate, "generate from a text prompt (chat template, sampling) or from prompt token ids"},
    {"mkmodel", v4_cmd_mkmodel, "write a synthetic V4 checkpoint (tiny|small|flash)"},
    {"inspect", v4_cmd_inspect, "print a checkpoint's config and tensor/byte summary"},
    {"tokenize", v4_cmd_tokenize, "text on stdin -> token ids (JSON array; --jsonl for many)"},
    {"detokenize", v4_cmd_detokenize, "JSON array of token ids on stdin -> text"},
    {"stats", v4_cmd_stats, "fleet expert-utilization report from Redis (table, JSON, PNG heatmap)"},
    {"pack", v4_cmd_pack, "repack routed experts into a checksummed expert pack, or --verify one"},
    {"worker", v4_cmd_worker, "queue worker: RabbitMQ tasks in, results out (settings from the environment)"},
    {"cachesim", v4_cmd_cachesim, "replay a routing trace through the expert cache policies vs Belady MIN"},
    {"numerics-check", v4_cmd_numerics_check, "the fast numerics mode against the exact one: the contract table"},
    {"grammar-check", v4_cmd_grammar_check, "does a text pass a constraint (JSON Schema, regex, choice), and where is it refused"},
    {"grammar-bench", v4_cmd_grammar_bench, "the constraint engine on MaskBench: passing, errors, mask times vs LLGuidance"},
    {"batch", v4_cmd_batch, "run a JSONL file of tasks (queue packets or OpenAI batch lines) -> results, resumable"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: v4fleet COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nRun 'v4fleet COMMAND --help' for the options of one command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "v4fleet: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

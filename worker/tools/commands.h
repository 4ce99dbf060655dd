/* commands.h - the offline subcommands of the v4fleet binary (one file each in
 * worker/tools/; the queue worker's `worker` subcommand is worker/fleet/fleet.h).
 * Each takes argc/argv starting at the subcommand name, prints its own usage and
 * errors to stderr, and returns the process exit status.
 * Thread: main thread only. */
#ifndef V4_COMMANDS_H
#define V4_COMMANDS_H

int v4_cmd_logits(int argc, char **argv);
int v4_cmd_generate(int argc, char **argv);
int v4_cmd_mkmodel(int argc, char **argv);
int v4_cmd_inspect(int argc, char **argv);
int v4_cmd_tokenize(int argc, char **argv);
int v4_cmd_detokenize(int argc, char **argv);
int v4_cmd_stats(int argc, char **argv);
int v4_cmd_pack(int argc, char **argv);
int v4_cmd_cachesim(int argc, char **argv);
int v4_cmd_batch(int argc, char **argv);
int v4_cmd_numerics_check(int argc, char **argv);
int v4_cmd_grammar_check(int argc, char **argv);
int v4_cmd_grammar_bench(int argc, char **argv);

#endif

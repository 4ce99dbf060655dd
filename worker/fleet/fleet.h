/* fleet.h - the fleet room's entry point: the `worker` subcommand (worker_main.c), the
 * queue worker program.  It reads its settings from the environment / settings file,
 * loads the model, then consumes tasks until SIGTERM (drain) or a fatal error.
 * Takes argc/argv starting at the subcommand name, prints its own usage and errors to
 * stderr (and its log), returns the process exit status.
 * Thread: main thread only (it starts and owns the AMQP, Redis and HTTP threads). */
#ifndef V4_FLEET_H
#define V4_FLEET_H

int v4_cmd_worker(int argc, char **argv);

#endif

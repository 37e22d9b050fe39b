/*
 * cli.h - helpers shared by the kiln CLI verbs (one file per verb in src/cli/). The CLI uses only
 * the public header kiln.h. Exit codes: 0 success, 1 failure (message on stderr), 2 bad usage.
 */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>

#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

/* Flags shared by verbs that load a model and generate. */
typedef struct cli_common {
    const char *model;
    const char *prompt;
    const char *file;
    int n_predict;
    int threads;
    int ctx;
    int batch;
    bool ignore_eos;
    bool verbose;
    bool mmap;
    kiln_kernels kernels;
    kiln_kv_type kv_type;
    kiln_sampler_params sp;   /* sampling flags as given (see sp_set) */
    unsigned sp_set;          /* CLI_SP_* bits of the sampling flags given on the command line */
} cli_common;

enum {
    CLI_SP_TEMP = 1u << 0, CLI_SP_TOP_K = 1u << 1, CLI_SP_TOP_P = 1u << 2, CLI_SP_MIN_P = 1u << 3,
    CLI_SP_REPEAT = 1u << 4, CLI_SP_REPEAT_N = 1u << 5, CLI_SP_PRESENCE = 1u << 6,
    CLI_SP_FREQUENCY = 1u << 7, CLI_SP_SEED = 1u << 8
};

/* The sampling settings to use: the model's recommended ones (kiln_model_sampler_params), with
 * every flag the user gave on top. */
kiln_sampler_params cli_sampler_params(const cli_common *c, const kiln_model *m);

void cli_common_init(cli_common *c);

/* Tries to consume the flag at argv[*i] (and its value) into c. Returns 1 if consumed, 0 if the
 * flag is not a common one, -1 after printing an error for a bad or missing value. */
int cli_parse_common(int argc, char **argv, int *i, cli_common *c);

/* Value parsers for flag `name`; print an error and return false when invalid. */
bool cli_int(const char *name, const char *v, long lo, long hi, int *out);
bool cli_float(const char *name, const char *v, double lo, double hi, float *out);

/* Reads a whole file into a malloc'd NUL-terminated string (length in *len); NULL with a message on
 * stderr on failure. */
char *cli_read_file(const char *path, size_t *len);

/* Prints the usage of a verb (NULL: the overview) to stdout or stderr. */
void cli_usage(const char *verb, bool to_stderr);

/* Loads the model named by c->model with the common flags; prints the error and returns NULL on
 * failure. */
kiln_model *cli_load_model(const cli_common *c, bool vocab_only);

/* Installs the CLI's log sink (stderr; debug messages with -v). */
void cli_setup_log(bool verbose);

int cli_run(int argc, char **argv);
int cli_perplexity(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_template(int argc, char **argv);
int cli_serve(int argc, char **argv);

#endif

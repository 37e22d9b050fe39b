/*
 * cli.h - helpers shared by the kiln CLI verbs (one file per verb in src/cli/). The CLI uses only
 * the public header kiln.h. Exit codes: 0 success, 1 failure (message on stderr), 2 bad usage.
 */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>

#define CLI_EXIT_FAIL  1
#define CLI_EXIT_USAGE 2

/* The largest -n / max_tokens accepted (-1 = no limit). */
#define CLI_MAX_TOKENS_MAX (1 << 30)

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
    kiln_sampler_params sp; /* sampling flags as given (see sp_set) */
    unsigned sp_set;        /* CLI_SP_* bits of the sampling flags given on the command line */

    /* --kv-type sets kv_type (keys and values); --kv-type-k / --kv-type-v set them apart */
    kiln_kv_type kv_type_v;     /* KILN_KV_SAME: kv_type */
    kiln_kv_rotation kv_rotate; /* --kv-rotate */
} cli_common;

enum {
    CLI_SP_TEMP = 1u << 0,
    CLI_SP_TOP_K = 1u << 1,
    CLI_SP_TOP_P = 1u << 2,
    CLI_SP_MIN_P = 1u << 3,
    CLI_SP_REPEAT = 1u << 4,
    CLI_SP_REPEAT_N = 1u << 5,
    CLI_SP_PRESENCE = 1u << 6,
    CLI_SP_FREQUENCY = 1u << 7,
    CLI_SP_SEED = 1u << 8
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
/* Parses v as the value of sampling parameter param into *sp, checked against the library's table
 * (kiln_sampler_param_range); prints an error naming `name` and the range and returns false when
 * it is missing, not a number or out of range (*sp is then unchanged). */
bool cli_sampler_value(const char *name, const char *v, kiln_sampler_param param, kiln_sampler_params *sp);

/* Reads a whole file into a malloc'd NUL-terminated string (length in *len); NULL with a message on
 * stderr on failure. */
char *cli_read_file(const char *path, size_t *len);

/* Prints the usage of a verb (NULL: the overview) to stdout or stderr. */
void cli_usage(const char *verb, bool to_stderr);

/* Loads the model named by c->model with the common flags; prints the error and returns NULL on
 * failure. */
kiln_model *cli_load_model(const cli_common *c, bool vocab_only);

/* Speculative decoding flags (spec_flags.c): --spec none|ngram|draft, --draft-model MODEL,
 * --spec-max K. */
typedef struct cli_spec {
    kiln_spec_method method;
    bool method_given;
    const char *draft; /* --draft-model, or NULL */
    int max;           /* --spec-max; 0 = the library's default */
} cli_spec;
/* Tries to consume the flag at argv[*i] (and its value) into s: 1 if consumed, 0 if it is not one,
 * -1 after printing an error (an unknown method, a --spec-max outside [1, KILN_SPEC_MAX_LIMIT]). */
int cli_parse_spec(int argc, char **argv, int *i, cli_spec *s, const char *verb);
/* After parsing: --draft-model alone means --spec draft; --spec draft needs --draft-model, and
 * --draft-model another method is an error. False after printing why. */
bool cli_spec_resolve(cli_spec *s, const char *verb);
/* Loads the draft model of --spec draft with c's other model flags (NULL for another method);
 * *ok false after printing why when it cannot be loaded. */
kiln_model *cli_load_draft(const cli_spec *s, const cli_common *c, const char *verb, bool *ok);

/* Installs the CLI's log sink (stderr; debug messages with -v). */
void cli_setup_log(bool verbose);

struct json_t;

/* Renders a conversation with the model's chat template (kiln_chat_apply, with
 * add_generation_prompt; a model without a template gets the plain fallback). messages is a
 * jansson array of {"role", "content"} objects, borrowed. On success *out is the rendered text
 * (release it with kiln_free); on failure kiln_last_error() says why. */
kiln_status cli_chat_render(const kiln_model *m, struct json_t *messages, char **out);

/* --chat-template-file FILE (serve, run, chat) and --tool-format NAME (serve): consumes the flag at
 * argv[*i] and its value. Returns 1 if consumed, 0 if it is neither, -1 after printing an error (an
 * unknown format name gets the list of names). */
int cli_parse_template_flags(int argc, char **argv, int *i, const char **template_file, const char **tool_format);

/* Reads the chat template of --chat-template-file (at most 1 MiB) and checks that it renders a
 * conversation for m; from then on it replaces the model's template (cli_chat_render,
 * cli_chat_template). NULL path: nothing changes. False after printing why. */
bool cli_use_chat_template(const char *path, const kiln_model *m);
/* The chat template in use: --chat-template-file's text, else the model's (NULL when none). */
const char *cli_chat_template(const kiln_model *m);

/* Tokenizes a rendered chat prompt as kiln_tokenize_chat does (special-token text parsed, BOS
 * added unless present) into a malloc'd array: *ids (caller frees) of *n tokens. */
kiln_status cli_tokenize_chat(const kiln_model *m, const char *text, kiln_token **ids, size_t *n);

/* An output constraint given by flags (grammar.c): --gbnf / --grammar-file FILE, --grammar TEXT,
 * --schema / --json-schema-file FILE, --json-schema TEXT (a file when it does not look like JSON),
 * --json-object, and --strict for a schema. flag is NULL while none was given. */
typedef struct cli_constraint {
    const char *flag; /* the flag that gave it */
    kiln_grammar_kind kind;
    const char *text; /* the grammar or schema itself, or NULL */
    const char *path; /* a file holding it, or NULL */
    bool strict;
} cli_constraint;

/* Tries to consume the constraint flag at argv[*i] (and its value) into c: 1 if consumed, 0 if it
 * is not one, -1 after printing an error (a missing value, a second constraint). */
int cli_parse_constraint(int argc, char **argv, int *i, cli_constraint *c, const char *verb);
/* Compiles c into *out (NULL when c gives no constraint). On failure prints "kiln VERB: ..." with
 * kiln_last_error() (or the file error) and returns the status. */
kiln_status cli_constraint_compile(const cli_constraint *c, const char *verb, kiln_grammar **out);

int cli_run(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_perplexity(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_template(int argc, char **argv);
int cli_parse(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_ls(int argc, char **argv);
int cli_grammar(int argc, char **argv);
int cli_pull(int argc, char **argv);
int cli_rm(int argc, char **argv);
int cli_embed(int argc, char **argv);

/* ---- local models (models.c) ----------------------------------------------------------------- */

#include <stdio.h>

/* One GGUF model found on this machine. */
typedef struct cli_model_entry {
    char *name;           /* friendly name: path under the searched directory without .gguf, or
                             ORG/NAME:FILE in the Hugging Face cache */
    char *path;           /* where it was found (in the Hugging Face cache: the snapshot link) */
    char *real;           /* the file itself, symlinks resolved; entries are unique by it */
    const char *source;   /* "kiln" (~/.cache/kiln/models), "KILN_MODELS" or "huggingface" */
    kiln_model_info info; /* from the file's header */
} cli_model_entry;

typedef struct cli_model_list {
    cli_model_entry *v;
    size_t n, cap;
    size_t n_skipped; /* .gguf files left out as unreadable or invalid */
    size_t n_split;   /* of the models listed, those split into several files (each listed once) */
} cli_model_list;

/* Finds the models in ~/.cache/kiln/models, KILN_MODELS and the Hugging Face cache (see models.c
 * for the order and the names), reading only each file's header. Files left out are counted, and
 * with warn each gets a one-line reason on stderr. Missing directories are simply empty; false
 * only when memory ran out (the list then holds what was found). Free with cli_models_free. */
bool cli_models_find(cli_model_list *out, bool warn);
void cli_models_free(cli_model_list *l);
/* ~/.cache/kiln/models (malloc'd), or NULL when HOME is not set. */
char *cli_models_dir(void);
/* Prints the places discovery searches, one per line, indented. */
void cli_models_print_places(FILE *f);
/* The small model whose pull command kiln suggests when it finds none. */
#define CLI_DEFAULT_PULL "Qwen/Qwen3-0.6B-GGUF:Q8_0"
/* Prints how to get a model (several lines). */
void cli_models_print_howto(FILE *f);
/* The entry with this friendly name, or NULL. */
const cli_model_entry *cli_models_lookup(const cli_model_list *l, const char *name);
/* What -m ARG names (malloc'd): ARG itself when such a file exists, else the file of the
 * discovered model with that friendly name, else ARG (whose load then fails with a clear error). */
char *cli_model_resolve(const char *arg, bool verbose);

/* Share of the machine's memory automatic choices may plan for, in percent. */
#define CLI_MEMORY_PCT     60
/* The memory automatic choices plan for when the machine does not say: a modest machine's. */
#define CLI_MEMORY_ASSUMED ((uint64_t)8 << 30)

/* The machine's memory for automatic choices: kiln_physical_memory(), or for tests only the
 * environment variable KILN_TEST_MEMORY (bytes, or a number with K, M or G). */
uint64_t cli_machine_memory(void);
/* The runnable model with the most weight bytes whose weights plus the F16 KV of one row at the
 * library's default context (kiln_default_n_ctx) fit in budget bytes (*fits true); when none fits,
 * the smallest runnable one (*fits false); NULL when there is no runnable model. */
const cli_model_entry *cli_models_pick(const cli_model_list *l, uint64_t budget, bool *fits);

/* The model a command runs when it may choose one: flag_model (-m, resolved as cli_model_resolve),
 * else $KILN_MODEL, else the largest discovered model whose weights and KV fit in CLI_MEMORY_PCT of
 * mem bytes, or in what the check before loading accepts when less is available now (hub_fit.h),
 * (else the smallest, with a warning). Returns its file (malloc'd) and writes where the
 * choice came from into src; NULL after printing why (nothing found: where kiln looked and how to
 * get a model). */
char *cli_models_choose(const char *flag_model, bool verbose, uint64_t mem, char *src, size_t src_cap);

/* Human forms: bytes as "1.2 GiB", counts as "1.2B" / "260K". */
void cli_fmt_bytes(uint64_t bytes, char *buf, size_t cap);
void cli_fmt_count(uint64_t n, char *buf, size_t cap);

#endif

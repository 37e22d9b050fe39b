/*
 * hub_fit.h - will a model fit this machine: judged before it is downloaded (kiln pull), and before
 * it is loaded (kiln run, chat, serve) against the memory available at that moment (hub_fit.c).
 */
#ifndef KILN_HUB_FIT_H
#define KILN_HUB_FIT_H

#include "cli.h"
#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Fills the dimensions of *out (arch, n_layer, n_head, n_head_kv, head_dim, n_embd, n_ctx_train;
 * the rest zero) from a config.json text (top level, else its text_config). False when the KV
 * dimensions are missing or the text is not a JSON object. */
bool hub_fit_from_config(const char *text, size_t len, kiln_model_info *out);
/* Bytes in memory per byte of weight files for a repository with this config.json: 1, except for MLX
 * quantization (`quantization: {bits, group_size}`), whose values kiln holds as Q4_1 (4 bits: 5 bits a
 * value) or MLX8 blocks (other widths: 9 bits a value) where the files take bits + 32 / group_size (an
 * fp16 scale and bias per group). Per-layer widths are not counted. */
double hub_fit_mlx_ratio(const char *text, size_t len);
/* The same from the first len bytes of a GGUF file (its metadata; the tensor table is not
 * needed): the keys read before the bytes end count. False when they are not GGUF or end
 * before the dimensions. */
bool hub_fit_from_gguf(const void *data, size_t len, kiln_model_info *out);
/* One line on f: weights bytes plus the F16 KV cache of dims at the default context against
 * CLI_MEMORY_PCT of the machine's memory (cli_machine_memory). dims NULL: weights only. */
void hub_fit_report(FILE *f, uint64_t weights, const kiln_model_info *dims);

/* ---- before loading ------------------------------------------------------------------------ */

/* Bytes of memory available to this process now: MemAvailable (/proc/meminfo), lowered to what the
 * cgroup memory limits of the process leave (limit less usage, its inactive file pages counted as
 * free), or for tests only the environment variable KILN_TEST_MEMORY_AVAILABLE (bytes, or a number
 * with K, M or G; KILN_TEST_CGROUP_FS, also for tests, is a directory read in place of "/" for the
 * cgroup files). 0 when unknown. src (cap bytes) says where the figure came from. */
uint64_t cli_memory_available(char *src, size_t cap);

/* What loading a model and running it will take, in bytes. */
typedef struct cli_fit_need {
    uint64_t weights; /* tensor bytes of every part, counted once whether mapped (--mmap) or copied */
    uint64_t kv;      /* KV of rows rows of ctx tokens (kiln_kv_bytes_per_token_kv), or a KV budget */
    uint64_t compute; /* activations and logits for the tokens one step runs, and a fixed allowance */
    uint64_t cache;   /* a prefix cache that fills as it is used: warned about, never refused for */
    int32_t ctx, rows;
    uint64_t kv_per_token;
} cli_fit_need;

/* Fills need->weights, ->compute (from the tensor table of path: feed-forward width and vocabulary;
 * the model's width when they cannot be read), ->kv_per_token and ->kv (rows x ctx tokens of KV of
 * types k / v), ->ctx and ->rows for a model described by info. step_tokens: the tokens one forward
 * pass holds (the prompt chunk, plus one per row); logit_rows: rows of logits kept. */
void cli_fit_estimate(const char *path, const kiln_model_info *info, int32_t ctx, int32_t rows, kiln_kv_type k,
                      kiln_kv_type v, int32_t step_tokens, int32_t logit_rows, cli_fit_need *need);

/* Adds a draft model (--draft-model ARG, resolved as -m is) to need: its weights, and its KV for
 * need's rows and context. Nothing when draft is NULL or its header cannot be read (its load then
 * says why). */
void cli_fit_add_draft(const char *draft, kiln_kv_type k, kiln_kv_type v, cli_fit_need *need);

/* --fit on|off (also --fit=on): consumes the flag at argv[*i] and its value into *on. 1 if consumed,
 * 0 if it is another flag, -1 after printing an error naming verb. */
int cli_parse_fit(int argc, char **argv, int *i, bool *on);

/* The check before a load: need against cli_memory_available(). Returns false after printing to
 * stderr why the model does not fit and what would (a smaller -c, fewer rows, a smaller KV type or
 * quant, --fit off), when on and the need exceeds what is available. Otherwise true; with a warning
 * when it fits only tightly (less than CLI_FIT_SLACK_PCT of the available memory left) or when the
 * prefix cache may grow beyond it. Unknown available memory: true, silently. label names the model;
 * rows_flag the flag that sets rows ("--batch"), NULL when rows are fixed. */
#define CLI_FIT_SLACK_PCT 10
/* Bytes counted for what a load holds beside weights, KV and activations (tokenizer, thread stacks). */
#define CLI_FIT_ALLOWANCE ((uint64_t)32 << 20)
bool cli_fit_check(const char *verb, const char *label, const cli_fit_need *need, const char *rows_flag, bool on);

/* Resolves -m's argument (cli_model_resolve), reads what the file says (kiln_model_info_read; a split
 * model is read whole) and checks run's or chat's need: one row of ctx tokens (0: the library's
 * default) with batch prompt tokens a step, and cache bytes of prefix cache. On success returns the
 * resolved path (malloc'd) for the load; NULL after printing why not (out of memory, or it does not
 * fit). A file the header read rejects is passed on: the load then reports it. draft: the
 * --draft-model of speculative decoding (cli_fit_add_draft), or NULL. */
char *cli_fit_resolve_check(const char *verb, const cli_common *c, int32_t cache_rows, const char *draft, bool on);

#endif

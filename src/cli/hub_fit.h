/*
 * hub_fit.h - will a model fit this machine, judged before it is downloaded (hub_fit.c).
 */
#ifndef KILN_HUB_FIT_H
#define KILN_HUB_FIT_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Fills the dimensions of *out (arch, n_layer, n_head, n_head_kv, head_dim, n_embd, n_ctx_train;
 * the rest zero) from a config.json text (top level, else its text_config). False when the KV
 * dimensions are missing or the text is not a JSON object. */
bool hub_fit_from_config(const char *text, size_t len, kiln_model_info *out);
/* The same from the first len bytes of a GGUF file (its metadata; the tensor table is not
 * needed): the keys read before the bytes end count. False when they are not GGUF or end
 * before the dimensions. */
bool hub_fit_from_gguf(const void *data, size_t len, kiln_model_info *out);
/* One line on f: weights bytes plus the F16 KV cache of dims at the default context against
 * CLI_MEMORY_PCT of the machine's memory (cli_machine_memory). dims NULL: weights only. */
void hub_fit_report(FILE *f, uint64_t weights, const kiln_model_info *dims);

#endif

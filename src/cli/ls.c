/*
 * ls.c - `kiln ls [--json] [-v]`: the GGUF models found on this machine, and the model directories
 * kiln pull fetched into the Hugging Face cache (see models.c for where kiln looks), one row each: friendly name,
 * architecture, parameters, dominant weight type, size on disk, training context and path. A model split into several
 * GGUF files is one row: its name without the part suffix, the size of all parts, the first part's path. --json prints
 * one JSON array of objects with the same facts (and "parts", the number of files) instead. Files that cannot be used
 * are left out with a one-line reason on stderr. Finding nothing is not an error: a message says where kiln looked and
 * how to get a model, and the exit status is 0.
 */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The architecture column: the name, marked when kiln cannot run the file. */
static void arch_cell(const kiln_model_info *i, char *buf, size_t cap) {
    const char *a = i->arch[0] ? i->arch : "?";
    if (i->runnable) snprintf(buf, cap, "%s", a);
    else if (!i->n_tensors) snprintf(buf, cap, "%s (no weights)", a);
    else snprintf(buf, cap, "%s (unsupported)", a);
}

static int print_json(const cli_model_list *l) {
    json_t *arr = json_array();
    if (!arr) return CLI_EXIT_FAIL;
    for (size_t k = 0; k < l->n; k++) {
        const cli_model_entry *e = &l->v[k];
        const kiln_model_info *i = &e->info;
        const uint64_t kv = kiln_kv_bytes_per_token(i, KILN_KV_F16);
        json_t *o =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:b, s:i}", "name", e->name, "path",
                      e->path, "file", e->real, "source", e->source, "architecture", i->arch, "model_name", i->name,
                      "parameters", (json_int_t)i->n_params, "weight_type", i->weight_type, "size_bytes",
                      (json_int_t)i->file_bytes, "context_length", (json_int_t)i->n_ctx_train, "kv_bytes_per_token",
                      (json_int_t)(kv > (uint64_t)INT64_MAX ? INT64_MAX : kv), "runnable", i->runnable, "parts",
                      (int)i->split_count);
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            fprintf(stderr, "kiln ls: out of memory\n");
            return CLI_EXIT_FAIL;
        }
    }
    char *s = json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(arr);
    if (!s) return CLI_EXIT_FAIL;
    puts(s);
    free(s);
    return 0;
}

static int print_table(const cli_model_list *l) {
    enum { NCOL = 7 };
    static const char *const head[NCOL] = {"NAME", "ARCH", "PARAMS", "TYPE", "SIZE", "CONTEXT", "PATH"};
    int w[NCOL];
    for (int c = 0; c < NCOL; c++) w[c] = (int)strlen(head[c]);
    char cell[NCOL][160];
    /* two passes: widths, then rows */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            printf("%-*s  %-*s  %*s  %-*s  %*s  %*s  %s\n", w[0], head[0], w[1], head[1], w[2], head[2], w[3], head[3],
                   w[4], head[4], w[5], head[5], head[6]);
        for (size_t k = 0; k < l->n; k++) {
            const cli_model_entry *e = &l->v[k];
            const kiln_model_info *i = &e->info;
            arch_cell(i, cell[1], sizeof cell[1]);
            cli_fmt_count(i->n_params, cell[2], sizeof cell[2]);
            snprintf(cell[3], sizeof cell[3], "%s", i->weight_type[0] ? i->weight_type : "-");
            cli_fmt_bytes(i->file_bytes, cell[4], sizeof cell[4]);
            if (i->n_ctx_train > 0) snprintf(cell[5], sizeof cell[5], "%d", i->n_ctx_train);
            else snprintf(cell[5], sizeof cell[5], "-");
            if (pass == 0) {
                const int nl = (int)strlen(e->name);
                if (nl > w[0]) w[0] = nl;
                for (int c = 1; c < 6; c++)
                    if ((int)strlen(cell[c]) > w[c]) w[c] = (int)strlen(cell[c]);
            } else {
                printf("%-*s  %-*s  %*s  %-*s  %*s  %*s  %s\n", w[0], e->name, w[1], cell[1], w[2], cell[2], w[3],
                       cell[3], w[4], cell[4], w[5], cell[5], e->path);
            }
        }
    }
    return 0;
}

int cli_ls(int argc, char **argv) {
    bool json = false, verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("ls", false);
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            json = true;
            continue;
        }
        if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbose = true;
            continue;
        }
        fprintf(stderr, "kiln ls: unknown option '%s'\n", a);
        cli_usage("ls", true);
        return CLI_EXIT_USAGE;
    }
    cli_setup_log(verbose);
    cli_model_list l;
    bool ok = cli_models_find(&l, true);
    int rc = 0;
    if (json) {
        rc = print_json(&l);
    } else if (l.n == 0) {
        printf("No models found. kiln looked in:\n");
        cli_models_print_places(stdout);
        if (l.n_skipped) printf("(%zu file(s) left out as unusable; the reasons are above)\n", l.n_skipped);
        cli_models_print_howto(stdout);
    } else {
        rc = print_table(&l);
    }
    if (json && l.n == 0) {
        fprintf(stderr, "kiln ls: no models found; kiln looked in:\n");
        cli_models_print_places(stderr);
    }
    cli_models_free(&l);
    return rc ? rc : ok ? 0 : CLI_EXIT_FAIL;
}

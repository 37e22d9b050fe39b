/*
 * inspect.c - `kiln inspect MODEL [--tensor NAME [--dequant]]`: what a model file or directory holds.
 *
 * Without --tensor: the format (gguf, safetensors or mlx), the metadata (a GGUF's key/values, a
 * directory's config.json) and the tensor table as stored. --tensor NAME prints that tensor's line;
 * with --dequant its values go to standard output as little-endian float32, row-major, and nothing
 * else does (so a reference dequantizer's output can be compared byte for byte). Built on kiln_file
 * (include/kiln.h).
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_tensor(const kiln_file_tensor *t) {
    printf("  %-48s %-6s [", t->name, t->type);
    for (int d = 0; d < t->n_dims; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
    printf("] %llu bytes", (unsigned long long)t->n_bytes);
    if (t->mlx_bits)
        printf(" (MLX %d-bit, group %d: %llu values)", t->mlx_bits, t->mlx_group, (unsigned long long)t->n_values);
    printf("\n");
}

int cli_inspect(int argc, char **argv) {
    const char *path = NULL, *tensor = NULL;
    bool dequant = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_usage("inspect", false);
            return 0;
        }
        if (!strcmp(a, "--tensor") && i + 1 < argc) tensor = argv[++i];
        else if (!strcmp(a, "--dequant")) dequant = true;
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc && !path) path = argv[++i];
        else if (a[0] != '-' && !path) path = a;
        else {
            fprintf(stderr, "kiln inspect: unknown or incomplete option '%s'\n", a);
            cli_usage("inspect", true);
            return CLI_EXIT_USAGE;
        }
    }
    if (!path) {
        fprintf(stderr, "kiln inspect: give a model file or directory\n");
        cli_usage("inspect", true);
        return CLI_EXIT_USAGE;
    }
    if (dequant && !tensor) {
        fprintf(stderr, "kiln inspect: --dequant needs --tensor NAME\n");
        return CLI_EXIT_USAGE;
    }
    kiln_file *f;
    if (kiln_file_open(path, &f) != KILN_OK) {
        fprintf(stderr, "kiln inspect: %s\n", kiln_last_error());
        return CLI_EXIT_FAIL;
    }
    int rc = 0;
    if (tensor) {
        const int64_t i = kiln_file_find(f, tensor);
        kiln_file_tensor t;
        if (i < 0 || !kiln_file_tensor_info(f, (size_t)i, &t)) {
            fprintf(stderr, "kiln inspect: %s has no tensor '%s'\n", path, tensor);
            kiln_file_close(f);
            return CLI_EXIT_FAIL;
        }
        if (!dequant) {
            print_tensor(&t);
        } else {
            float *v = t.n_values ? malloc(t.n_values * sizeof *v) : NULL;
            if (t.n_values && !v) {
                fprintf(stderr, "kiln inspect: out of memory for %llu values\n", (unsigned long long)t.n_values);
                rc = CLI_EXIT_FAIL;
            } else if (kiln_file_dequant(f, (size_t)i, v) != KILN_OK) {
                fprintf(stderr, "kiln inspect: %s\n", kiln_last_error());
                rc = CLI_EXIT_FAIL;
            } else if (fwrite(v, sizeof *v, t.n_values, stdout) != t.n_values || fflush(stdout)) {
                fprintf(stderr, "kiln inspect: cannot write the values\n");
                rc = CLI_EXIT_FAIL;
            }
            free(v);
        }
        kiln_file_close(f);
        return rc;
    }
    printf("format: %s\n", kiln_file_format(f));
    printf("metadata (%zu):\n", kiln_file_n_meta(f));
    char value[512];
    for (size_t i = 0; i < kiln_file_n_meta(f); i++) {
        const char *k = kiln_file_meta(f, i, value, sizeof value);
        if (k) printf("  %s = %s\n", k, value);
    }
    printf("tensors (%zu):\n", kiln_file_n_tensors(f));
    for (size_t i = 0; i < kiln_file_n_tensors(f); i++) {
        kiln_file_tensor t;
        if (kiln_file_tensor_info(f, i, &t)) print_tensor(&t);
    }
    kiln_file_close(f);
    return 0;
}

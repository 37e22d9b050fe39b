/*
 * template.c - `kiln template`: render a Jinja2 chat template with a JSON context and print the
 * result exactly (no newline added). With --template FILE the context is used as given
 * (kiln_template_render); with -m/--model GGUF the model's own template is rendered the way
 * kiln_chat_apply does it (bos_token / eos_token from the model, add_generation_prompt true
 * unless the context says otherwise, the plain fallback for a model without a template).
 * Template errors print the message ("line L, column C: ...") on stderr and exit 1.
 * `kiln template --batch OUTDIR TEMPLATE... -- CONTEXT...` renders every template with every context
 * in one process (the conformance test's many pairs, tests/cli/test_templates.sh).
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file name of path without its folder and last extension, into out[cap]; false when too long. */
static bool stem(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    const char *dot = strrchr(b, '.');
    size_t n = dot && dot != b ? (size_t)(dot - b) : strlen(b);
    if (n >= cap) return false;
    memcpy(out, b, n);
    out[n] = 0;
    return true;
}

/* Writes len bytes of p to path; 0 or CLI_EXIT_FAIL (with a message). */
static int write_file(const char *path, const char *p, size_t len) {
    FILE *f = fopen(path, "wb");
    bool ok = f && (len == 0 || fwrite(p, 1, len, f) == len);
    if (f && fclose(f) != 0) ok = false;
    if (!ok) fprintf(stderr, "kiln template: cannot write %s\n", path);
    return ok ? 0 : CLI_EXIT_FAIL;
}

/* `kiln template --batch OUTDIR TEMPLATE... -- CONTEXT...` (argv[0] is OUTDIR): renders every pair
 * and writes OUTDIR/T__C.out with the output, or OUTDIR/T__C.err with the error message, where T and
 * C are the file names without folder and extension. Returns 0 when every pair was recorded,
 * CLI_EXIT_FAIL when a file cannot be read or written, CLI_EXIT_USAGE without the "--". */
static int template_batch(int argc, char **argv) {
    int cut = 1;
    while (cut < argc && strcmp(argv[cut], "--") != 0) cut++;
    if (argc < 1 || cut == argc) {
        fprintf(stderr, "kiln template: --batch OUTDIR TEMPLATE... -- CONTEXT...\n");
        return CLI_EXIT_USAGE;
    }
    int rc = 0;
    for (int t = 1; t < cut && !rc; t++) {
        size_t tlen;
        char *tmpl = cli_read_file(argv[t], &tlen), ts[256];
        if (!tmpl || !stem(argv[t], ts, sizeof ts)) rc = CLI_EXIT_FAIL;
        for (int c = cut + 1; c < argc && !rc; c++) {
            size_t clen;
            char *ctx = cli_read_file(argv[c], &clen), cs[256], path[4096];
            if (!ctx || !stem(argv[c], cs, sizeof cs)) {
                free(ctx);
                rc = CLI_EXIT_FAIL;
                break;
            }
            char *out = NULL;
            size_t out_len = 0;
            kiln_status st = kiln_template_render(tmpl, tlen, ctx, clen, &out, &out_len);
            free(ctx);
            if ((size_t)snprintf(path, sizeof path, "%s/%s__%s.%s", argv[0], ts, cs, st ? "err" : "out") >=
                sizeof path) {
                fprintf(stderr, "kiln template: output path too long\n");
                rc = CLI_EXIT_FAIL;
            } else if (st) {
                const char *msg = kiln_last_error();
                rc = write_file(path, msg, strlen(msg));
            } else {
                rc = write_file(path, out, out_len);
            }
            kiln_free(out);
        }
        free(tmpl);
    }
    return rc;
}

/* `kiln template`: flags, reading the files, rendering, printing (see the file comment). */
int cli_template(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "--batch") == 0) {
        cli_setup_log(false);
        return template_batch(argc - 2, argv + 2);
    }
    cli_common c;
    cli_common_init(&c);
    const char *tmpl_path = NULL, *ctx_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("template", false);
            return 0;
        }
        if (strcmp(a, "--template") == 0 || strcmp(a, "--context") == 0) {
            if (!v) {
                fprintf(stderr, "kiln template: %s needs a value\n", a);
                return CLI_EXIT_USAGE;
            }
            if (a[2] == 't') tmpl_path = v;
            else ctx_path = v;
            i++;
            continue;
        }
        if ((strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0 || strcmp(a, "-v") == 0 ||
             strcmp(a, "--verbose") == 0)) {
            int got = cli_parse_common(argc, argv, &i, &c);
            if (got == 1) continue;
            if (got < 0) return CLI_EXIT_USAGE;
        }
        fprintf(stderr, "kiln template: unknown or incomplete option '%s'\n", a);
        cli_usage("template", true);
        return CLI_EXIT_USAGE;
    }
    if (!tmpl_path == !c.model) {
        fprintf(stderr, "kiln template: give either --template FILE or --model FILE\n");
        cli_usage("template", true);
        return CLI_EXIT_USAGE;
    }
    cli_setup_log(c.verbose);
    size_t ctx_len = 2;
    char *ctx = ctx_path ? cli_read_file(ctx_path, &ctx_len) : strdup("{}");
    if (!ctx) return CLI_EXIT_FAIL;
    char *out = NULL;
    size_t out_len = 0;
    kiln_status st;
    if (tmpl_path) {
        size_t tlen;
        char *tmpl = cli_read_file(tmpl_path, &tlen);
        if (!tmpl) {
            free(ctx);
            return CLI_EXIT_FAIL;
        }
        st = kiln_template_render(tmpl, tlen, ctx, ctx_len, &out, &out_len);
        free(tmpl);
    } else {
        kiln_model *m = cli_load_model(&c, true);
        if (!m) {
            free(ctx);
            return CLI_EXIT_FAIL;
        }
        st = kiln_chat_apply(m, ctx, ctx_len, &out, &out_len);
        kiln_model_free(m);
    }
    free(ctx);
    if (st) {
        fprintf(stderr, "kiln template: %s (%s)\n", kiln_last_error(), kiln_status_str(st));
        return CLI_EXIT_FAIL;
    }
    int rc = 0;
    if (out_len && fwrite(out, 1, out_len, stdout) != out_len) rc = CLI_EXIT_FAIL;
    if (fflush(stdout) != 0) rc = CLI_EXIT_FAIL;
    if (rc) fprintf(stderr, "kiln template: cannot write the output\n");
    kiln_free(out);
    return rc;
}

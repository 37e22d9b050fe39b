/*
 * template.c - `kiln template`: render a Jinja2 chat template with a JSON context and print the
 * result exactly (no newline added). With --template FILE the context is used as given
 * (kiln_template_render); with -m/--model GGUF the model's own template is rendered the way
 * kiln_chat_apply does it (bos_token / eos_token from the model, add_generation_prompt true
 * unless the context says otherwise, the plain fallback for a model without a template).
 * Template errors print the message ("line L, column C: ...") on stderr and exit 1.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `kiln template`: flags, reading the files, rendering, printing (see the file comment). */
int cli_template(int argc, char **argv) {
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

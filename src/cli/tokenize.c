/*
 * tokenize.c - `kiln tokenize`: show the tokens of a text (works on vocab-only GGUF files).
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints piece bytes quoted, escaping control characters and quotes. */
static void print_piece(const char *p, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\n') fputs("\\n", stdout);
        else if (ch == '\t') fputs("\\t", stdout);
        else if (ch == '\'' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) printf("\\x%02x", ch);
        else putchar(ch);
    }
    putchar('\'');
}

int cli_tokenize(int argc, char **argv) {
    cli_common c;
    cli_common_init(&c);
    bool ids = false, no_bos = false, parse_special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("tokenize", false);
            return 0;
        }
        if (strcmp(a, "--ids") == 0) {
            ids = true;
            continue;
        }
        if (strcmp(a, "--no-bos") == 0) {
            no_bos = true;
            continue;
        }
        if (strcmp(a, "--parse-special") == 0) {
            parse_special = true;
            continue;
        }
        if ((strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0 || strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0 ||
             strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0 || strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) &&
            cli_parse_common(argc, argv, &i, &c) == 1)
            continue;
        fprintf(stderr, "kiln tokenize: unknown or incomplete option '%s'\n", a);
        cli_usage("tokenize", true);
        return CLI_EXIT_USAGE;
    }
    if (c.prompt && c.file) {
        fprintf(stderr, "kiln tokenize: give either -p or -f, not both\n");
        return CLI_EXIT_USAGE;
    }
    cli_setup_log(c.verbose);
    char *text = NULL;
    size_t len = 0;
    if (c.file) {
        if (!(text = cli_read_file(c.file, &len))) return CLI_EXIT_FAIL;
    } else {
        text = strdup(c.prompt ? c.prompt : "");
        len = strlen(text);
    }
    kiln_model *m = cli_load_model(&c, true);
    if (!m) {
        free(text);
        return CLI_EXIT_FAIL;
    }
    size_t cap = len + 16, n = 0;
    kiln_token *toks = malloc(cap * sizeof *toks);
    kiln_status st = toks ? kiln_tokenize(m, text, len, !no_bos, parse_special, toks, cap, &n) : KILN_ERR_NOMEM;
    if (st == KILN_ERR_BUFFER_SMALL) {
        free(toks);
        cap = n;
        toks = malloc(cap * sizeof *toks);
        st = toks ? kiln_tokenize(m, text, len, !no_bos, parse_special, toks, cap, &n) : KILN_ERR_NOMEM;
    }
    int rc = 0;
    if (st) {
        fprintf(stderr, "kiln tokenize: %s\n", kiln_last_error());
        rc = CLI_EXIT_FAIL;
    } else if (ids) {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", toks[i]);
        printf("\n");
    } else {
        char piece[1024];
        for (size_t i = 0; i < n; i++) {
            size_t pl = 0;
            kiln_token_piece(m, toks[i], true, piece, sizeof piece, &pl);
            printf("%6d -> ", toks[i]);
            print_piece(piece, pl < sizeof piece ? pl : sizeof piece);
            printf("\n");
        }
    }
    free(toks);
    free(text);
    kiln_model_free(m);
    return rc;
}

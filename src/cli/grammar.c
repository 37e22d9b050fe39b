/*
 * grammar.c - `kiln grammar`: compile a GBNF grammar, a JSON Schema or JSON mode, print the GBNF it
 * runs, and check JSON instances against it; and the constraint flags `kiln run` shares with it.
 *
 * An instance passes --check when the grammar accepts it both serialized compactly and
 * pretty-printed with an indent of 2 (as a model may write either). The instance is parsed with
 * jansson and serialized again, members in their order, numbers in the fewest digits that keep
 * every real of the document exact (15 to 17).
 *
 * Exit codes (like grep's): 0 compiled (and every instance accepted), 1 an instance is not in the
 * language, 2 bad usage, an unreadable file, a grammar or schema that does not compile, an instance
 * that is not JSON.
 */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_REJECTED 1
#define EXIT_ERROR    2

/* ---- the constraint flags (shared with kiln run) ------------------------------------------------ */

/* Records one constraint in c; a second one is a usage error. */
static bool take(cli_constraint *c, const char *flag, kiln_grammar_kind kind, const char *text, const char *path,
                 const char *verb) {
    if (c->flag) {
        fprintf(stderr, "kiln %s: %s and %s both give a constraint; give one\n", verb, c->flag, flag);
        return false;
    }
    c->flag = flag;
    c->kind = kind;
    c->text = text;
    c->path = path;
    return true;
}

/* Whether a --json-schema value is the schema itself rather than a file name: JSON text starts with
 * '{' (after blanks) or is a boolean schema. */
static bool looks_like_json(const char *v) {
    v += strspn(v, " \t\r\n");
    return *v == '{' || strcmp(v, "true") == 0 || strcmp(v, "false") == 0;
}

int cli_parse_constraint(int argc, char **argv, int *i, cli_constraint *c, const char *verb) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(a, "--strict") == 0) {
        c->strict = true;
        return 1;
    }
    if (strcmp(a, "--json-object") == 0) return take(c, a, KILN_GRAMMAR_JSON_OBJECT, NULL, NULL, verb) ? 1 : -1;
    const bool gbnf_file = strcmp(a, "--gbnf") == 0 || strcmp(a, "--grammar-file") == 0;
    const bool gbnf_text = strcmp(a, "--grammar") == 0;
    const bool schema_file = strcmp(a, "--schema") == 0 || strcmp(a, "--json-schema-file") == 0;
    const bool schema_any = strcmp(a, "--json-schema") == 0;
    if (!gbnf_file && !gbnf_text && !schema_file && !schema_any) return 0;
    if (!v) {
        fprintf(stderr, "kiln %s: %s needs a value\n", verb, a);
        return -1;
    }
    (*i)++;
    if (gbnf_file) return take(c, a, KILN_GRAMMAR_GBNF, NULL, v, verb) ? 1 : -1;
    if (gbnf_text) return take(c, a, KILN_GRAMMAR_GBNF, v, NULL, verb) ? 1 : -1;
    if (schema_file || !looks_like_json(v)) return take(c, a, KILN_GRAMMAR_JSON_SCHEMA, NULL, v, verb) ? 1 : -1;
    return take(c, a, KILN_GRAMMAR_JSON_SCHEMA, v, NULL, verb) ? 1 : -1;
}

/* What the constraint is, for messages: a file's name, or the flag. */
static const char *source_name(const cli_constraint *c) {
    return c->path ? c->path : c->kind == KILN_GRAMMAR_JSON_OBJECT ? "JSON mode" : c->flag;
}

kiln_status cli_constraint_compile(const cli_constraint *c, const char *verb, kiln_grammar **out) {
    *out = NULL;
    if (!c->flag) return KILN_OK;
    char *file = NULL;
    size_t len = 0;
    const char *text = c->text;
    if (c->path) {
        if (!(file = cli_read_file(c->path, &len))) return KILN_ERR_IO;
        text = file;
    } else if (text) {
        len = strlen(text);
    }
    kiln_grammar_params gp = kiln_grammar_default_params();
    gp.kind = c->kind;
    gp.strict = c->strict;
    kiln_status st = kiln_grammar_compile(text, len, &gp, out);
    if (st)
        fprintf(stderr, "kiln %s: %s does not compile: %s\n", verb, source_name(c),
                *kiln_last_error() ? kiln_last_error() : kiln_status_str(st));
    else if (kiln_grammar_approximation(*out))
        fprintf(stderr, "kiln %s: note: %s is enforced approximately (docs/structured-output.md): %s\n", verb,
                source_name(c), kiln_grammar_approximation(*out));
    free(file);
    return st;
}

/* ---- --check ------------------------------------------------------------------------------------ */

/* Whether every real number in v prints exactly (round-trips) with prec significant digits. */
static bool reals_exact(json_t *v, int prec) {
    if (json_is_real(v)) {
        char buf[40];
        snprintf(buf, sizeof buf, "%.*g", prec, json_real_value(v));
        return strtod(buf, NULL) == json_real_value(v);
    }
    size_t i;
    const char *k;
    json_t *x;
    if (json_is_array(v)) {
        json_array_foreach(v, i, x) if (!reals_exact(x, prec)) return false;
    } else if (json_is_object(v)) {
        json_object_foreach(v, k, x) if (!reals_exact(x, prec)) return false;
    }
    return true;
}

/* Checks one instance file against g: 0 accepted in both forms, EXIT_REJECTED, or EXIT_ERROR after
 * a message. */
static int check_instance(const kiln_grammar *g, const char *path) {
    size_t len = 0;
    char *text = cli_read_file(path, &len);
    if (!text) return EXIT_ERROR;
    json_error_t err;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    free(text);
    if (!v) {
        fprintf(stderr, "kiln grammar: '%s' is not JSON: line %d, column %d: %s\n", path, err.line, err.column,
                err.text);
        return EXIT_ERROR;
    }
    int prec = 15;
    while (prec < 17 && !reals_exact(v, prec)) prec++;
    const size_t flags = JSON_ENCODE_ANY | JSON_REAL_PRECISION(prec);
    char *compact = json_dumps(v, flags | JSON_COMPACT);
    char *pretty = json_dumps(v, flags | JSON_INDENT(2));
    json_decref(v);
    int rc = 0;
    if (!compact || !pretty) {
        fprintf(stderr, "kiln grammar: out of memory serializing '%s'\n", path);
        rc = EXIT_ERROR;
    } else {
        const bool c_ok = kiln_grammar_accepts(g, compact, strlen(compact));
        const bool p_ok = kiln_grammar_accepts(g, pretty, strlen(pretty));
        if (c_ok && p_ok) {
            printf("%s: accepted (compact and pretty-printed)\n", path);
        } else {
            fprintf(stderr, "kiln grammar: '%s' is not in the language: %s rejected\n", path,
                    !c_ok && !p_ok ? "both its compact and its pretty-printed (indent 2) forms are"
                    : !c_ok        ? "its compact form is"
                                   : "its pretty-printed (indent 2) form is");
            rc = EXIT_REJECTED;
        }
    }
    free(compact);
    free(pretty);
    return rc;
}

/* ---- the verb ----------------------------------------------------------------------------------- */

int cli_grammar(int argc, char **argv) {
    cli_constraint c = {0};
    bool print_gbnf = false;
    const char **checks = calloc((size_t)argc, sizeof *checks);
    size_t n_checks = 0;
    if (!checks) {
        fprintf(stderr, "kiln grammar: out of memory\n");
        return EXIT_ERROR;
    }
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("grammar", false);
            free(checks);
            return 0;
        }
        if (strcmp(a, "--print-gbnf") == 0) {
            print_gbnf = true;
            continue;
        }
        if (strcmp(a, "--check") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kiln grammar: --check needs a file\n");
                rc = EXIT_ERROR;
                break;
            }
            checks[n_checks++] = argv[++i];
            continue;
        }
        int got = cli_parse_constraint(argc, argv, &i, &c, "grammar");
        if (got == 1) continue;
        if (got == 0) fprintf(stderr, "kiln grammar: unknown option '%s'\n", a);
        rc = EXIT_ERROR;
    }
    if (!rc && !c.flag) {
        fprintf(stderr, "kiln grammar: give --schema FILE, --gbnf FILE or --json-object\n");
        rc = EXIT_ERROR;
    }
    if (rc) {
        cli_usage("grammar", true);
        free(checks);
        return rc;
    }
    kiln_grammar *g = NULL;
    if (cli_constraint_compile(&c, "grammar", &g)) {
        free(checks);
        return EXIT_ERROR;
    }
    if (print_gbnf) {
        const char *gbnf = kiln_grammar_gbnf(g);
        fputs(gbnf, stdout);
        if (*gbnf && gbnf[strlen(gbnf) - 1] != '\n') putchar('\n');
    }
    for (size_t k = 0; k < n_checks; k++) {
        int r = check_instance(g, checks[k]);
        if (r > rc) rc = r;
    }
    if (!print_gbnf && !n_checks) printf("%s: compiles\n", source_name(&c));
    if (fflush(stdout) != 0) {
        fprintf(stderr, "kiln grammar: cannot write the output\n");
        rc = EXIT_ERROR;
    }
    kiln_grammar_free(g);
    free(checks);
    return rc;
}

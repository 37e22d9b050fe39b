/*
 * spec_flags.c - the speculative decoding flags of kiln run, chat, serve and bench: --spec
 * none|ngram|draft, --draft-model MODEL (alone it means --spec draft) and --spec-max K, and the
 * draft model's loading with the verb's other model flags.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int cli_parse_spec(int argc, char **argv, int *i, cli_spec *s, const char *verb) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(a, "--spec") == 0) {
        if (!v) {
            fprintf(stderr, "kiln %s: --spec needs a value (none, ngram or draft)\n", verb);
            return -1;
        }
        if (kiln_spec_method_parse(v, &s->method) != KILN_OK) {
            fprintf(stderr, "kiln %s: --spec: %s\n", verb, kiln_last_error());
            return -1;
        }
        s->method_given = true;
    } else if (strcmp(a, "--draft-model") == 0) {
        if (!v || !*v) {
            fprintf(stderr, "kiln %s: --draft-model needs a model (a path or a name)\n", verb);
            return -1;
        }
        s->draft = v;
    } else if (strcmp(a, "--spec-max") == 0) {
        if (!cli_int(a, v, 1, KILN_SPEC_MAX_LIMIT, &s->max)) return -1;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

bool cli_spec_resolve(cli_spec *s, const char *verb) {
    if (s->draft && !s->method_given) s->method = KILN_SPEC_DRAFT;
    if (s->method == KILN_SPEC_DRAFT && !s->draft) {
        fprintf(stderr, "kiln %s: --spec draft needs --draft-model MODEL\n", verb);
        return false;
    }
    if (s->draft && s->method != KILN_SPEC_DRAFT) {
        fprintf(stderr, "kiln %s: --draft-model is for --spec draft (not %s)\n", verb,
                kiln_spec_method_name(s->method));
        return false;
    }
    return true;
}

kiln_model *cli_load_draft(const cli_spec *s, const cli_common *c, const char *verb, bool *ok) {
    *ok = true;
    if (s->method != KILN_SPEC_DRAFT) return NULL;
    cli_common dc = *c;
    dc.model = s->draft;
    kiln_model *d = cli_load_model(&dc, false);
    if (!d) {
        fprintf(stderr, "kiln %s: the draft model could not be loaded\n", verb);
        *ok = false;
    }
    return d;
}

/*
 * schema.c - JSON Schema to GBNF (schema.h): the walk. $ref resolution, flattening of $ref / allOf /
 * dependencies (and `not` and if / then / else, rewritten into positive keywords), distribution of
 * anyOf / oneOf, one rule per distinct conjunction, and the entry points. schema_merge.c merges the
 * keywords of a conjunction; schema_emit.c writes the grammar of the merged result.
 *
 * A schema position is compiled as a conjunction: the list of schema objects that all apply there
 * (a $ref's target, the members of allOf, and the object itself). ks_compile() flattens that list,
 * distributes the first anyOf / oneOf over it (S and (A or B) = (S and A) or (S and B); oneOf is
 * enforced as anyOf), and merges what is left into one node from which the GBNF of the position is
 * written. Each distinct conjunction gets one rule, registered before its body is written, so
 * recursive schemas become recursive rules.
 *
 * Fail closed: a keyword that constrains and that kiln cannot enforce, exactly or in a documented
 * approximation (docs/structured-output.md), is an error naming its JSON pointer; keywords JSON
 * Schema does not define, and the annotations it does (title, description, ...), are ignored.
 * Duplicate keys in the schema text are an error (JSON_REJECT_DUPLICATES).
 */
#include "sample/schema.h"
#include "base/json.h"
#include "sample/grammar.h"
#include "sample/schema_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
static const char json_object_gbnf[] =
    "root ::= object\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    KN_SCHEMA_WS_RULE;
/* clang-format on */

const char *kn_json_object_gbnf(void) { return json_object_gbnf; }

void ks_fail(ctx *c, const char *path, const char *kw, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

void ks_fail(ctx *c, const char *path, const char *kw, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = true;
    c->st = KILN_ERR_INVALID_ARG;
    char msg[KN_SCHEMA_ERRMSG_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (kw) snprintf(c->err, sizeof c->err, "schema #%.120s/%.40s: %s", path, kw, msg);
    else snprintf(c->err, sizeof c->err, "schema #%.120s: %s", path, msg);
}

void ks_nomem(ctx *c) {
    if (c->failed) return;
    c->failed = true;
    c->st = KILN_ERR_NOMEM;
    snprintf(c->err, sizeof c->err, "out of memory converting the schema");
}

void ks_approx(ctx *c, const char *path, const char *kw, const char *how) {
    if (c->approx) return;
    c->approx = true;
    snprintf(c->approx_what, sizeof c->approx_what, "#%.200s/%.40s: %.120s", path, kw, how);
}

/* path + "/" + key as a JSON pointer (~ and / escaped), owned by c. */
const char *ks_path_join(ctx *c, const char *base, const char *key) {
    kn_sbuf b;
    kn_sbuf_init(&b, 1 << 16);
    kn_sbuf_puts(&b, base);
    kn_sbuf_puts(&b, "/");
    for (const char *p = key; *p; p++) {
        if (*p == '~') kn_sbuf_puts(&b, "~0");
        else if (*p == '/') kn_sbuf_puts(&b, "~1");
        else kn_sbuf_put(&b, p, 1);
    }
    if (b.nomem || b.over || !b.p) {
        kn_sbuf_free(&b);
        ks_nomem(c);
        return base;
    }
    if (c->npaths == c->cappaths) {
        int nc = c->cappaths ? c->cappaths * 2 : 64;
        char **np = realloc(c->paths, (size_t)nc * sizeof *np);
        if (!np) {
            kn_sbuf_free(&b);
            ks_nomem(c);
            return base;
        }
        c->paths = np;
        c->cappaths = nc;
    }
    c->paths[c->npaths++] = b.p;
    return b.p;
}

const char *ks_path_idx(ctx *c, const char *base, const char *kw, size_t i) {
    char num[32];
    snprintf(num, sizeof num, "%zu", i);
    return ks_path_join(c, ks_path_join(c, base, kw), num);
}

void ks_conj_add(ctx *c, conj *k, sref x) {
    /* the same object twice: a distributed anyOf / oneOf stays distributed (the branch taken
     * satisfies it) */
    for (int i = 0; i < k->n; i++)
        if (k->v[i].s == x.s) {
            k->v[i].skip |= x.skip;
            return;
        }
    if (k->n == k->cap) {
        int nc = k->cap ? k->cap * 2 : 4;
        sref *v = realloc(k->v, (size_t)nc * sizeof *v);
        if (!v) {
            ks_nomem(c);
            return;
        }
        k->v = v;
        k->cap = nc;
    }
    k->v[k->n++] = x;
}

void ks_conj_free(conj *k) {
    free(k->v);
    *k = (conj){0};
}

conj ks_conj_copy(ctx *c, const conj *k) {
    conj o = {0};
    for (int i = 0; i < k->n; i++) ks_conj_add(c, &o, k->v[i]);
    return o;
}

sref ks_mk(json_t *s, const char *path) { return (sref){s, path, 0}; }

/* ---- $ref ------------------------------------------------------------------------------------ */

int ks_hexdig(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static json_t *find_anchor(json_t *s, const char *name, int depth) {
    if (depth > 200) return NULL;
    if (json_is_object(s)) {
        json_t *a = json_object_get(s, "$anchor"), *id = json_object_get(s, "$id");
        if (!id) id = json_object_get(s, "id");
        if (json_is_string(a) && !strcmp(json_string_value(a), name)) return s;
        if (json_is_string(id) && json_string_value(id)[0] == '#' && !strcmp(json_string_value(id) + 1, name)) return s;
        const char *k;
        json_t *v;
        json_object_foreach(s, k, v) {
            if (!strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "examples") || !strcmp(k, "default")) continue;
            json_t *f = find_anchor(v, name, depth + 1);
            if (f) return f;
        }
    } else if (json_is_array(s)) {
        size_t i;
        json_t *v;
        json_array_foreach(s, i, v) {
            json_t *f = find_anchor(v, name, depth + 1);
            if (f) return f;
        }
    }
    return NULL;
}

bool ks_resolve(ctx *c, sref from, const json_t *ref, sref *out, bool quiet) {
    if (!json_is_string(ref)) {
        if (!quiet) ks_fail(c, from.path, "$ref", "must be a string");
        return false;
    }
    const char *r = json_string_value(ref);
    /* a reference that names the root's own $id is local */
    json_t *id = json_object_get(c->root, "$id");
    if (!json_is_string(id)) id = json_object_get(c->root, "id");
    if (json_is_string(id)) {
        const char *b = json_string_value(id);
        size_t bl = strcspn(b, "#");
        if (bl && !strncmp(r, b, bl) && (r[bl] == '#' || r[bl] == 0)) r += bl;
    }
    if (!*r) r = "#";
    if (r[0] != '#') {
        if (!quiet)
            ks_fail(c, from.path, "$ref",
                    "remote reference \"%.120s\" is not supported (only references inside the schema)", r);
        return false;
    }
    if (!r[1]) {
        *out = ks_mk(c->root, "");
        return true;
    }
    if (r[1] != '/') {
        json_t *a = find_anchor(c->root, r + 1, 0);
        if (!a) {
            if (!quiet) ks_fail(c, from.path, "$ref", "\"%.120s\" does not resolve", r);
            return false;
        }
        *out = ks_mk(a, quiet ? "" : ks_path_join(c, "", r));
        return true;
    }
    /* a JSON pointer in a URI fragment: percent-decoding, then ~1 and ~0 */
    size_t n = strlen(r);
    char *dec = malloc(n + 1);
    if (!dec) {
        ks_nomem(c);
        return false;
    }
    size_t w = 0;
    for (size_t i = 1; i < n; i++) {
        int h1, h2;
        if (r[i] == '%' && i + 2 < n && (h1 = ks_hexdig(r[i + 1])) >= 0 && (h2 = ks_hexdig(r[i + 2])) >= 0) {
            dec[w++] = (char)(h1 * 16 + h2);
            i += 2;
        } else {
            dec[w++] = r[i];
        }
    }
    dec[w] = 0;
    json_t *cur = c->root;
    char *p = dec;
    bool ok = true;
    while (ok && *p == '/') {
        p++;
        char *end = strchr(p, '/');
        size_t tl = end ? (size_t)(end - p) : strlen(p);
        char *tok = malloc(tl + 1);
        if (!tok) {
            free(dec);
            ks_nomem(c);
            return false;
        }
        size_t tw = 0;
        for (size_t i = 0; i < tl; i++) {
            if (p[i] == '~' && i + 1 < tl && (p[i + 1] == '0' || p[i + 1] == '1')) {
                tok[tw++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                tok[tw++] = p[i];
            }
        }
        tok[tw] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *e;
            unsigned long idx = strtoul(tok, &e, 10);
            cur = (*tok && !*e) ? json_array_get(cur, idx) : NULL;
        } else {
            cur = NULL;
        }
        free(tok);
        ok = cur != NULL;
        p += tl;
    }
    free(dec);
    if (!ok) {
        if (!quiet) ks_fail(c, from.path, "$ref", "\"%.120s\" does not resolve", json_string_value(ref));
        return false;
    }
    *out = ks_mk(cur, r + 1); /* the pointer as written, kept alive by the document */
    return true;
}

/* ---- keyword lists -------------------------------------------------------------------------------- */

/* Annotations and keywords handled outside the ks_merge (flatten, combinators, containers). */
const char *const ks_passive_kw[] = {
    "$schema",
    "$id",
    "id",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "example",
    "readOnly",
    "writeOnly",
    "deprecated",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "discriminator",
    "xml",
    "externalDocs",
    "$ref",
    "allOf",
    "anyOf",
    "oneOf",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "nullable",
    "then",
    "else",
    SYNTH_DEPS,
};
const size_t ks_n_passive_kw = sizeof ks_passive_kw / sizeof *ks_passive_kw;

/* Keywords that constrain and that kiln does not enforce: an error. */
const char *const ks_refused_kw[] = {
    "contains",    "minContains",   "maxContains", "unevaluatedItems", "unevaluatedProperties",
    "$dynamicRef", "$recursiveRef",
};
const size_t ks_n_refused_kw = sizeof ks_refused_kw / sizeof *ks_refused_kw;

bool ks_in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}

/* ---- flattening: $ref, allOf and dependencies ------------------------------------------------ */

/* dependencies / dependentRequired / dependentSchemas as anyOf: "a absent, or the dependency
 * holds" for each property a; built once per schema object and kept in it. */
static json_t *deps_anyof(ctx *c, sref x) {
    json_t *have = json_object_get(x.s, SYNTH_DEPS);
    if (have) return have;
    static const char *const kws[] = {"dependencies", "dependentRequired", "dependentSchemas"};
    json_t *all = json_array();
    if (!all) {
        ks_nomem(c);
        return NULL;
    }
    for (size_t k = 0; k < 3; k++) {
        json_t *d = json_object_get(x.s, kws[k]);
        if (!d) continue;
        if (!json_is_object(d)) {
            ks_fail(c, x.path, kws[k], "must be an object");
            break;
        }
        const char *name;
        json_t *v;
        json_object_foreach(d, name, v) {
            json_t *then;
            if (json_is_array(v)) {
                size_t i;
                json_t *e;
                json_array_foreach(v, i, e) if (!json_is_string(e)) {
                    ks_fail(c, ks_path_join(c, x.path, kws[k]), name, "must list property names");
                    break;
                }
                then = json_pack("{sO}", "required", v);
            } else if (json_is_object(v) || json_is_boolean(v)) {
                then = json_incref(v);
            } else {
                ks_fail(c, ks_path_join(c, x.path, kws[k]), name, "must be an array of names or a schema");
                break;
            }
            json_t *absent = json_pack("{s{sb}}", "properties", name, 0);
            json_t *alt = json_pack("{s[oo]}", "anyOf", absent, then);
            if (!alt || json_array_append_new(all, alt)) {
                ks_nomem(c);
                break;
            }
        }
    }
    if (json_object_set_new(x.s, SYNTH_DEPS, all)) ks_nomem(c);
    return all;
}

/* Whether `not` of n is rewritten into positive keywords (else merge_not handles it). */
bool ks_not_rewrites(const json_t *n) {
    return json_is_object(n) && (json_object_get(n, "required") || json_object_get(n, "properties") ||
                                 json_object_get(n, "allOf") || json_object_get(n, "anyOf"));
}

/* not {k1: v1, k2: v2, ...} = anyOf [not {k1: v1}, not {k2: v2}, ...], with the object keywords in
 * positive form: not required [a] = an object without a; not properties {k: S} = an object whose k
 * is there and not S; not allOf = anyOf of nots; not anyOf = allOf of nots. */
static json_t *not_rewrite(ctx *c, sref x, json_t *n) {
    json_t *have = json_object_get(x.s, SYNTH_NOT);
    if (have) return have;
    json_t *alts = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(n, k, v) {
        size_t i;
        json_t *e;
        if (!strcmp(k, "required") && json_is_array(v)) {
            json_array_foreach(v, i, e) if (json_is_string(e)) json_array_append_new(
                alts, json_pack("{ss s{sb}}", "type", "object", "properties", json_string_value(e), 0));
        } else if (!strcmp(k, "properties") && json_is_object(v)) {
            const char *pk;
            json_object_foreach(v, pk, e) json_array_append_new(
                alts, json_pack("{ss s[s] s{s{sO}}}", "type", "object", "required", pk, "properties", pk, "not", e));
        } else if (!strcmp(k, "allOf") && json_is_array(v)) {
            json_array_foreach(v, i, e) json_array_append_new(alts, json_pack("{sO}", "not", e));
        } else if (!strcmp(k, "anyOf") && json_is_array(v)) {
            json_t *all = json_array();
            json_array_foreach(v, i, e) json_array_append_new(all, json_pack("{sO}", "not", e));
            json_array_append_new(alts, json_pack("{so}", "allOf", all));
        } else if (!ks_in_list(k, ks_passive_kw, ks_n_passive_kw) || !strcmp(k, "$ref") || !strcmp(k, "oneOf")) {
            json_array_append_new(alts, json_pack("{s{sO}}", "not", k, v));
        }
    }
    json_t *r = json_array_size(alts) ? json_pack("{so}", "anyOf", alts) : (json_decref(alts), json_false());
    if (!r || json_object_set_new(x.s, SYNTH_NOT, r)) ks_nomem(c);
    return json_object_get(x.s, SYNTH_NOT);
}

/* if I then T else E = anyOf [allOf [I, T], allOf [not I, E]] (T, E absent: true). */
static json_t *if_rewrite(ctx *c, sref x) {
    json_t *have = json_object_get(x.s, SYNTH_IF);
    if (have) return have;
    json_t *i = json_object_get(x.s, "if"), *t = json_object_get(x.s, "then"), *e = json_object_get(x.s, "else");
    json_t *r = json_pack("{s[{s[OO]}{s[{sO}O]}]}", "anyOf", "allOf", i, t ? t : json_true(), "allOf", "not", i,
                          e ? e : json_true());
    if (!r || json_object_set_new(x.s, SYNTH_IF, r)) ks_nomem(c);
    return json_object_get(x.s, SYNTH_IF);
}

static void flatten(ctx *c, sref x, conj *out, bool *unsat, int depth) {
    if (c->failed) return;
    if (x.skip & FLAT) {
        ks_conj_add(c, out, x);
        return;
    }
    if (depth > MAX_DEPTH) {
        ks_fail(c, x.path, NULL, "$ref / allOf nest more than %d deep (a reference cycle?)", MAX_DEPTH);
        return;
    }
    if (json_is_true(x.s)) return;
    if (json_is_false(x.s)) {
        *unsat = true;
        return;
    }
    if (!json_is_object(x.s)) {
        ks_fail(c, x.path, NULL, "a schema must be an object or a boolean");
        return;
    }
    json_t *ref = json_object_get(x.s, "$ref");
    if (ref) {
        sref t;
        if (!ks_resolve(c, x, ref, &t, false)) return;
        flatten(c, t, out, unsat, depth + 1);
    }
    json_t *all = json_object_get(x.s, "allOf");
    if (all) {
        if (!json_is_array(all) || !json_array_size(all)) {
            ks_fail(c, x.path, "allOf", "must be a non-empty array");
            return;
        }
        size_t i;
        json_t *e;
        json_array_foreach(all, i, e) flatten(c, ks_mk(e, ks_path_idx(c, x.path, "allOf", i)), out, unsat, depth + 1);
    }
    if (json_object_get(x.s, "dependencies") || json_object_get(x.s, "dependentRequired") ||
        json_object_get(x.s, "dependentSchemas")) {
        json_t *deps = deps_anyof(c, x);
        size_t i;
        json_t *e;
        json_array_foreach(deps, i, e)
            flatten(c, ks_mk(e, ks_path_join(c, x.path, "dependencies")), out, unsat, depth + 1);
    }
    json_t *n = json_object_get(x.s, "not");
    if (ks_not_rewrites(n)) {
        json_t *r = not_rewrite(c, x, n);
        if (r) flatten(c, ks_mk(r, ks_path_join(c, x.path, "not")), out, unsat, depth + 1);
    }
    if (json_object_get(x.s, "if")) {
        json_t *r = if_rewrite(c, x);
        if (r) flatten(c, ks_mk(r, ks_path_join(c, x.path, "if")), out, unsat, depth + 1);
    }
    x.skip |= FLAT;
    ks_conj_add(c, out, x);
}

/* ---- conjunctions to rules ------------------------------------------------------------------- */

static int cmp_uptr(const void *a, const void *b) {
    const uintptr_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static memo *memo_find(ctx *c, const uintptr_t *key, int n) {
    for (int i = 0; i < c->nm; i++)
        if (c->m[i].n == n && !memcmp(c->m[i].key, key, (size_t)n * 2 * sizeof *key)) return &c->m[i];
    return NULL;
}

/* The constraints of the flattened conjunction f (no anyOf / oneOf left to distribute) merged into one
 * node; free it with ks_node_free. */
static node merged(ctx *c, const conj *f) {
    node n = {.types = T_ALL, .maxlen = -1, .mult10 = -1, .maxitems = -1, .maxprops = -1, .req = json_array()};
    n.path = f->v[0].path;
    for (int i = 0; i < f->n && !c->failed; i++) ks_merge(c, &n, f->v[i]);
    return n;
}

json_t *ks_conj_values(ctx *c, const conj *in) {
    conj f = {0};
    bool unsat = false;
    for (int i = 0; i < in->n && !c->failed; i++) flatten(c, in->v[i], &f, &unsat, 0);
    bool plain = !c->failed && !unsat && f.n;
    for (int i = 0; i < f.n && plain; i++)
        plain = !json_object_get(f.v[i].s, "anyOf") && !json_object_get(f.v[i].s, "oneOf");
    json_t *out = NULL;
    if (plain) {
        node n = merged(c, &f);
        if (!c->failed && n.req && n.enums && (out = json_array())) {
            size_t i, j;
            json_t *v, *w;
            json_array_foreach(n.enums, i, v) {
                bool dup = false;
                json_array_foreach(out, j, w) dup = dup || ks_values_equal(v, w);
                if (json_is_object(v) || json_is_array(v)) { /* values kiln writes without checking them */
                    json_decref(out);
                    out = NULL;
                    break;
                }
                if (!dup && ks_value_ok(&n, v) && json_array_append(out, v)) ks_nomem(c);
            }
        }
        ks_node_free(&n);
    }
    ks_conj_free(&f);
    return out;
}

/* The rules outgrew what may run (KILN_GRAMMAR_MAX_TEXT): the compile stops there. */
static void grammar_too_big(ctx *c) {
    c->too_big = true;
    ks_fail(c, "", NULL, "the schema's grammar is larger than %u bytes", KILN_GRAMMAR_MAX_TEXT);
}

/* The rule of the values valid under every schema of in; NULL when none is (or on failure). */
const char *ks_compile(ctx *c, conj *in, const char *hint, int depth) {
    if (c->failed) return NULL;
    if (c->g.text.over) { /* the rest would be written for nothing */
        grammar_too_big(c);
        return NULL;
    }
    if (depth > 400 || ++c->calls > MAX_COMPILES) {
        ks_fail(c, in->n ? in->v[0].path : "", NULL, "the schema is too complex (more than %d sub-schemas to combine)",
                MAX_COMPILES);
        return NULL;
    }
    conj f = {0};
    bool unsat = false;
    for (int i = 0; i < in->n && !c->failed; i++) flatten(c, in->v[i], &f, &unsat, 0);
    if (c->failed || unsat) {
        ks_conj_free(&f);
        return NULL;
    }
    if (!f.n) {
        ks_conj_free(&f);
        return ks_use(c, U_VALUE);
    }
    uintptr_t *key = malloc((size_t)f.n * 2 * sizeof *key);
    if (!key) {
        ks_conj_free(&f);
        ks_nomem(c);
        return NULL;
    }
    for (int i = 0; i < f.n; i++) key[2 * i] = (uintptr_t)f.v[i].s, key[2 * i + 1] = f.v[i].skip;
    qsort(key, (size_t)f.n, 2 * sizeof *key, cmp_uptr);
    memo *hit = memo_find(c, key, f.n);
    if (hit) {
        free(key);
        ks_conj_free(&f);
        return hit->name ? hit->name : ks_use(c, U_NEVER);
    }
    if (c->nm == c->capm) {
        int nc = c->capm ? c->capm * 2 : 64;
        memo *nm = realloc(c->m, (size_t)nc * sizeof *nm);
        if (!nm) {
            free(key);
            ks_conj_free(&f);
            ks_nomem(c);
            return NULL;
        }
        c->m = nm;
        c->capm = nc;
    }
    int mi = c->nm++;
    const char *name = kn_gout_name(&c->g, hint);
    c->m[mi] = (memo){key, f.n, name};
    if (!name) {
        ks_conj_free(&f);
        ks_nomem(c);
        return NULL;
    }
    kn_sbuf body;
    kn_sbuf_init(&body, KN_SCHEMA_MAX_GBNF);
    int alts = 0;
    /* the first anyOf / oneOf not yet distributed */
    int at = -1;
    const char *kw = NULL;
    for (int i = 0; i < f.n && at < 0; i++) {
        if (!(f.v[i].skip & SKIP_ANYOF) && json_object_get(f.v[i].s, "anyOf")) at = i, kw = "anyOf";
        else if (!(f.v[i].skip & SKIP_ONEOF) && json_object_get(f.v[i].s, "oneOf")) at = i, kw = "oneOf";
    }
    if (at >= 0) {
        json_t *list = json_object_get(f.v[at].s, kw);
        if (!json_is_array(list) || !json_array_size(list)) ks_fail(c, f.v[at].path, kw, "must be a non-empty array");
        if (kw[0] == 'o' && json_array_size(list) > 1 && !ks_oneof_disjoint(c, list, &f))
            ks_approx(c, f.v[at].path, kw, "enforced as anyOf: a value valid under several branches is accepted");
        size_t i;
        json_t *alt;
        json_array_foreach(list, i, alt) {
            if (c->failed) break;
            conj k = ks_conj_copy(c, &f);
            k.v[at].skip |= kw[0] == 'a' ? SKIP_ANYOF : SKIP_ONEOF;
            ks_conj_add(c, &k, ks_mk(alt, ks_path_idx(c, f.v[at].path, kw, i)));
            const char *an = ks_compile(c, &k, hint, depth + 1);
            ks_conj_free(&k);
            if (an) kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", an);
        }
    } else {
        node n = merged(c, &f);
        if (!n.req) ks_nomem(c);
        if (!c->failed && n.enums) {
            const char *en = ks_emit_enum(c, &n, hint);
            if (en) kn_sbuf_printf(&body, "%s", en), alts++;
        } else if (!c->failed) {
            if (n.types & T_NULL) kn_sbuf_printf(&body, "%s\"null\"", alts++ ? " | " : "");
            if (n.types & T_BOOL) kn_sbuf_printf(&body, "%s\"true\" | \"false\"", alts++ ? " | " : "");
            if (n.types & T_NUM) {
                kn_sbuf nb;
                kn_sbuf_init(&nb, KN_SCHEMA_MAX_GBNF);
                int widened = 0;
                bool integer = !(n.types & T_FRAC);
                if (!(n.types & T_INT))
                    ks_approx(c, n.path, "type", "numbers that are not integers are enforced as numbers");
                if (!n.lo.set && !n.hi.set && n.mult10 < 0 && !integer) {
                    kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", ks_use(c, U_NUMBER));
                } else if (kn_num_body(&nb, &c->g, n.lo, n.hi, integer, integer ? -1 : n.mult10, &widened)) {
                    kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", nb.p);
                }
                if (widened) { /* the keyword of the first bound widened */
                    const bool low = widened == 1, excl = low ? n.lo.excl : n.hi.excl;
                    ks_approx(c, n.path,
                              low ? (excl ? "exclusiveMinimum" : "minimum") : (excl ? "exclusiveMaximum" : "maximum"),
                              "a bound with more than 40 fraction digits is widened to an integer");
                }
                if (nb.over || nb.nomem) ks_nomem(c);
                kn_sbuf_free(&nb);
            }
            if (n.types & T_STR) {
                kn_sbuf sb;
                kn_sbuf_init(&sb, KN_SCHEMA_MAX_GBNF);
                if (ks_emit_string(c, &n, &sb, hint)) kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", sb.p);
                kn_sbuf_free(&sb);
            }
            if (n.types & T_ARR) {
                kn_sbuf ab;
                kn_sbuf_init(&ab, KN_SCHEMA_MAX_GBNF);
                if (ks_emit_array(c, &n, &ab, depth)) kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", ab.p);
                kn_sbuf_free(&ab);
            }
            if (n.types & T_OBJ) {
                kn_sbuf ob;
                kn_sbuf_init(&ob, KN_SCHEMA_MAX_GBNF);
                if (ks_emit_object(c, &n, &ob, name, depth)) kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", ob.p);
                kn_sbuf_free(&ob);
            }
        }
        ks_node_free(&n);
    }
    ks_conj_free(&f);
    if (body.over || body.nomem) ks_nomem(c);
    const char *ret = NULL;
    if (!c->failed) {
        if (alts) {
            kn_gout_rule(&c->g, name, body.p);
            ret = name;
        } else {
            /* empty: later references see NULL; earlier recursive ones need the rule to exist */
            c->m[mi].name = NULL;
            kn_gout_rule(&c->g, name, ks_use(c, U_NEVER));
        }
    }
    kn_sbuf_free(&body);
    return ret;
}

/* ---- entry ----------------------------------------------------------------------------------- */

/* One conversion into *gbnf; cheap: additional property names are not told apart from declared ones.
 * *too_big: the grammar outgrew KILN_GRAMMAR_MAX_TEXT (the compile stops as its rules pass that size:
 * nothing larger may run). */
static kiln_status convert(const char *json, size_t len, bool strict, bool cheap, char **gbnf, kn_schema_info *info,
                           bool *too_big) {
    *too_big = false;
    json_error_t je;
    json_t *root = kn_json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root && strstr(je.text, "too big"))
        root = kn_json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    if (!root)
        return kn_error(kn_json_status(&je, KILN_ERR_INVALID_ARG),
                        "the schema is not valid JSON: line %d, column %d: %s", je.line, je.column, je.text);
    const unsigned mark = kn_json_mark(); /* the compile builds values: a part left out fails it */
    ctx c = {.root = root, .strict = strict, .cheap_keys = cheap};
    kn_gout_init(&c.g);
    static const char *const reserved[] = {"root",   "ws",   "value",  "object", "array",
                                           "string", "char", "number", "never",  "jesc"};
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) kn_gout_name(&c.g, reserved[i]);
    conj top = {0};
    ks_conj_add(&c, &top, ks_mk(root, ""));
    const char *r = ks_compile(&c, &top, "schema", 0);
    ks_conj_free(&top);
    kn_sbuf out;
    kn_sbuf_init(&out, KILN_GRAMMAR_MAX_TEXT);
    if (!c.failed && !r) ks_fail(&c, "", NULL, "no JSON value is valid under the schema");
    if (!c.failed) {
        kn_sbuf_printf(&out, "root ::= %s\n", r);
        kn_sbuf_put(&out, c.g.text.p ? c.g.text.p : "", c.g.text.len);
        if (c.used & U_VALUE) {
            /* the same rules as JSON mode, but object and array with any content */
            const char *jm = json_object_gbnf;
            jm = strchr(jm, '\n') + 1; /* skip its root */
            const char *ws = strstr(jm, "ws ::=");
            kn_sbuf_put(&out, jm, (size_t)(ws - jm));
            c.used &= ~(unsigned)(U_STRING | U_NUMBER | U_CHAR);
        }
        if (c.used & U_STRING) kn_sbuf_puts(&out, "string ::= \"\\\"\" char* \"\\\"\"\n");
        if (c.used & (U_STRING | U_CHAR))
            kn_sbuf_puts(&out, "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] "
                               "[0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" "
                               "[dD] [c-fC-F] [0-9a-fA-F]{2} ) )\n");
        if (c.used & U_NUMBER)
            kn_sbuf_puts(&out, "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n");
        if (c.used & U_NEVER) kn_sbuf_puts(&out, "never ::= [^\\x00-\\U0010FFFF]\n");
        if (c.g.used_jesc) kn_sbuf_puts(&out, KN_SCHEMA_JESC_RULE);
        kn_sbuf_puts(&out, KN_SCHEMA_WS_RULE);
        if (c.g.text.over || out.over) grammar_too_big(&c);
        else if (c.g.text.nomem || out.nomem || kn_json_failed_since(mark)) ks_nomem(&c);
    }
    kiln_status st = KILN_OK;
    *too_big = c.too_big;
    if (c.failed) {
        st = kn_error(c.st, "%s", c.err);
        kn_sbuf_free(&out);
    } else {
        *gbnf = out.p;
        if (info) {
            info->approx = c.approx;
            snprintf(info->approx_what, sizeof info->approx_what, "%s", c.approx_what);
            info->rules = c.g.nrules;
        }
    }
    for (int i = 0; i < c.nm; i++) free(c.m[i].key);
    free(c.m);
    for (int i = 0; i < c.npaths; i++) free(c.paths[i]);
    free(c.paths);
    for (int i = 0; i < c.npc; i++) kn_dfa_free(c.pc[i].dfa);
    for (int i = 0; i < c.nkeys; i++) free(c.keys[i].sig);
    free(c.pc);
    kn_gout_free(&c.g);
    json_decref(root);
    return st;
}

kiln_status kn_schema_to_gbnf_info(const char *json, size_t len, bool strict, char **gbnf, kn_schema_info *info) {
    if (!gbnf) return kn_error(KILN_ERR_INVALID_ARG, "gbnf is NULL");
    *gbnf = NULL;
    if (info) *info = (kn_schema_info){0};
    if (!json) return kn_error(KILN_ERR_INVALID_ARG, "the schema is NULL");
    bool too_big;
    kiln_status st = convert(json, len, strict, false, gbnf, info, &too_big);
    /* too large for the GBNF compiler: the names of additional properties are the first thing to give
     * up (each object's list of names it must not repeat is most of a big grammar) */
    if (too_big) st = convert(json, len, strict, true, gbnf, info, &too_big);
    if (too_big)
        st = kn_error(KILN_ERR_INVALID_ARG, "schema #: the schema's grammar is larger than %u bytes",
                      KILN_GRAMMAR_MAX_TEXT);
    return st;
}

kiln_status kn_schema_to_gbnf(const char *json, size_t len, bool strict, char **gbnf) {
    return kn_schema_to_gbnf_info(json, len, strict, gbnf, NULL);
}

/*
 * schema.c - JSON Schema to GBNF (schema.h): the schema walk, $ref resolution, combinators and the
 * grammar of each kind of JSON value.
 *
 * A schema position is compiled as a conjunction: the list of schema objects that all apply there
 * (a $ref, the members of allOf, and the object itself). compile() flattens that list, distributes
 * the first anyOf / oneOf over it (S and (A or B) = (S and A) or (S and B); oneOf is enforced as
 * anyOf), and merges what is left into one `node` (types, string automaton, numeric range, array
 * and object shapes) from which the GBNF of the position is written. Each distinct conjunction gets
 * one rule, registered before its body is written, so recursive schemas become recursive rules.
 *
 * Fail closed: a keyword that constrains and that kiln cannot enforce, exactly or in a documented
 * approximation (docs/structured-output.md), is an error naming its JSON pointer; keywords JSON
 * Schema does not define, and the annotations it does (title, description, ...), are ignored.
 */
#include "sample/schema.h"
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

/* ---- the converter's state ------------------------------------------------------------------- */

enum { SKIP_ANYOF = 1, SKIP_ONEOF = 2, FLAT = 4 }; /* FLAT: its $ref, allOf, dependencies are in the list */

/* One schema object applying at a position, with the JSON pointer it was reached by. */
typedef struct sref {
    json_t *s;
    const char *path;
    unsigned skip; /* combinators already distributed */
} sref;

typedef struct conj {
    sref *v;
    int n, cap;
} conj;

typedef struct memo {
    uintptr_t *key; /* pointer, skip pairs, sorted */
    int n;
    const char *name; /* NULL: the language is empty */
} memo;

typedef struct patcache {
    const json_t *obj; /* a patternProperties object */
    const char *key;
    kn_dfa *dfa;
} patcache;

typedef struct keycache {
    char *sig; /* the sorted declared names, as JSON */
    const char *name;
} keycache;

enum { U_VALUE = 1, U_STRING = 2, U_NUMBER = 4, U_NEVER = 8, U_CHAR = 16 };

typedef struct ctx {
    json_t *root;
    bool strict;
    kn_gout g;
    memo *m;
    int nm, capm;
    char **paths;
    int npaths, cappaths;
    patcache *pc;
    int npc, cappc;
    bool failed;
    kiln_status st;
    char err[KN_SCHEMA_ERRMSG_MAX];
    bool approx;
    char approx_what[KN_SCHEMA_ERRMSG_MAX];
    int calls;
    unsigned used;
    keycache keys[256];
    int nkeys;
    bool cheap_keys; /* additional property names need not differ from the declared ones */
} ctx;

#define MAX_COMPILES 20000 /* conjunctions compiled per schema at most */
#define MAX_DEPTH    64    /* $ref and allOf chains, schema nesting */

static void fail(ctx *c, const char *path, const char *kw, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void fail(ctx *c, const char *path, const char *kw, const char *fmt, ...) {
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

static void nomem(ctx *c) {
    if (c->failed) return;
    c->failed = true;
    c->st = KILN_ERR_NOMEM;
    snprintf(c->err, sizeof c->err, "out of memory converting the schema");
}

static void approx(ctx *c, const char *path, const char *kw, const char *how) {
    if (c->approx) return;
    c->approx = true;
    snprintf(c->approx_what, sizeof c->approx_what, "#%.200s/%.40s: %.120s", path, kw, how);
}

/* path + "/" + key as a JSON pointer (~ and / escaped), owned by c. */
static const char *path_join(ctx *c, const char *base, const char *key) {
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
        nomem(c);
        return base;
    }
    if (c->npaths == c->cappaths) {
        int nc = c->cappaths ? c->cappaths * 2 : 64;
        char **np = realloc(c->paths, (size_t)nc * sizeof *np);
        if (!np) {
            kn_sbuf_free(&b);
            nomem(c);
            return base;
        }
        c->paths = np;
        c->cappaths = nc;
    }
    c->paths[c->npaths++] = b.p;
    return b.p;
}

static const char *path_idx(ctx *c, const char *base, const char *kw, size_t i) {
    char num[32];
    snprintf(num, sizeof num, "%zu", i);
    return path_join(c, path_join(c, base, kw), num);
}

static void conj_add(ctx *c, conj *k, sref x) {
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
            nomem(c);
            return;
        }
        k->v = v;
        k->cap = nc;
    }
    k->v[k->n++] = x;
}

static void conj_free(conj *k) {
    free(k->v);
    *k = (conj){0};
}

static conj conj_copy(ctx *c, const conj *k) {
    conj o = {0};
    for (int i = 0; i < k->n; i++) conj_add(c, &o, k->v[i]);
    return o;
}

static sref mk(json_t *s, const char *path) { return (sref){s, path, 0}; }

/* ---- $ref ------------------------------------------------------------------------------------ */

static int hexdig(char c) {
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

static bool resolve(ctx *c, sref from, json_t *ref, sref *out) {
    if (!json_is_string(ref)) {
        fail(c, from.path, "$ref", "must be a string");
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
        fail(c, from.path, "$ref", "remote reference \"%.120s\" is not supported (only references inside the schema)",
             r);
        return false;
    }
    if (!r[1]) {
        *out = mk(c->root, "");
        return true;
    }
    if (r[1] != '/') {
        json_t *a = find_anchor(c->root, r + 1, 0);
        if (!a) {
            fail(c, from.path, "$ref", "\"%.120s\" does not resolve", r);
            return false;
        }
        *out = mk(a, path_join(c, "", r));
        return true;
    }
    /* a JSON pointer in a URI fragment: percent-decoding, then ~1 and ~0 */
    size_t n = strlen(r);
    char *dec = malloc(n + 1);
    if (!dec) {
        nomem(c);
        return false;
    }
    size_t w = 0;
    for (size_t i = 1; i < n; i++) {
        int h1, h2;
        if (r[i] == '%' && i + 2 < n && (h1 = hexdig(r[i + 1])) >= 0 && (h2 = hexdig(r[i + 2])) >= 0) {
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
            nomem(c);
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
        fail(c, from.path, "$ref", "\"%.120s\" does not resolve", json_string_value(ref));
        return false;
    }
    *out = mk(cur, r + 1); /* the pointer as written, kept alive by the document */
    return true;
}

#define SYNTH_DEPS "$kiln:dependencies" /* where the anyOf form of dependencies is kept */
#define SYNTH_NOT  "$kiln:not"          /* where a `not` rewritten by De Morgan's laws is kept */
#define SYNTH_IF   "$kiln:if"           /* where if / then / else as anyOf is kept */

/* ---- keyword lists -------------------------------------------------------------------------------- */

/* Annotations and keywords handled outside the merge (flatten, combinators, containers). */
static const char *const passive_kw[] = {
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

/* Keywords that constrain and that kiln does not enforce: an error. */
static const char *const refused_kw[] = {
    "contains",    "minContains",   "maxContains", "unevaluatedItems", "unevaluatedProperties",
    "$dynamicRef", "$recursiveRef",
};

static bool in_list(const char *k, const char *const *list, size_t n) {
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
        nomem(c);
        return NULL;
    }
    for (size_t k = 0; k < 3; k++) {
        json_t *d = json_object_get(x.s, kws[k]);
        if (!d) continue;
        if (!json_is_object(d)) {
            fail(c, x.path, kws[k], "must be an object");
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
                    fail(c, path_join(c, x.path, kws[k]), name, "must list property names");
                    break;
                }
                then = json_pack("{sO}", "required", v);
            } else if (json_is_object(v) || json_is_boolean(v)) {
                then = json_incref(v);
            } else {
                fail(c, path_join(c, x.path, kws[k]), name, "must be an array of names or a schema");
                break;
            }
            json_t *absent = json_pack("{s{sb}}", "properties", name, 0);
            json_t *alt = json_pack("{s[oo]}", "anyOf", absent, then);
            if (!alt || json_array_append_new(all, alt)) {
                nomem(c);
                break;
            }
        }
    }
    if (json_object_set_new(x.s, SYNTH_DEPS, all)) nomem(c);
    return all;
}

/* Whether `not` of n is rewritten into positive keywords (else merge_not handles it). */
static bool not_rewrites(const json_t *n) {
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
        } else if (!in_list(k, passive_kw, sizeof passive_kw / sizeof *passive_kw) || !strcmp(k, "$ref") ||
                   !strcmp(k, "oneOf")) {
            json_array_append_new(alts, json_pack("{s{sO}}", "not", k, v));
        }
    }
    json_t *r = json_array_size(alts) ? json_pack("{so}", "anyOf", alts) : (json_decref(alts), json_false());
    if (!r || json_object_set_new(x.s, SYNTH_NOT, r)) nomem(c);
    return json_object_get(x.s, SYNTH_NOT);
}

/* if I then T else E = anyOf [allOf [I, T], allOf [not I, E]] (T, E absent: true). */
static json_t *if_rewrite(ctx *c, sref x) {
    json_t *have = json_object_get(x.s, SYNTH_IF);
    if (have) return have;
    json_t *i = json_object_get(x.s, "if"), *t = json_object_get(x.s, "then"), *e = json_object_get(x.s, "else");
    json_t *r = json_pack("{s[{s[OO]}{s[{sO}O]}]}", "anyOf", "allOf", i, t ? t : json_true(), "allOf", "not", i,
                          e ? e : json_true());
    if (!r || json_object_set_new(x.s, SYNTH_IF, r)) nomem(c);
    return json_object_get(x.s, SYNTH_IF);
}

static void flatten(ctx *c, sref x, conj *out, bool *unsat, int depth) {
    if (c->failed) return;
    if (x.skip & FLAT) {
        conj_add(c, out, x);
        return;
    }
    if (depth > MAX_DEPTH) {
        fail(c, x.path, NULL, "$ref / allOf nest more than %d deep (a reference cycle?)", MAX_DEPTH);
        return;
    }
    if (json_is_true(x.s)) return;
    if (json_is_false(x.s)) {
        *unsat = true;
        return;
    }
    if (!json_is_object(x.s)) {
        fail(c, x.path, NULL, "a schema must be an object or a boolean");
        return;
    }
    json_t *ref = json_object_get(x.s, "$ref");
    if (ref) {
        sref t;
        if (!resolve(c, x, ref, &t)) return;
        flatten(c, t, out, unsat, depth + 1);
    }
    json_t *all = json_object_get(x.s, "allOf");
    if (all) {
        if (!json_is_array(all) || !json_array_size(all)) {
            fail(c, x.path, "allOf", "must be a non-empty array");
            return;
        }
        size_t i;
        json_t *e;
        json_array_foreach(all, i, e) flatten(c, mk(e, path_idx(c, x.path, "allOf", i)), out, unsat, depth + 1);
    }
    if (json_object_get(x.s, "dependencies") || json_object_get(x.s, "dependentRequired") ||
        json_object_get(x.s, "dependentSchemas")) {
        json_t *deps = deps_anyof(c, x);
        size_t i;
        json_t *e;
        json_array_foreach(deps, i, e) flatten(c, mk(e, path_join(c, x.path, "dependencies")), out, unsat, depth + 1);
    }
    json_t *n = json_object_get(x.s, "not");
    if (not_rewrites(n)) {
        json_t *r = not_rewrite(c, x, n);
        if (r) flatten(c, mk(r, path_join(c, x.path, "not")), out, unsat, depth + 1);
    }
    if (json_object_get(x.s, "if")) {
        json_t *r = if_rewrite(c, x);
        if (r) flatten(c, mk(r, path_join(c, x.path, "if")), out, unsat, depth + 1);
    }
    x.skip |= FLAT;
    conj_add(c, out, x);
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_FRAC = 64, T_ALL = 127 };
#define T_NUM (T_INT | T_FRAC)

static unsigned type_bit(const char *t) {
    static const struct {
        const char *n;
        unsigned b;
    } tt[] = {{"null", T_NULL},  {"boolean", T_BOOL}, {"object", T_OBJ}, {"array", T_ARR},
              {"string", T_STR}, {"integer", T_INT},  {"number", T_NUM}};
    for (size_t i = 0; i < sizeof tt / sizeof *tt; i++)
        if (!strcmp(t, tt[i].n)) return tt[i].b;
    return 0;
}

static bool is_integral(const json_t *v) {
    if (json_is_integer(v)) return true;
    if (!json_is_real(v)) return false;
    double d = json_real_value(v);
    return floor(d) == d && fabs(d) < 9e15;
}

static unsigned value_type(const json_t *v) {
    switch (json_typeof(v)) {
        case JSON_NULL: return T_NULL;
        case JSON_TRUE:
        case JSON_FALSE: return T_BOOL;
        case JSON_OBJECT: return T_OBJ;
        case JSON_ARRAY: return T_ARR;
        case JSON_STRING: return T_STR;
        case JSON_INTEGER: return T_INT;
        case JSON_REAL: return is_integral(v) ? T_INT : T_FRAC;
    }
    return 0;
}

/* JSON Schema equality: numbers by value, objects regardless of key order. */
static bool values_equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b)) return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!values_equal(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !values_equal(v, w)) return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

static bool nonneg_int(const json_t *v, long *out) {
    if (!json_is_number(v)) return false;
    double d = json_number_value(v);
    if (d < 0 || floor(d) != d) return false;
    *out = d > 1e9 ? 1000000000L : (long)d;
    return true;
}

/* The merged constraints of a conjunction. */
typedef struct node {
    unsigned types;
    json_t *enums; /* allowed values, or NULL for any */
    kn_dfa *str;   /* allowed strings (content), or NULL for any */
    long minlen, maxlen;
    kn_nbound lo, hi;
    int mult10;
    conj osrc;    /* objects with properties / patternProperties / additionalProperties */
    json_t *req;  /* required names (array of strings) */
    kn_dfa *keys; /* propertyNames, or NULL */
    long minprops, maxprops;
    conj asrc; /* objects with items / prefixItems / additionalItems */
    long minitems, maxitems;
    bool unique;
    const char *path, *unique_path;
} node;

static void node_free(node *n) {
    json_decref(n->enums);
    json_decref(n->req);
    kn_dfa_free(n->str);
    kn_dfa_free(n->keys);
    conj_free(&n->osrc);
    conj_free(&n->asrc);
}

/* *slot = *slot AND d (takes d). */
static void dfa_and_into(ctx *c, kn_dfa **slot, kn_dfa *d, const char *path, const char *kw) {
    if (!d) return;
    if (!*slot) {
        *slot = d;
        return;
    }
    kn_dfa *r = kn_dfa_and(*slot, d);
    kn_dfa_free(d);
    if (!r) {
        fail(c, path, kw, "the string constraints combine into more than %d automaton states", KN_DFA_MAX_STATES);
        return;
    }
    kn_dfa_free(*slot);
    *slot = r;
}

static kn_dfa *pattern_dfa(ctx *c, const char *pattern, const char *path, const char *kw) {
    char err[200];
    kn_dfa *d = kn_dfa_regex(pattern, err, sizeof err);
    if (!d) fail(c, path, kw, "unsupported regular expression \"%.100s\": %s", pattern, err);
    return d;
}

static kn_dfa *literals_dfa(ctx *c, json_t *strs) {
    size_t n = json_array_size(strs);
    const char **s = calloc(n + 1, sizeof *s);
    size_t *l = calloc(n + 1, sizeof *l);
    kn_dfa *d = NULL;
    if (s && l) {
        for (size_t i = 0; i < n; i++) {
            s[i] = json_string_value(json_array_get(strs, i));
            l[i] = json_string_length(json_array_get(strs, i));
        }
        d = kn_dfa_literals(s, l, (int)n);
    }
    free(s);
    free(l);
    if (!d) nomem(c);
    return d;
}

static void bound_lo(kn_nbound *b, double v, bool excl) {
    if (!b->set || v > b->v || (v == b->v && excl)) *b = (kn_nbound){true, excl, v};
}

static void bound_hi(kn_nbound *b, double v, bool excl) {
    if (!b->set || v < b->v || (v == b->v && excl)) *b = (kn_nbound){true, excl, v};
}

static void enum_and(ctx *c, node *n, json_t *vals) {
    if (!n->enums) {
        n->enums = json_copy(vals);
        if (!n->enums) nomem(c);
        return;
    }
    json_t *keep = json_array();
    size_t i, j;
    json_t *a, *b;
    json_array_foreach(n->enums, i, a) {
        json_array_foreach(vals, j, b) if (values_equal(a, b)) {
            json_array_append(keep, a);
            break;
        }
    }
    json_decref(n->enums);
    n->enums = keep;
}

/* `not`: the forms kiln enforces exactly: not {} / true / false, not {type}, not {enum | const}
 * (with an optional type), not {pattern} (with an optional type "string"). */
static void merge_not(ctx *c, node *n, json_t *v, const char *path) {
    if (json_is_false(v)) return;
    if (json_is_true(v)) {
        n->types = 0;
        return;
    }
    if (!json_is_object(v)) {
        fail(c, path, "not", "must be a schema");
        return;
    }
    json_t *type = NULL, *vals = NULL, *pattern = NULL;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (!strcmp(k, "type")) type = x;
        else if (!strcmp(k, "enum")) vals = x;
        else if (!strcmp(k, "const")) vals = x;
        else if (!strcmp(k, "pattern")) pattern = x;
        else if (in_list(k, passive_kw, sizeof passive_kw / sizeof *passive_kw) && strcmp(k, "$ref") &&
                 strcmp(k, "allOf") && strcmp(k, "anyOf") && strcmp(k, "oneOf") && strcmp(k, "nullable"))
            continue;
        else {
            fail(c, path, "not", "kiln enforces `not` only of type, enum, const or pattern (here: \"%.60s\")", k);
            return;
        }
    }
    unsigned tmask = T_ALL;
    if (type) {
        tmask = 0;
        if (json_is_string(type)) tmask = type_bit(json_string_value(type));
        else if (json_is_array(type)) {
            size_t i;
            json_t *t;
            json_array_foreach(type, i, t) tmask |= json_is_string(t) ? type_bit(json_string_value(t)) : 0;
        }
        if (!tmask) {
            fail(c, path_join(c, path, "not"), "type", "unknown type");
            return;
        }
    }
    if (!vals && !pattern) {
        /* not {type: T}: remove T; not {}: nothing is valid */
        if ((tmask & T_NUM) == T_INT && (n->types & T_FRAC)) {
            fail(c, path_join(c, path, "not"), "type", "\"not integer\" is not supported");
            return;
        }
        n->types &= ~tmask;
        return;
    }
    if (vals && pattern) {
        fail(c, path, "not", "kiln enforces `not` of enum or pattern, not both");
        return;
    }
    if (pattern) {
        if (!json_is_string(pattern)) {
            fail(c, path_join(c, path, "not"), "pattern", "must be a string");
            return;
        }
        /* strings that match are excluded, and so is everything of the types the inner schema
         * admits besides strings (a pattern does not apply to them) */
        n->types &= ~(tmask & ~(unsigned)T_STR);
        if (!(tmask & T_STR)) return;
        kn_dfa *d = pattern_dfa(c, json_string_value(pattern), path_join(c, path, "not"), "pattern");
        if (!d) return;
        kn_dfa *nd = kn_dfa_not(d);
        kn_dfa_free(d);
        if (!nd) {
            nomem(c);
            return;
        }
        dfa_and_into(c, &n->str, nd, path, "not");
        return;
    }
    json_t *list = json_is_array(vals) ? json_incref(vals) : json_pack("[O]", vals);
    json_t *strs = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        unsigned t = value_type(e);
        if (!(t & tmask)) continue;
        if (t == T_STR) json_array_append(strs, e);
        else if (t == T_NULL) n->types &= ~(unsigned)T_NULL;
        else {
            fail(c, path, "not", "kiln enforces `not` of enum values that are strings or null only");
            break;
        }
    }
    if (!c->failed && json_array_size(strs)) {
        kn_dfa *d = literals_dfa(c, strs);
        kn_dfa *nd = d ? kn_dfa_not(d) : NULL;
        kn_dfa_free(d);
        if (!nd) nomem(c);
        else dfa_and_into(c, &n->str, nd, path, "not");
    }
    json_decref(strs);
    json_decref(list);
}

static void merge_format(ctx *c, node *n, json_t *v, const char *path) {
    if (!json_is_string(v)) {
        fail(c, path, "format", "must be a string");
        return;
    }
    const char *re;
    kn_fmt_kind k = kn_format_regex(json_string_value(v), &re);
    if (k == KN_FMT_UNKNOWN) return;
    if (k == KN_FMT_IGNORED) {
        approx(c, path, "format", "this format is not checked");
        return;
    }
    if (k == KN_FMT_APPROX) approx(c, path, "format", "the format's usual shape is enforced, not its full grammar");
    dfa_and_into(c, &n->str, pattern_dfa(c, re, path, "format"), path, "format");
}

/* propertyNames: a schema of strings kiln can turn into an automaton. */
static void merge_propnames(ctx *c, node *n, json_t *v, const char *path) {
    if (json_is_true(v)) return;
    node k = {.types = T_ALL, .maxlen = -1};
    bool ok = json_is_object(v) || json_is_false(v);
    if (json_is_false(v)) {
        /* no property at all */
        kn_dfa *d = kn_dfa_literals(NULL, NULL, 0);
        dfa_and_into(c, &n->keys, d, path, "propertyNames");
        return;
    }
    const char *kw;
    json_t *x;
    if (ok) json_object_foreach(v, kw, x) {
            if (!strcmp(kw, "pattern") && json_is_string(x))
                dfa_and_into(c, &k.str, pattern_dfa(c, json_string_value(x), path_join(c, path, "propertyNames"), kw),
                             path, "propertyNames");
            else if (!strcmp(kw, "format")) merge_format(c, &k, x, path_join(c, path, "propertyNames"));
            else if (!strcmp(kw, "minLength")) ok = nonneg_int(x, &k.minlen);
            else if (!strcmp(kw, "maxLength")) ok = nonneg_int(x, &k.maxlen);
            else if (!strcmp(kw, "type")) ok = json_is_string(x) && !strcmp(json_string_value(x), "string");
            else if (in_list(kw, passive_kw, 25)) continue;
            else ok = false;
            if (!ok) break;
        }
    if (!ok) {
        kn_dfa_free(k.str);
        fail(c, path, "propertyNames", "kiln enforces propertyNames of pattern, format, minLength and maxLength only");
        return;
    }
    kn_dfa *d = k.str;
    if (k.minlen > 0 || k.maxlen >= 0) {
        kn_dfa *l = kn_dfa_length(k.minlen, k.maxlen);
        if (!l) {
            kn_dfa_free(d);
            fail(c, path, "propertyNames", "length bounds too large");
            return;
        }
        if (d) dfa_and_into(c, &d, l, path, "propertyNames");
        else d = l;
    }
    if (d) dfa_and_into(c, &n->keys, d, path, "propertyNames");
}

/* Merges the keywords of schema object x into n. */
static void merge(ctx *c, node *n, sref x) {
    json_t *s = x.s;
    const char *p = x.path;
    const char *k;
    json_t *v;
    json_t *nullable = json_object_get(s, "nullable");
    bool has_obj = false, has_arr = false;
    json_object_foreach(s, k, v) {
        if (c->failed) return;
        if (!strcmp(k, "type")) {
            unsigned m = 0;
            if (json_is_string(v)) m = type_bit(json_string_value(v));
            else if (json_is_array(v)) {
                size_t i;
                json_t *t;
                json_array_foreach(v, i, t) {
                    unsigned b = json_is_string(t) ? type_bit(json_string_value(t)) : 0;
                    if (!b) break;
                    m |= b;
                }
                if (!json_array_size(v)) m = 0;
            }
            if (!m) {
                fail(c, p, k, "unknown type");
                return;
            }
            if (json_is_true(nullable)) m |= T_NULL;
            n->types &= m;
        } else if (!strcmp(k, "enum") || !strcmp(k, "const")) {
            if (!strcmp(k, "enum") && !json_is_array(v)) {
                fail(c, p, k, "must be an array");
                return;
            }
            json_t *vals = !strcmp(k, "enum") ? json_incref(v) : json_pack("[O]", v);
            enum_and(c, n, vals);
            json_decref(vals);
        } else if (!strcmp(k, "minLength") || !strcmp(k, "maxLength")) {
            long l;
            if (!nonneg_int(v, &l)) {
                fail(c, p, k, "must be a non-negative integer");
                return;
            }
            if (k[1] == 'i') n->minlen = l > n->minlen ? l : n->minlen;
            else n->maxlen = (n->maxlen < 0 || l < n->maxlen) ? l : n->maxlen;
        } else if (!strcmp(k, "pattern")) {
            if (!json_is_string(v)) {
                fail(c, p, k, "must be a string");
                return;
            }
            dfa_and_into(c, &n->str, pattern_dfa(c, json_string_value(v), p, k), p, k);
        } else if (!strcmp(k, "format")) {
            merge_format(c, n, v, p);
        } else if (!strcmp(k, "minimum") || !strcmp(k, "maximum")) {
            if (!json_is_number(v)) {
                fail(c, p, k, "must be a number");
                return;
            }
            const char *ex = k[1] == 'i' ? "exclusiveMinimum" : "exclusiveMaximum";
            bool excl = json_is_true(json_object_get(s, ex)); /* draft 4 */
            if (k[1] == 'i') bound_lo(&n->lo, json_number_value(v), excl);
            else bound_hi(&n->hi, json_number_value(v), excl);
        } else if (!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum")) {
            if (json_is_boolean(v)) continue; /* draft 4: read with minimum / maximum */
            if (!json_is_number(v)) {
                fail(c, p, k, "must be a number");
                return;
            }
            if (!strcmp(k, "exclusiveMinimum")) bound_lo(&n->lo, json_number_value(v), true);
            else bound_hi(&n->hi, json_number_value(v), true);
        } else if (!strcmp(k, "multipleOf")) {
            double m = json_number_value(v);
            if (!json_is_number(v) || !(m > 0)) {
                fail(c, p, k, "must be a positive number");
                return;
            }
            int dig = -1;
            for (int e = 0; e <= 12 && dig < 0; e++)
                if (fabs(m * pow(10, e) - 1) < 1e-9) dig = e;
            if (dig == 0) n->types &= ~(unsigned)T_FRAC;
            else if (dig > 0) n->mult10 = (n->mult10 < 0 || dig < n->mult10) ? dig : n->mult10;
            else if (n->types & T_NUM) {
                fail(c, p, k, "kiln enforces multipleOf 1 and powers of ten below it (0.1, 0.01, ...) only");
                return;
            }
        } else if (!strcmp(k, "items") || !strcmp(k, "prefixItems") || !strcmp(k, "additionalItems")) {
            has_arr = true;
        } else if (!strcmp(k, "minItems") || !strcmp(k, "maxItems")) {
            long l;
            if (!nonneg_int(v, &l)) {
                fail(c, p, k, "must be a non-negative integer");
                return;
            }
            if (k[1] == 'i') n->minitems = l > n->minitems ? l : n->minitems;
            else n->maxitems = (n->maxitems < 0 || l < n->maxitems) ? l : n->maxitems;
        } else if (!strcmp(k, "uniqueItems")) {
            if (json_is_true(v)) n->unique = true, n->unique_path = p;
        } else if (!strcmp(k, "properties") || !strcmp(k, "patternProperties") || !strcmp(k, "additionalProperties")) {
            if (!strcmp(k, "additionalProperties") ? !(json_is_object(v) || json_is_boolean(v)) : !json_is_object(v)) {
                fail(c, p, k, "must be %s", k[0] == 'a' ? "a schema" : "an object");
                return;
            }
            has_obj = true;
        } else if (!strcmp(k, "required")) {
            if (!json_is_array(v)) {
                fail(c, p, k, "must be an array of names");
                return;
            }
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                if (!json_is_string(e)) {
                    fail(c, p, k, "must be an array of names");
                    return;
                }
                bool have = false;
                for (size_t j = 0; j < json_array_size(n->req) && !have; j++)
                    have = json_equal(json_array_get(n->req, j), e);
                if (!have) json_array_append(n->req, e);
            }
        } else if (!strcmp(k, "propertyNames")) {
            merge_propnames(c, n, v, p);
        } else if (!strcmp(k, "minProperties") || !strcmp(k, "maxProperties")) {
            long l;
            if (!nonneg_int(v, &l)) {
                fail(c, p, k, "must be a non-negative integer");
                return;
            }
            if (k[1] == 'i') n->minprops = l > n->minprops ? l : n->minprops;
            else n->maxprops = (n->maxprops < 0 || l < n->maxprops) ? l : n->maxprops;
            if (!n->path) n->path = p;
        } else if (!strcmp(k, "not")) {
            if (!not_rewrites(v)) merge_not(c, n, v, p);
        } else if (in_list(k, refused_kw, sizeof refused_kw / sizeof *refused_kw)) {
            fail(c, p, k, "this keyword is not supported");
            return;
        }
        /* anything else: an annotation, or not a JSON Schema keyword: ignored */
    }
    if (has_obj) conj_add(c, &n->osrc, x);
    if (has_arr) conj_add(c, &n->asrc, x);
}

/* ---- writing values -------------------------------------------------------------------------- */

static const char *compile(ctx *c, conj *in, const char *hint, int depth);

static const char *use(ctx *c, unsigned what) {
    c->used |= what;
    if (what == U_VALUE) c->used |= U_STRING | U_NUMBER;
    switch (what) {
        case U_VALUE: return "value";
        case U_STRING: return "string";
        case U_NUMBER: return "number";
        case U_NEVER: return "never";
        default: return "char";
    }
}

/* The GBNF of one JSON value as written in the schema (enum, const): scalars in canonical text,
 * arrays and objects with whitespace between their tokens. */
static void value_text(ctx *c, kn_sbuf *b, const json_t *v) {
    if (json_is_array(v)) {
        kn_sbuf_puts(b, "\"[\" ws");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) kn_sbuf_puts(b, " \",\" ws");
            kn_sbuf_puts(b, " ");
            value_text(c, b, json_array_get(v, i));
            kn_sbuf_puts(b, " ws");
        }
        kn_sbuf_puts(b, " \"]\"");
        return;
    }
    if (json_is_object(v)) {
        kn_sbuf_puts(b, "\"{\" ws");
        const char *k;
        json_t *x;
        int i = 0;
        json_object_foreach((json_t *)v, k, x) {
            if (i++) kn_sbuf_puts(b, " \",\" ws");
            json_t *ks = json_string(k);
            kn_sbuf_puts(b, " ");
            value_text(c, b, ks);
            json_decref(ks);
            kn_sbuf_puts(b, " ws \":\" ws ");
            value_text(c, b, x);
            kn_sbuf_puts(b, " ws");
        }
        kn_sbuf_puts(b, " \"}\"");
        return;
    }
    char *t = json_dumps(v, JSON_ENCODE_ANY);
    if (!t) {
        nomem(c);
        return;
    }
    if (json_is_real(v) && is_integral(v)) {
        /* 5.0 is the integer 5 too */
        kn_sbuf_printf(b, "(\"%.0f\" | \"", json_real_value(v));
        kn_sbuf_gbnf_lit(b, t, strlen(t));
        kn_sbuf_puts(b, "\")");
    } else {
        kn_sbuf_puts(b, "\"");
        kn_sbuf_gbnf_lit(b, t, strlen(t));
        kn_sbuf_puts(b, "\"");
    }
    free(t);
}

/* Whether v (of a type n admits) meets n's scalar constraints; arrays and objects pass (their
 * shape constraints next to an enum are an approximation, flagged by the caller). */
static bool value_ok(const node *n, const json_t *v) {
    unsigned t = value_type(v);
    if (!(t & n->types)) return false;
    if (t == T_STR) {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v), cps = 0;
        for (size_t i = 0; i < len; i++) cps += ((unsigned char)s[i] & 0xC0) != 0x80;
        if ((long)cps < n->minlen || (n->maxlen >= 0 && (long)cps > n->maxlen)) return false;
        if (n->str && !kn_dfa_match(n->str, s, len)) return false;
    }
    if (t & T_NUM) {
        double d = json_number_value(v);
        if (n->lo.set && (d < n->lo.v || (d == n->lo.v && n->lo.excl))) return false;
        if (n->hi.set && (d > n->hi.v || (d == n->hi.v && n->hi.excl))) return false;
    }
    return true;
}

static const char *emit_enum(ctx *c, node *n, const char *hint) {
    kn_sbuf b;
    kn_sbuf_init(&b, KN_SCHEMA_MAX_GBNF);
    size_t i;
    json_t *v;
    int alts = 0;
    json_array_foreach(n->enums, i, v) {
        if (!value_ok(n, v)) continue;
        if ((json_is_object(v) && n->osrc.n) || (json_is_array(v) && n->asrc.n))
            approx(c, n->path ? n->path : "", "enum",
                   "enum values that are objects or arrays are not checked against "
                   "the schema's other keywords");
        if (alts++) kn_sbuf_puts(&b, " | ");
        value_text(c, &b, v);
    }
    const char *name = NULL;
    if (alts && !b.over && !b.nomem) {
        name = kn_gout_name(&c->g, hint);
        if (name) kn_gout_rule(&c->g, name, b.p);
    }
    if (b.over || b.nomem) nomem(c);
    kn_sbuf_free(&b);
    return name;
}

/* The string alternative of n into b; false if no string is allowed. */
static bool emit_string(ctx *c, node *n, kn_sbuf *b, const char *hint) {
    long lo = n->minlen, hi = n->maxlen;
    if (hi >= 0 && lo > hi) return false;
    if (lo > KN_GBNF_MAX_REPEAT) {
        fail(c, n->path ? n->path : "", "minLength", "kiln enforces minLength up to %d", KN_GBNF_MAX_REPEAT);
        return false;
    }
    if (hi > KN_GBNF_MAX_REPEAT) {
        approx(c, n->path ? n->path : "", "maxLength", "a maxLength above 10000 is not enforced");
        hi = -1;
    }
    if (!n->str) {
        if (lo == 0 && hi < 0) {
            kn_sbuf_puts(b, use(c, U_STRING));
        } else {
            use(c, U_CHAR);
            if (hi < 0) kn_sbuf_printf(b, "\"\\\"\" char{%ld,} \"\\\"\"", lo);
            else kn_sbuf_printf(b, "\"\\\"\" char{%ld,%ld} \"\\\"\"", lo, hi);
        }
        return true;
    }
    kn_dfa *d = n->str;
    kn_dfa *own = NULL;
    if (lo > 0 || hi >= 0) {
        kn_dfa *l = kn_dfa_length(lo, hi);
        if (!l) {
            fail(c, n->path ? n->path : "", "maxLength", "length bounds too large next to a pattern or format");
            return false;
        }
        own = kn_dfa_and(d, l);
        kn_dfa_free(l);
        if (!own)
            approx(c, n->path ? n->path : "", "maxLength",
                   "a length next to a pattern or format whose combination is too large is not enforced");
        if (own) d = own;
    }
    bool ok = !kn_dfa_is_empty(d);
    if (ok) {
        if (kn_dfa_is_all(d)) kn_sbuf_puts(b, use(c, U_STRING));
        else {
            const char *nm = kn_dfa_emit_string(&c->g, d, hint);
            if (!nm) nomem(c);
            else kn_sbuf_puts(b, nm);
        }
    }
    kn_dfa_free(own);
    return ok;
}

/* The conjunction of the values of property `name` under object sources osrc (additionalProperties
 * and patternProperties of each source where its properties do not name it). */
static void prop_conj(ctx *c, const node *n, const char *name, conj *out, bool *unsat) {
    for (int j = 0; j < n->osrc.n; j++) {
        sref o = n->osrc.v[j];
        json_t *props = json_object_get(o.s, "properties");
        json_t *ps = props ? json_object_get(props, name) : NULL;
        if (ps) {
            conj_add(c, out, mk(ps, path_join(c, path_join(c, o.path, "properties"), name)));
            continue;
        }
        bool matched = false;
        json_t *pp = json_object_get(o.s, "patternProperties");
        const char *pk;
        json_t *pv;
        if (pp) json_object_foreach(pp, pk, pv) {
                kn_dfa *d = NULL;
                for (int i = 0; i < c->npc; i++)
                    if (c->pc[i].obj == pp && c->pc[i].key == pk) d = c->pc[i].dfa;
                if (!d) continue; /* compiled by the caller beforehand */
                if (kn_dfa_match(d, name, strlen(name))) {
                    matched = true;
                    conj_add(c, out, mk(pv, path_join(c, path_join(c, o.path, "patternProperties"), pk)));
                }
            }
        if (matched) continue;
        json_t *ap = json_object_get(o.s, "additionalProperties");
        if (ap) conj_add(c, out, mk(ap, path_join(c, o.path, "additionalProperties")));
        else if (c->strict) *unsat = true;
    }
}

static kn_dfa *pat_get(ctx *c, json_t *pp, const char *key, const char *path) {
    for (int i = 0; i < c->npc; i++)
        if (c->pc[i].obj == pp && c->pc[i].key == key) return c->pc[i].dfa;
    kn_dfa *d = pattern_dfa(c, key, path, "patternProperties");
    if (!d) return NULL;
    if (c->npc == c->cappc) {
        int nc = c->cappc ? c->cappc * 2 : 16;
        patcache *np = realloc(c->pc, (size_t)nc * sizeof *np);
        if (!np) {
            kn_dfa_free(d);
            nomem(c);
            return NULL;
        }
        c->pc = np;
        c->cappc = nc;
    }
    c->pc[c->npc++] = (patcache){pp, key, d};
    return d;
}

/* The rule of the names of additional properties: the automaton rest, shared between objects
 * with the same declared names and no other key constraint (big schemas repeat them). */
static const char *key_rule(ctx *c, const kn_dfa *rest, json_t *names, const node *n) {
    bool plain = !n->keys;
    for (int j = 0; j < n->osrc.n && plain; j++) plain = !json_object_get(n->osrc.v[j].s, "patternProperties");
    char *sig = NULL;
    if (plain) {
        json_t *sorted = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(names, i, e) {
            size_t at = 0;
            while (at < json_array_size(sorted) &&
                   strcmp(json_string_value(json_array_get(sorted, at)), json_string_value(e)) < 0)
                at++;
            json_array_insert(sorted, at, e);
        }
        sig = json_dumps(sorted, JSON_COMPACT);
        json_decref(sorted);
        for (int k = 0; sig && k < c->nkeys; k++)
            if (!strcmp(c->keys[k].sig, sig)) {
                free(sig);
                return c->keys[k].name;
            }
    }
    const char *name = kn_dfa_emit_string(&c->g, rest, "k");
    if (!name) nomem(c);
    if (sig && name && c->nkeys < (int)(sizeof c->keys / sizeof *c->keys)) {
        c->keys[c->nkeys++] = (keycache){sig, name};
        sig = NULL;
    }
    free(sig);
    return name;
}

typedef struct kv {
    const char *key; /* property name (declared) or NULL */
    const char *keyrule, *val;
    bool req;
} kv;

/* The object alternative of n into b; false if no object is allowed. Declared properties in
 * schema order (required ones mandatory, optional ones optional), then additional ones. */
static bool emit_object(ctx *c, node *n, kn_sbuf *b, const char *hint, int depth) {
    /* compile the patterns first (prop_conj looks them up) */
    for (int j = 0; j < n->osrc.n; j++) {
        json_t *pp = json_object_get(n->osrc.v[j].s, "patternProperties");
        const char *pk;
        json_t *pv;
        if (pp) json_object_foreach(pp, pk, pv) pat_get(c, pp, pk, n->osrc.v[j].path);
    }
    if (c->failed) return false;
    /* declared names: properties of each source in order, then required names */
    json_t *names = json_array();
    for (int j = 0; j < n->osrc.n; j++) {
        json_t *props = json_object_get(n->osrc.v[j].s, "properties");
        const char *pk;
        json_t *pv;
        if (props) json_object_foreach(props, pk, pv) {
                bool have = false;
                for (size_t i = 0; i < json_array_size(names) && !have; i++)
                    have = !strcmp(json_string_value(json_array_get(names, i)), pk);
                if (!have) json_array_append_new(names, json_string(pk));
            }
    }
    for (size_t r = 0; r < json_array_size(n->req); r++) {
        const char *rn = json_string_value(json_array_get(n->req, r));
        bool have = false;
        for (size_t i = 0; i < json_array_size(names) && !have; i++)
            have = !strcmp(json_string_value(json_array_get(names, i)), rn);
        if (!have) json_array_append_new(names, json_string(rn));
    }
    size_t nn = json_array_size(names);
    kv *props = calloc(nn + 1, sizeof *props);
    kv *adds = NULL;
    int nprops = 0, nadds = 0, nreq = 0;
    bool ok = props != NULL;
    if (!ok) nomem(c);
    for (size_t i = 0; ok && i < nn && !c->failed; i++) {
        const char *name = json_string_value(json_array_get(names, i));
        bool req = false;
        for (size_t r = 0; r < json_array_size(n->req) && !req; r++)
            req = !strcmp(json_string_value(json_array_get(n->req, r)), name);
        if (n->keys && !kn_dfa_match(n->keys, name, strlen(name))) {
            if (req) ok = false;
            continue;
        }
        conj k = {0};
        bool unsat = false;
        prop_conj(c, n, name, &k, &unsat);
        const char *val = unsat ? NULL : (k.n ? compile(c, &k, name, depth + 1) : use(c, U_VALUE));
        conj_free(&k);
        if (!val) {
            if (req) ok = false;
            continue;
        }
        props[nprops++] = (kv){name, NULL, val, req};
        nreq += req;
    }
    /* additional properties: per pattern, and the keys no pattern matches */
    kn_dfa *base = NULL;
    if (ok && !c->failed) {
        kn_dfa *lit = literals_dfa(c, names);
        base = lit ? kn_dfa_not(lit) : NULL;
        kn_dfa_free(lit);
        if (base && n->keys) dfa_and_into(c, &base, kn_dfa_and(n->keys, base), n->path ? n->path : "", "propertyNames");
        if (!base) nomem(c);
    }
    int npat = 0;
    for (int j = 0; j < n->osrc.n; j++) {
        json_t *pp = json_object_get(n->osrc.v[j].s, "patternProperties");
        npat += pp ? (int)json_object_size(pp) : 0;
    }
    adds = calloc((size_t)npat + 2, sizeof *adds);
    if (!adds) ok = false, nomem(c);
    kn_dfa *rest = NULL; /* keys no pattern matches */
    if (ok && base && !c->failed) {
        rest = kn_dfa_and(base, base);
        for (int j = 0; j < n->osrc.n && rest && !c->failed; j++) {
            json_t *pp = json_object_get(n->osrc.v[j].s, "patternProperties");
            const char *pk;
            json_t *pv;
            if (!pp) continue;
            json_object_foreach(pp, pk, pv) {
                kn_dfa *pd = pat_get(c, pp, pk, n->osrc.v[j].path);
                if (!pd) break;
                kn_dfa *kd = kn_dfa_and(base, pd);
                kn_dfa *np = kn_dfa_not(pd);
                kn_dfa *nr = np ? kn_dfa_and(rest, np) : NULL;
                kn_dfa_free(np);
                kn_dfa_free(rest);
                rest = nr;
                if (!kd || !rest) {
                    kn_dfa_free(kd);
                    fail(c, n->osrc.v[j].path, "patternProperties", "the property name patterns are too complex");
                    break;
                }
                if (kn_dfa_is_empty(kd)) {
                    kn_dfa_free(kd);
                    continue;
                }
                if (npat > 1 || n->osrc.n > 1)
                    approx(c, n->osrc.v[j].path, "patternProperties",
                           "a name matching several patterns is checked against one of their schemas");
                conj k = {0};
                conj_add(c, &k, mk(pv, path_join(c, path_join(c, n->osrc.v[j].path, "patternProperties"), pk)));
                const char *val = compile(c, &k, "pattern-value", depth + 1);
                conj_free(&k);
                if (val) {
                    const char *kr = kn_dfa_emit_string(&c->g, kd, "pkey");
                    if (!kr) nomem(c);
                    adds[nadds++] = (kv){NULL, kr, val, false};
                }
                kn_dfa_free(kd);
            }
        }
        if (!rest && !c->failed) nomem(c);
    }
    if (ok && rest && !c->failed && !kn_dfa_is_empty(rest)) {
        conj k = {0};
        bool unsat = false;
        for (int j = 0; j < n->osrc.n; j++) {
            json_t *ap = json_object_get(n->osrc.v[j].s, "additionalProperties");
            if (ap) conj_add(c, &k, mk(ap, path_join(c, n->osrc.v[j].path, "additionalProperties")));
            else if (c->strict) unsat = true;
        }
        if (!n->osrc.n && c->strict) unsat = true;
        const char *val = unsat ? NULL : (k.n ? compile(c, &k, "additional-value", depth + 1) : use(c, U_VALUE));
        conj_free(&k);
        if (val) {
            const char *kr = kn_dfa_is_all(rest) || (c->cheap_keys && !n->keys && npat == 0)
                                 ? use(c, U_STRING)
                                 : key_rule(c, rest, names, n);
            if (c->cheap_keys && !kn_dfa_is_all(rest) && !n->keys && npat == 0)
                approx(c, n->path ? n->path : "", "additionalProperties",
                       "in a schema this large, an additional property may repeat a declared name");
            if (!kr) nomem(c);
            adds[nadds++] = (kv){NULL, kr, val, false};
        }
    }
    kn_dfa_free(rest);
    kn_dfa_free(base);
    /* property counts: only the bounds the shape already meets, or "at least one" */
    if (ok && !c->failed) {
        long most = nadds ? -1 : nprops;
        if (n->maxprops >= 0 && (most < 0 || most > n->maxprops) && n->maxprops < nreq) ok = false;
        else if (n->maxprops >= 0 && (most < 0 || most > n->maxprops))
            fail(c, n->path ? n->path : "", "maxProperties",
                 "kiln enforces maxProperties only when the schema cannot exceed it");
        if (n->minprops > nreq && !(n->minprops == 1))
            fail(c, n->path ? n->path : "", "minProperties",
                 "kiln enforces minProperties only up to the number of required properties, or 1");
    }
    bool need_one = ok && n->minprops >= 1 && nreq == 0;
    if (ok && !c->failed) {
        /* kv text of each property */
        char **kvt = calloc((size_t)nprops + 1, sizeof *kvt);
        kn_sbuf t;
        kn_sbuf_init(&t, KN_SCHEMA_MAX_GBNF);
        for (int i = 0; kvt && i < nprops; i++) {
            t.len = 0;
            json_t *ks = json_string(props[i].key);
            value_text(c, &t, ks);
            json_decref(ks);
            kn_sbuf_printf(&t, " ws \":\" ws %s ws", props[i].val);
            kvt[i] = t.p ? strdup(t.p) : NULL;
            if (!kvt[i]) nomem(c);
        }
        const char *addkv = NULL;
        if (nadds && kvt) {
            t.len = 0;
            for (int i = 0; i < nadds; i++)
                kn_sbuf_printf(&t, "%s%s ws \":\" ws %s ws", i ? " | " : "", adds[i].keyrule, adds[i].val);
            addkv = kn_gout_name(&c->g, "additional-kv");
            if (addkv) kn_gout_rule(&c->g, addkv, t.p);
        }
        /* C_i: after something was written, properties i.. then the additional ones */
        const char **cn = calloc((size_t)nprops + 2, sizeof *cn);
        const char **tn = calloc((size_t)nprops + 2, sizeof *tn);
        char hbuf[96];
        if (!cn || !tn || !kvt) nomem(c);
        for (int i = nprops; cn && tn && kvt && i >= 0 && !c->failed; i--) {
            t.len = 0;
            if (i == nprops) {
                if (addkv) kn_sbuf_printf(&t, "( \",\" ws %s )*", addkv);
            } else {
                if (props[i].req) kn_sbuf_printf(&t, "\",\" ws %s", kvt[i]);
                else kn_sbuf_printf(&t, "( \",\" ws %s )?", kvt[i]);
                if (cn[i + 1]) kn_sbuf_printf(&t, " %s", cn[i + 1]);
            }
            if (t.len) {
                snprintf(hbuf, sizeof hbuf, "%s-rest", hint);
                cn[i] = kn_gout_name(&c->g, hbuf);
                if (cn[i]) kn_gout_rule(&c->g, cn[i], t.p);
            }
            /* T_i: nothing written yet */
            t.len = 0;
            bool may_be_empty;
            if (i == nprops) {
                if (addkv) kn_sbuf_printf(&t, "%s%s%s", addkv, cn[i] ? " " : "", cn[i] ? cn[i] : "");
                may_be_empty = true;
            } else {
                kn_sbuf_printf(&t, "%s%s%s", kvt[i], cn[i + 1] ? " " : "", cn[i + 1] ? cn[i + 1] : "");
                may_be_empty = false;
                if (!props[i].req) {
                    if (tn[i + 1]) kn_sbuf_printf(&t, " | %s", tn[i + 1]);
                    else if (i + 1 <= nprops) may_be_empty = true;
                }
            }
            (void)may_be_empty;
            if (t.len) {
                snprintf(hbuf, sizeof hbuf, "%s-props", hint);
                tn[i] = kn_gout_name(&c->g, hbuf);
                if (tn[i]) kn_gout_rule(&c->g, tn[i], t.p);
            }
        }
        /* T_i may be empty exactly when every property from i on is optional */
        if (tn && !c->failed) {
            bool empty_ok = true;
            for (int i = 0; i < nprops; i++) empty_ok &= !props[i].req;
            if (!tn[0]) kn_sbuf_puts(b, "\"{\" ws \"}\"");
            else if (empty_ok && !need_one) kn_sbuf_printf(b, "\"{\" ws ( %s )? \"}\"", tn[0]);
            else kn_sbuf_printf(b, "\"{\" ws %s \"}\"", tn[0]);
            if (!tn[0] && need_one) ok = false;
        }
        for (int i = 0; kvt && i < nprops; i++) free(kvt[i]);
        free(kvt);
        free(cn);
        free(tn);
        kn_sbuf_free(&t);
    }
    free(props);
    free(adds);
    json_decref(names);
    return ok && !c->failed;
}

/* The conjunction for array position i (tail: a position past every prefix) under the array
 * sources; *unsat when some source forbids it. */
static void item_conj(ctx *c, const node *n, size_t i, bool tail, conj *out, bool *unsat) {
    for (int j = 0; j < n->asrc.n; j++) {
        sref a = n->asrc.v[j];
        json_t *prefix = json_object_get(a.s, "prefixItems"), *items = json_object_get(a.s, "items");
        json_t *more = NULL; /* what applies past the prefix */
        const char *more_kw = "items";
        if (json_is_array(items)) { /* draft 4-2019: items as an array, additionalItems after it */
            prefix = items;
            more = json_object_get(a.s, "additionalItems");
            more_kw = "additionalItems";
        } else {
            more = items;
        }
        if (prefix && !json_is_array(prefix)) {
            fail(c, a.path, "prefixItems", "must be an array");
            return;
        }
        if (!tail && prefix && i < json_array_size(prefix)) {
            conj_add(
                c, out,
                mk(json_array_get(prefix, i), path_idx(c, a.path, json_is_array(items) ? "items" : "prefixItems", i)));
            continue;
        }
        if (more) {
            if (json_is_false(more)) *unsat = true;
            else conj_add(c, out, mk(more, path_join(c, a.path, more_kw)));
        }
    }
}

static bool emit_array(ctx *c, node *n, kn_sbuf *b, int depth) {
    long lo = n->minitems, hi = n->maxitems;
    if (lo > KN_GBNF_MAX_REPEAT) {
        fail(c, n->path ? n->path : "", "minItems", "kiln enforces minItems up to %d", KN_GBNF_MAX_REPEAT);
        return false;
    }
    if (hi > KN_GBNF_MAX_REPEAT) {
        approx(c, n->path ? n->path : "", "maxItems", "a maxItems above 10000 is not enforced");
        hi = -1;
    }
    size_t np = 0;
    for (int j = 0; j < n->asrc.n; j++) {
        json_t *items = json_object_get(n->asrc.v[j].s, "items");
        json_t *prefix = json_is_array(items) ? items : json_object_get(n->asrc.v[j].s, "prefixItems");
        if (json_array_size(prefix) > np) np = json_array_size(prefix);
    }
    if (np > 10000) {
        fail(c, n->asrc.v[0].path, "prefixItems", "too many positions");
        return false;
    }
    const char **pos = calloc(np + 1, sizeof *pos);
    if (!pos) {
        nomem(c);
        return false;
    }
    /* positions of the prefix, then the tail */
    for (size_t i = 0; i < np && !c->failed; i++) {
        if (hi >= 0 && (long)i >= hi) break;
        conj k = {0};
        bool unsat = false;
        item_conj(c, n, i, false, &k, &unsat);
        pos[i] = unsat ? NULL : (k.n ? compile(c, &k, "item", depth + 1) : use(c, U_VALUE));
        conj_free(&k);
        if (!pos[i] && (hi < 0 || hi > (long)i)) hi = (long)i;
    }
    const char *tail = NULL;
    if ((hi < 0 || hi > (long)np) && !c->failed) {
        conj k = {0};
        bool unsat = false;
        item_conj(c, n, np, true, &k, &unsat);
        tail = unsat ? NULL : (k.n ? compile(c, &k, "item", depth + 1) : use(c, U_VALUE));
        conj_free(&k);
        if (!tail) hi = (long)np;
    }
    if (n->unique && (hi < 0 || hi > 1)) approx(c, n->unique_path, "uniqueItems", "repeated items are not prevented");
    bool ok = !c->failed && !(hi >= 0 && lo > hi);
    if (ok) {
        kn_sbuf_puts(b, "\"[\" ws");
        if (hi == 0) {
            kn_sbuf_puts(b, " \"]\"");
        } else {
            int open = 0;
            size_t i = 0;
            for (; i < np && (hi < 0 || (long)i < hi); i++) {
                const char *sep = i ? "\",\" ws " : "";
                if ((long)i < lo) kn_sbuf_printf(b, " %s%s ws", sep, pos[i]);
                else kn_sbuf_printf(b, " ( %s%s ws", sep, pos[i]), open++;
            }
            if (tail && (hi < 0 || hi > (long)np)) {
                long tmin = lo > (long)np ? lo - (long)np : 0, tmax = hi < 0 ? -1 : hi - (long)np;
                char rep[48];
                if (np == 0) {
                    /* the first item, then repetitions with a comma */
                    long rmin = tmin > 0 ? tmin - 1 : 0, rmax = tmax < 0 ? -1 : tmax - 1;
                    if (rmax < 0) snprintf(rep, sizeof rep, rmin ? "{%ld,}" : "*", rmin);
                    else snprintf(rep, sizeof rep, "{%ld,%ld}", rmin, rmax);
                    if (tmin == 0) kn_sbuf_puts(b, " (");
                    kn_sbuf_printf(b, " %s ws", tail);
                    if (rmax != 0) kn_sbuf_printf(b, " ( \",\" ws %s ws )%s", tail, rep);
                    if (tmin == 0) kn_sbuf_puts(b, " )?");
                } else {
                    if (tmax < 0) snprintf(rep, sizeof rep, tmin ? "{%ld,}" : "*", tmin);
                    else snprintf(rep, sizeof rep, "{%ld,%ld}", tmin, tmax);
                    kn_sbuf_printf(b, " ( \",\" ws %s ws )%s", tail, rep);
                }
            }
            for (int k = 0; k < open; k++) kn_sbuf_puts(b, " )?");
            kn_sbuf_puts(b, " \"]\"");
        }
    }
    free(pos);
    return ok;
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

/* The rule of the values valid under every schema of in; NULL when none is (or on failure). */
static const char *compile(ctx *c, conj *in, const char *hint, int depth) {
    if (c->failed) return NULL;
    if (depth > 400 || ++c->calls > MAX_COMPILES) {
        fail(c, in->n ? in->v[0].path : "", NULL, "the schema is too complex (more than %d sub-schemas to combine)",
             MAX_COMPILES);
        return NULL;
    }
    conj f = {0};
    bool unsat = false;
    for (int i = 0; i < in->n && !c->failed; i++) flatten(c, in->v[i], &f, &unsat, 0);
    if (c->failed || unsat) {
        conj_free(&f);
        return NULL;
    }
    if (!f.n) {
        conj_free(&f);
        return use(c, U_VALUE);
    }
    uintptr_t *key = malloc((size_t)f.n * 2 * sizeof *key);
    if (!key) {
        conj_free(&f);
        nomem(c);
        return NULL;
    }
    for (int i = 0; i < f.n; i++) key[2 * i] = (uintptr_t)f.v[i].s, key[2 * i + 1] = f.v[i].skip;
    qsort(key, (size_t)f.n, 2 * sizeof *key, cmp_uptr);
    memo *hit = memo_find(c, key, f.n);
    if (hit) {
        free(key);
        conj_free(&f);
        return hit->name ? hit->name : use(c, U_NEVER);
    }
    if (c->nm == c->capm) {
        int nc = c->capm ? c->capm * 2 : 64;
        memo *nm = realloc(c->m, (size_t)nc * sizeof *nm);
        if (!nm) {
            free(key);
            conj_free(&f);
            nomem(c);
            return NULL;
        }
        c->m = nm;
        c->capm = nc;
    }
    int mi = c->nm++;
    const char *name = kn_gout_name(&c->g, hint);
    c->m[mi] = (memo){key, f.n, name};
    if (!name) {
        conj_free(&f);
        nomem(c);
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
        if (!json_is_array(list) || !json_array_size(list)) fail(c, f.v[at].path, kw, "must be a non-empty array");
        if (kw[0] == 'o' && json_array_size(list) > 1)
            approx(c, f.v[at].path, kw, "enforced as anyOf: a value valid under several branches is accepted");
        size_t i;
        json_t *alt;
        json_array_foreach(list, i, alt) {
            if (c->failed) break;
            conj k = conj_copy(c, &f);
            k.v[at].skip |= kw[0] == 'a' ? SKIP_ANYOF : SKIP_ONEOF;
            conj_add(c, &k, mk(alt, path_idx(c, f.v[at].path, kw, i)));
            const char *an = compile(c, &k, hint, depth + 1);
            conj_free(&k);
            if (an) kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", an);
        }
    } else {
        node n = {.types = T_ALL, .maxlen = -1, .mult10 = -1, .maxitems = -1, .maxprops = -1, .req = json_array()};
        n.path = f.v[0].path;
        for (int i = 0; i < f.n && !c->failed; i++) merge(c, &n, f.v[i]);
        if (!n.req) nomem(c);
        if (!c->failed && n.enums) {
            const char *en = emit_enum(c, &n, hint);
            if (en) kn_sbuf_printf(&body, "%s", en), alts++;
        } else if (!c->failed) {
            if (n.types & T_NULL) kn_sbuf_printf(&body, "%s\"null\"", alts++ ? " | " : "");
            if (n.types & T_BOOL) kn_sbuf_printf(&body, "%s\"true\" | \"false\"", alts++ ? " | " : "");
            if (n.types & T_NUM) {
                kn_sbuf nb;
                kn_sbuf_init(&nb, KN_SCHEMA_MAX_GBNF);
                bool ap = false;
                bool integer = !(n.types & T_FRAC);
                if (!(n.types & T_INT))
                    approx(c, n.path, "type", "numbers that are not integers are enforced as numbers");
                if (!n.lo.set && !n.hi.set && n.mult10 < 0 && !integer) {
                    kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", use(c, U_NUMBER));
                } else if (kn_num_body(&nb, n.lo, n.hi, integer, integer ? -1 : n.mult10, &ap)) {
                    kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", nb.p);
                }
                if (ap) approx(c, n.path, "minimum", "a bound that is not an integer is widened to one");
                if (nb.over || nb.nomem) nomem(c);
                kn_sbuf_free(&nb);
            }
            if (n.types & T_STR) {
                kn_sbuf sb;
                kn_sbuf_init(&sb, KN_SCHEMA_MAX_GBNF);
                if (emit_string(c, &n, &sb, hint)) kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", sb.p);
                kn_sbuf_free(&sb);
            }
            if (n.types & T_ARR) {
                kn_sbuf ab;
                kn_sbuf_init(&ab, KN_SCHEMA_MAX_GBNF);
                if (emit_array(c, &n, &ab, depth)) kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", ab.p);
                kn_sbuf_free(&ab);
            }
            if (n.types & T_OBJ) {
                kn_sbuf ob;
                kn_sbuf_init(&ob, KN_SCHEMA_MAX_GBNF);
                if (emit_object(c, &n, &ob, name, depth)) kn_sbuf_printf(&body, "%s%s", alts++ ? " | " : "", ob.p);
                kn_sbuf_free(&ob);
            }
        }
        node_free(&n);
    }
    conj_free(&f);
    if (body.over || body.nomem) nomem(c);
    const char *ret = NULL;
    if (!c->failed) {
        if (alts) {
            kn_gout_rule(&c->g, name, body.p);
            ret = name;
        } else {
            /* empty: later references see NULL; earlier recursive ones need the rule to exist */
            c->m[mi].name = NULL;
            kn_gout_rule(&c->g, name, use(c, U_NEVER));
        }
    }
    kn_sbuf_free(&body);
    return ret;
}

/* ---- entry ----------------------------------------------------------------------------------- */

/* One conversion; cheap: additional property names are not told apart from declared ones. */
static kiln_status convert(const char *json, size_t len, bool strict, bool cheap, char **gbnf, kn_schema_info *info) {
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root && strstr(je.text, "too big"))
        root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    if (!root)
        return kn_error(KILN_ERR_INVALID_ARG, "the schema is not valid JSON: line %d, column %d: %s", je.line,
                        je.column, je.text);
    ctx c = {.root = root, .strict = strict, .cheap_keys = cheap};
    kn_gout_init(&c.g);
    static const char *const reserved[] = {"root",   "ws",   "value",  "object", "array",
                                           "string", "char", "number", "never",  "jesc"};
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) kn_gout_name(&c.g, reserved[i]);
    conj top = {0};
    conj_add(&c, &top, mk(root, ""));
    const char *r = compile(&c, &top, "schema", 0);
    conj_free(&top);
    kn_sbuf out;
    kn_sbuf_init(&out, KN_SCHEMA_MAX_GBNF);
    if (!c.failed && !r) fail(&c, "", NULL, "no JSON value is valid under the schema");
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
        if (kn_gout_failed(&c.g) || out.over)
            fail(&c, "", NULL, "the schema's grammar is larger than %u bytes", (unsigned)KN_SCHEMA_MAX_GBNF);
        else if (out.nomem) nomem(&c);
    }
    kiln_status st = KILN_OK;
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
    kiln_status st = convert(json, len, strict, false, gbnf, info);
    if (st == KILN_OK && strlen(*gbnf) > KILN_GRAMMAR_MAX_TEXT) {
        /* too large for the GBNF compiler: the names of additional properties are the first thing
         * to give up (each object's list of names it must not repeat is most of a big grammar) */
        free(*gbnf);
        *gbnf = NULL;
        st = convert(json, len, strict, true, gbnf, info);
        if (st == KILN_OK && strlen(*gbnf) > KILN_GRAMMAR_MAX_TEXT) {
            free(*gbnf);
            *gbnf = NULL;
            st = kn_error(KILN_ERR_INVALID_ARG, "schema #: the schema's grammar is larger than %u bytes",
                          KILN_GRAMMAR_MAX_TEXT);
        }
    }
    return st;
}

kiln_status kn_schema_to_gbnf(const char *json, size_t len, bool strict, char **gbnf) {
    return kn_schema_to_gbnf_info(json, len, strict, gbnf, NULL);
}

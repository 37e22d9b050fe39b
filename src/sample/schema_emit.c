/*
 * schema_emit.c - the GBNF of a merged node: enum values as literal JSON, strings (plain, length
 * bounded, or through their automaton), objects (declared properties in schema order, required ones
 * mandatory, then the additional ones) and arrays (prefix positions, then the tail with its count).
 */
#include "sample/grammar.h"
#include "sample/schema_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing values -------------------------------------------------------------------------- */

const char *ks_compile(ctx *c, conj *in, const char *hint, int depth);

const char *ks_use(ctx *c, unsigned what) {
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
void ks_value_text(ctx *c, kn_sbuf *b, const json_t *v) {
    if (json_is_array(v)) {
        kn_sbuf_puts(b, "\"[\" ws");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) kn_sbuf_puts(b, " \",\" ws");
            kn_sbuf_puts(b, " ");
            ks_value_text(c, b, json_array_get(v, i));
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
            ks_value_text(c, b, ks);
            json_decref(ks);
            kn_sbuf_puts(b, " ws \":\" ws ");
            ks_value_text(c, b, x);
            kn_sbuf_puts(b, " ws");
        }
        kn_sbuf_puts(b, " \"}\"");
        return;
    }
    char *t = json_dumps(v, JSON_ENCODE_ANY);
    if (!t) {
        ks_nomem(c);
        return;
    }
    if (json_is_real(v) && ks_is_integral(v)) {
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
bool ks_value_ok(const node *n, const json_t *v) {
    unsigned t = ks_value_type(v);
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

const char *ks_emit_enum(ctx *c, node *n, const char *hint) {
    kn_sbuf b;
    kn_sbuf_init(&b, KN_SCHEMA_MAX_GBNF);
    size_t i;
    json_t *v;
    int alts = 0;
    json_array_foreach(n->enums, i, v) {
        if (!ks_value_ok(n, v)) continue;
        if ((json_is_object(v) && n->osrc.n) || (json_is_array(v) && n->asrc.n))
            ks_approx(c, n->path ? n->path : "", "enum",
                      "enum values that are objects or arrays are not checked against "
                      "the schema's other keywords");
        if (alts++) kn_sbuf_puts(&b, " | ");
        ks_value_text(c, &b, v);
    }
    const char *name = NULL;
    if (alts && !b.over && !b.nomem) {
        name = kn_gout_name(&c->g, hint);
        if (name) kn_gout_rule(&c->g, name, b.p);
    }
    if (b.over || b.nomem) ks_nomem(c);
    kn_sbuf_free(&b);
    return name;
}

/* The string alternative of n into b; false if no string is allowed. */
bool ks_emit_string(ctx *c, node *n, kn_sbuf *b, const char *hint) {
    long lo = n->minlen, hi = n->maxlen;
    if (hi >= 0 && lo > hi) return false;
    if (hi > KN_GBNF_MAX_COUNT) {
        ks_approx(c, n->path ? n->path : "", "maxLength", "a maxLength above 16777216 is not enforced");
        hi = -1;
    }
    if (hi < 0 && lo > KN_GBNF_MAX_REPEAT) { /* without a maximum, a repetition: char{lo,} */
        ks_fail(c, n->path ? n->path : "", "minLength", "kiln enforces minLength up to %d without a maxLength",
                KN_GBNF_MAX_REPEAT);
        return false;
    }
    if (!n->str) {
        if (lo == 0 && hi < 0) {
            kn_sbuf_puts(b, ks_use(c, U_STRING));
        } else {
            ks_use(c, U_CHAR); /* a maximum: a counter beside the characters, checked again at the end */
            if (hi < 0) kn_sbuf_printf(b, "\"\\\"\" char{%ld,} \"\\\"\"", lo);
            else if (lo == 0) kn_sbuf_printf(b, "\"\\\"\" @count (char @+1{0,%ld})* \"\\\"\"", hi);
            else kn_sbuf_printf(b, "\"\\\"\" @count (char @+1{0,%ld})* @{%ld,%ld} \"\\\"\"", hi, lo, hi);
        }
        return true;
    }
    kn_dfa *d = n->str;
    if (hi >= 0) { /* a counter beside the automaton, when its guards are exact */
        int *glo = malloc((size_t)d->n * sizeof *glo), *ghi = malloc((size_t)d->n * sizeof *ghi);
        kn_len_guards r = glo && ghi ? kn_dfa_len_guards(d, lo, hi, glo, ghi) : KN_LEN_NOMEM;
        const char *nm = NULL;
        if (r == KN_LEN_OK) {
            kn_dfa_count cnt = {lo, hi, glo, ghi};
            if (!(nm = kn_dfa_emit_string(&c->g, d, hint, &cnt))) ks_nomem(c);
            else kn_sbuf_puts(b, nm);
        } else if (r == KN_LEN_NOMEM) {
            ks_nomem(c);
        }
        free(glo);
        free(ghi);
        if (r != KN_LEN_NO) return r == KN_LEN_OK && nm;
    }
    kn_dfa *own = NULL;
    if (lo > 0 || hi >= 0) {
        /* a minimum alone, or lengths guards cannot say exactly: the product of the automata; past
         * their bounds, the minimum alone; past them too, neither (a superset either way, reported) */
        kn_dfa *l = kn_dfa_length(lo, hi);
        own = l ? kn_dfa_and(d, l) : NULL;
        kn_dfa_free(l);
        bool whole = own != NULL;
        if (!own && hi >= 0 && lo > 0) {
            l = kn_dfa_length(lo, -1);
            own = l ? kn_dfa_and(d, l) : NULL;
            kn_dfa_free(l);
        }
        if (!whole)
            ks_approx(c, n->path ? n->path : "", !own && lo > 0 ? "minLength" : "maxLength",
                      "a length next to a pattern or format whose combination is too large is not enforced");
        if (own) d = own;
    }
    bool ok = !kn_dfa_is_empty(d);
    if (ok) {
        if (kn_dfa_is_all(d)) kn_sbuf_puts(b, ks_use(c, U_STRING));
        else {
            const char *nm = kn_dfa_emit_string(&c->g, d, hint, NULL);
            if (!nm) ks_nomem(c);
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
            ks_conj_add(c, out, ks_mk(ps, ks_path_join(c, ks_path_join(c, o.path, "properties"), name)));
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
                    ks_conj_add(c, out, ks_mk(pv, ks_path_join(c, ks_path_join(c, o.path, "patternProperties"), pk)));
                }
            }
        if (matched) continue;
        json_t *ap = json_object_get(o.s, "additionalProperties");
        if (ap) ks_conj_add(c, out, ks_mk(ap, ks_path_join(c, o.path, "additionalProperties")));
        else if (c->strict) *unsat = true;
    }
}

static kn_dfa *pat_get(ctx *c, json_t *pp, const char *key, const char *path) {
    for (int i = 0; i < c->npc; i++)
        if (c->pc[i].obj == pp && c->pc[i].key == key) return c->pc[i].dfa;
    kn_dfa *d = ks_pattern_dfa(c, key, path, "patternProperties");
    if (!d) return NULL;
    if (c->npc == c->cappc) {
        int nc = c->cappc ? c->cappc * 2 : 16;
        patcache *np = realloc(c->pc, (size_t)nc * sizeof *np);
        if (!np) {
            kn_dfa_free(d);
            ks_nomem(c);
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
    const char *name = kn_dfa_emit_string(&c->g, rest, "k", NULL);
    if (!name) ks_nomem(c);
    if (sig && name && c->nkeys < (int)(sizeof c->keys / sizeof *c->keys)) {
        c->keys[c->nkeys++] = (keycache){sig, name};
        sig = NULL;
    }
    free(sig);
    return name;
}

/* The object's patterns (patternProperties of every source, in order): the automaton, the value's
 * schema and path, the source. */
typedef struct pat {
    kn_dfa *d; /* owned by the context's pattern cache */
    json_t *schema;
    int src;
    const char *path;
} pat;

/* A set of names: exactly the patterns with in[i] match them. */
typedef struct region {
    kn_dfa *d;
    uint8_t *in; /* [number of patterns] */
} region;

#define MAX_REGIONS 64

/* Splits the names of base by the patterns p[np] that match them, into the non-empty regions r[]
 * (MAX_REGIONS at most: overlapping patterns make up to 2^np; disjoint ones np + 1). The count, -1
 * after a failure (reported), -2 past MAX_REGIONS (r[] freed: the caller splits greedily). */
static int split_names(ctx *c, const node *n, const kn_dfa *base, const pat *p, int np, region *r) {
    const char *path = n->path ? n->path : "";
    r[0].d = kn_dfa_and(base, base);
    r[0].in = calloc((size_t)np + 1, 1);
    if (!r[0].d || !r[0].in) return ks_nomem(c), -1;
    int nr = 1;
    for (int i = 0; i < np; i++) {
        kn_dfa *out = p[i].d ? kn_dfa_not(p[i].d) : NULL;
        if (!out) return ks_fail(c, path, "patternProperties", "the property name patterns are too complex"), -1;
        for (int k = 0, cur = nr; k < cur; k++) {
            kn_dfa *yes = kn_dfa_and(r[k].d, p[i].d), *no = yes ? kn_dfa_and(r[k].d, out) : NULL;
            if (!no) {
                kn_dfa_free(yes), kn_dfa_free(out);
                return ks_fail(c, path, "patternProperties", "the property name patterns are too complex"), -1;
            }
            if (kn_dfa_is_empty(yes) || kn_dfa_is_empty(no)) { /* all or none of the region: no split */
                if (!kn_dfa_is_empty(yes)) r[k].in[i] = 1;
                kn_dfa_free(yes), kn_dfa_free(no);
                continue;
            }
            if (nr == MAX_REGIONS) {
                kn_dfa_free(yes), kn_dfa_free(no), kn_dfa_free(out);
                for (int f = 0; f < nr; f++) kn_dfa_free(r[f].d), free(r[f].in), r[f] = (region){0};
                return -2;
            }
            r[nr].in = malloc((size_t)np + 1);
            if (!r[nr].in) {
                kn_dfa_free(yes), kn_dfa_free(no), kn_dfa_free(out);
                return ks_nomem(c), -1;
            }
            memcpy(r[nr].in, r[k].in, (size_t)np + 1);
            r[nr].in[i] = 1;
            r[nr++].d = yes;
            kn_dfa_free(r[k].d);
            r[k].d = no;
        }
        kn_dfa_free(out);
    }
    return nr;
}

/* The greedy split past MAX_REGIONS: pattern i's region holds the names it matches and no earlier
 * pattern does (np + 1 regions at most, the last the names no pattern matches), reported as an
 * approximation: a name matching several patterns is under the first one's schema. The count, or -1
 * after a failure (reported). */
static int split_greedy(ctx *c, const node *n, const kn_dfa *base, const pat *p, int np, region *r) {
    const char *path = n->path ? n->path : "";
    kn_dfa *rest = kn_dfa_and(base, base);
    int nr = 0;
    for (int i = 0; i < np && rest && nr < MAX_REGIONS - 1; i++) {
        kn_dfa *out = p[i].d ? kn_dfa_not(p[i].d) : NULL, *yes = out ? kn_dfa_and(rest, p[i].d) : NULL;
        kn_dfa *no = yes ? kn_dfa_and(rest, out) : NULL;
        kn_dfa_free(out);
        kn_dfa_free(rest);
        rest = no;
        r[nr].in = calloc((size_t)np + 1, 1);
        if (!no || !r[nr].in) {
            kn_dfa_free(yes), kn_dfa_free(rest);
            return ks_fail(c, path, "patternProperties", "the property name patterns are too complex"), -1;
        }
        r[nr].in[i] = 1;
        r[nr++].d = yes;
    }
    r[nr].in = calloc((size_t)np + 1, 1);
    if (!rest || !r[nr].in || nr == MAX_REGIONS - 1) {
        kn_dfa_free(rest);
        return ks_fail(c, path, "patternProperties", "the property name patterns are too complex"), -1;
    }
    r[nr++].d = rest;
    ks_approx(c, path, "patternProperties",
              "names matching several of these patterns (more than 64 combinations) are under the first one's schema");
    return nr;
}

typedef struct kv {
    const char *key; /* property name (declared) or NULL */
    const char *keyrule, *val;
    bool req;
} kv;

/* The object alternative of n into b; false if no object is allowed. Declared properties in
 * schema order (required ones mandatory, optional ones optional), then additional ones. */
bool ks_emit_object(ctx *c, node *n, kn_sbuf *b, const char *hint, int depth) {
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
    if (!ok) ks_nomem(c);
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
        const char *val = unsat ? NULL : (k.n ? ks_compile(c, &k, name, depth + 1) : ks_use(c, U_VALUE));
        ks_conj_free(&k);
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
        const char *path = n->path ? n->path : "";
        kn_dfa *lit = ks_literals_dfa(c, names, path, "properties", "the property names (declared and required)");
        base = lit ? kn_dfa_not(lit) : NULL;
        if (lit && !base) ks_dfa_fail(c, path, "properties", "the names besides the declared and required ones");
        kn_dfa_free(lit);
        if (base && n->keys) {
            kn_dfa *kb = kn_dfa_and(n->keys, base);
            if (!kb) ks_dfa_fail(c, path, "propertyNames", "the names besides the declared ones");
            kn_dfa_free(base);
            base = kb;
        }
    }
    int npat = 0;
    for (int j = 0; j < n->osrc.n; j++) {
        json_t *pp = json_object_get(n->osrc.v[j].s, "patternProperties");
        npat += pp ? (int)json_object_size(pp) : 0;
    }
    adds = calloc(MAX_REGIONS + 2, sizeof *adds);
    if (!adds) ok = false, ks_nomem(c);
    kn_dfa *rest = NULL; /* keys no pattern matches */
    if (ok && base && !c->failed) {
        /* the names besides the declared ones, split by the patterns that match them: a region's
         * value is under every source's patterns that match, or the source's additionalProperties */
        pat *pats = calloc((size_t)npat + 1, sizeof *pats);
        region *rg = calloc(MAX_REGIONS, sizeof *rg);
        int np = 0, nreg = -1;
        for (int j = 0; pats && j < n->osrc.n; j++) {
            json_t *pp = json_object_get(n->osrc.v[j].s, "patternProperties");
            const char *pk;
            json_t *pv;
            if (pp) json_object_foreach(pp, pk, pv) {
                    const char *pp_path = ks_path_join(c, n->osrc.v[j].path, "patternProperties");
                    pats[np++] = (pat){pat_get(c, pp, pk, n->osrc.v[j].path), pv, j, ks_path_join(c, pp_path, pk)};
                }
        }
        if (!pats || !rg) ks_nomem(c);
        else if ((nreg = split_names(c, n, base, pats, np, rg)) == -2) nreg = split_greedy(c, n, base, pats, np, rg);
        for (int k = 0; k < nreg && !c->failed; k++) {
            if (kn_dfa_is_empty(rg[k].d)) continue;
            bool any = false;
            for (int i = 0; i < np; i++) any |= rg[k].in[i];
            if (!any) { /* no pattern matches: additionalProperties, below */
                rest = rg[k].d;
                rg[k].d = NULL;
                continue;
            }
            conj k2 = {0};
            bool unsat = false;
            for (int j = 0; j < n->osrc.n; j++) {
                bool matched = false;
                for (int i = 0; i < np; i++)
                    if (pats[i].src == j && rg[k].in[i])
                        ks_conj_add(c, &k2, ks_mk(pats[i].schema, pats[i].path)), matched = true;
                json_t *ap = matched ? NULL : json_object_get(n->osrc.v[j].s, "additionalProperties");
                if (ap) ks_conj_add(c, &k2, ks_mk(ap, ks_path_join(c, n->osrc.v[j].path, "additionalProperties")));
                else if (!matched && c->strict) unsat = true;
            }
            const char *val = unsat ? NULL : ks_compile(c, &k2, "pattern-value", depth + 1);
            ks_conj_free(&k2);
            if (val) {
                const char *kr = kn_dfa_emit_string(&c->g, rg[k].d, "pkey", NULL);
                if (!kr) ks_nomem(c);
                adds[nadds++] = (kv){NULL, kr, val, false};
            }
        }
        for (int k = 0; k < MAX_REGIONS && rg; k++) kn_dfa_free(rg[k].d), free(rg[k].in);
        free(rg);
        free(pats);
    }
    if (ok && rest && !c->failed && !kn_dfa_is_empty(rest)) {
        conj k = {0};
        bool unsat = false;
        for (int j = 0; j < n->osrc.n; j++) {
            json_t *ap = json_object_get(n->osrc.v[j].s, "additionalProperties");
            if (ap) ks_conj_add(c, &k, ks_mk(ap, ks_path_join(c, n->osrc.v[j].path, "additionalProperties")));
            else if (c->strict) unsat = true;
        }
        if (!n->osrc.n && c->strict) unsat = true;
        const char *val = unsat ? NULL : (k.n ? ks_compile(c, &k, "additional-value", depth + 1) : ks_use(c, U_VALUE));
        ks_conj_free(&k);
        if (val) {
            const char *kr = kn_dfa_is_all(rest) || (c->cheap_keys && !n->keys && npat == 0)
                                 ? ks_use(c, U_STRING)
                                 : key_rule(c, rest, names, n);
            if (c->cheap_keys && !kn_dfa_is_all(rest) && !n->keys && npat == 0)
                ks_approx(c, n->path ? n->path : "", "additionalProperties",
                          "in a schema this large, an additional property may repeat a declared name");
            if (!kr) ks_nomem(c);
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
            ks_fail(c, n->path ? n->path : "", "maxProperties",
                    "kiln enforces maxProperties only when the schema cannot exceed it");
        if (n->minprops > nreq && !(n->minprops == 1))
            ks_fail(c, n->path ? n->path : "", "minProperties",
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
            ks_value_text(c, &t, ks);
            json_decref(ks);
            kn_sbuf_printf(&t, " ws \":\" ws %s ws", props[i].val);
            kvt[i] = t.p ? strdup(t.p) : NULL;
            if (!kvt[i]) ks_nomem(c);
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
        if (!cn || !tn || !kvt) ks_nomem(c);
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
            ks_fail(c, a.path, "prefixItems", "must be an array");
            return;
        }
        if (!tail && prefix && i < json_array_size(prefix)) {
            ks_conj_add(c, out,
                        ks_mk(json_array_get(prefix, i),
                              ks_path_idx(c, a.path, json_is_array(items) ? "items" : "prefixItems", i)));
            continue;
        }
        if (more) {
            if (json_is_false(more)) *unsat = true;
            else ks_conj_add(c, out, ks_mk(more, ks_path_join(c, a.path, more_kw)));
        }
    }
}

bool ks_emit_array(ctx *c, node *n, kn_sbuf *b, int depth) {
    long lo = n->minitems, hi = n->maxitems;
    size_t np = 0;
    for (int j = 0; j < n->asrc.n; j++) {
        json_t *items = json_object_get(n->asrc.v[j].s, "items");
        json_t *prefix = json_is_array(items) ? items : json_object_get(n->asrc.v[j].s, "prefixItems");
        if (json_array_size(prefix) > np) np = json_array_size(prefix);
    }
    if (np > 10000) {
        ks_fail(c, n->asrc.v[0].path, "prefixItems", "too many positions");
        return false;
    }
    /* counts past the repetition limit: a counter beside the items (without prefixItems) */
    if (hi > (np ? KN_GBNF_MAX_REPEAT : KN_GBNF_MAX_COUNT)) {
        ks_approx(c, n->path ? n->path : "", "maxItems",
                  np ? "a maxItems above 10000 next to prefixItems is not enforced"
                     : "a maxItems above 16777216 is not enforced");
        hi = -1;
    }
    if (lo > KN_GBNF_MAX_REPEAT && (hi < 0 || np)) {
        ks_fail(c, n->path ? n->path : "", "minItems", "kiln enforces minItems up to %d without a maxItems",
                KN_GBNF_MAX_REPEAT);
        return false;
    }
    const bool counted = !np && hi > KN_GBNF_MAX_REPEAT;
    const char **pos = calloc(np + 1, sizeof *pos);
    if (!pos) {
        ks_nomem(c);
        return false;
    }
    /* positions of the prefix, then the tail */
    for (size_t i = 0; i < np && !c->failed; i++) {
        if (hi >= 0 && (long)i >= hi) break;
        conj k = {0};
        bool unsat = false;
        item_conj(c, n, i, false, &k, &unsat);
        pos[i] = unsat ? NULL : (k.n ? ks_compile(c, &k, "item", depth + 1) : ks_use(c, U_VALUE));
        ks_conj_free(&k);
        if (!pos[i] && (hi < 0 || hi > (long)i)) hi = (long)i;
    }
    const char *tail = NULL;
    json_t *uvals = NULL; /* uniqueItems over items of listed values: those values */
    if ((hi < 0 || hi > (long)np) && !c->failed) {
        conj k = {0};
        bool unsat = false;
        item_conj(c, n, np, true, &k, &unsat);
        tail = unsat ? NULL : (k.n ? ks_compile(c, &k, "item", depth + 1) : ks_use(c, U_VALUE));
        if (tail && n->unique && np == 0 && k.n) uvals = ks_conj_values(c, &k);
        ks_conj_free(&k);
        if (!tail) hi = (long)np;
    }
    bool ok = !c->failed && !(hi >= 0 && lo > hi);
    int uniq = -1;
    if (ok && uvals && (hi < 0 || hi > 1)) {
        uniq = ks_emit_unique(c, uvals, lo, hi, b);
        ok = uniq > 0 && !c->failed;
    }
    json_decref(uvals);
    if (uniq < 0 && n->unique && (hi < 0 || hi > 1))
        ks_approx(c, n->unique_path, "uniqueItems", "repeated items are not prevented");
    if (ok && uniq < 0) {
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
                if (counted) { /* "[" ws @count (item (, item)*)? @{lo,hi} "]" */
                    kn_sbuf_printf(b, " @count ( %s ws @+1{0,%ld} ( \",\" ws %s ws @+1{0,%ld} )* )? @{%ld,%ld}", tail,
                                   hi, tail, hi, lo, hi);
                } else if (np == 0) {
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

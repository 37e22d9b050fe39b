/*
 * schema_oneof.c - when oneOf is exact as anyOf: branches no value satisfies together.
 *
 * The compiler enforces oneOf as anyOf, which admits a value valid under several branches. When no
 * two branches share a value that is no approximation: a value valid under one is then valid under
 * exactly one. This file proves that for the common shapes, from the keywords that say directly what
 * a schema admits: its JSON types (type, nullable, the values of enum / const, the types of its
 * anyOf / oneOf branches), its values (enum / const), and for objects a property every common value
 * has (a branch or the schema around the oneOf requires it) whose values cannot agree in the two
 * branches (the discriminator of a tagged union: {"kind": {"const": "circle"}} against {"kind":
 * {"const": "square"}}) or that one of them forbids. Every JSON Schema keyword restricts, so reading
 * only some of a schema's keywords (and those of its $ref target and allOf members, which restrict it
 * too) over-approximates what it admits: "disjoint" is never said of branches that share a value.
 * Anything else is reported as the approximation it is.
 */
#include "sample/schema_internal.h"

#include <string.h>

#define MAX_SHAPE_DEPTH 16      /* $ref / allOf / property levels looked through */
#define MAX_SHAPE_STEPS 1000000 /* schemas looked at per compiled schema, in all its oneOfs */

/* Whether the walk may look at one more schema (a oneOf of many branches, or $ref / allOf chains
 * that branch, could take exponential time): past the budget every question is answered "not known
 * to restrict", which keeps every answer sound. */
static bool step(ctx *c) { return !c->failed && ++c->oneof_steps <= MAX_SHAPE_STEPS; }

/* What a schema admits, as far as its direct keywords say. */
typedef struct shape {
    unsigned types;     /* T_* bits */
    const json_t *one;  /* const, or NULL */
    const json_t *vals; /* enum (an array), or NULL */
} shape;

/* The parts of schema s that restrict it besides its own keywords: its $ref target (NULL when it has
 * none or it does not resolve) and its allOf members. */
static const json_t *ref_target(ctx *c, const json_t *s) {
    json_t *ref = json_object_get(s, "$ref");
    sref t;
    return ref && ks_resolve(c, ks_mk((json_t *)s, ""), ref, &t, true) ? t.s : NULL;
}

static unsigned type_bits(const json_t *s) {
    const json_t *t = json_object_get(s, "type");
    unsigned m = 0;
    if (json_is_string(t)) m = ks_type_bit(json_string_value(t));
    size_t i;
    const json_t *e;
    json_array_foreach(t, i, e) m |= json_is_string(e) ? ks_type_bit(json_string_value(e)) : T_ALL;
    if (!m) return T_ALL; /* no type, or one the compiler refuses */
    return json_is_true(json_object_get(s, "nullable")) ? m | T_NULL : m;
}

/* Narrows *sh by schema s and the parts that restrict it. */
static void shape_of(ctx *c, const json_t *s, shape *sh, int depth) {
    if (json_is_false(s)) sh->types = 0;
    if (!json_is_object(s) || depth > MAX_SHAPE_DEPTH || !step(c)) return;
    sh->types &= type_bits(s);
    const json_t *one = json_object_get(s, "const"), *vals = json_object_get(s, "enum");
    if (one && !sh->one) sh->one = one, sh->types &= ks_value_type(one);
    if (json_is_array(vals) && !sh->vals) {
        unsigned m = 0;
        size_t i;
        const json_t *v;
        json_array_foreach(vals, i, v) m |= ks_value_type(v);
        sh->vals = vals;
        sh->types &= m;
    }
    const json_t *t = ref_target(c, s);
    if (t) shape_of(c, t, sh, depth + 1);
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(s, "allOf"), i, e) shape_of(c, e, sh, depth + 1);
    /* a value valid under anyOf / oneOf is valid under a branch: it has one of their types */
    static const char *const alts[] = {"anyOf", "oneOf"};
    for (size_t k = 0; k < 2; k++) {
        const json_t *list = json_object_get(s, alts[k]);
        if (!json_is_array(list) || !json_array_size(list)) continue;
        unsigned m = 0;
        json_array_foreach(list, i, e) {
            shape b = {T_ALL, NULL, NULL};
            shape_of(c, e, &b, depth + 1);
            m |= b.types;
        }
        sh->types &= m;
    }
}

/* Whether value v may be admitted by sh (numbers compare by value; past the budget: yes). */
static bool admits(ctx *c, const shape *sh, const json_t *v) {
    if (!(sh->types & ks_value_type(v))) return false;
    if (sh->one && !ks_values_equal(sh->one, v)) return false;
    if (!sh->vals) return true;
    size_t i;
    const json_t *w;
    json_array_foreach(sh->vals, i, w) {
        if (!step(c)) return true;
        if (ks_values_equal(w, v)) return true;
    }
    return false;
}

/* Whether b admits none of the values a lists (false when a lists none). */
static bool values_excluded(ctx *c, const shape *a, const shape *b) {
    if (a->one) return !admits(c, b, a->one);
    if (!a->vals) return false;
    size_t i;
    const json_t *v;
    json_array_foreach(a->vals, i, v) if (admits(c, b, v)) return false;
    return true;
}

/* The schema of property name in s's properties (or a part's), NULL when none says. */
static const json_t *property(ctx *c, const json_t *s, const char *name, int depth) {
    if (!json_is_object(s) || depth > MAX_SHAPE_DEPTH || !step(c)) return NULL;
    const json_t *p = json_object_get(json_object_get(s, "properties"), name);
    if (p) return p;
    const json_t *t = ref_target(c, s);
    if (t && (p = property(c, t, name, depth + 1))) return p;
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(s, "allOf"), i, e) if ((p = property(c, e, name, depth + 1))) return p;
    return NULL;
}

static bool disjoint(ctx *c, const json_t *a, const json_t *b, const conj *sib, int depth);

/* Whether schema s (or a part) forbids property name: its schema is false, or additionalProperties is
 * false in a schema object that neither declares the name nor has patternProperties. */
static bool forbids(ctx *c, const json_t *s, const char *name, int depth) {
    if (!json_is_object(s) || depth > MAX_SHAPE_DEPTH || !step(c)) return false;
    const json_t *props = json_object_get(s, "properties"), *p = json_object_get(props, name);
    if (json_is_false(p) ||
        (!p && json_is_false(json_object_get(s, "additionalProperties")) && !json_object_get(s, "patternProperties")))
        return true;
    const json_t *t = ref_target(c, s);
    if (t && forbids(c, t, name, depth + 1)) return true;
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(s, "allOf"), i, e) if (forbids(c, e, name, depth + 1)) return true;
    return false;
}

/* Whether a and b, objects at most, cannot agree on a property that s (a, b, a schema they are both
 * conjoined with, or a part of one) requires, which every value valid under both then has: a or b
 * forbids it, or their own schemas of it admit no common value. */
static bool names_split(ctx *c, const json_t *s, const json_t *a, const json_t *b, int depth) {
    if (!json_is_object(s) || depth > MAX_SHAPE_DEPTH || !step(c)) return false;
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(s, "required"), i, e) {
        const char *name = json_string_value(e);
        if (name && (forbids(c, a, name, 0) || forbids(c, b, name, 0) ||
                     disjoint(c, property(c, a, name, 0), property(c, b, name, 0), NULL, depth + 1)))
            return true;
    }
    const json_t *t = ref_target(c, s);
    if (t && names_split(c, t, a, b, depth + 1)) return true;
    json_array_foreach(json_object_get(s, "allOf"), i, e) if (names_split(c, e, a, b, depth + 1)) return true;
    return false;
}

/* Whether no JSON value is valid under both a and b (NULL: any value), each conjoined with the
 * schemas of sib (NULL: none), as far as shapes show. */
static bool disjoint(ctx *c, const json_t *a, const json_t *b, const conj *sib, int depth) {
    if (!a || !b || depth > MAX_SHAPE_DEPTH) return false;
    shape sa = {T_ALL, NULL, NULL}, sb = {T_ALL, NULL, NULL};
    shape_of(c, a, &sa, 0);
    shape_of(c, b, &sb, 0);
    for (int k = 0; sib && k < sib->n; k++) shape_of(c, sib->v[k].s, &sa, 0), shape_of(c, sib->v[k].s, &sb, 0);
    const unsigned both = sa.types & sb.types;
    if (!both || values_excluded(c, &sa, &sb) || values_excluded(c, &sb, &sa)) return true;
    if (both & ~T_OBJ) return false;
    if (names_split(c, a, a, b, depth) || names_split(c, b, a, b, depth)) return true;
    for (int k = 0; sib && k < sib->n; k++)
        if (names_split(c, sib->v[k].s, a, b, depth)) return true;
    return false;
}

bool ks_oneof_disjoint(ctx *c, const json_t *list, const conj *sib) {
    const size_t n = json_array_size(list);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (!disjoint(c, json_array_get(list, i), json_array_get(list, j), sib, 0)) return false;
    return true;
}

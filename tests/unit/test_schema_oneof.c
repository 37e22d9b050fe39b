/*
 * test_schema_oneof.c - the claim that a oneOf is exact (its branches share no value, so anyOf
 * enforces it) checked against a validator of its own.
 *
 * Random schemas {sibling keywords, "oneOf": [A, B], "$defs": {...}} are built from the keywords the
 * claim reads (type, nullable, const, enum, required, properties, additionalProperties: false,
 * patternProperties, allOf, anyOf, $ref, boolean schemas) over a small universe of values: every
 * scalar of a short list, arrays, and every object over four keys with small values. For each
 * schema that compiles and whose oneOf kiln reports as exact (no "enforced as anyOf" approximation),
 * no value of the universe may be valid under the siblings and both branches, by the validator
 * below (which implements those keywords as JSON Schema defines them). The test also requires that
 * the claim is made often enough to mean something.
 */
#include "harness.h"
#include "sample/schema.h"

#include <jansson.h>

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static const char *const KEYS[] = {"k", "m", "n", "z"};
#define NKEYS 4

/* A scalar or small value of the universe (objects and arrays built around them). */
static json_t *scalar(uint32_t i) {
    switch (i % 7) {
        case 0: return json_null();
        case 1: return json_true();
        case 2: return json_integer(1);
        case 3: return json_real(1.5);
        case 4: return json_string("a");
        case 5: return json_string("b");
        default: return json_integer(0);
    }
}

/* ---- the validator ---------------------------------------------------------------------------- */

static bool equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    return json_equal(a, b);
}

static bool has_type(const char *t, const json_t *v) {
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(long)json_real_value(v));
    return false;
}

static bool valid(const json_t *root, const json_t *s, const json_t *v);

static bool valid_all(const json_t *root, const json_t *list, const json_t *v, int need) {
    size_t i, ok = 0;
    const json_t *e;
    json_array_foreach(list, i, e) ok += valid(root, e, v);
    return need == 0 ? ok == json_array_size(list) : need == 1 ? ok >= 1 : ok == 1;
}

/* Whether v is valid under schema s (root: the document, for $ref "#/$defs/NAME"). */
static bool valid(const json_t *root, const json_t *s, const json_t *v) {
    if (json_is_boolean(s)) return json_is_true(s);
    const json_t *x;
    if ((x = json_object_get(s, "type"))) {
        bool ok = json_is_true(json_object_get(s, "nullable")) && json_is_null(v);
        size_t i;
        const json_t *t;
        if (json_is_string(x)) ok = ok || has_type(json_string_value(x), v);
        json_array_foreach(x, i, t) ok = ok || has_type(json_string_value(t), v);
        if (!ok) return false;
    }
    if ((x = json_object_get(s, "const")) && !equal(x, v)) return false;
    if ((x = json_object_get(s, "enum"))) {
        bool ok = false;
        size_t i;
        const json_t *e;
        json_array_foreach(x, i, e) ok = ok || equal(e, v);
        if (!ok) return false;
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(s, "properties"), *pats = json_object_get(s, "patternProperties");
        size_t i;
        const json_t *e;
        json_array_foreach(json_object_get(s, "required"), i,
                           e) if (!json_object_get(v, json_string_value(e))) return false;
        const char *k;
        const json_t *pv;
        json_object_foreach((json_t *)v, k, pv) {
            const json_t *ps = json_object_get(props, k);
            /* the generator's patterns are "^NAME$" */
            bool matched = false;
            const char *pk;
            const json_t *pp;
            json_object_foreach((json_t *)pats, pk,
                                pp) if (strlen(pk) == strlen(k) + 2 && !strncmp(pk + 1, k, strlen(k))) {
                matched = true;
                if (!valid(root, pp, pv)) return false;
            }
            if (ps && !valid(root, ps, pv)) return false;
            const json_t *ap = json_object_get(s, "additionalProperties");
            if (!ps && !matched && ap && !valid(root, ap, pv)) return false;
        }
    }
    if ((x = json_object_get(s, "allOf")) && !valid_all(root, x, v, 0)) return false;
    if ((x = json_object_get(s, "anyOf")) && !valid_all(root, x, v, 1)) return false;
    if ((x = json_object_get(s, "oneOf")) && !valid_all(root, x, v, 2)) return false;
    if ((x = json_object_get(s, "$ref"))) {
        const json_t *t = json_object_get(json_object_get(root, "$defs"), json_string_value(x) + 8);
        if (!t || !valid(root, t, v)) return false;
    }
    return true;
}

/* ---- the generator ---------------------------------------------------------------------------- */

/* A schema over the keywords the claim reads, nested depth more levels at most; refs: it may refer
 * to the $defs (which themselves may not: no cycles). Values in const and enum are scalars (object
 * values next to object keywords are an approximation of their own, which would hide the oneOf's). */
static json_t *gen(int depth, bool refs) {
    if (!rnd(12)) return rnd(3) ? json_true() : json_false();
    static const char *const types[] = {"null", "boolean", "object", "string", "integer", "number", "array"};
    json_t *s = json_object();
    if (rnd(3)) {
        if (rnd(3)) json_object_set_new(s, "type", json_string(types[rnd(7)]));
        else json_object_set_new(s, "type", json_pack("[ss]", types[rnd(7)], types[rnd(7)]));
        if (!rnd(6)) json_object_set_new(s, "nullable", json_true());
    }
    if (!rnd(4)) json_object_set_new(s, "const", scalar(rnd(7)));
    else if (!rnd(4)) {
        json_t *e = json_array();
        for (uint32_t i = 0, n = 1 + rnd(3); i < n; i++) json_array_append_new(e, scalar(rnd(7)));
        json_object_set_new(s, "enum", e);
    }
    if (rnd(2)) {
        json_t *props = json_object(), *req = json_array();
        for (int k = 0; k < NKEYS; k++) {
            if (!rnd(3))
                json_object_set_new(props, KEYS[k], depth ? gen(depth - 1, refs) : json_pack("{ss}", "const", "a"));
            if (!rnd(3)) json_array_append_new(req, json_string(KEYS[k]));
        }
        json_object_set_new(s, "properties", props);
        json_object_set_new(s, "required", req);
        if (!rnd(3)) json_object_set_new(s, "additionalProperties", json_false());
        if (!rnd(4)) json_object_set_new(s, "patternProperties", json_pack("{s{ss}}", "^z$", "type", "integer"));
    }
    if (depth && !rnd(5))
        json_object_set_new(s, "allOf", json_pack("[oo]", gen(depth - 1, refs), gen(depth - 1, refs)));
    if (depth && !rnd(6))
        json_object_set_new(s, "anyOf", json_pack("[oo]", gen(depth - 1, refs), gen(depth - 1, refs)));
    if (refs && !rnd(5)) json_object_set_new(s, "$ref", json_string(rnd(2) ? "#/$defs/d0" : "#/$defs/d1"));
    return s;
}

/* Every value of the universe: the scalars, two arrays, and every object whose keys are a subset of
 * KEYS with scalar values (a key absent or one of four values). */
static json_t *universe(void) {
    json_t *u = json_array();
    for (uint32_t i = 0; i < 7; i++) json_array_append_new(u, scalar(i));
    json_array_append_new(u, json_array());
    json_array_append_new(u, json_pack("[i]", 1));
    static const uint32_t vals[] = {0, 2, 4, 5}; /* null, 1, "a", "b" */
    for (uint32_t code = 0; code < 5 * 5 * 5 * 5; code++) {
        json_t *o = json_object();
        for (uint32_t k = 0, c = code; k < NKEYS; k++, c /= 5)
            if (c % 5) json_object_set_new(o, KEYS[k], scalar(vals[c % 5 - 1]));
        json_array_append_new(u, o);
    }
    return u;
}

static void test_claims_hold(void) {
    json_t *u = universe();
    int compiled = 0, exact = 0, others = 0, shared = 0;
    for (int round = 0; round < 8000; round++) {
        json_t *doc = rnd(2) ? gen(0, true) : json_object();
        if (!json_is_object(doc)) doc = (json_decref(doc), json_object());
        json_object_set_new(doc, "oneOf", json_pack("[oo]", gen(2, true), gen(2, true)));
        json_object_set_new(doc, "$defs", json_pack("{soso}", "d0", gen(1, false), "d1", gen(1, false)));
        char *text = json_dumps(doc, JSON_COMPACT);
        char *gbnf = NULL;
        kn_schema_info info;
        if (kn_schema_to_gbnf_info(text, strlen(text), false, &gbnf, &info) == KILN_OK) {
            compiled++;
            /* only the first approximation is reported: one of another keyword hides the oneOf's */
            const bool claimed = !info.approx,
                       other = !claimed && !strstr(info.approx_what, "oneOf: enforced as anyOf");
            exact += claimed;
            others += other;
            if (other) goto next;
            const json_t *a = json_array_get(json_object_get(doc, "oneOf"), 0);
            const json_t *b = json_array_get(json_object_get(doc, "oneOf"), 1);
            json_t *sib = json_deep_copy(doc);
            json_object_del(sib, "oneOf");
            size_t i;
            const json_t *v;
            json_array_foreach(u, i, v) {
                if (!(valid(doc, sib, v) && valid(doc, a, v) && valid(doc, b, v))) continue;
                shared += !claimed;
                if (claimed) {
                    char *vs = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
                    CHECKF(false, "oneOf called exact, but %s is valid under both branches of %s", vs, text);
                    free(vs);
                    break;
                }
            }
            json_decref(sib);
        }
    next:
        free(gbnf);
        free(text);
        json_decref(doc);
    }
    printf("  %d schemas compiled: oneOf exact in %d, another approximation in %d; %d values valid under both "
           "branches of the rest\n",
           compiled, exact, others, shared);
    CHECK(compiled > 4000 && exact > compiled / 5 && shared > 0);
    json_decref(u);
}

int main(void) {
    RUN(test_claims_hold);
    return kt_summary();
}

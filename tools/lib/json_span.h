/*
 * json_span.h - find values inside JSON text without re-serializing them.
 *
 * Benchmarks and tests over JSON test material (schemas with instances) need the exact text of a
 * value: re-serializing a parsed document changes numbers (0.1 becomes 0.10000000000000001 in
 * jansson) and escapes, and a number too large for int64 does not parse at all. These helpers walk
 * the text instead: a span is a pointer and a length into the caller's buffer, never copied. They
 * assume well-formed JSON (test material) but stop, never overrun, on anything else.
 */
#ifndef KN_JSON_SPAN_H
#define KN_JSON_SPAN_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kn_jspan {
    const char *p;
    size_t n;
} kn_jspan;

/* The value of member key (compared byte for byte with the raw key text) of the object v. */
bool kn_jspan_member(kn_jspan v, const char *key, kn_jspan *out);

/* Element i of the array v. */
bool kn_jspan_elem(kn_jspan v, size_t i, kn_jspan *out);

/* The number of elements of the array v (0 when v is not an array). */
size_t kn_jspan_len(kn_jspan v);

/* v is the literal true. */
bool kn_jspan_is_true(kn_jspan v);

/* Writes v without the whitespace outside strings (compact JSON: "," and ":" with nothing around
 * them) to out, which has room for v.n + 1 bytes; returns the length (out is NUL-terminated). */
size_t kn_jspan_compact(kn_jspan v, char *out);

#endif

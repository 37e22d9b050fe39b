/*
 * tok_json.h - a small, fast, read-only JSON document for the tokenizer.json loader.
 *
 * A tokenizer.json can hold 30+ MB (a 262k-token vocabulary and half a million merges); a general
 * JSON library that builds a hash per object is several times too slow for that. This parser copies
 * the text once, unescapes strings in place in the copy, and keeps every value as a flat node
 * (type, where its text is, first child, next sibling), so a document is two allocations, sized
 * up front and prefaulted. Object
 * members keep their order; looking a key up is a linear scan (objects other than the vocabulary
 * are small, and the vocabulary is walked, not searched). Syntax errors give KILN_ERR_FORMAT naming
 * the JSON path of the value being parsed (e.g. "model.merges[12]") and the byte offset.
 */
#ifndef KN_TOK_JSON_H
#define KN_TOK_JSON_H

#include "base/base.h"

typedef enum kn_jtype { KN_J_NULL, KN_J_FALSE, KN_J_TRUE, KN_J_NUM, KN_J_STR, KN_J_ARR, KN_J_OBJ } kn_jtype;

typedef struct kn_jnode {
    uint32_t off, len;         /* KN_J_STR: unescaped bytes in kn_json.buf; KN_J_NUM: its text */
    uint32_t key_off, key_len; /* for a member of an object: its key (unescaped) */
    int32_t first, next;       /* first child (-1: none), next sibling (-1: last) */
    uint32_t n;                /* KN_J_ARR / KN_J_OBJ: number of children */
    uint8_t type;              /* kn_jtype */
} kn_jnode;

typedef struct kn_json {
    char *buf; /* the copied text, strings unescaped in place */
    size_t buf_bytes;
    kn_jnode *v;
    size_t n, cap; /* node 0 is the root; cap is fixed at parse start */
} kn_json;

/* Parses text[0..len) (a JSON document; `what` names it in messages, e.g. "tokenizer.json").
 * max_depth caps nesting (at most 512). KILN_ERR_FORMAT with the JSON path on bad syntax, a
 * document over 4 GiB, or trailing text; KILN_ERR_NOMEM. j is freed on error. */
kiln_status kn_json_parse(const char *text, size_t len, const char *what, int max_depth, kn_json *j);
void kn_json_free(kn_json *j);

/* The member `key` of object node obj, -1 when obj is not an object or has no such key (the
 * first one when the key repeats). obj < 0 gives -1, so lookups chain. */
int32_t kn_json_get(const kn_json *j, int32_t obj, const char *key);
/* Node type; KN_J_NULL for a node < 0 (absent reads like null). */
static inline kn_jtype kn_json_type(const kn_json *j, int32_t node) {
    return node < 0 ? KN_J_NULL : (kn_jtype)j->v[node].type;
}
/* The string of node (its bytes and length); NULL when it is not a string. */
const char *kn_json_str(const kn_json *j, int32_t node, size_t *len);
/* True when node is a string equal to the C string s. */
bool kn_json_str_eq(const kn_json *j, int32_t node, const char *s);
/* The integer value of a number node, false when it is not an integer in [lo, hi]. */
bool kn_json_int(const kn_json *j, int32_t node, int64_t lo, int64_t hi, int64_t *out);
/* The value of a number node as a double, false when it is not a number. */
bool kn_json_num(const kn_json *j, int32_t node, double *out);
/* The boolean of node, or dflt when it is absent, null or not a boolean. */
bool kn_json_bool(const kn_json *j, int32_t node, bool dflt);

#endif

/*
 * json.h - jansson as the library uses it: parsing that an allocation failure cannot corrupt.
 *
 * jansson's parser does not stop at a failed allocation: its lexer ignores an append to a string's
 * text that failed, so a string comes out without the bytes it could not save (a JSON Schema's
 * pattern or enum value changed, silently), and one whose closing quote was not saved is copied
 * past the end of its buffer (a heap overflow, jansson 2.14). The library therefore keeps jansson's
 * allocations from failing where it can: its allocator (installed on first use, over whatever
 * allocator the program set before) lets go of a reserve and tries again when one fails. And the
 * parsing functions below count the failures jansson still saw on this thread: a parse that met
 * one returns NULL with the error "out of memory" (json_error_out_of_memory), never a value.
 *
 * A program that sets jansson's allocator after the library's first use replaces the library's
 * (kiln serve does: src/server/http.c keeps the same rules for its requests).
 */
#ifndef KN_JSON_H
#define KN_JSON_H

#include "base/base.h"

#include <jansson.h>

/* json_loadb / json_loads / json_load_file with the library's allocator, and NULL (*err says "out
 * of memory", code json_error_out_of_memory) when an allocation failed under the parse. */
json_t *kn_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *err);
json_t *kn_json_loads(const char *text, size_t flags, json_error_t *err);
json_t *kn_json_load_file(const char *path, size_t flags, json_error_t *err);

/* KILN_ERR_NOMEM when err says an allocation failed, else other (the input's fault). */
kiln_status kn_json_status(const json_error_t *err, kiln_status other);

/* Building values (json_pack, json_object_set_new, json_array_append, ...) has the same weakness: a
 * value that could not be made is left out of its array or object, and a call whose result goes
 * unchecked then yields a smaller value (a schema without one of its `required` names). Work that
 * builds takes a mark first (the library's allocator installed, its reserve made) and asks at its
 * end whether jansson saw an allocation fail on this thread since: then it fails as out of memory. */
unsigned kn_json_mark(void);
bool kn_json_failed_since(unsigned mark);

#endif

/*
 * tok_json.c - the flat JSON document of tok_json.h: a recursive-descent parser over a private copy
 * of the text (strings unescaped in place, never longer than their escaped form), nodes in one
 * growable array. On a syntax error the message is built while the recursion unwinds, each level
 * prepending its key or index, so it reads "tokenizer.json: model.vocab["ab"]: offset 1234:
 * expected ':'" without the parser keeping a path on the way down.
 */
#include "text/tok_json.h"

#include "text/unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_DOC_DEPTH 512

typedef struct parser {
    char *s;
    size_t len, pos;
    kn_json *j;
    int depth, max_depth;
    char msg[128];
    char path[256]; /* filled from the end while unwinding: path + plen_at .. end */
    size_t pstart;
} parser;

static int fail(parser *p, const char *m) {
    snprintf(p->msg, sizeof p->msg, "offset %zu: %s", p->pos, m);
    return -1;
}

/* Prepends text to the error path (dropping what no longer fits). */
static void prepend(parser *p, const char *t, size_t n) {
    if (n > p->pstart) return;
    p->pstart -= n;
    memcpy(p->path + p->pstart, t, n);
}

static void prepend_key(parser *p, const char *k, size_t n) {
    char tmp[64];
    size_t m = KN_MIN(n, (size_t)40);
    int w = snprintf(tmp, sizeof tmp, ".%.*s%s", (int)m, k, m < n ? "..." : "");
    if (w > 0) prepend(p, tmp, (size_t)w);
}

static void prepend_index(parser *p, uint32_t i) {
    char tmp[24];
    int w = snprintf(tmp, sizeof tmp, "[%u]", i);
    if (w > 0) prepend(p, tmp, (size_t)w);
}

static inline void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
        p->pos++;
    }
}

/* Memory for the document, prefaulted in one call (a page fault per 4 KiB page costs more than
 * parsing that page on some virtual machines); NULL on failure. */
static void *map_mem(size_t bytes) {
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int32_t new_node(parser *p, uint8_t type) {
    kn_json *j = p->j;
    if (j->n >= j->cap) return -1; /* cap is an upper bound on the values the text can hold */
    kn_jnode *nd = &j->v[j->n];
    nd->off = nd->len = nd->key_off = nd->key_len = nd->n = 0;
    nd->type = type;
    nd->first = nd->next = -1;
    return (int32_t)j->n++;
}

/* An upper bound on the number of values in text: every value but the first follows a ',' or an
 * opening bracket, or is the first of an array/object ('[' / '{' / ':' counted). */
static size_t count_values(const char *s, size_t n) {
    size_t c = 1;
    for (size_t i = 0; i < n; i++) c += s[i] == ',' || s[i] == '[' || s[i] == ':';
    return c;
}

static int hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* Parses the string at p->pos (at its opening quote), unescaping in place; sets *off / *n. */
static int parse_string(parser *p, uint32_t *off, uint32_t *n) {
    char *s = p->s;
    size_t r = p->pos + 1, w = r, len = p->len;
    for (;;) {
        size_t start = r;
        while (r < len) {
            unsigned char c = (unsigned char)s[r];
            if (c == '"' || c == '\\' || c < 0x20) break;
            r++;
        }
        if (w != start) memmove(s + w, s + start, r - start);
        w += r - start;
        if (r >= len) {
            p->pos = r;
            return fail(p, "unterminated string");
        }
        char c = s[r];
        if (c == '"') break;
        if (c != '\\') {
            p->pos = r;
            return fail(p, "control character in a string");
        }
        if (r + 1 >= len) {
            p->pos = r;
            return fail(p, "unterminated string");
        }
        char e = s[r + 1];
        r += 2;
        switch (e) {
            case '"': s[w++] = '"'; break;
            case '\\': s[w++] = '\\'; break;
            case '/': s[w++] = '/'; break;
            case 'b': s[w++] = '\b'; break;
            case 'f': s[w++] = '\f'; break;
            case 'n': s[w++] = '\n'; break;
            case 'r': s[w++] = '\r'; break;
            case 't': s[w++] = '\t'; break;
            case 'u': {
                uint32_t cp;
                if (r + 4 > len || hex4(s + r, &cp)) {
                    p->pos = r;
                    return fail(p, "bad \\u escape");
                }
                r += 4;
                if (cp >= 0xD800 && cp < 0xDC00) {
                    uint32_t lo;
                    if (r + 6 <= len && s[r] == '\\' && s[r + 1] == 'u' && !hex4(s + r + 2, &lo) && lo >= 0xDC00 &&
                        lo < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        r += 6;
                    } else {
                        cp = KN_UNICODE_REPLACEMENT; /* a lone surrogate */
                    }
                } else if (cp >= 0xDC00 && cp < 0xE000) {
                    cp = KN_UNICODE_REPLACEMENT;
                }
                uint8_t enc[4];
                size_t k = kn_utf8_encode(cp, enc);
                memcpy(s + w, enc, k); /* k <= 6 escaped bytes consumed: never overtakes r */
                w += k;
                break;
            }
            default: p->pos = r - 1; return fail(p, "bad escape in a string");
        }
    }
    *off = (uint32_t)(p->pos + 1);
    *n = (uint32_t)(w - (p->pos + 1));
    p->pos = r + 1;
    return 0;
}

static int parse_number(parser *p, int32_t node) {
    const char *s = p->s;
    size_t i = p->pos, len = p->len, start = i;
    if (i < len && s[i] == '-') i++;
    if (i >= len || s[i] < '0' || s[i] > '9') return fail(p, "bad number");
    if (s[i] == '0') i++;
    else
        while (i < len && s[i] >= '0' && s[i] <= '9') i++;
    if (i < len && s[i] == '.') {
        i++;
        if (i >= len || s[i] < '0' || s[i] > '9') return fail(p, "bad number");
        while (i < len && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= len || s[i] < '0' || s[i] > '9') return fail(p, "bad number");
        while (i < len && s[i] >= '0' && s[i] <= '9') i++;
    }
    p->j->v[node].off = (uint32_t)start;
    p->j->v[node].len = (uint32_t)(i - start);
    p->pos = i;
    return 0;
}

static int32_t parse_value(parser *p);

static int parse_array(parser *p, int32_t node) {
    p->pos++; /* [ */
    skip_ws(p);
    int32_t last = -1;
    uint32_t count = 0;
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        return 0;
    }
    for (;;) {
        int32_t child = parse_value(p);
        if (child < 0) {
            prepend_index(p, count);
            return -1;
        }
        if (last < 0) p->j->v[node].first = child;
        else p->j->v[last].next = child;
        last = child;
        count++;
        skip_ws(p);
        if (p->pos >= p->len) return fail(p, "unterminated array");
        char c = p->s[p->pos++];
        if (c == ']') break;
        if (c != ',') {
            p->pos--;
            prepend_index(p, count - 1);
            return fail(p, "expected ',' or ']'");
        }
        skip_ws(p);
    }
    p->j->v[node].n = count;
    return 0;
}

static int parse_object(parser *p, int32_t node) {
    p->pos++; /* { */
    skip_ws(p);
    int32_t last = -1;
    uint32_t count = 0;
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        return 0;
    }
    for (;;) {
        if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "expected a member name");
        uint32_t koff, klen;
        if (parse_string(p, &koff, &klen)) return -1;
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':') {
            prepend_key(p, p->s + koff, klen);
            return fail(p, "expected ':'");
        }
        p->pos++;
        int32_t child = parse_value(p);
        if (child < 0) {
            prepend_key(p, p->s + koff, klen);
            return -1;
        }
        p->j->v[child].key_off = koff;
        p->j->v[child].key_len = klen;
        if (last < 0) p->j->v[node].first = child;
        else p->j->v[last].next = child;
        last = child;
        count++;
        skip_ws(p);
        if (p->pos >= p->len) return fail(p, "unterminated object");
        char c = p->s[p->pos++];
        if (c == '}') break;
        if (c != ',') {
            p->pos--;
            return fail(p, "expected ',' or '}'");
        }
        skip_ws(p);
    }
    p->j->v[node].n = count;
    return 0;
}

/* Parses one value at p->pos; returns its node or -1 (message in p->msg). */
static int32_t parse_value(parser *p) {
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end of text");
    char c = p->s[p->pos];
    int32_t node;
    switch (c) {
        case '{':
        case '[':
            if (p->depth >= p->max_depth) return fail(p, "nested too deeply");
            if ((node = new_node(p, c == '{' ? KN_J_OBJ : KN_J_ARR)) < 0) return fail(p, "out of memory");
            p->depth++;
            if ((c == '{' ? parse_object(p, node) : parse_array(p, node)) < 0) return -1;
            p->depth--;
            return node;
        case '"': {
            if ((node = new_node(p, KN_J_STR)) < 0) return fail(p, "out of memory");
            uint32_t off, n;
            if (parse_string(p, &off, &n)) return -1;
            p->j->v[node].off = off;
            p->j->v[node].len = n;
            return node;
        }
        case 't':
        case 'f':
        case 'n': {
            const char *word = c == 't' ? "true" : c == 'f' ? "false" : "null";
            size_t wl = strlen(word);
            if (p->len - p->pos < wl || memcmp(p->s + p->pos, word, wl) != 0) return fail(p, "unexpected character");
            if ((node = new_node(p, c == 't' ? KN_J_TRUE : c == 'f' ? KN_J_FALSE : KN_J_NULL)) < 0)
                return fail(p, "out of memory");
            p->pos += wl;
            return node;
        }
        default:
            if (c != '-' && (c < '0' || c > '9')) return fail(p, "unexpected character");
            if ((node = new_node(p, KN_J_NUM)) < 0) return fail(p, "out of memory");
            return parse_number(p, node) ? -1 : node;
    }
}

kiln_status kn_json_parse(const char *text, size_t len, const char *what, int max_depth, kn_json *j) {
    memset(j, 0, sizeof *j);
    if (!text && len) return kn_error(KILN_ERR_INVALID_ARG, "%s: NULL text", what);
    if (len >= UINT32_MAX) return kn_error(KILN_ERR_FORMAT, "%s: %zu bytes is over the 4 GiB limit", what, len);
    j->cap = count_values(text, len);
    if (j->cap > INT32_MAX) j->cap = INT32_MAX;
    j->buf_bytes = len + 1;
    j->buf = map_mem(j->buf_bytes);
    j->v = map_mem(j->cap * sizeof *j->v);
    if (!j->buf || !j->v) {
        kn_json_free(j);
        return kn_error(KILN_ERR_NOMEM, "%s: out of memory for %zu bytes", what, len);
    }
    if (len) memcpy(j->buf, text, len);
    j->buf[len] = 0;
    parser p = {.s = j->buf, .len = len, .j = j, .max_depth = KN_MIN(max_depth, MAX_DOC_DEPTH)};
    p.pstart = sizeof p.path;
    int32_t root = parse_value(&p);
    if (root >= 0) {
        skip_ws(&p);
        if (p.pos < p.len) root = fail(&p, "text after the JSON value");
    }
    if (root < 0) {
        size_t plen = sizeof p.path - p.pstart;
        kiln_status st = strstr(p.msg, "out of memory") ? KILN_ERR_NOMEM : KILN_ERR_FORMAT;
        kn_json_free(j);
        if (plen && p.path[p.pstart] == '.') p.pstart++, plen--;
        return kn_error(st, "%s: %s%.*s%s%s", what, plen ? "at " : "", (int)plen, p.path + p.pstart, plen ? ": " : "",
                        p.msg);
    }
    return KILN_OK;
}

void kn_json_free(kn_json *j) {
    if (j->buf) munmap(j->buf, j->buf_bytes);
    if (j->v) munmap(j->v, (j->cap ? j->cap : 1) * sizeof *j->v);
    memset(j, 0, sizeof *j);
}

int32_t kn_json_get(const kn_json *j, int32_t obj, const char *key) {
    if (obj < 0 || j->v[obj].type != KN_J_OBJ) return -1;
    size_t kl = strlen(key);
    for (int32_t c = j->v[obj].first; c >= 0; c = j->v[c].next)
        if (j->v[c].key_len == kl && memcmp(j->buf + j->v[c].key_off, key, kl) == 0) return c;
    return -1;
}

const char *kn_json_str(const kn_json *j, int32_t node, size_t *len) {
    if (node < 0 || j->v[node].type != KN_J_STR) return NULL;
    if (len) *len = j->v[node].len;
    return j->buf + j->v[node].off;
}

bool kn_json_str_eq(const kn_json *j, int32_t node, const char *s) {
    size_t n;
    const char *v = kn_json_str(j, node, &n);
    return v && n == strlen(s) && memcmp(v, s, n) == 0;
}

bool kn_json_int(const kn_json *j, int32_t node, int64_t lo, int64_t hi, int64_t *out) {
    if (node < 0 || j->v[node].type != KN_J_NUM) return false;
    const char *s = j->buf + j->v[node].off;
    size_t n = j->v[node].len, i = 0;
    bool neg = n && s[0] == '-';
    if (neg) i++;
    if (i >= n || n - i > 18) return false;
    int64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false; /* a fraction or an exponent */
        v = v * 10 + (s[i] - '0');
    }
    if (neg) v = -v;
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool kn_json_num(const kn_json *j, int32_t node, double *out) {
    if (node < 0 || j->v[node].type != KN_J_NUM) return false;
    char tmp[64];
    size_t n = KN_MIN((size_t)j->v[node].len, sizeof tmp - 1);
    memcpy(tmp, j->buf + j->v[node].off, n);
    tmp[n] = 0;
    *out = strtod(tmp, NULL);
    return true;
}

bool kn_json_bool(const kn_json *j, int32_t node, bool dflt) {
    kn_jtype t = kn_json_type(j, node);
    return t == KN_J_TRUE ? true : t == KN_J_FALSE ? false : dflt;
}

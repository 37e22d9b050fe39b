/*
 * json_span.c - walking JSON text by spans (see json_span.h).
 */
#include "json_span.h"

#include <string.h>

static size_t skip_ws(const char *p, size_t n, size_t i) {
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) i++;
    return i;
}

/* The index just past the string starting at p[i] == '"', or n when it is not closed. */
static size_t skip_string(const char *p, size_t n, size_t i) {
    for (i++; i < n; i++) {
        if (p[i] == '\\') i++;
        else if (p[i] == '"') return i + 1;
    }
    return n;
}

/* The index just past the value starting at p[i] (no leading whitespace), or i when there is none. */
static size_t skip_value(const char *p, size_t n, size_t i) {
    if (i >= n) return i;
    if (p[i] == '"') return skip_string(p, n, i);
    if (p[i] == '{' || p[i] == '[') {
        size_t depth = 0;
        for (size_t k = i; k < n;) {
            char c = p[k];
            if (c == '"') {
                k = skip_string(p, n, k);
                continue;
            }
            if (c == '{' || c == '[') depth++;
            else if ((c == '}' || c == ']') && --depth == 0) return k + 1;
            k++;
        }
        return i;
    }
    size_t k = i;
    while (k < n && !strchr(",:]} \t\r\n", p[k])) k++;
    return k;
}

/* Calls visit on each element (arrays) or member (objects: key span without quotes, then value)
 * of v until it returns false. */
typedef bool (*visit_fn)(void *user, kn_jspan key, kn_jspan val);

static bool walk(kn_jspan v, char open, visit_fn visit, void *user) {
    size_t i = skip_ws(v.p, v.n, 0);
    if (i >= v.n || v.p[i] != open) return false;
    const char close = open == '{' ? '}' : ']';
    i = skip_ws(v.p, v.n, i + 1);
    if (i < v.n && v.p[i] == close) return true;
    while (i < v.n) {
        kn_jspan key = {NULL, 0};
        if (open == '{') {
            if (v.p[i] != '"') return false;
            size_t e = skip_string(v.p, v.n, i);
            key = (kn_jspan){v.p + i + 1, e - i - 2};
            i = skip_ws(v.p, v.n, e);
            if (i >= v.n || v.p[i] != ':') return false;
            i = skip_ws(v.p, v.n, i + 1);
        }
        size_t e = skip_value(v.p, v.n, i);
        if (e == i) return false;
        if (!visit(user, key, (kn_jspan){v.p + i, e - i})) return true;
        i = skip_ws(v.p, v.n, e);
        if (i < v.n && v.p[i] == close) return true;
        if (i >= v.n || v.p[i] != ',') return false;
        i = skip_ws(v.p, v.n, i + 1);
    }
    return false;
}

typedef struct find_ctx {
    const char *key;
    size_t index, seen;
    kn_jspan *out;
    bool found;
} find_ctx;

static bool visit_member(void *user, kn_jspan key, kn_jspan val) {
    find_ctx *c = user;
    if (key.n == strlen(c->key) && memcmp(key.p, c->key, key.n) == 0) {
        *c->out = val;
        c->found = true;
        return false;
    }
    return true;
}

static bool visit_elem(void *user, kn_jspan key, kn_jspan val) {
    (void)key;
    find_ctx *c = user;
    if (c->seen++ == c->index) {
        *c->out = val;
        c->found = true;
        return false;
    }
    return true;
}

bool kn_jspan_member(kn_jspan v, const char *key, kn_jspan *out) {
    find_ctx c = {.key = key, .out = out};
    return walk(v, '{', visit_member, &c) && c.found;
}

bool kn_jspan_elem(kn_jspan v, size_t i, kn_jspan *out) {
    find_ctx c = {.index = i, .out = out};
    return walk(v, '[', visit_elem, &c) && c.found;
}

size_t kn_jspan_len(kn_jspan v) {
    kn_jspan dummy;
    find_ctx c = {.index = (size_t)-1, .out = &dummy};
    return walk(v, '[', visit_elem, &c) ? c.seen : 0;
}

bool kn_jspan_is_true(kn_jspan v) { return v.n == 4 && memcmp(v.p, "true", 4) == 0; }

size_t kn_jspan_compact(kn_jspan v, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < v.n;) {
        char c = v.p[i];
        if (c == '"') {
            size_t e = skip_string(v.p, v.n, i);
            memcpy(out + o, v.p + i, e - i);
            o += e - i;
            i = e;
        } else {
            if (!(c == ' ' || c == '\t' || c == '\n' || c == '\r')) out[o++] = c;
            i++;
        }
    }
    out[o] = 0;
    return o;
}

/*
 * schema_out.c - the text buffer and rule table the JSON Schema converter writes GBNF into.
 */
#include "sample/schema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kn_sbuf_init(kn_sbuf *b, size_t limit) { *b = (kn_sbuf){.limit = limit}; }

void kn_sbuf_free(kn_sbuf *b) {
    free(b->p);
    *b = (kn_sbuf){0};
}

void kn_sbuf_put(kn_sbuf *b, const char *s, size_t n) {
    if (b->over || b->nomem) return;
    if (b->len + n > b->limit) {
        b->over = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p) {
            b->nomem = true;
            return;
        }
        b->p = p;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n); /* s may be NULL when n is 0 */
    b->len += n;
    b->p[b->len] = 0;
}

void kn_sbuf_puts(kn_sbuf *b, const char *s) { kn_sbuf_put(b, s, strlen(s)); }

void kn_sbuf_cat(kn_sbuf *b, const kn_sbuf *o) {
    b->over |= o->over;
    b->nomem |= o->nomem;
    kn_sbuf_put(b, o->p, o->len);
}

void kn_sbuf_printf(kn_sbuf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        kn_sbuf_put(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->nomem = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    kn_sbuf_put(b, big, (size_t)n);
    free(big);
}

void kn_sbuf_gbnf_lit(kn_sbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            kn_sbuf_put(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            kn_sbuf_printf(b, "\\x%02X", c);
        } else {
            kn_sbuf_put(b, (const char *)&c, 1);
        }
    }
}

void kn_gout_init(kn_gout *g) {
    *g = (kn_gout){0};
    kn_sbuf_init(&g->text, KILN_GRAMMAR_MAX_TEXT); /* nothing larger may run */
}

void kn_gout_free(kn_gout *g) {
    for (size_t i = 0; i < g->capnames; i++) free(g->names[i]);
    free(g->names);
    free(g->next);
    kn_sbuf_free(&g->text);
}

static uint64_t shash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The slot of s in g's name set, -1 when s is not there. */
static long name_slot(const kn_gout *g, const char *s) {
    if (!g->capnames) return -1;
    for (size_t i = shash(s) & (g->capnames - 1); g->names[i]; i = (i + 1) & (g->capnames - 1))
        if (!strcmp(g->names[i], s)) return (long)i;
    return -1;
}

/* Adds s to g's name set; NULL when memory runs out, which fails g (a caller that goes on without
 * the rule must not leave a narrower grammar behind). */
static const char *name_add(kn_gout *g, const char *s) {
    if ((g->nnames + 1) * 2 > g->capnames) {
        size_t nc = g->capnames ? g->capnames * 2 : 256;
        char **nn = calloc(nc, sizeof *nn);
        unsigned *nx = calloc(nc, sizeof *nx);
        if (!nn || !nx) {
            free(nn);
            free(nx);
            g->text.nomem = true;
            return NULL;
        }
        for (size_t i = 0; i < g->capnames; i++) {
            if (!g->names[i]) continue;
            size_t j = shash(g->names[i]) & (nc - 1);
            while (nn[j]) j = (j + 1) & (nc - 1);
            nn[j] = g->names[i];
            nx[j] = g->next[i];
        }
        free(g->names);
        free(g->next);
        g->names = nn;
        g->next = nx;
        g->capnames = nc;
    }
    char *d = strdup(s);
    if (!d) {
        g->text.nomem = true;
        return NULL;
    }
    size_t j = shash(s) & (g->capnames - 1);
    while (g->names[j]) j = (j + 1) & (g->capnames - 1);
    g->names[j] = d;
    g->nnames++;
    return d;
}

const char *kn_gout_name(kn_gout *g, const char *hint) {
    char base[64];
    size_t n = 0;
    for (const char *p = hint; *p && n < 40; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!ok) c = '-';
        if (c == '-' && (n == 0 || base[n - 1] == '-')) continue;
        base[n++] = c;
    }
    while (n && base[n - 1] == '-') n--;
    if (!n) base[n++] = 'r';
    base[n] = 0;
    long at = name_slot(g, base);
    if (at < 0) return name_add(g, base);
    /* base-k for the first k not taken, from where the last search for base stopped (names are never
     * removed, so the ones below stay taken; searching from 1 each time made a schema of 2,000
     * properties quadratic: 0.9 s) */
    char buf[80];
    for (unsigned k = g->next[at] ? g->next[at] : 1;; k++) {
        snprintf(buf, sizeof buf, "%s-%u", base, k);
        if (name_slot(g, buf) >= 0) continue;
        const char *r = name_add(g, buf);
        if (r && (at = name_slot(g, base)) >= 0) g->next[at] = k + 1; /* name_add may have moved it */
        return r;
    }
}

void kn_gout_rule(kn_gout *g, const char *name, const char *body) {
    if (!body) { /* the body's buffer could not be allocated */
        g->text.nomem = true;
        return;
    }
    kn_sbuf_puts(&g->text, name); /* not printf: a body can be hundreds of kilobytes */
    kn_sbuf_puts(&g->text, " ::= ");
    kn_sbuf_puts(&g->text, body);
    kn_sbuf_puts(&g->text, "\n");
    g->nrules++;
}

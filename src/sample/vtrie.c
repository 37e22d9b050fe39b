/*
 * vtrie.c - the vocabulary trie of constrained output (gmask.h; layout in vtrie.h).
 *
 * Built once per vocabulary: the tokens with text are sorted by their bytes, the trie is laid out
 * in preorder from the sorted list in one pass (each token adds the nodes past its common prefix
 * with the previous one), and the subtree summaries are computed bottom-up in a second pass over
 * the nodes in reverse order, then interned (many subtrees share one). A model's trie is built on
 * first use from its tokenizer (the text each token adds to the output, as the detokenizer emits
 * it) and freed with the model.
 */
#include "sample/vtrie.h"

#include "model/model.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct sort_item {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} sort_item;

/* Byte order; a prefix first; equal texts by id. */
static int cmp_item(const void *a, const void *b) {
    const sort_item *x = a, *y = b;
    const uint32_t n = KN_MIN(x->len, y->len);
    const int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

void kn_vtrie_free(kn_vtrie *t) {
    if (!t) return;
    free(t->order);
    free(t->tok_off);
    free(t->tok_len);
    free(t->text);
    free(t->text_bits);
    free(t->eog_bits);
    free(t->eog);
    free(t->nodes);
    free(t->sums);
    free(t->plain_bits);
    kn_vtrie_free(t->exc);
    free(t);
}

/* Lays out the nodes in preorder from the sorted tokens (t->order, texts in t->text). */
static kiln_status build_nodes(kn_vtrie *t, uint64_t total_bytes) {
    t->nodes = kn_calloc((size_t)total_bytes + 2, sizeof *t->nodes);
    uint32_t *path = kn_calloc(KN_VTRIE_MAX_TEXT + 1, sizeof *path);
    if (!t->nodes || !path) {
        free(path);
        return kn_error(KILN_ERR_NOMEM, "out of memory for a vocabulary trie");
    }
    kn_vnode *nd = t->nodes;
    uint32_t n = 1; /* the root */
    path[0] = 0;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    for (int32_t k = 0; k < t->n_text; k++) {
        const int32_t id = t->order[k];
        const uint8_t *p = t->text + t->tok_off[id];
        const uint32_t len = t->tok_len[id];
        uint32_t lcp = 0;
        while (lcp < len && lcp < prev_len && p[lcp] == prev[lcp]) lcp++;
        for (uint32_t d = prev_len; d > lcp; d--) nd[path[d]].skip = n; /* close the old branch */
        for (uint32_t d = lcp + 1; d <= len; d++) {
            nd[n] = (kn_vnode){.lo = (uint32_t)k, .depth = (uint16_t)d, .byte = p[d - 1]};
            path[d] = n++;
        }
        prev = p;
        prev_len = len;
        if (len > t->max_depth) t->max_depth = len;
    }
    for (uint32_t d = prev_len; d > 0; d--) nd[path[d]].skip = n;
    nd[0].skip = n;
    nd[n] = (kn_vnode){.lo = (uint32_t)t->n_text, .skip = n};
    t->n_nodes = n;
    free(path);
    kn_vnode *shrunk = realloc(t->nodes, ((size_t)n + 1) * sizeof *t->nodes);
    if (shrunk) t->nodes = shrunk;
    return KILN_OK;
}

/* What a subtree holds, while summaries are computed. */
typedef struct sum_work {
    uint64_t ascii[2];
    uint8_t valid;  /* bit q: every text below the node is well-formed from validator state q */
    uint64_t leads; /* lead bytes below (kn_u8_lead_bit) */
} sum_work;

static uint64_t hash_sum(const kn_vsum *s) {
    uint64_t h = s->ascii[0] * 0x9E3779B97F4A7C15ull ^
                 (s->ascii[1] + s->valid + s->leads * 0x165667B19E3779F9ull) * 0xC2B2AE3D27D4EB4Full;
    return h ^ (h >> 29);
}

/* Computes every node's subtree summary and depth bottom-up and interns the summaries of nodes with
 * tokens below them. */
static kiln_status build_sums(kn_vtrie *t) {
    const uint32_t n = t->n_nodes;
    kn_vnode *nd = t->nodes;
    uint32_t n_big = 0;
    for (uint32_t i = 0; i < n; i++) n_big += nd[i].skip > i + 1;
    uint64_t cap = 16;
    while (cap < 2ull * n_big) cap <<= 1;
    sum_work *w = kn_calloc(n, sizeof *w);
    uint32_t *slots = kn_calloc(cap, sizeof *slots); /* sums index, 0 = empty */
    t->sums = kn_calloc((size_t)n_big + 1, sizeof *t->sums);
    if (!w || !slots || !t->sums) {
        free(w);
        free(slots);
        return kn_error(KILN_ERR_NOMEM, "out of memory for a vocabulary trie");
    }
    t->n_sums = 1;
    for (uint32_t i = n; i-- > 0;) {
        sum_work *s = &w[i];
        s->valid = (uint8_t)((1u << KN_U8_STATES) - 1); /* a leaf: nothing below */
        for (uint32_t c = i + 1; c < nd[i].skip; c = nd[c].skip) {
            const uint8_t b = nd[c].byte;
            const sum_work *cw = &w[c];
            s->ascii[0] |= cw->ascii[0];
            s->ascii[1] |= cw->ascii[1];
            if (b < 128) s->ascii[b >> 6] |= 1ull << (b & 63);
            s->leads |= cw->leads | kn_u8_lead_bit(b);
            nd[i].below = (uint8_t)KN_MAX(nd[i].below, KN_MIN(nd[c].below + 1, KN_VTRIE_BELOW_MAX));
            for (int q = 0; q < KN_U8_STATES; q++) {
                const int q2 = kn_u8_next(q, b);
                if (q2 < 0 || !(cw->valid >> q2 & 1)) s->valid &= (uint8_t) ~(1u << q);
            }
        }
        if (nd[i].skip == i + 1) continue; /* a leaf */
        kn_vsum key = {.ascii = {s->ascii[0], s->ascii[1]}, .leads = s->leads, .valid = s->valid};
        uint64_t h = hash_sum(&key) & (cap - 1);
        while (slots[h]) {
            const kn_vsum *o = &t->sums[slots[h]];
            if (o->ascii[0] == key.ascii[0] && o->ascii[1] == key.ascii[1] && o->valid == key.valid &&
                o->leads == key.leads)
                break;
            h = (h + 1) & (cap - 1);
        }
        if (!slots[h]) {
            slots[h] = t->n_sums;
            t->sums[t->n_sums++] = key;
        }
        nd[i].sum = slots[h];
    }
    free(w);
    free(slots);
    kn_vsum *shrunk = realloc(t->sums, (size_t)t->n_sums * sizeof *t->sums);
    if (shrunk) t->sums = shrunk;
    return KILN_OK;
}

static kiln_status vtrie_new(int32_t n, const char *const *text, const uint32_t *len, const int32_t *eog, int32_t n_eog,
                             bool with_exc, kn_vtrie **out);

/* Whether a token's text is plain (vtrie.h): printable ASCII but '"' and '\\', and well-formed UTF-8
 * (the last character may be cut). */
static bool is_plain(const uint8_t *p, uint32_t len) {
    int q = KN_U8_BOUNDARY;
    for (uint32_t k = 0; k < len; k++) {
        const uint8_t b = p[k];
        if (q == KN_U8_BOUNDARY && b < 0x80) {
            if (b < 0x20 || b == 0x7F || b == '"' || b == '\\') return false;
            continue;
        }
        if ((q = kn_u8_next(q, b)) < 0) return false;
    }
    return true;
}

/* The most characters of a plain token, ASCII [0] or not [1]: longer ones are exceptions, so that
 * the chains of states the plain summaries are checked over stay short. */
static const uint32_t PLAIN_MAX_CHARS[2] = {16, 6};

/* Splits the tokens with text into plain ones (bitmap, summary) and the exception trie. */
static kiln_status build_plain(kn_vtrie *t) {
    const size_t W = (size_t)KN_MAX(t->words, 1);
    const int32_t n = t->n_vocab;
    t->plain_bits = kn_calloc(W, sizeof *t->plain_bits);
    const char **text = kn_calloc((size_t)KN_MAX(n, 1), sizeof *text);
    uint32_t *len = kn_calloc((size_t)KN_MAX(n, 1), sizeof *len);
    kiln_status st = KILN_OK;
    if (!t->plain_bits || !text || !len) {
        st = kn_error(KILN_ERR_NOMEM, "out of memory for a vocabulary trie");
        goto done;
    }
    int32_t n_exc = 0;
    for (int32_t id = 0; id < n; id++) {
        const uint8_t *p = t->text + t->tok_off[id];
        const uint32_t l = t->tok_len[id];
        if (!l) continue;
        uint32_t chars = 0, g = 0;
        for (uint32_t k = 0; k < l; k++) {
            chars += p[k] < 0x80 || p[k] >= 0xC0;
            g |= p[k] >= 0x80;
        }
        if (!is_plain(p, l) || chars > PLAIN_MAX_CHARS[g]) {
            text[id] = (const char *)p;
            len[id] = l;
            n_exc++;
            continue;
        }
        t->plain_bits[id >> 6] |= 1ull << (id & 63);
        t->n_plain++;
        kn_vsum *ps = &t->plain_sum[g];
        t->plain_below[g] = (uint8_t)KN_MAX(t->plain_below[g], KN_MIN(chars, KN_VTRIE_BELOW_MAX));
        for (uint32_t k = 0; k < l; k++) {
            if (p[k] < 128) ps->ascii[p[k] >> 6] |= 1ull << (p[k] & 63);
            ps->leads |= kn_u8_lead_bit(p[k]);
        }
    }
    t->plain_sum[0].valid = t->plain_sum[1].valid = 1 << KN_U8_BOUNDARY;
    if (n_exc && t->n_plain) st = vtrie_new(n, text, len, NULL, 0, false, &t->exc);
done:
    free(text);
    free(len);
    return st;
}

kiln_status kn_vtrie_new(int32_t n, const char *const *text, const uint32_t *len, const int32_t *eog, int32_t n_eog,
                         kn_vtrie **out) {
    return vtrie_new(n, text, len, eog, n_eog, true, out);
}

/* kn_vtrie_new; with_exc: also the plain tokens and the exception trie (not for that trie itself). */
static kiln_status vtrie_new(int32_t n, const char *const *text, const uint32_t *len, const int32_t *eog, int32_t n_eog,
                             bool with_exc, kn_vtrie **out) {
    *out = NULL;
    if (n < 0 || n_eog < 0 || (n && (!text || !len)) || (n_eog && !eog))
        return kn_error(KILN_ERR_INVALID_ARG, "a vocabulary trie needs n >= 0 texts and lengths");
    kn_vtrie *t = kn_calloc(1, sizeof *t);
    if (!t) return KILN_ERR_NOMEM;
    t->n_vocab = n;
    t->words = (n + 63) / 64;
    const size_t W = (size_t)KN_MAX(t->words, 1);
    t->tok_off = kn_calloc((size_t)KN_MAX(n, 1), sizeof *t->tok_off);
    t->tok_len = kn_calloc((size_t)KN_MAX(n, 1), sizeof *t->tok_len);
    t->text_bits = kn_calloc(W, sizeof *t->text_bits);
    t->eog_bits = kn_calloc(W, sizeof *t->eog_bits);
    t->eog = kn_calloc((size_t)KN_MAX(n_eog, 1), sizeof *t->eog);
    sort_item *items = kn_calloc((size_t)KN_MAX(n, 1), sizeof *items);
    kiln_status st = KILN_OK;
    if (!t->tok_off || !t->tok_len || !t->text_bits || !t->eog_bits || !t->eog || !items) {
        st = kn_error(KILN_ERR_NOMEM, "out of memory for a vocabulary trie");
        goto done;
    }
    for (int32_t i = 0; i < n_eog; i++) {
        if (eog[i] < 0 || eog[i] >= n) {
            st = kn_error(KILN_ERR_INVALID_ARG, "end-of-generation token %d is outside the vocabulary", eog[i]);
            goto done;
        }
        t->eog_bits[eog[i] >> 6] |= 1ull << (eog[i] & 63);
    }
    for (int32_t i = 0; i < n; i++)
        if (t->eog_bits[i >> 6] >> (i & 63) & 1) t->eog[t->n_eog++] = i;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (len[i] > KN_VTRIE_MAX_TEXT) {
            st = kn_error(KILN_ERR_INVALID_ARG, "token %d is %u bytes long (at most %d)", i, len[i], KN_VTRIE_MAX_TEXT);
            goto done;
        }
        if (len[i] && !text[i]) {
            st = kn_error(KILN_ERR_INVALID_ARG, "token %d has a length but no text", i);
            goto done;
        }
        if (!(t->eog_bits[i >> 6] >> (i & 63) & 1)) total += len[i];
    }
    if (total >= UINT32_MAX - 2) {
        st = kn_error(KILN_ERR_INVALID_ARG, "the vocabulary's texts are too long for a trie");
        goto done;
    }
    t->text = malloc((size_t)KN_MAX(total, 1));
    if (!t->text) {
        st = kn_error(KILN_ERR_NOMEM, "out of memory for a vocabulary trie");
        goto done;
    }
    uint32_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!len[i] || (t->eog_bits[i >> 6] >> (i & 63) & 1)) continue; /* never text */
        memcpy(t->text + off, text[i], len[i]);
        t->tok_off[i] = off;
        t->tok_len[i] = (uint16_t)len[i];
        t->text_bits[i >> 6] |= 1ull << (i & 63);
        items[t->n_text++] = (sort_item){t->text + off, len[i], i};
        off += len[i];
    }
    qsort(items, (size_t)t->n_text, sizeof *items, cmp_item);
    t->order = kn_calloc((size_t)KN_MAX(t->n_text, 1), sizeof *t->order);
    if (!t->order) {
        st = kn_error(KILN_ERR_NOMEM, "out of memory for a vocabulary trie");
        goto done;
    }
    for (int32_t k = 0; k < t->n_text; k++) t->order[k] = items[k].id;
    if (!(st = build_nodes(t, total)) && !(st = build_sums(t)) && with_exc) st = build_plain(t);
done:
    free(items);
    if (st) {
        kn_vtrie_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

/* The trie of a tokenizer: each token's text as the detokenizer emits it (control and unused tokens
 * have none, unless special: then they have theirs), end-of-generation tokens without text. */
static kiln_status vtrie_of_tokenizer(const kn_tokenizer *tok, bool special, kn_vtrie **out) {
    const int32_t n = kn_tok_n_vocab(tok);
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += kn_token_piece(tok, i, special, NULL, 0);
    char *pool = malloc(KN_MAX(total, 1));
    const char **text = kn_calloc((size_t)KN_MAX(n, 1), sizeof *text);
    uint32_t *len = kn_calloc((size_t)KN_MAX(n, 1), sizeof *len);
    int32_t *eog = kn_calloc((size_t)KN_MAX(n, 1), sizeof *eog);
    kiln_status st = KILN_ERR_NOMEM;
    if (pool && text && len && eog) {
        size_t off = 0;
        int32_t n_eog = 0;
        for (int32_t i = 0; i < n; i++) {
            const bool is_eog = kn_tok_is_eog(tok, i);
            if (is_eog) eog[n_eog++] = i;
            const size_t k = is_eog ? 0 : kn_token_piece(tok, i, special, pool + off, total - off);
            text[i] = pool + off;
            len[i] = (uint32_t)k;
            off += k;
        }
        st = kn_vtrie_new(n, text, len, eog, n_eog, out);
    } else {
        kn_error(st, "out of memory for a vocabulary trie");
    }
    free(pool);
    free(text);
    free(len);
    free(eog);
    return st;
}

/* Serializes first builds across models (a build takes tens of milliseconds, once per model). */
static pthread_mutex_t build_mu = PTHREAD_MUTEX_INITIALIZER;

/* The trie in slot (built on first use). */
static const kn_vtrie *model_trie(const kiln_model *m, kn_vtrie *_Atomic *slot, bool special) {
    kn_vtrie *t = atomic_load_explicit(slot, memory_order_acquire);
    if (t) return t;
    pthread_mutex_lock(&build_mu);
    t = atomic_load_explicit(slot, memory_order_relaxed);
    if (!t && vtrie_of_tokenizer(m->tok, special, &t) == KILN_OK) atomic_store_explicit(slot, t, memory_order_release);
    pthread_mutex_unlock(&build_mu);
    return t;
}

const kn_vtrie *kn_model_vtrie(const kiln_model *m) {
    kiln_model *mm = (kiln_model *)m; /* the trie slots are the model's lazily built parts */
    return model_trie(m, &mm->vtrie, false);
}

const kn_vtrie *kn_model_vtrie_special(const kiln_model *m) {
    kiln_model *mm = (kiln_model *)m;
    return model_trie(m, &mm->vtrie_special, true);
}

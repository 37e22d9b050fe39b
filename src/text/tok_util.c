/*
 * tok_util.c - the data structures under the tokenizers: a byte hash, the token-text -> id map and
 * the BPE merge-pair -> rank map (open addressing over the tokenizer's own string pools, so a lookup
 * allocates nothing), a 64-bit-keyed map for the special-token trie, growable vectors and the binary
 * heap of candidate bigram merges used by both SPM and BPE.
 */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

uint64_t kn_hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xc4ceb9fe1a85ec53ull);
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    /* the last n (< 8) bytes as a little-endian word, read without a variable-length copy */
    uint64_t w = 0;
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, s, 4);
        memcpy(&hi, s + n - 4, 4);
        w = lo | (uint64_t)hi << (8 * (n - 4)); /* the overlap holds the same bytes in both */
    } else if (n) {
        w = (uint64_t)s[0] | (uint64_t)s[n / 2] << (8 * (n / 2)) | (uint64_t)s[n - 1] << (8 * (n - 1));
    }
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

/* Final avalanche so that the low bits used for the slot index depend on every input byte. */
static inline uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* Smallest power of two >= 2 * n (at least 16); 0 on overflow. */
static uint64_t table_size(uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) {
        if (cap > (UINT64_MAX >> 2)) return 0;
        cap <<= 1;
    }
    return cap;
}

/* ---- growable vectors ------------------------------------------------------------------------- */

bool kn_reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) {
            kn_error(KILN_ERR_NOMEM, "vector too large");
            return false;
        }
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elem) {
        kn_error(KILN_ERR_NOMEM, "vector too large");
        return false;
    }
    void *q = realloc(*p, ncap * elem);
    if (!q) {
        kn_error(KILN_ERR_NOMEM, "out of memory (%zu bytes)", ncap * elem);
        return false;
    }
    *p = q;
    *cap = ncap;
    return true;
}

bool kn_ivec_push(kn_ivec *a, int32_t x) {
    if (a->n == a->cap && !kn_reserve((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) return false;
    a->v[a->n++] = x;
    return true;
}

bool kn_bvec_append(kn_bvec *a, const void *p, size_t n) {
    if (n == 0) return true;
    if (a->n + n < a->n) {
        kn_error(KILN_ERR_NOMEM, "vector too large");
        return false;
    }
    if (!kn_reserve((void **)&a->v, &a->cap, a->n + n, 1)) return false;
    memcpy(a->v + a->n, p, n);
    a->n += n;
    return true;
}

/* ---- text -> id ------------------------------------------------------------------------------- */

kiln_status kn_tok_build_index(kn_tokenizer *t) {
    uint64_t cap = table_size((uint64_t)t->n_vocab);
    if (!cap) return kn_error(KILN_ERR_NOMEM, "vocabulary index too large");
    t->by_text.slots = malloc(cap * sizeof(int32_t));
    if (!t->by_text.slots) return kn_error(KILN_ERR_NOMEM, "out of memory for the vocabulary index");
    memset(t->by_text.slots, 0xff, cap * sizeof(int32_t));
    t->by_text.mask = cap - 1;
    uint64_t n_dup = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const kn_tok_info *ti = &t->tok[id];
        if (ti->text_len == 0) continue; /* an empty text can never be looked up */
        const char *s = t->text + ti->text_off;
        uint64_t i = mix(kn_hash_bytes(s, ti->text_len)) & t->by_text.mask;
        for (;;) {
            int32_t other = t->by_text.slots[i];
            if (other < 0) {
                t->by_text.slots[i] = id;
                break;
            }
            const kn_tok_info *to = &t->tok[other];
            if (to->text_len == ti->text_len && memcmp(t->text + to->text_off, s, ti->text_len) == 0) {
                n_dup++; /* duplicate text: the lower id keeps it */
                break;
            }
            i = (i + 1) & t->by_text.mask;
        }
    }
    if (n_dup)
        KN_LOGW("tokenizer: %llu duplicate token texts; the lowest id is used for each", (unsigned long long)n_dup);
    return KILN_OK;
}

int32_t kn_tok_lookup(const kn_tokenizer *t, const char *s, size_t n) {
    if (n == 0 || n > t->max_token_len) return -1;
    uint64_t i = mix(kn_hash_bytes(s, n)) & t->by_text.mask;
    for (;;) {
        int32_t id = t->by_text.slots[i];
        if (id < 0) return -1;
        const kn_tok_info *ti = &t->tok[id];
        if (ti->text_len == n && memcmp(t->text + ti->text_off, s, n) == 0) return id;
        i = (i + 1) & t->by_text.mask;
    }
}

/* ---- merge pair -> rank ----------------------------------------------------------------------- */

/* The hash of a merge pair combines the hashes of its two parts (kn_hash_bytes of each), so a
 * lookup from two separate symbols needs no concatenated string, and a symbol is hashed once. */
static uint64_t pair_hash(uint64_t ha, uint64_t hb) { return mix(ha * 0x9E3779B97F4A7C15ull + hb); }

static bool merge_is(const kn_tokenizer *t, int32_t rank, const char *a, size_t an, const char *b, size_t bn) {
    const char *m = t->merge_text + t->merge_off[rank];
    return t->merge_a_len[rank] == an && t->merge_len[rank] == an + 1 + bn && memcmp(m, a, an) == 0 &&
           memcmp(m + an + 1, b, bn) == 0;
}

kiln_status kn_bpe_build_index(kn_tokenizer *t) {
    uint64_t cap = table_size(t->n_merges);
    if (!cap) return kn_error(KILN_ERR_NOMEM, "merge index too large");
    t->merge_slots = malloc(cap * sizeof(int32_t));
    if (!t->merge_slots) return kn_error(KILN_ERR_NOMEM, "out of memory for the merge index");
    memset(t->merge_slots, 0xff, cap * sizeof(int32_t));
    t->merge_mask = cap - 1;
    for (uint32_t r = 0; r < t->n_merges; r++) {
        const char *a = t->merge_text + t->merge_off[r];
        size_t an = t->merge_a_len[r], bn = t->merge_len[r] - an - 1;
        const char *b = a + an + 1;
        uint64_t i = pair_hash(kn_hash_bytes(a, an), kn_hash_bytes(b, bn)) & t->merge_mask;
        for (;;) {
            int32_t other = t->merge_slots[i];
            if (other < 0) {
                t->merge_slots[i] = (int32_t)r;
                break;
            }
            if (merge_is(t, other, a, an, b, bn)) break; /* duplicate: the lower rank wins */
            i = (i + 1) & t->merge_mask;
        }
    }
    return KILN_OK;
}

/* The merge rank of symbols a and b of w: -1 when there is no such merge. */
static int32_t bpe_rank(const kn_tokenizer *t, const char *w, const kn_symbol *sa, const kn_symbol *sb) {
    const char *a = w + sa->off, *b = w + sb->off;
    const size_t an = sa->n, bn = sb->n;
    if (!t->merge_slots || an + bn + 1 > t->max_merge_len) return -1;
    uint64_t i = pair_hash(sa->h, sb->h) & t->merge_mask;
    for (;;) {
        int32_t r = t->merge_slots[i];
        if (r < 0) return -1;
        if (merge_is(t, r, a, an, b, bn)) return r;
        i = (i + 1) & t->merge_mask;
    }
}

/* Pushes the bigram of symbols l and r when they have a merge (either may be -1: none). */
static bool add_bigram(const kn_tokenizer *t, const char *w, const kn_symbol *sym, kn_heap *heap, int32_t l,
                       int32_t r) {
    if (l < 0 || r < 0) return true;
    const int32_t rank = bpe_rank(t, w, &sym[l], &sym[r]);
    return rank < 0 ||
           kn_heap_push(heap, (kn_bigram){.prio = -rank, .left = l, .right = r, .size = sym[l].n + sym[r].n});
}

bool kn_bpe_merge(const kn_tokenizer *t, const char *w, kn_symbol *sym, int32_t n_sym, kn_heap *heap) {
    for (int32_t i = 0; i < n_sym; i++) sym[i].h = kn_hash_bytes(w + sym[i].off, sym[i].n);
    heap->n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        if (!add_bigram(t, w, sym, heap, i - 1, i)) return false;
    while (heap->n) {
        kn_bigram bg = kn_heap_pop(heap);
        kn_symbol *l = &sym[bg.left], *r = &sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size || l->next != bg.right) continue; /* stale */
        l->n += r->n;
        l->h = kn_hash_bytes(w + l->off, l->n);
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = bg.left;
        if (!add_bigram(t, w, sym, heap, l->prev, bg.left) || !add_bigram(t, w, sym, heap, bg.left, l->next))
            return false;
    }
    return true;
}

/* ---- u64 -> i32 ------------------------------------------------------------------------------- */

kiln_status kn_u64map_init(kn_u64map *m, uint64_t expected) {
    memset(m, 0, sizeof *m);
    uint64_t cap = table_size(expected);
    if (!cap) return kn_error(KILN_ERR_NOMEM, "map too large");
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = calloc(cap, sizeof *m->vals);
    if (!m->keys || !m->vals) {
        kn_u64map_free(m);
        return kn_error(KILN_ERR_NOMEM, "out of memory for a map of %llu entries", (unsigned long long)expected);
    }
    m->mask = cap - 1;
    return KILN_OK;
}

static uint64_t u64_hash(uint64_t k) { return mix(k * 0x9E3779B97F4A7C15ull); }

kiln_status kn_u64map_put(kn_u64map *m, uint64_t key, int32_t val) {
    if (2 * (m->n + 1) > m->mask + 1) { /* grow to keep the load factor at most 1/2 */
        kn_u64map bigger;
        kiln_status st = kn_u64map_init(&bigger, 2 * (m->n + 1));
        if (st) return st;
        for (uint64_t i = 0; i <= m->mask; i++)
            if (m->keys[i]) {
                st = kn_u64map_put(&bigger, m->keys[i] - 1, m->vals[i]);
                if (st) {
                    kn_u64map_free(&bigger);
                    return st;
                }
            }
        kn_u64map_free(m);
        *m = bigger;
    }
    uint64_t i = u64_hash(key) & m->mask;
    while (m->keys[i] && m->keys[i] != key + 1) i = (i + 1) & m->mask;
    if (!m->keys[i]) {
        m->keys[i] = key + 1;
        m->n++;
    }
    m->vals[i] = val;
    return KILN_OK;
}

int32_t kn_u64map_get(const kn_u64map *m, uint64_t key) {
    if (!m->keys) return -1;
    uint64_t i = u64_hash(key) & m->mask;
    while (m->keys[i]) {
        if (m->keys[i] == key + 1) return m->vals[i];
        i = (i + 1) & m->mask;
    }
    return -1;
}

void kn_u64map_free(kn_u64map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- bigram heap ------------------------------------------------------------------------------ */

static inline bool better(const kn_bigram *a, const kn_bigram *b) {
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

bool kn_heap_push(kn_heap *h, kn_bigram b) {
    if (h->n == h->cap && !kn_reserve((void **)&h->v, &h->cap, h->n + 1, sizeof *h->v)) return false;
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!better(&b, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = b;
    return true;
}

kn_bigram kn_heap_pop(kn_heap *h) {
    kn_bigram top = h->v[0];
    kn_bigram last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(&h->v[c + 1], &h->v[c])) c++;
        if (!better(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = last;
    return top;
}

/*
 * tok_tj_enc.c - encoding with a tokenizer built from tokenizer.json, as the tokenizers library does:
 *   1. the text is cut at added tokens (leftmost-longest over a byte trie; special ones only with
 *      parse_special), an lstrip / rstrip token eating the whitespace beside it;
 *   2. each piece in between is normalized, cut again at the added tokens whose text is matched
 *      after normalization ("normalized": true), pre-tokenized into words (tok_tj_pre.c);
 *   3. each word goes through the model: BPE (merge ranks over characters, lowest rank first, ties
 *      leftmost; ignore_merges; a symbol not in the vocabulary becomes its <0xNN> byte tokens with
 *      byte_fallback, else the unknown token, else nothing), WordPiece (greedy longest match with the
 *      continuing prefix) or Unigram (unigram.c); fuse_unk joins runs of unknown tokens. Where the
 *      model needs an unknown token it lacks, the encode fails instead (kn_tj_push_unk).
 * The tries live here too.
 */
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tries ------------------------------------------------------------------------------------ */

kiln_status kn_tj_trie_add(kn_tj_trie *tr, const char *s, size_t n, int32_t id) {
    kiln_status st;
    if (!tr->edges.keys && (st = kn_u64map_init(&tr->edges, 256))) return st;
    if (tr->nodes == 0) {
        if (!(tr->term = malloc(16 * sizeof *tr->term))) return KILN_ERR_NOMEM;
        tr->cap = 16;
        tr->term[0] = -1;
        tr->nodes = 1;
    }
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = ((uint64_t)node << 8) | (uint8_t)s[i];
        int32_t child = kn_u64map_get(&tr->edges, key);
        if (child < 0) {
            if (tr->nodes == INT32_MAX) return kn_error(KILN_ERR_FORMAT, "too many added tokens");
            if (tr->nodes == tr->cap) {
                int32_t ncap = tr->cap > INT32_MAX / 2 ? INT32_MAX : tr->cap * 2;
                int32_t *t2 = realloc(tr->term, (size_t)ncap * sizeof *t2);
                if (!t2) return KILN_ERR_NOMEM;
                tr->term = t2;
                tr->cap = ncap;
            }
            child = tr->nodes++;
            tr->term[child] = -1;
            if ((st = kn_u64map_put(&tr->edges, key, child))) return st;
        }
        node = child;
    }
    if (n && tr->term[node] < 0) tr->term[node] = id;
    if (n) tr->first[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
    return KILN_OK;
}

int32_t kn_tj_trie_match(const kn_tj_trie *tr, const kn_tokenizer *t, const uint8_t *s, size_t len, bool parse_special,
                         size_t *mlen) {
    if (tr->nodes == 0 || !(tr->first[s[0] >> 3] & (1u << (s[0] & 7)))) return -1;
    int32_t node = 0, best = -1;
    for (size_t k = 0; k < len; k++) {
        node = kn_u64map_get(&tr->edges, ((uint64_t)node << 8) | s[k]);
        if (node < 0) break;
        int32_t id = tr->term[node];
        if (id >= 0 && (parse_special || !(t->tok[id].attr & KN_ATTR_CONTROL))) {
            best = id;
            *mlen = k + 1;
        }
    }
    return best;
}

void kn_tj_trie_free(kn_tj_trie *tr) {
    kn_u64map_free(&tr->edges);
    free(tr->term);
    memset(tr, 0, sizeof *tr);
}

/* ---- sections --------------------------------------------------------------------------------- */

/* A piece of a text: raw text (id < 0) or an added token. */
typedef struct piece {
    size_t off, len;
    int32_t id;
} piece;

typedef struct piecevec {
    piece *v;
    size_t n, cap;
} piecevec;

static bool add_piece(piecevec *p, size_t off, size_t len, int32_t id) {
    if (p->n == p->cap && !kn_reserve((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v)) return false;
    p->v[p->n++] = (piece){off, len, id};
    return true;
}

static size_t ws_len_fwd(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t adv;
        uint32_t cp = kn_utf8_decode((const uint8_t *)s + i, n - i, &adv);
        if (cp == KN_UTF8_INVALID || !kn_ucd_is_whitespace(cp)) break;
        i += adv;
    }
    return i;
}

static size_t ws_len_back(const char *s, size_t n) {
    size_t e = n;
    while (e > 0) {
        size_t b = e - 1;
        while (b > 0 && ((uint8_t)s[b] & 0xC0) == 0x80 && e - b < 4) b--;
        size_t adv;
        uint32_t cp = kn_utf8_decode((const uint8_t *)s + b, e - b, &adv);
        if (cp == KN_UTF8_INVALID || b + adv != e || !kn_ucd_is_whitespace(cp)) break;
        e = b;
    }
    return n - e;
}

/* Cuts s[0..n) at the tokens of trie tr into pieces (text pieces may be empty after stripping). */
static kiln_status split_added(const kn_tokenizer *t, const kn_tj_trie *tr, const char *s, size_t n, bool parse_special,
                               piecevec *out) {
    out->n = 0;
    size_t start = 0;
    for (size_t i = 0; i < n;) {
        size_t ml = 0;
        int32_t id = tr->nodes ? kn_tj_trie_match(tr, t, (const uint8_t *)s + i, n - i, parse_special, &ml) : -1;
        if (id < 0) {
            i++;
            continue;
        }
        if (!add_piece(out, start, i - start, -1) || !add_piece(out, i, ml, id)) return KILN_ERR_NOMEM;
        i += ml;
        start = i;
    }
    if (!add_piece(out, start, n - start, -1)) return KILN_ERR_NOMEM;
    /* lstrip / rstrip eat the whitespace of the text beside the token */
    for (size_t k = 0; k < out->n; k++) {
        if (out->v[k].id < 0) continue;
        uint8_t attr = t->tok[out->v[k].id].attr;
        if ((attr & KN_ATTR_LSTRIP) && k > 0)
            out->v[k - 1].len -= ws_len_back(s + out->v[k - 1].off, out->v[k - 1].len);
        if ((attr & KN_ATTR_RSTRIP) && k + 1 < out->n) {
            size_t w = ws_len_fwd(s + out->v[k + 1].off, out->v[k + 1].len);
            out->v[k + 1].off += w;
            out->v[k + 1].len -= w;
        }
    }
    return KILN_OK;
}

/* ---- models ----------------------------------------------------------------------------------- */

typedef struct enc_state {
    const kn_tokenizer *t;
    kn_bvec word;
    kn_symbol *sym;
    size_t sym_cap;
    kn_heap heap;
    piecevec p1, p2;
    kn_bvec norm;
    kn_tj_words words, tmp;
} enc_state;

kiln_status kn_tj_push_unk(const kn_tokenizer *t, const char *s, size_t n, kn_ivec *out) {
    if (t->tj->unk >= 0) return kn_ivec_push(out, t->tj->unk) ? KILN_OK : KILN_ERR_NOMEM;
    return t->tj->unk_required ? kn_tj_no_unk(s, n) : KILN_OK;
}

kiln_status kn_tj_no_unk(const char *s, size_t n) {
    size_t adv;
    const uint32_t cp = kn_utf8_decode((const uint8_t *)s, n, &adv);
    char at[24];
    if (cp == KN_UTF8_INVALID) snprintf(at, sizeof at, "the byte 0x%02X", (unsigned)(uint8_t)s[0]);
    else snprintf(at, sizeof at, "U+%04X", (unsigned)cp);
    return kn_error(KILN_ERR_INVALID_ARG,
                    "the tokenizer cannot encode the text at %s: no piece of its vocabulary covers it and its "
                    "tokenizer.json has no unknown token",
                    at);
}

/* Emits the token of one final BPE symbol (see the file comment). */
static kiln_status bpe_emit(const kn_tokenizer *t, const char *s, size_t n, kn_ivec *out) {
    int32_t id = kn_tok_lookup(t, s, n);
    if (id >= 0) return kn_ivec_push(out, id) ? KILN_OK : KILN_ERR_NOMEM;
    if (t->tj->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < n && all; i++) all = t->byte_tok[(uint8_t)s[i]] >= 0;
        if (all) {
            for (size_t i = 0; i < n; i++)
                if (!kn_ivec_push(out, t->byte_tok[(uint8_t)s[i]])) return KILN_ERR_NOMEM;
            return KILN_OK;
        }
    }
    return kn_tj_push_unk(t, s, n, out);
}

static kiln_status bpe_word(enc_state *st, const char *w, size_t wn, kn_ivec *out) {
    const kn_tokenizer *t = st->t;
    if (t->ignore_merges) {
        int32_t id = kn_tok_lookup(t, w, wn);
        if (id >= 0) return kn_ivec_push(out, id) ? KILN_OK : KILN_ERR_NOMEM;
    }
    st->word.n = 0;
    if (!kn_bvec_append(&st->word, w, wn) ||
        (t->tj->eow_suffix && !kn_bvec_append(&st->word, t->tj->eow_suffix, t->tj->eow_suffix_len)))
        return KILN_ERR_NOMEM;
    size_t n = st->word.n;
    if (n > INT32_MAX || !kn_reserve((void **)&st->sym, &st->sym_cap, n, sizeof *st->sym)) return KILN_ERR_NOMEM;
    int32_t n_sym = 0;
    for (size_t off = 0; off < wn;) {
        size_t cl;
        kn_utf8_decode((const uint8_t *)w + off, wn - off, &cl);
        st->sym[n_sym] = (kn_symbol){.prev = n_sym - 1, .next = n_sym + 1, .off = (uint32_t)off, .n = (uint32_t)cl};
        n_sym++;
        off += cl;
    }
    if (n_sym == 0) return KILN_OK;
    st->sym[n_sym - 1].n += (uint32_t)(n - wn); /* the end-of-word suffix belongs to the last character */
    st->sym[n_sym - 1].next = -1;
    if (!kn_bpe_merge(t, st->word.v, st->sym, n_sym, &st->heap)) return KILN_ERR_NOMEM;
    kiln_status rc = KILN_OK;
    for (int32_t i = 0; rc == KILN_OK && i != -1; i = st->sym[i].next)
        rc = bpe_emit(t, st->word.v + st->sym[i].off, st->sym[i].n, out);
    return rc;
}

static kiln_status wordpiece_word(enc_state *st, const char *w, size_t wn, kn_ivec *out) {
    const kn_tokenizer *t = st->t;
    const kn_tj *tj = t->tj;
    size_t chars = 0;
    for (size_t i = 0; i < wn; chars++) {
        size_t adv;
        kn_utf8_decode((const uint8_t *)w + i, wn - i, &adv);
        i += adv;
    }
    if (chars > (size_t)tj->max_word_chars) return kn_tj_push_unk(t, w, wn, out);
    size_t mark = out->n;
    for (size_t start = 0; start < wn;) {
        int32_t found = -1;
        size_t end = wn;
        while (end > start) {
            st->word.n = 0;
            if ((start > 0 && !kn_bvec_append(&st->word, tj->cont_prefix, tj->cont_prefix_len)) ||
                !kn_bvec_append(&st->word, w + start, end - start))
                return KILN_ERR_NOMEM;
            found = kn_tok_lookup(t, st->word.v, st->word.n);
            if (found >= 0) break;
            /* one character shorter */
            end--;
            while (end > start && ((uint8_t)w[end] & 0xC0) == 0x80) end--;
        }
        if (found < 0) {
            out->n = mark;
            return kn_tj_push_unk(t, w, wn, out);
        }
        if (!kn_ivec_push(out, found)) return KILN_ERR_NOMEM;
        start = end;
    }
    return KILN_OK;
}

/* Encodes one piece of text that holds no added token of the raw trie. */
static kiln_status encode_text(enc_state *st, const char *s, size_t n, size_t section_index, bool parse_special,
                               kn_ivec *out) {
    const kn_tokenizer *t = st->t;
    const kn_tj *tj = t->tj;
    kiln_status rc = kn_tj_normalize(tj, s, n, &st->norm);
    if (rc) return rc;
    if (st->norm.n == 0) return KILN_OK;
    const char *ns = st->norm.v;
    if ((rc = split_added(t, &tj->normed, ns, st->norm.n, parse_special, &st->p2))) return rc;
    for (size_t k = 0; k < st->p2.n; k++) {
        const piece *pc = &st->p2.v[k];
        if (pc->id >= 0) {
            if (!kn_ivec_push(out, pc->id)) return KILN_ERR_NOMEM;
            continue;
        }
        if (pc->len == 0) continue;
        if ((rc = kn_tj_pretokenize(tj, ns + pc->off, pc->len, section_index, &st->words, &st->tmp))) return rc;
        size_t mark = out->n;
        for (size_t w = 0; w < st->words.w.n; w++) {
            const char *ws = st->words.buf.v + st->words.w.v[w].off;
            size_t wl = st->words.w.v[w].len;
            if (wl == 0) continue;
            switch (tj->model) {
                case KN_TJ_BPE: rc = bpe_word(st, ws, wl, out); break;
                case KN_TJ_WORDPIECE: rc = wordpiece_word(st, ws, wl, out); break;
                case KN_TJ_UNIGRAM: rc = kn_unigram_encode(t, ws, wl, out); break;
            }
            if (rc) return rc;
        }
        if (tj->fuse_unk && tj->unk >= 0) { /* runs of the unknown token become one */
            size_t o = mark;
            for (size_t i = mark; i < out->n; i++)
                if (!(out->v[i] == tj->unk && o > mark && out->v[o - 1] == tj->unk)) out->v[o++] = out->v[i];
            out->n = o;
        }
    }
    return KILN_OK;
}

kiln_status kn_tj_encode(const kn_tokenizer *t, const char *text, size_t len, bool parse_special, kn_ivec *out) {
    enc_state st = {.t = t};
    kiln_status rc = split_added(t, &t->tj->raw, text, len, parse_special, &st.p1);
    for (size_t k = 0; rc == KILN_OK && k < st.p1.n; k++) {
        const piece *pc = &st.p1.v[k];
        if (pc->id >= 0) rc = kn_ivec_push(out, pc->id) ? KILN_OK : KILN_ERR_NOMEM;
        else if (pc->len) rc = encode_text(&st, text + pc->off, pc->len, k, parse_special, out);
    }
    free(st.word.v);
    free(st.sym);
    free(st.heap.v);
    free(st.p1.v);
    free(st.p2.v);
    free(st.norm.v);
    free(st.words.buf.v);
    free(st.words.w.v);
    free(st.tmp.buf.v);
    free(st.tmp.w.v);
    if (rc == KILN_ERR_NOMEM) kn_error(rc, "out of memory tokenizing %zu bytes", len);
    return rc;
}

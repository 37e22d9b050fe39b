/*
 * tokenizer.c - the tokenizer's entry points: kn_tokenize, kn_token_piece and the accessors.
 *
 * kn_tokenize first partitions the text on the texts of special tokens, the way llama.cpp does:
 * user-defined tokens always, control and unknown tokens only with parse_special; the longest
 * token text is cut out first (everywhere it occurs, left to right), then the next longest in what
 * is left, and so on. The raw fragments in between go through the vocabulary's encoder (spm.c,
 * bpe.c, wordpiece.c); BOS/EOS/SEP are added around the result when add_special asks for them.
 * A tokenizer built from tokenizer.json encodes through tok_tj_enc.c instead, with the special tokens
 * of its post-processor.
 */
#include "text/tok_internal.h"
#include "text/tok_tj.h"

#include <stdlib.h>
#include <string.h>

/* A piece of the input: raw text to encode (id < 0) or a special token found in it. */
typedef struct frag {
    int32_t id;
    size_t off, len;
    int32_t next; /* index of the following fragment, -1 at the end */
} frag;

typedef struct fragvec {
    frag *v;
    size_t n, cap;
} fragvec;

static int32_t frag_add(fragvec *f, int32_t id, size_t off, size_t len, int32_t next) {
    if (f->n >= INT32_MAX || (f->n == f->cap && !kn_reserve((void **)&f->v, &f->cap, f->n + 1, sizeof *f->v)))
        return -1;
    f->v[f->n] = (frag){id, off, len, next};
    return (int32_t)f->n++;
}

static inline bool is_c_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static inline bool allowed(const kn_tokenizer *t, int32_t id, bool parse_special) {
    return parse_special || !(t->tok[id].attr & (KN_ATTR_CONTROL | KN_ATTR_UNKNOWN));
}

/* Marks in `seen` (indexed by rank) every special token that occurs in the text, using the trie. */
static void find_occurring(const kn_tokenizer *t, const uint8_t *s, size_t len, bool parse_special, uint8_t *seen) {
    for (size_t pos = 0; pos < len; pos++) {
        if (!(t->trie_first[s[pos] >> 3] & (1u << (s[pos] & 7)))) continue;
        int32_t node = 0;
        for (size_t k = pos; k < len; k++) {
            node = kn_u64map_get(&t->trie_edges, ((uint64_t)node << 8) | s[k]);
            if (node < 0) break;
            int32_t id = t->trie_term[node];
            if (id >= 0 && allowed(t, id, parse_special)) seen[t->special_rank[id]] = 1;
        }
    }
}

/* Splits the fragment list on every occurrence of special token id (see the file comment). */
static kiln_status cut_token(const kn_tokenizer *t, const char *text, int32_t id, fragvec *f) {
    const kn_tok_info *ti = &t->tok[id];
    const char *tt = t->text + ti->text_off;
    size_t tl = ti->text_len;
    for (int32_t i = 0; i >= 0; i = f->v[i].next) {
        if (f->v[i].id >= 0 || f->v[i].len < tl) continue;
        size_t base = f->v[i].off, flen = f->v[i].len;
        const char *m = memmem(text + base, flen, tt, tl);
        if (!m) continue;
        size_t mpos = (size_t)(m - text);
        size_t llen = mpos - base;
        if (ti->attr & KN_ATTR_LSTRIP)
            while (llen > 0 && is_c_space(text[base + llen - 1])) llen--;
        f->v[i].len = llen; /* the left part stays (possibly empty) */
        size_t roff = mpos + tl, rlen = base + flen - roff;
        if (ti->attr & KN_ATTR_RSTRIP)
            while (rlen > 0 && is_c_space(text[roff])) {
                roff++;
                rlen--;
            }
        int32_t right = -1;
        if (rlen > 0 && (right = frag_add(f, -1, roff, rlen, f->v[i].next)) < 0) return KILN_ERR_NOMEM;
        int32_t tok = frag_add(f, id, mpos, tl, rlen > 0 ? right : f->v[i].next);
        if (tok < 0) return KILN_ERR_NOMEM;
        f->v[i].next = tok;
        i = tok; /* continue with the right part */
    }
    return KILN_OK;
}

static kiln_status partition(const kn_tokenizer *t, const char *text, size_t len, bool parse_special, fragvec *f) {
    if (len == 0) return KILN_OK;
    if (frag_add(f, -1, 0, len, -1) < 0) return KILN_ERR_NOMEM;
    if (t->n_special == 0) return KILN_OK;
    uint8_t *seen = calloc((size_t)t->n_special, 1);
    if (!seen) return kn_error(KILN_ERR_NOMEM, "out of memory");
    find_occurring(t, (const uint8_t *)text, len, parse_special, seen);
    kiln_status st = KILN_OK;
    for (int32_t r = 0; r < t->n_special && st == KILN_OK; r++)
        if (seen[r]) st = cut_token(t, text, t->special[r], f);
    free(seen);
    return st;
}

kiln_status kn_tokenize(const kn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                        int32_t *out, size_t cap, size_t *n_out) {
    if (!t || !n_out || (!text && len) || (!out && cap))
        return kn_error(KILN_ERR_INVALID_ARG, "kn_tokenize: NULL argument");
    *n_out = 0;
    kn_ivec ids = {0};
    fragvec f = {0};
    kiln_status st = KILN_OK;
    if (t->tj) { /* a tokenizer.json: its own added-token split and the post-processor's tokens */
        const kn_tj *tj = t->tj;
        for (int i = 0; add_special && i < tj->n_pre_ids; i++)
            if (!kn_ivec_push(&ids, tj->pre_ids[i])) st = KILN_ERR_NOMEM;
        if (!st) st = kn_tj_encode(t, text, len, parse_special, &ids);
        for (int i = 0; !st && add_special && i < tj->n_post_ids; i++)
            if (!kn_ivec_push(&ids, tj->post_ids[i])) st = KILN_ERR_NOMEM;
        if (st) goto done;
        goto out;
    }
    st = partition(t, text, len, parse_special, &f);
    if (st) goto done;

    if (add_special && t->add_bos && t->bos >= 0 && !kn_ivec_push(&ids, t->bos)) {
        st = KILN_ERR_NOMEM;
        goto done;
    }
    bool prev_special = true; /* SPM: a fragment at the start or after a special token gets a space */
    for (int32_t i = f.n ? 0 : -1; i >= 0; i = f.v[i].next) {
        const frag *fr = &f.v[i];
        if (fr->id >= 0) {
            if (!kn_ivec_push(&ids, fr->id)) {
                st = KILN_ERR_NOMEM;
                goto done;
            }
            prev_special = true;
            continue;
        }
        if (fr->len == 0) continue;
        switch (t->kind) {
            case KN_TOK_SPM:
                st = kn_spm_encode(t, text + fr->off, fr->len, t->add_space_prefix && prev_special, &ids);
                break;
            case KN_TOK_BPE: st = kn_bpe_encode(t, text + fr->off, fr->len, &ids); break;
            case KN_TOK_WPM: st = kn_wpm_encode(t, text + fr->off, fr->len, &ids); break;
        }
        if (st) goto done;
        prev_special = false;
    }
    if (add_special && t->add_eos && t->eos >= 0 && !kn_ivec_push(&ids, t->eos)) {
        st = KILN_ERR_NOMEM;
        goto done;
    }
    if (add_special && t->add_sep && t->sep >= 0 && !kn_ivec_push(&ids, t->sep)) {
        st = KILN_ERR_NOMEM;
        goto done;
    }

out:
    *n_out = ids.n;
    if (ids.n > cap) {
        st = kn_error(KILN_ERR_BUFFER_SMALL, "%zu tokens do not fit in a buffer of %zu", ids.n, cap);
        goto done;
    }
    if (ids.n) memcpy(out, ids.v, ids.n * sizeof *out);
done:
    if (st == KILN_ERR_NOMEM) kn_error(st, "out of memory tokenizing %zu bytes", len);
    free(ids.v);
    free(f.v);
    return st;
}

size_t kn_token_piece(const kn_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    const kn_tok_info *ti = &t->tok[id];
    if (!render_special && (ti->attr & (KN_ATTR_CONTROL | KN_ATTR_UNKNOWN))) return 0;
    if (buf && cap) memcpy(buf, t->pieces + ti->piece_off, KN_MIN(cap, (size_t)ti->piece_len));
    return ti->piece_len;
}

int32_t kn_tok_n_vocab(const kn_tokenizer *t) { return t->n_vocab; }
int32_t kn_tok_bos(const kn_tokenizer *t) { return t->bos; }
int32_t kn_tok_eos(const kn_tokenizer *t) { return t->eos; }
int32_t kn_tok_eot(const kn_tokenizer *t) { return t->eot; }
int32_t kn_tok_unk(const kn_tokenizer *t) { return t->unk; }
bool kn_tok_add_bos(const kn_tokenizer *t) { return t->add_bos; }
bool kn_tok_add_eos(const kn_tokenizer *t) { return t->add_eos; }

bool kn_tok_is_eog(const kn_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->tok[id].eog; }

bool kn_tok_strips_first_space(const kn_tokenizer *t) {
    return (t->kind == KN_TOK_SPM || t->tj) && t->add_space_prefix;
}

bool kn_tok_is_special(const kn_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->tok[id].attr & (KN_ATTR_CONTROL | KN_ATTR_UNKNOWN));
}

int32_t kn_tok_find(const kn_tokenizer *t, const char *s, size_t n) { return kn_tok_lookup(t, s, n); }

/*
 * spm.c - SentencePiece-style encoding (tokenizer.ggml.model = "llama"), as llama.cpp does it.
 *
 * The fragment is prefixed with a space when the vocabulary asks for it, every space becomes U+2581
 * ("▁"), and the text is split into UTF-8 characters (by lead byte, without validation, so any byte
 * string works). Then, repeatedly, the adjacent pair whose concatenation is the vocabulary token
 * with the highest score is merged (ties: the leftmost pair), until no pair forms a token. A final
 * symbol that is not a token is emitted as byte-fallback tokens <0xNN>, one per byte.
 */
#include "text/tok_internal.h"
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

bool kn_tok_push_byte(const kn_tokenizer *t, uint8_t b, kn_ivec *out) {
    int32_t id = t->byte_tok[b];
    if (id < 0) id = t->unk;
    if (id < 0) return true; /* no way to represent the byte: it is dropped */
    return kn_ivec_push(out, id);
}

typedef struct spm_state {
    const kn_tokenizer *t;
    const char *s; /* escaped text */
    kn_symbol *sym;
    kn_heap heap;
} spm_state;

/* Queues the merge of symbols l and r if their concatenation is a token. */
static bool try_add(spm_state *st, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    const kn_symbol *a = &st->sym[l], *b = &st->sym[r];
    uint32_t n = a->n + b->n;
    int32_t id = kn_tok_lookup(st->t, st->s + a->off, n);
    if (id < 0) return true;
    kn_bigram bg = {.prio = kn_score_key(st->t->tok[id].score), .left = l, .right = r, .size = n};
    return kn_heap_push(&st->heap, bg);
}

static bool is_mark(const char *s, const kn_symbol *y) {
    return y->n == 3 && memcmp(s + y->off, "\xe2\x96\x81", 3) == 0;
}

/* Runs the merges over symbols [a, b) and appends their tokens. */
static kiln_status merge_segment(spm_state *st, int32_t a, int32_t b, kn_ivec *out) {
    kn_symbol *sym = st->sym;
    const kn_tokenizer *t = st->t;
    sym[a].prev = -1;
    sym[b - 1].next = -1;
    st->heap.n = 0;
    for (int32_t i = a + 1; i < b; i++)
        if (!try_add(st, i - 1, i)) return KILN_ERR_NOMEM;
    while (st->heap.n) {
        kn_bigram bg = kn_heap_pop(&st->heap);
        kn_symbol *l = &sym[bg.left], *r = &sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = bg.left;
        if (!try_add(st, l->prev, bg.left) || !try_add(st, bg.left, l->next)) return KILN_ERR_NOMEM;
    }
    for (int32_t i = a; i != -1; i = sym[i].next) {
        const kn_symbol *y = &sym[i];
        int32_t id = kn_tok_lookup(t, st->s + y->off, y->n);
        if (id >= 0) {
            if (!kn_ivec_push(out, id)) return KILN_ERR_NOMEM;
            continue;
        }
        for (uint32_t j = 0; j < y->n; j++)
            if (!kn_tok_push_byte(t, (uint8_t)st->s[y->off + j], out)) return KILN_ERR_NOMEM;
    }
    return KILN_OK;
}

kiln_status kn_spm_encode(const kn_tokenizer *t, const char *text, size_t len, bool prefix_space, kn_ivec *out) {
    static const char SPACE_MARK[3] = {'\xe2', '\x96', '\x81'};
    /* escaped text: optional leading space, ' ' -> U+2581 */
    size_t n_spaces = prefix_space ? 1 : 0;
    for (size_t i = 0; i < len; i++) n_spaces += text[i] == ' ';
    size_t elen = len + (prefix_space ? 1 : 0) + 2 * n_spaces;
    if (elen > UINT32_MAX / 2) return kn_error(KILN_ERR_INVALID_ARG, "text too long to tokenize");
    if (elen == 0) return KILN_OK;
    char *s = malloc(elen);
    kn_symbol *sym = malloc(elen * sizeof *sym);
    spm_state st = {.t = t, .s = s, .sym = sym};
    kiln_status rc = KILN_OK;
    if (!s || !sym) {
        rc = kn_error(KILN_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
        goto done;
    }
    size_t o = 0;
    if (prefix_space) {
        memcpy(s, SPACE_MARK, 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + o, SPACE_MARK, 3);
            o += 3;
        } else s[o++] = text[i];
    }

    /* one symbol per character */
    int32_t n_sym = 0;
    for (size_t off = 0; off < elen;) {
        size_t cl = kn_utf8_lead_len((uint8_t)s[off]);
        if (cl > elen - off) cl = elen - off;
        sym[n_sym] = (kn_symbol){.prev = n_sym - 1, .next = n_sym + 1, .off = (uint32_t)off, .n = (uint32_t)cl};
        n_sym++;
        off += cl;
    }

    /* Merge segment by segment: a segment ends before a "▁" that follows another character when
     * no token could span that point (t->spm_split_ok); otherwise the text is one segment. */
    for (int32_t a = 0, b; a < n_sym; a = b) {
        for (b = a + 1; b < n_sym; b++)
            if (t->spm_split_ok && is_mark(s, &sym[b]) && !is_mark(s, &sym[b - 1])) break;
        if ((rc = merge_segment(&st, a, b, out))) goto done;
    }
done:
    free(s);
    free(sym);
    free(st.heap.v);
    return rc;
}

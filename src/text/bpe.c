/*
 * bpe.c - byte-level BPE encoding (tokenizer.ggml.model = "gpt2"), as GPT-2 defined it and
 * llama.cpp implements it.
 *
 * The pre-tokenizer (pretok.c) cuts a fragment into words. Each word's bytes are written with the
 * GPT-2 byte-to-unicode mapping (printable bytes stand for themselves, the others for U+0100..U+0143),
 * split into those characters, and merged pairwise: always the adjacent pair with the lowest merge
 * rank in tokenizer.ggml.merges (ties: the leftmost), until no adjacent pair has a rank. Each
 * resulting symbol is a vocabulary token.
 */
#include "text/tok_internal.h"
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

uint32_t kn_bpe_byte_char(uint8_t b) {
    if (b <= 32) return 256u + b;                            /* controls and space: U+0100..U+0120 */
    if (b >= 127 && b <= 160) return 256u + 33 + (b - 127u); /* DEL..NBSP: U+0121..U+0142 */
    if (b == 173) return 256u + 67;                          /* soft hyphen: U+0143 */
    return b;
}

int kn_bpe_char_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp >= 256 && cp <= 288) return (int)(cp - 256);
    if (cp >= 289 && cp <= 322) return (int)(cp - 289 + 127);
    if (cp == 323) return 173;
    return -1;
}

typedef struct bpe_state {
    const kn_tokenizer *t;
    kn_bvec word; /* the current word, byte-mapped */
    kn_symbol *sym;
    size_t sym_cap;
    kn_heap heap;
} bpe_state;

/* Emits the tokens of one symbol: the token with its text, or else its characters one by one
 * (a character that is not a token either is dropped, as llama.cpp does). */
static bool emit_symbol(const kn_tokenizer *t, const char *s, size_t n, kn_ivec *out) {
    int32_t id = kn_tok_lookup(t, s, n);
    if (id >= 0) return kn_ivec_push(out, id);
    for (size_t i = 0; i < n;) {
        size_t cl = kn_utf8_lead_len((uint8_t)s[i]);
        if (cl > n - i) cl = n - i;
        id = kn_tok_lookup(t, s + i, cl);
        if (id >= 0 && !kn_ivec_push(out, id)) return false;
        i += cl;
    }
    return true;
}

/* Merges one byte-mapped word (st->word) and appends its tokens. */
static kiln_status encode_word(bpe_state *st, kn_ivec *out) {
    const kn_tokenizer *t = st->t;
    const char *w = st->word.v;
    size_t wn = st->word.n;
    if (t->ignore_merges) {
        int32_t id = kn_tok_lookup(t, w, wn);
        if (id >= 0) return kn_ivec_push(out, id) ? KILN_OK : KILN_ERR_NOMEM;
    }
    if (wn > INT32_MAX || !kn_reserve((void **)&st->sym, &st->sym_cap, wn, sizeof *st->sym))
        return kn_error(KILN_ERR_NOMEM, "word too long to tokenize");
    int32_t n_sym = 0;
    for (size_t off = 0; off < wn;) {
        size_t cl = kn_utf8_lead_len((uint8_t)w[off]);
        if (cl > wn - off) cl = wn - off;
        st->sym[n_sym] = (kn_symbol){.prev = n_sym - 1, .next = n_sym + 1, .off = (uint32_t)off, .n = (uint32_t)cl};
        n_sym++;
        off += cl;
    }
    st->sym[n_sym - 1].next = -1;
    if (!kn_bpe_merge(t, w, st->sym, n_sym, &st->heap)) return KILN_ERR_NOMEM;
    for (int32_t i = 0; i != -1; i = st->sym[i].next)
        if (!emit_symbol(t, w + st->sym[i].off, st->sym[i].n, out)) return KILN_ERR_NOMEM;
    return KILN_OK;
}

kiln_status kn_bpe_encode(const kn_tokenizer *t, const char *text, size_t len, kn_ivec *out) {
    /* the UTF-8 form of each byte's mapped character */
    uint8_t map[256][2], map_len[256];
    for (int b = 0; b < 256; b++) map_len[b] = (uint8_t)kn_utf8_encode(kn_bpe_byte_char((uint8_t)b), map[b]);

    kn_spanvec words = {0};
    bpe_state st = {.t = t};
    kiln_status rc = kn_pretok_split(t->pretok, text, len, &words);
    for (size_t k = 0; rc == KILN_OK && k < words.n; k++) {
        const uint8_t *p = (const uint8_t *)text + words.v[k].off;
        size_t n = words.v[k].len;
        if (n == 0) continue;
        st.word.n = 0;
        if (!kn_reserve((void **)&st.word.v, &st.word.cap, 2 * n, 1)) {
            rc = KILN_ERR_NOMEM;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            memcpy(st.word.v + st.word.n, map[p[i]], map_len[p[i]]);
            st.word.n += map_len[p[i]];
        }
        rc = encode_word(&st, out);
    }
    free(words.v);
    free(st.word.v);
    free(st.sym);
    free(st.heap.v);
    return rc;
}

/*
 * wordpiece.c - BERT WordPiece encoding (tokenizer.ggml.model = "bert"), as llama.cpp does it for
 * GGUF vocabularies (where a word-initial piece is stored with a leading U+2581 and a continuation
 * piece without the "##" of the original vocab.txt).
 *
 * Normalization and splitting follow BertNormalizer + BertPreTokenizer: canonical decomposition and
 * removal of nonspacing marks (strip_accents), lowercasing, dropping of NUL, U+FFFD and control
 * characters, splitting at whitespace, and punctuation, ASCII symbols and CJK ideographs each made a
 * word of their own. Each word, prefixed with U+2581, is then cut greedily into the longest
 * vocabulary tokens from the left; a word that cannot be covered (or has more than 100
 * characters) becomes the unknown token.
 */
#include "text/tok_internal.h"
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

/* The ideograph blocks BERT isolates (as in the reference implementation, including its
 * 0x2B920 bound where Unicode's block starts at 0x2B820). */
static bool is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* Words longer than this many characters become the unknown token (BERT's max_input_chars_per_word;
 * it also bounds the work per word). */
#define MAX_WORD_CHARS 100

/* Greedy longest-match of "▁" + word; appends the tokens, or the unknown token if the word
 * cannot be covered completely. */
static kiln_status encode_word(const kn_tokenizer *t, kn_bvec *w, size_t n_chars, kn_ivec *out) {
    static const char MARK[3] = {'\xe2', '\x96', '\x81'};
    if (w->n == 0) return KILN_OK;
    /* w->v holds 3 reserved bytes in front of the word for the mark */
    memcpy(w->v, MARK, 3);
    const char *s = w->v;
    size_t n = w->n, start = out->n;
    for (size_t i = 0; i < n && n_chars <= MAX_WORD_CHARS;) {
        size_t j = KN_MIN(n, i + t->max_token_len);
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = kn_tok_lookup(t, s + i, j - i)) >= 0) break;
        if (id < 0) {
            out->n = start;
            break;
        } /* discard the whole word */
        if (!kn_ivec_push(out, id)) return KILN_ERR_NOMEM;
        i = j;
    }
    if (out->n == start && t->unk >= 0 && !kn_ivec_push(out, t->unk)) return KILN_ERR_NOMEM;
    return KILN_OK;
}

kiln_status kn_wpm_encode(const kn_tokenizer *t, const char *text, size_t len, kn_ivec *out) {
    kn_bvec w = {0};
    size_t n_chars = 0;
    kiln_status rc = KILN_OK;
#define WORD_RESET() (w.n = 3, n_chars = 0) /* keep room for the U+2581 prefix */
#define FLUSH()                                                                                                        \
    do {                                                                                                               \
        if (w.n > 3 && (rc = encode_word(t, &w, n_chars, out))) goto done;                                             \
        WORD_RESET();                                                                                                  \
    } while (0)
    if (!kn_reserve((void **)&w.v, &w.cap, 64, 1)) return KILN_ERR_NOMEM;
    WORD_RESET();
    const uint8_t *p = (const uint8_t *)text;
    for (size_t i = 0; i < len;) {
        size_t adv;
        uint32_t cp0 = kn_utf8_decode(p + i, len - i, &adv);
        i += adv;
        if (cp0 == KN_UTF8_INVALID) continue; /* becomes U+FFFD, which BERT drops */
        uint32_t cps[4];
        size_t n_cps = 1;
        cps[0] = cp0;
        if (t->wpm_strip_accents) n_cps = kn_ucd_nfd(cp0, cps);
        for (size_t k = 0; k < n_cps; k++) {
            uint32_t cp = cps[k];
            if (kn_ucd_is_whitespace(cp)) {
                FLUSH();
                continue;
            }
            uint8_t fl = kn_ucd_flags(cp);
            if (cp == 0 || cp == KN_UNICODE_REPLACEMENT || (fl & KN_UCD_OTHER)) continue;
            if (t->wpm_strip_accents && (fl & KN_UCD_MARK_NONSPACING)) continue;
            if (t->wpm_lowercase) cp = kn_ucd_tolower(cp);
            uint8_t enc[4];
            size_t en = kn_utf8_encode(cp, enc);
            bool alone = (fl & KN_UCD_PUNCT) || (cp < 0x7F && (fl & KN_UCD_SYMBOL)) || is_cjk(cp);
            if (alone) FLUSH();
            if (!kn_bvec_append(&w, enc, en)) {
                rc = KILN_ERR_NOMEM;
                goto done;
            }
            n_chars++;
            if (alone) FLUSH();
        }
    }
    FLUSH();
done:
#undef FLUSH
#undef WORD_RESET
    free(w.v);
    return rc;
}

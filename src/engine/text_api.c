/*
 * text_api.c - the public tokenizer functions of kiln.h, forwarding to the model's tokenizer. A
 * failure is also recorded on the model (kiln_model_last_error).
 */
#include "model/model.h"

#include <string.h>

kiln_token kiln_token_bos(const kiln_model *m) { return kn_tok_bos(m->tok); }
kiln_token kiln_token_eos(const kiln_model *m) { return kn_tok_eos(m->tok); }
kiln_token kiln_token_eot(const kiln_model *m) { return kn_tok_eot(m->tok); }
bool kiln_token_is_eog(const kiln_model *m, kiln_token t) { return kn_tok_is_eog(m->tok, t); }
bool kiln_model_add_bos(const kiln_model *m) { return kn_tok_add_bos(m->tok); }

kiln_status kiln_tokenize(const kiln_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                          kiln_token *out, size_t cap, size_t *n_out) {
    kn_error_clear();
    if (!m) return kn_error(KILN_ERR_INVALID_ARG, "kiln_tokenize: NULL model");
    if (!n_out || (!text && len) || (!out && cap))
        return kn_model_fail(m, kn_error(KILN_ERR_INVALID_ARG, "kiln_tokenize: NULL argument"));
    return kn_model_fail(m, kn_tokenize(m->tok, text ? text : "", len, add_special, parse_special, out, cap, n_out));
}

kiln_status kiln_token_piece(const kiln_model *m, kiln_token token, bool render_special, char *buf, size_t cap,
                             size_t *n_out) {
    kn_error_clear();
    if (!m) return kn_error(KILN_ERR_INVALID_ARG, "kiln_token_piece: NULL model");
    if (!n_out || (!buf && cap))
        return kn_model_fail(m, kn_error(KILN_ERR_INVALID_ARG, "kiln_token_piece: NULL argument"));
    if (token < 0 || token >= m->hp.n_vocab)
        return kn_model_fail(
            m, kn_error(KILN_ERR_INVALID_ARG, "token %d is outside the vocabulary [0, %d)", token, m->hp.n_vocab));
    *n_out = kn_token_piece(m->tok, token, render_special, buf, cap);
    if (*n_out > cap)
        return kn_model_fail(m, kn_error(KILN_ERR_BUFFER_SMALL, "piece of %zu bytes does not fit in %zu", *n_out, cap));
    return KILN_OK;
}

/* kiln_tokenize_chat without the error recording (m is not NULL). */
static kiln_status tokenize_chat(const kiln_model *m, const char *text, size_t len, kiln_token *out, size_t cap,
                                 size_t *n_out) {
    if (!n_out || (!text && len) || (!out && cap))
        return kn_error(KILN_ERR_INVALID_ARG, "kiln_tokenize_chat: NULL argument");
    const int32_t bos = kn_tok_bos(m->tok);
    const bool want_bos = bos >= 0 && kn_tok_add_bos(m->tok);
    /* Tokenize after a reserved slot for BOS, then drop the slot if it is not needed. */
    size_t n = 0;
    kiln_status st =
        kn_tokenize(m->tok, text ? text : "", len, false, true, cap ? out + 1 : NULL, cap ? cap - 1 : 0, &n);
    if (st && st != KILN_ERR_BUFFER_SMALL) return st;
    const bool add = want_bos && (n == 0 || (st == KILN_OK && out[1] != bos));
    if (st == KILN_ERR_BUFFER_SMALL) {
        /* The first token is unknown when nothing fit: count BOS unless the text starts with it. */
        *n_out = n + (want_bos ? 1 : 0);
        return kn_error(KILN_ERR_BUFFER_SMALL, "%zu tokens do not fit in a buffer of %zu", *n_out, cap);
    }
    if (add) out[0] = bos;
    else if (n) memmove(out, out + 1, n * sizeof *out);
    *n_out = n + (add ? 1 : 0);
    return KILN_OK;
}

kiln_status kiln_tokenize_chat(const kiln_model *m, const char *text, size_t len, kiln_token *out, size_t cap,
                               size_t *n_out) {
    kn_error_clear();
    if (!m) return kn_error(KILN_ERR_INVALID_ARG, "kiln_tokenize_chat: NULL model");
    return kn_model_fail(m, tokenize_chat(m, text, len, out, cap, n_out));
}

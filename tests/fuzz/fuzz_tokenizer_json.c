/*
 * fuzz_tokenizer_json.c - libFuzzer harness of the Hugging Face tokenizer.json loader
 * (kn_tokenizer_load_hf) and of the tokenizers it builds.
 *
 * Feeds: the input up to its first NUL as a tokenizer.json, up to the second NUL as the
 * tokenizer_config.json beside it (none when empty), and the rest as text. A tokenizer that loads
 * encodes the text (with and without special tokens, into a buffer too small first: the
 * KILN_ERR_BUFFER_SMALL contract), every id it gives must be in the vocabulary and is decoded
 * again, and the text read as 32-bit ids (out of range ones included) is decoded too. Seeds: small
 * tokenizer.json files of each model type (BPE byte-level and with byte_fallback, WordPiece,
 * Unigram) with normalizers (a Precompiled charsmap among them), pre-tokenizers, post-processors and added tokens
 * (tests/fuzz/corpus/tokenizer_json/).
 *
 * In a tree without the loader this harness builds as a stub that reports itself skipped.
 */
#include "fuzz.h"

#include "text/tokenizer.h"

#if __has_include("text/tok_json.h")

#define MAX_TOKENS 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    fz_in in = {data, size};
    const uint8_t *tj, *cfg;
    size_t tj_len, cfg_len;
    fz_until_nul(&in, &tj, &tj_len);
    fz_until_nul(&in, &cfg, &cfg_len);
    kn_tokenizer *t = NULL;
    if (kn_tokenizer_load_hf((const char *)tj, tj_len, cfg_len ? (const char *)cfg : NULL, cfg_len, &t) != KILN_OK)
        return 0;
    (void)kn_tok_chat_template(t, NULL);
    const int32_t *eos;
    (void)kn_tok_eos_ids(t, &eos);
    const int32_t n_vocab = kn_tok_n_vocab(t);
    static int32_t ids[MAX_TOKENS];
    char piece[KN_TOK_MAX_PIECE];
    for (int special = 0; special < 2; special++) {
        size_t n = 0;
        kiln_status st = kn_tokenize(t, (const char *)in.p, in.n, special, special, ids, 1, &n);
        if (st == KILN_ERR_BUFFER_SMALL && n <= 1) abort();
        if (st == KILN_ERR_BUFFER_SMALL && n <= MAX_TOKENS)
            st = kn_tokenize(t, (const char *)in.p, in.n, special, special, ids, MAX_TOKENS, &n);
        if (st != KILN_OK || n > MAX_TOKENS) continue;
        for (size_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= n_vocab) abort();
            (void)kn_token_piece(t, ids[i], special, piece, sizeof piece);
        }
    }
    fz_in idin = in;
    for (int i = 0; i < 64 && idin.n >= 4; i++) (void)kn_token_piece(t, (int32_t)fz_u32(&idin), i & 1, piece, 16);
    kn_tokenizer_free(t);
    return 0;
}
#else
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)data;
    (void)size;
    fz_skip("the tokenizer.json loader (src/text/tok_json.h) is not in this tree");
    return 0;
}
#endif

/*
 * fuzz_tokenizer.c - libFuzzer harness of the tokenizers: encoding arbitrary bytes and decoding
 * arbitrary token ids.
 *
 * Feeds: the first byte picks the vocabulary (bits 0-1: stories260K's SentencePiece vocabulary,
 * GPT-2's byte-level BPE, BERT's WordPiece, or llama's SentencePiece vocabulary of 32000 pieces,
 * the last three vocab-only files of the tokenizer tests) and the flags (bit 2 add_special, bit 3
 * parse_special, bit 4 the chat path kiln_tokenize_chat); the rest is the text to encode, bytes
 * of any kind (invalid UTF-8, NULs, special-token text). The ids it gives are checked to be in
 * the vocabulary and decoded again piece by piece (special tokens rendered or not), into a buffer
 * too small on purpose first (KILN_ERR_BUFFER_SMALL must give the needed length). The same bytes,
 * read as little-endian 32-bit ids (out of range ones included), are decoded too. Seeds: text in
 * several scripts, special-token text and broken UTF-8 (tests/fuzz/corpus/tokenizer/).
 */
#include "fuzz.h"

#define MAX_TOKENS 8192

static kiln_model *models[4];
static const char *const paths[4] = {
    "models/stories260K/stories260K.gguf",
    "tokenizer-tests/llama.cpp-vocab/ggml-vocab-gpt-2.gguf",
    "tokenizer-tests/llama.cpp-vocab/ggml-vocab-bert-bge.gguf",
    "tokenizer-tests/llama.cpp-vocab/ggml-vocab-llama-spm.gguf",
};

static void decode(const kiln_model *m, kiln_token t, bool special) {
    char small[2], big[512];
    size_t n = 0, n2 = 0;
    kiln_status st = kiln_token_piece(m, t, special, small, sizeof small, &n);
    if (st == KILN_ERR_BUFFER_SMALL) {
        if (n <= sizeof small) abort();
        if (n <= sizeof big && (kiln_token_piece(m, t, special, big, sizeof big, &n2) != KILN_OK || n2 != n)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!models[0])
        for (int i = 0; i < 4; i++) models[i] = fz_model(paths[i], true);
    if (size == 0 || size > 16384) return 0;
    const uint8_t flags = data[0];
    const kiln_model *m = models[flags & 3];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    static kiln_token toks[MAX_TOKENS];
    size_t n = 0;
    kiln_status st = (flags & 16) ? kiln_tokenize_chat(m, text, len, toks, MAX_TOKENS, &n)
                                  : kiln_tokenize(m, text, len, flags & 4, flags & 8, toks, MAX_TOKENS, &n);
    const int32_t n_vocab = kiln_model_n_vocab(m);
    if (st == KILN_OK) {
        if (n > MAX_TOKENS) abort();
        for (size_t i = 0; i < n; i++) {
            if (toks[i] < 0 || toks[i] >= n_vocab) abort();
            decode(m, toks[i], (flags & 32) != 0);
        }
    } else if (st == KILN_ERR_BUFFER_SMALL && n <= MAX_TOKENS) {
        abort(); /* it said the buffer was too small, yet the tokens fit */
    }
    fz_in in = {data + 1, len};
    for (int i = 0; i < 64 && in.n >= 4; i++) decode(m, (kiln_token)fz_u32(&in), i & 1);
    return 0;
}

/*
 * tokenizer.h - text <-> token ids for every vocabulary a GGUF file can describe.
 *
 * Built from the file's tokenizer.ggml.* metadata: SentencePiece-style (`llama`: scores, byte
 * fallback), byte-level BPE (`gpt2`: merges, a pre-tokenizer chosen by tokenizer.ggml.pre) and
 * WordPiece (`bert`). The tokenizer is immutable after load and safe to use from several threads.
 */
#ifndef KN_TOKENIZER_H
#define KN_TOKENIZER_H

#include "base/base.h"
#include "model/gguf.h"

typedef struct kn_tokenizer kn_tokenizer;

/* Builds the tokenizer from g's metadata (g may be freed afterwards: everything is copied).
 * KILN_ERR_FORMAT / KILN_ERR_UNSUPPORTED with a message on bad or unknown metadata. */
kiln_status kn_tokenizer_load(const kn_gguf *g, kn_tokenizer **out);

/* Builds the tokenizer from a Hugging Face tokenizer.json (len bytes) and, when not NULL, the
 * tokenizer_config.json beside it (cfg_len bytes); both are copied, the caller keeps its buffers.
 * Models BPE (byte-level, or SentencePiece-style with byte_fallback), WordPiece and Unigram; the
 * normalizers, pre-tokenizers, post-processors and decoders of the tokenizers library that
 * src/text/tok_tj.h lists. Which special tokens encoding adds (BOS/EOS) comes from the
 * post-processor; bos_token / eos_token / chat_template come from the config. Errors: KILN_ERR_FORMAT
 * naming the file and the JSON path (malformed JSON, a wrong type, a file over its size cap),
 * KILN_ERR_UNSUPPORTED naming a model / normalizer / pre-tokenizer / post-processor type kiln does
 * not implement. Takes well under a second for a 33 MB file. */
kiln_status kn_tokenizer_load_hf(const char *tokenizer_json, size_t len, const char *tokenizer_config_json,
                                 size_t cfg_len, kn_tokenizer **out);
/* For a tokenizer from tokenizer.json (NULL / 0 / false for one from GGUF metadata):
 * kn_tok_chat_template: the config's chat template; name NULL gives the default one (the string, or
 *   the entry named "default" of a list), a name gives that entry of the list; NULL when none. Valid
 *   as long as the tokenizer.
 * kn_tok_eos_ids: the end-of-generation ids, the config's eos_token first (*ids valid as long as the
 *   tokenizer). */
const char *kn_tok_chat_template(const kn_tokenizer *t, const char *name);
size_t kn_tok_eos_ids(const kn_tokenizer *t, const int32_t **ids);
/* Makes token id (0 <= id < n_vocab) end generation too (a model's generation config naming more
 * end-of-generation ids than its tokenizer files); it joins kn_tok_eos_ids' list once. */
kiln_status kn_tok_add_eog(kn_tokenizer *t, int32_t id);
void kn_tokenizer_free(kn_tokenizer *t);

int32_t kn_tok_n_vocab(const kn_tokenizer *t);
int32_t kn_tok_bos(const kn_tokenizer *t); /* -1 if none */
int32_t kn_tok_eos(const kn_tokenizer *t);
int32_t kn_tok_eot(const kn_tokenizer *t);
int32_t kn_tok_unk(const kn_tokenizer *t);
bool kn_tok_add_bos(const kn_tokenizer *t);
bool kn_tok_add_eos(const kn_tokenizer *t);
/* True for EOS, EOT and any other end-of-generation token of the vocabulary. */
bool kn_tok_is_eog(const kn_tokenizer *t, int32_t id);
/* True for control/special tokens (never shown unless rendered explicitly). */
bool kn_tok_is_special(const kn_tokenizer *t, int32_t id);
/* True when the detokenizer drops the leading space of a text's first piece (a SentencePiece
 * vocabulary that prefixes text with a space; see kn_detok). */
bool kn_tok_strips_first_space(const kn_tokenizer *t);
/* The id of the token whose vocabulary text is exactly s[0..n) (e.g. "<|im_end|>"), -1 if none. */
int32_t kn_tok_find(const kn_tokenizer *t, const char *s, size_t n);

/* The longest piece (decoded bytes of one token) a vocabulary may have; kn_tokenizer_load rejects
 * a vocabulary with a longer token, so kn_detok.out always has room for one piece. */
#define KN_TOK_MAX_PIECE 1024

/* Encodes len bytes of text; see kiln_tokenize for add_special / parse_special and the
 * KILN_ERR_BUFFER_SMALL contract. Invalid UTF-8 in text is tokenized byte-wise, never rejected. */
kiln_status kn_tokenize(const kn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                        int32_t *out, size_t cap, size_t *n_out);

/* The bytes token id decodes to (see kiln_token_piece). Returns the full length; writes at most cap
 * bytes. An id out of range decodes to 0 bytes. */
size_t kn_token_piece(const kn_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap);

/* Incremental detokenizer: turns a stream of token ids into text that never splits a UTF-8
 * character. Handles the SentencePiece rule that the leading space of the first piece after BOS
 * (or at the start of the stream) is dropped. Fixed capacity: allocates nothing after init. */
typedef struct kn_detok {
    const kn_tokenizer *tok;
    bool at_start; /* no text emitted yet and the previous token was BOS or nothing */
    bool render_special;
    uint8_t pending[8]; /* bytes of an incomplete UTF-8 character */
    size_t n_pending;
    char out[3 * (KN_TOK_MAX_PIECE + 8)]; /* text produced by the last push (each invalid byte
                                             can become a 3-byte U+FFFD) */
} kn_detok;

/* at_start: the stream begins a text (so an SPM leading space is stripped from its first piece). */
void kn_detok_init(kn_detok *d, const kn_tokenizer *t, bool at_start, bool render_special);
/* Feeds one token; returns the bytes now complete (pointer into d->out, valid until the next call)
 * and their length in *len. Control tokens give no text unless render_special. BOS starts a new
 * text: for an SPM vocabulary with add_space_prefix, the leading space of the next piece is
 * dropped. An id outside the vocabulary gives no text. */
const char *kn_detok_push(kn_detok *d, int32_t id, size_t *len);
/* Flushes bytes of a trailing incomplete character (as U+FFFD replacement). */
const char *kn_detok_flush(kn_detok *d, size_t *len);

#endif

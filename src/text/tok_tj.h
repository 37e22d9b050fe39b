/*
 * tok_tj.h - the inside of a tokenizer built from a Hugging Face tokenizer.json (kn_tokenizer.tj):
 * the normalizer and pre-tokenizer pipelines, the model's options, the post-processor's special
 * tokens and the added-token tries. Shared by
 *   tok_tj_load.c   reading tokenizer.json / tokenizer_config.json into kn_tokenizer + kn_tj
 *   tok_tj_norm.c   the normalizers (NFC/NFD/NFKC/NFKD, Lowercase, Replace, Strip, BertNormalizer...)
 *   tok_tj_charsmap.c  the Precompiled normalizer (SentencePiece's precompiled charsmap)
 *   tok_tj_pre.c    the pre-tokenizers (Split, ByteLevel, Metaspace, Digits, Whitespace, ...)
 *   tok_tj_enc.c    encoding: added tokens, normalize, pre-tokenize, the model (BPE, WordPiece, Unigram)
 * The semantics follow Hugging Face's tokenizers (the JS port is the test oracle); where the JS port
 * and the Rust library differ, the comment at the step says which one kiln follows.
 */
#ifndef KN_TOK_TJ_H
#define KN_TOK_TJ_H

#include "text/tok_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

typedef enum kn_tj_model { KN_TJ_BPE, KN_TJ_WORDPIECE, KN_TJ_UNIGRAM } kn_tj_model;

typedef enum kn_tj_norm_type {
    KN_TJN_NFC,
    KN_TJN_NFD,
    KN_TJN_NFKC,
    KN_TJN_NFKD,
    KN_TJN_LOWERCASE,
    KN_TJN_STRIP_ACCENTS,
    KN_TJN_STRIP,   /* flags: left, right */
    KN_TJN_PREPEND, /* str */
    KN_TJN_REPLACE, /* pattern (str or re) -> content */
    KN_TJN_BERT,    /* flags: clean_text, handle_chinese_chars, strip_accents, lowercase */
    /* cmap: a SentencePiece precompiled charsmap */
    KN_TJN_PRECOMPILED,
} kn_tj_norm_type;

typedef struct kn_tj_charsmap kn_tj_charsmap;

typedef struct kn_tj_norm {
    kn_tj_norm_type type;
    char *str; /* Prepend text / Replace literal pattern */
    size_t str_len;
    char *content; /* Replace's replacement */
    size_t content_len;
    pcre2_code *re; /* Replace with a regex */
    /* Precompiled's charsmap */
    kn_tj_charsmap *cmap;
    bool f[4];
} kn_tj_norm;

/* Split behaviours (Hugging Face's SplitDelimiterBehavior). */
typedef enum kn_tj_behavior {
    KN_TJB_REMOVED,
    KN_TJB_ISOLATED,
    KN_TJB_MERGED_PREV,
    KN_TJB_MERGED_NEXT,
    KN_TJB_CONTIGUOUS
} kn_tj_behavior;

typedef enum kn_tj_pre_type {
    KN_TJP_SPLIT,      /* re (or a literal str), behavior, invert */
    KN_TJP_BYTELEVEL,  /* f[0] add_prefix_space, f[1] use_regex (re = GPT-2's) */
    KN_TJP_METASPACE,  /* str = replacement; scheme; f[0] split */
    KN_TJP_BYTEMAP,    /* internal: ByteLevel's byte -> char mapping only */
    KN_TJP_REPLACE,    /* re or str -> content */
    KN_TJP_FIXEDLEN,   /* n characters per piece */
    KN_TJP_UNICODE_SC, /* UnicodeScripts: refused at load */
} kn_tj_pre_type;

enum { KN_TJ_PREPEND_ALWAYS, KN_TJ_PREPEND_NEVER, KN_TJ_PREPEND_FIRST };

typedef struct kn_tj_pre {
    kn_tj_pre_type type;
    pcre2_code *re;
    char *str;
    size_t str_len;
    char *content;
    size_t content_len;
    kn_tj_behavior behavior;
    bool invert;
    int scheme;
    size_t n;
    bool f[2];
} kn_tj_pre;

/* A byte trie over added-token texts, matched leftmost-longest. */
typedef struct kn_tj_trie {
    kn_u64map edges; /* (node << 8 | byte) -> child */
    int32_t *term;   /* [nodes] token id ending here, -1 */
    int32_t nodes, cap;
    uint8_t first[32]; /* bitmap of first bytes */
} kn_tj_trie;

/* A byte trie of every token text of a Unigram model (ending at the id kn_tok_lookup gives for the
 * text), compact: nodes in breadth-first order, so that a node's children are consecutive and in
 * byte order (9 bytes a node: 3.8 MB for a 151k vocabulary). unigram.c walks it from each position
 * of a word to find the pieces that start there, stopping where no piece continues. */
typedef struct kn_tj_ptrie {
    uint32_t *first;   /* [n + 1]: node x's children are the nodes first[x] .. first[x + 1] - 1 */
    uint8_t *label;    /* [n]: the byte of the edge into the node */
    int32_t *term;     /* [n]: the token whose text ends at the node, -1 */
    int32_t root[256]; /* the root's child along each byte, -1 */
    uint32_t n;        /* nodes (0: none built) */
} kn_tj_ptrie;

typedef struct kn_tj {
    kn_tj_model model;
    kn_tj_norm *norm;
    int n_norm;
    kn_tj_pre *pre;
    int n_pre;
    /* model options */
    bool byte_fallback, fuse_unk;
    int32_t unk;       /* the model's unknown token, what encoding uses (-1: none); t->unk may also come
                        * from tokenizer_config.json, which the tokenizers library does not encode with */
    bool unk_required; /* text no piece covers fails the encode when there is no unknown token (Unigram,
                        * WordPiece, a BPE naming an unk_token its vocabulary lacks); else it is dropped */
    char *cont_prefix; /* BPE continuing_subword_prefix / WordPiece "##" (NULL: none) */
    size_t cont_prefix_len;
    char *eow_suffix; /* BPE end_of_word_suffix */
    size_t eow_suffix_len;
    int32_t max_word_chars; /* WordPiece max_input_chars_per_word */
    double unigram_min_score;
    /* post-processor: the special tokens before and after a single sequence */
    int32_t pre_ids[8], post_ids[8];
    int n_pre_ids, n_post_ids;
    /* added tokens: matched in the raw text, and in the normalized text (normalized: true) */
    kn_tj_trie raw, normed;
    /* Unigram: the trie of the vocabulary (unigram.c) */
    kn_tj_ptrie pieces;
    /* decoding */
    bool strip_first_space; /* decoder Strip(" ", 1, 0) or Metaspace prepend: drop a text's first space */
    /* tokenizer_config.json */
    char *chat_template; /* the default template (NUL-terminated), NULL when none */
    char **tmpl_names, **tmpl_texts;
    int n_tmpl;
    kn_ivec eos_ids;    /* eos_token of the config, then every other end-of-generation token */
    int cfg_add_bos;    /* the config's add_bos_token: 0 / 1, -1 when absent */
    bool cfg_bos_named; /* the config names a bos_token that is in the vocabulary */
    char *split_regex;  /* the first Split pre-tokenizer's regex (its source text), NULL when none */
    uint8_t *added;     /* [n_vocab]: 0 a model token, 1 an added token, 2 an added special token */
} kn_tj;

void kn_tj_free(kn_tj *tj);

/* ---- tries ------------------------------------------------------------------------------------- */
kiln_status kn_tj_trie_add(kn_tj_trie *tr, const char *s, size_t n, int32_t id);
/* The id and length of the longest token starting at s[0..len) that allowed() accepts; -1 if none. */
int32_t kn_tj_trie_match(const kn_tj_trie *tr, const kn_tokenizer *t, const uint8_t *s, size_t len, bool parse_special,
                         size_t *mlen);
void kn_tj_trie_free(kn_tj_trie *tr);

/* ---- normalizers (tok_tj_norm.c) --------------------------------------------------------------- */
/* Applies the pipeline to in[0..n) into out (cleared first). */
kiln_status kn_tj_normalize(const kn_tj *tj, const char *in, size_t n, kn_bvec *out);
void kn_tj_norm_free(kn_tj_norm *nm);

/* Precompiled charsmaps (tok_tj_charsmap.c). parse reads the binary form (data[0..n)), from_base64
 * its base64 text (tokenizer.json); both check every size and offset a lookup can reach and fail
 * with KILN_ERR_FORMAT naming path. apply normalizes in[0..n) into out (cleared first) as the
 * tokenizers library does. */
kiln_status kn_tj_charsmap_parse(const uint8_t *data, size_t n, const char *path, kn_tj_charsmap **out);
kiln_status kn_tj_charsmap_from_base64(const char *b64, size_t n, const char *path, kn_tj_charsmap **out);
kiln_status kn_tj_charsmap_apply(const kn_tj_charsmap *cm, const char *in, size_t n, kn_bvec *out);
void kn_tj_charsmap_free(kn_tj_charsmap *cm);

/* Unicode forms over UTF-8 (ill-formed bytes pass through unchanged). */
kiln_status kn_tj_unicode_form(const char *in, size_t n, bool compose, bool compat, kn_bvec *out);
/* The same without the quick check (every character decomposed, reordered and composed): the
 * reference of the tests. */
kiln_status kn_tj_unicode_form_full(const char *in, size_t n, bool compose, bool compat, kn_bvec *out);

/* ---- pre-tokenizers (tok_tj_pre.c) ------------------------------------------------------------- */
/* Words of one text section: bytes in buf, spans into it. */
typedef struct kn_tj_words {
    kn_bvec buf;
    kn_spanvec w;
} kn_tj_words;
/* Runs the pipeline over in[0..n) (section_index: the position of the section among the added-token
 * split, for Metaspace's "first" scheme) into *out (cleared first). */
kiln_status kn_tj_pretokenize(const kn_tj *tj, const char *in, size_t n, size_t section_index, kn_tj_words *out,
                              kn_tj_words *tmp);
void kn_tj_pre_free(kn_tj_pre *p);
/* Compiles a Hugging Face (Oniguruma) regex with PCRE2; KILN_ERR_FORMAT naming `where` on error. */
kiln_status kn_tj_compile(const char *re, size_t n, const char *where, pcre2_code **out);
/* Splits text[0..n) at the matches of re (or of the literal lit when re is NULL) with a behaviour,
 * appending spans relative to base. */
kiln_status kn_tj_split(const pcre2_code *re, const char *lit, size_t lit_len, kn_tj_behavior b, bool invert,
                        const char *text, size_t n, size_t base, kn_spanvec *out);

/* ---- encoding (tok_tj_enc.c) ------------------------------------------------------------------- */
/* Appends the ids of text[0..len) (no post-processor tokens) to out. */
kiln_status kn_tj_encode(const kn_tokenizer *t, const char *text, size_t len, bool parse_special, kn_ivec *out);
/* Appends the unknown token for the text s[0..n) that no piece covers. Without one the text is dropped
 * (a BPE naming no unk_token) or, as the tokenizers library does, the encode fails with
 * KILN_ERR_INVALID_ARG naming the text's first character (tj->unk_required). */
kiln_status kn_tj_push_unk(const kn_tokenizer *t, const char *s, size_t n, kn_ivec *out);
/* That failure: KILN_ERR_INVALID_ARG naming the first character of s[0..n). */
kiln_status kn_tj_no_unk(const char *s, size_t n);
/* Unigram (unigram.c): appends the ids of one pre-tokenized word. */
kiln_status kn_unigram_encode(const kn_tokenizer *t, const char *w, size_t n, kn_ivec *out);
/* Builds t->tj->pieces from the vocabulary. */
kiln_status kn_unigram_build_trie(kn_tokenizer *t);
void kn_tj_ptrie_free(kn_tj_ptrie *p);

#endif

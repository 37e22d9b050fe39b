/*
 * tok_internal.h - the inside of kn_tokenizer, shared by the files of src/text that implement it:
 *   tok_util.c    hashing, the text->id and merge-pair hash maps, growable vectors, the bigram heap
 *   tok_load.c    building a tokenizer from GGUF metadata (every count, length and id checked)
 *   tok_tj*.c     building one from a Hugging Face tokenizer.json, and its encoder (see tok_tj.h)
 *   tok_json.c    the JSON reader under it
 *   tokenizer.c   kn_tokenize (special-token partition, BOS/EOS) and kn_token_piece
 *   spm.c         SentencePiece-style encoding (score-ordered bigram merges, byte fallback)
 *   bpe.c         byte-level BPE encoding (GPT-2 byte mapping, merge ranks)
 *   pretok.c      the BPE pre-tokenizer regex sets (PCRE2), chosen by tokenizer.ggml.pre
 *   wordpiece.c   BERT WordPiece (normalization, greedy longest match)
 *   detok.c       the incremental detokenizer
 *   unicode.c     UTF-8 and Unicode lookups (tables in unicode_data.c, made by tools/gen_unicode_data.py)
 * Nothing here is visible outside src/text.
 */
#ifndef KN_TOK_INTERNAL_H
#define KN_TOK_INTERNAL_H

#include "text/tokenizer.h"

typedef enum kn_tok_kind {
    KN_TOK_SPM, /* tokenizer.ggml.model = "llama" */
    KN_TOK_BPE, /* "gpt2" */
    KN_TOK_WPM, /* "bert" */
} kn_tok_kind;

/* GGUF tokenizer.ggml.token_type values. */
enum {
    KN_TTYPE_UNDEFINED = 0,
    KN_TTYPE_NORMAL = 1,
    KN_TTYPE_UNKNOWN = 2,
    KN_TTYPE_CONTROL = 3,
    KN_TTYPE_USER_DEFINED = 4,
    KN_TTYPE_UNUSED = 5,
    KN_TTYPE_BYTE = 6,
};

/* Token attributes (bit set, derived from the type and a few name-based rules at load). */
enum {
    KN_ATTR_NORMAL = 1 << 0,
    KN_ATTR_UNKNOWN = 1 << 1,
    KN_ATTR_CONTROL = 1 << 2,
    KN_ATTR_USER_DEFINED = 1 << 3,
    KN_ATTR_UNUSED = 1 << 4,
    KN_ATTR_BYTE = 1 << 5,
    KN_ATTR_LSTRIP = 1 << 6, /* eat whitespace left of the token when partitioning */
    KN_ATTR_RSTRIP = 1 << 7, /* eat whitespace right of the token when partitioning */
};

typedef struct kn_tok_info {
    uint32_t text_off, text_len;   /* vocabulary text, in kn_tokenizer.text */
    uint32_t piece_off, piece_len; /* decoded bytes (special tokens: their text), in .pieces */
    float score;
    uint8_t attr;
    bool eog;
} kn_tok_info;

/* ---- tok_util.c ------------------------------------------------------------------------------ */

/* A fast 64-bit hash of n bytes (8 bytes per step) for the tables below; not cryptographic. */
uint64_t kn_hash_bytes(const void *p, size_t n);

/* Open-addressing map from token text to id over the tokenizer's text pool. */
typedef struct kn_strmap {
    int32_t *slots; /* id or -1 */
    uint64_t mask;  /* capacity - 1 (capacity a power of two, at least twice the entries) */
} kn_strmap;

/* Open-addressing map from a 64-bit key to a 32-bit value (trie edges). */
typedef struct kn_u64map {
    uint64_t *keys; /* key + 1; 0 marks an empty slot */
    int32_t *vals;
    uint64_t mask;
    uint64_t n;
} kn_u64map;

kiln_status kn_u64map_init(kn_u64map *m, uint64_t expected);
kiln_status kn_u64map_put(kn_u64map *m, uint64_t key, int32_t val);
int32_t kn_u64map_get(const kn_u64map *m, uint64_t key); /* -1 when absent */
void kn_u64map_free(kn_u64map *m);

/* Growable vectors; push returns false (with a NOMEM message recorded) when memory runs out. */
typedef struct kn_ivec {
    int32_t *v;
    size_t n, cap;
} kn_ivec;
typedef struct kn_bvec {
    char *v;
    size_t n, cap;
} kn_bvec;
bool kn_ivec_push(kn_ivec *a, int32_t x);
bool kn_bvec_append(kn_bvec *a, const void *p, size_t n);
bool kn_reserve(void **p, size_t *cap, size_t need, size_t elem);

/* Candidate merge of two adjacent symbols; the heap pops the highest prio, then the lowest left. */
typedef struct kn_bigram {
    int32_t prio; /* SPM: kn_score_key(score); BPE: -rank */
    int32_t left, right;
    uint32_t size; /* byte length of the merged text, to detect stale entries */
} kn_bigram;

/* Maps a float score to an int32 with the same order (-0 and +0 equal; NaN must not occur). */
static inline int32_t kn_score_key(float f) {
    union {
        float f;
        uint32_t u;
    } v = {f == 0.0f ? 0.0f : f};
    uint32_t u = (v.u & 0x80000000u) ? ~v.u : (v.u | 0x80000000u);
    return (int32_t)(u ^ 0x80000000u);
}
typedef struct kn_heap {
    kn_bigram *v;
    size_t n, cap;
} kn_heap;
bool kn_heap_push(kn_heap *h, kn_bigram b);
kn_bigram kn_heap_pop(kn_heap *h); /* h->n > 0 */

/* A symbol in a merge list: bytes [off, off+n) of the text being encoded; n == 0 once merged away;
 * h the kn_hash_bytes of its bytes while kn_bpe_merge runs. */
typedef struct kn_symbol {
    int32_t prev, next;
    uint32_t off, n;
    uint64_t h;
} kn_symbol;

/* ---- pretok.c -------------------------------------------------------------------------------- */

typedef struct kn_pretok kn_pretok;
typedef struct kn_span {
    size_t off, len;
} kn_span;
typedef struct kn_spanvec {
    kn_span *v;
    size_t n, cap;
} kn_spanvec;

/* Flags a pre-tokenizer type implies for the vocabulary. */
typedef struct kn_pretok_traits {
    bool ignore_merges; /* a word that is itself a token is emitted whole (Llama 3, Tekken) */
    bool add_bos;       /* default for add_bos when the metadata does not say */
} kn_pretok_traits;

/* Compiles the regex set of pre-tokenizer `name` (tokenizer.ggml.pre; NULL or "" for the default
 * set). KILN_ERR_UNSUPPORTED for a name kiln does not know. */
kiln_status kn_pretok_create(const char *name, size_t name_len, kn_pretok **out, kn_pretok_traits *traits);
void kn_pretok_free(kn_pretok *p);
/* Splits text[0..len) into words: each regex in turn splits every current piece into its matches
 * and the gaps between them. Appends the spans (relative to text) to *out. Ill-formed UTF-8 never
 * matches a regex, so it ends up in gap pieces of its own. */
kiln_status kn_pretok_split(const kn_pretok *p, const char *text, size_t len, kn_spanvec *out);

/* ---- the tokenizer --------------------------------------------------------------------------- */

struct kn_tokenizer {
    kn_tok_kind kind;
    int32_t n_vocab;
    kn_tok_info *tok; /* [n_vocab] */
    char *text;       /* token texts */
    char *pieces;     /* decoded pieces */
    kn_strmap by_text;
    uint32_t max_token_len; /* longest token text in bytes */
    bool spm_split_ok;      /* no token has a U+2581 after another character: SPM merges never
                               cross the start of a "▁word", so words can be merged separately */

    int32_t bos, eos, eot, eom, unk, sep, pad; /* -1 when absent */
    bool add_bos, add_eos, add_sep;
    bool add_space_prefix; /* SPM: prefix text (and text after a special token) with a space */
    bool ignore_merges;
    bool wpm_lowercase, wpm_strip_accents;

    int32_t byte_tok[256]; /* SPM: <0xNN> (or the 1-byte token); BPE: the byte's mapped char; -1 */

    /* BPE */
    kn_pretok *pretok;
    char *merge_text;      /* copies of the merge strings */
    uint32_t *merge_off;   /* [n_merges] offsets into merge_text, strings "A B" */
    uint32_t *merge_a_len; /* [n_merges] length of A */
    uint32_t *merge_len;   /* [n_merges] total length */
    uint32_t n_merges;
    uint32_t max_merge_len; /* longest merge string ("A B") */
    int32_t *merge_slots;   /* open addressing: rank or -1 */
    uint64_t merge_mask;

    /* special tokens (control, user-defined, unknown), for partitioning the input text */
    int32_t *special; /* ids, longest text first (ties: lower id first) */
    int32_t n_special;
    int32_t *special_rank; /* [n_vocab]: position in `special`, or -1 */
    int32_t *trie_term;    /* [n_nodes]: id ending at the node, or -1 */
    int32_t trie_nodes;
    kn_u64map trie_edges;   /* (node << 8 | byte) -> child */
    uint8_t trie_first[32]; /* bitmap of first bytes */

    struct kn_tj *tj; /* built from a tokenizer.json (tok_tj.h); NULL for GGUF metadata */
};

/* tok_load.c, shared with tok_tj_load.c: the decoded piece of every token (by kind and attr), the
 * special-token list and trie of the GGUF partition, and the end-of-generation rules by token text
 * (EOT / EOM by name, gpt-oss's shown tokens). */
kiln_status kn_tok_build_pieces(kn_tokenizer *t);
kiln_status kn_tok_build_specials(kn_tokenizer *t);
void kn_tok_apply_eog_rules(kn_tokenizer *t);

/* Text -> id lookup; -1 when text is not a token. */
int32_t kn_tok_lookup(const kn_tokenizer *t, const char *s, size_t n);
/* BPE merging of one word w: sym[0..n_sym) are its symbols (characters), a list in order
 * (prev / next, the last one's next -1). Merges the adjacent pair with the lowest merge rank
 * (ties: the leftmost) until no adjacent pair has a rank; the merged symbols are those still of
 * n > 0, from sym[0] along next. heap is scratch. False when out of memory. */
bool kn_bpe_merge(const kn_tokenizer *t, const char *w, kn_symbol *sym, int32_t n_sym, kn_heap *heap);
/* Builds by_text over the vocabulary (first id wins for duplicate texts). */
kiln_status kn_tok_build_index(kn_tokenizer *t);
/* Builds the merge hash over merge_* arrays (first rank wins for duplicates). */
kiln_status kn_bpe_build_index(kn_tokenizer *t);

/* GPT-2 byte <-> unicode mapping. kn_bpe_byte_char: the code point byte b is written as.
 * kn_bpe_char_byte: the byte code point cp stands for, or -1 if cp is not one of the 256. */
uint32_t kn_bpe_byte_char(uint8_t b);
int kn_bpe_char_byte(uint32_t cp);

/* Model encoders: each appends the ids for text[0..len) (a raw fragment between special tokens). */
kiln_status kn_spm_encode(const kn_tokenizer *t, const char *text, size_t len, bool prefix_space, kn_ivec *out);
kiln_status kn_bpe_encode(const kn_tokenizer *t, const char *text, size_t len, kn_ivec *out);
kiln_status kn_wpm_encode(const kn_tokenizer *t, const char *text, size_t len, kn_ivec *out);

/* Appends the byte-fallback id(s) for byte b (SPM), or the unknown token, or nothing. */
bool kn_tok_push_byte(const kn_tokenizer *t, uint8_t b, kn_ivec *out);

#endif

/*
 * vtrie.h - the inside of kn_vtrie (gmask.h), shared by vtrie.c (building it) and gmask.c (walking
 * it). Nothing here is visible outside src/sample.
 *
 * The tokens with text are renumbered in sorted byte order (order[] maps a sorted index back to the
 * token id), so the tokens below any trie node form one contiguous range of sorted indices. The
 * nodes are stored in preorder, node 0 the root (no byte): a node's first child is the next node,
 * its subtree ends at node `skip`, and its tokens are the sorted indices [lo, nodes[skip].lo), of
 * which [lo, nodes[i + 1].lo) end exactly at the node. A sentinel node at index n_nodes has
 * lo = n_text, so nodes[i + 1] and nodes[skip] always exist.
 *
 * Every node with tokens strictly below it carries a summary of its subtree (an index into sums[],
 * 0 = none): the ASCII bytes that occur below the node, the lead bytes of the multi-byte characters
 * (one bit per lead byte: a lead byte names a block of 64 to 262,144 code points, so a class such as
 * \p{L} that splits a kind of characters still holds most blocks whole), and from which states of a
 * UTF-8 validator every token's bytes below the node are well-formed (a character boundary, or
 * inside a character when the node is; a token may stop in the middle of its last character); and
 * `below`, the most bytes a token has below the node (255: that many or more). The matcher accepts
 * a whole subtree at once when its parser state moves the same way on every character the summary
 * allows, for as many characters as `below`.
 *
 * Plain tokens and exceptions. Most tokens are plain text: short runs (vtrie.c: PLAIN_MAX_CHARS) of
 * printable ASCII other than '"' and '\\' and of well-formed UTF-8 (the last character may be cut),
 * all of which a JSON string's content takes alike. The root's summary also covers the others
 * (quotes, backslashes, control bytes, stray UTF-8 bytes, long runs), so it fails inside a string;
 * hence the trie also keeps the summaries of the plain tokens alone, their bitmap by id, and a
 * second trie `exc` over the other tokens only (same ids, no end-of-generation tokens). When a state
 * passes the plain summaries, every plain token is allowed at once and only the exception trie is
 * walked. The plain tokens are summarized in two groups, the ASCII ones and those with multi-byte
 * characters, each with its most characters (not bytes) per token: multi-byte characters are the
 * dear ones to check, so a bounded string checks them over a short chain of states only.
 */
#ifndef KN_VTRIE_H
#define KN_VTRIE_H

#include "sample/gmask.h"

#define KN_VTRIE_MAX_TEXT  1024 /* bytes of one token's text at most (KN_TOK_MAX_PIECE) */
#define KN_VTRIE_BELOW_MAX 255  /* kn_vnode.below saturates here */

/* The kinds of multi-byte UTF-8 characters, by lead byte (each kind has its own continuations). */
enum {
    KN_U8_KIND_C2_DF,
    KN_U8_KIND_E0,
    KN_U8_KIND_E1_EC,
    KN_U8_KIND_ED,
    KN_U8_KIND_EE_EF,
    KN_U8_KIND_F0,
    KN_U8_KIND_F1_F3,
    KN_U8_KIND_F4,
    KN_U8_KINDS
};

static inline int kn_u8_kind(uint8_t lead) {
    if (lead < 0xC2) return -1;
    if (lead <= 0xDF) return KN_U8_KIND_C2_DF;
    if (lead == 0xE0) return KN_U8_KIND_E0;
    if (lead <= 0xEC) return KN_U8_KIND_E1_EC;
    if (lead == 0xED) return KN_U8_KIND_ED;
    if (lead <= 0xEF) return KN_U8_KIND_EE_EF;
    if (lead == 0xF0) return KN_U8_KIND_F0;
    if (lead <= 0xF3) return KN_U8_KIND_F1_F3;
    return lead == 0xF4 ? KN_U8_KIND_F4 : -1;
}

/* The lead bytes of multi-byte characters, C2..F4, as bits 0..50 of a uint64_t (0 for other bytes). */
#define KN_U8_LEAD_FIRST 0xC2
#define KN_U8_LEAD_LAST  0xF4
static inline uint64_t kn_u8_lead_bit(uint8_t b) {
    return b >= KN_U8_LEAD_FIRST && b <= KN_U8_LEAD_LAST ? 1ull << (b - KN_U8_LEAD_FIRST) : 0;
}

typedef struct kn_vsum {
    uint64_t ascii[2]; /* bit b: byte b (< 128) occurs below the node */
    uint64_t leads;    /* kn_u8_lead_bit of every lead byte below the node */
    uint8_t valid;     /* bit q: every text below the node is well-formed UTF-8 read from validator
                          state q (kn_u8_next; a text may stop inside its last character): bit 0
                          (KN_U8_BOUNDARY) for texts of whole characters, another for texts that
                          begin by ending a character */
} kn_vsum;

typedef struct kn_vnode {
    uint32_t lo;    /* first sorted token index of the subtree */
    uint32_t skip;  /* the node after the subtree (preorder) */
    uint32_t sum;   /* index into sums[], 0 = no summary */
    uint16_t depth; /* bytes from the root (the root: 0) */
    uint8_t byte;   /* the byte leading here from the parent */
    uint8_t below;  /* the most bytes of a token below the node, at most KN_VTRIE_BELOW_MAX */
} kn_vnode;

/* A UTF-8 validator over bytes that lets a text stop inside a character: q0 (KN_U8_BOUNDARY) between
 * characters, the others inside one, naming the continuation bytes still due (Unicode's table of
 * well-formed byte sequences: no overlong forms, no surrogates, nothing above U+10FFFF). */
enum {
    KN_U8_BOUNDARY,
    KN_U8_CONT1, /* one more 80..BF */
    KN_U8_CONT2, /* two more 80..BF */
    KN_U8_CONT3, /* three more 80..BF */
    KN_U8_E0,    /* A0..BF, then one more */
    KN_U8_ED,    /* 80..9F, then one more */
    KN_U8_F0,    /* 90..BF, then two more */
    KN_U8_F4,    /* 80..8F, then two more */
    KN_U8_STATES
};

/* The validator's state after byte b in state q, or -1 when b cannot come next. */
static inline int kn_u8_next(int q, uint8_t b) {
    switch (q) {
        case KN_U8_BOUNDARY:
            if (b < 0x80) return KN_U8_BOUNDARY;
            if (b >= 0xC2 && b <= 0xDF) return KN_U8_CONT1;
            if (b == 0xE0) return KN_U8_E0;
            if (b == 0xED) return KN_U8_ED;
            if (b >= 0xE1 && b <= 0xEF) return KN_U8_CONT2;
            if (b == 0xF0) return KN_U8_F0;
            if (b >= 0xF1 && b <= 0xF3) return KN_U8_CONT3;
            if (b == 0xF4) return KN_U8_F4;
            return -1;
        case KN_U8_CONT1: return b >= 0x80 && b <= 0xBF ? KN_U8_BOUNDARY : -1;
        case KN_U8_CONT2: return b >= 0x80 && b <= 0xBF ? KN_U8_CONT1 : -1;
        case KN_U8_CONT3: return b >= 0x80 && b <= 0xBF ? KN_U8_CONT2 : -1;
        case KN_U8_E0: return b >= 0xA0 && b <= 0xBF ? KN_U8_CONT1 : -1;
        case KN_U8_ED: return b >= 0x80 && b <= 0x9F ? KN_U8_CONT1 : -1;
        case KN_U8_F0: return b >= 0x90 && b <= 0xBF ? KN_U8_CONT2 : -1;
        case KN_U8_F4: return b >= 0x80 && b <= 0x8F ? KN_U8_CONT2 : -1;
        default: return -1;
    }
}

struct kn_vtrie {
    int32_t n_vocab;
    int32_t n_text;      /* tokens with text (the others are never allowed, EOG aside) */
    int32_t *order;      /* [n_text] sorted index -> token id */
    uint32_t *tok_off;   /* [n_vocab] offset of the token's text in text[] */
    uint16_t *tok_len;   /* [n_vocab] its length (0: no text) */
    uint8_t *text;       /* the token texts */
    uint64_t *text_bits; /* [words] bitmap by id of the tokens with text */
    uint64_t *eog_bits;  /* [words] bitmap by id of the end-of-generation tokens */
    int32_t *eog;        /* [n_eog] their ids, ascending */
    int32_t n_eog;
    int32_t words;    /* (n_vocab + 63) / 64 */
    uint32_t n_nodes; /* nodes[n_nodes] is the sentinel */
    kn_vnode *nodes;  /* [n_nodes + 1] preorder */
    kn_vsum *sums;    /* [n_sums], sums[0] unused */
    uint32_t n_sums;
    uint32_t max_depth; /* the longest text */
    /* plain tokens and the exception trie (NULL when either set is empty) */
    struct kn_vtrie *exc;   /* the trie of the tokens with text that are not plain */
    uint64_t *plain_bits;   /* [words] bitmap by id of the plain tokens */
    int32_t n_plain;        /* plain tokens */
    kn_vsum plain_sum[2];   /* summaries of the ASCII plain tokens [0] and of the others [1] */
    uint8_t plain_below[2]; /* their most characters per token, at most KN_VTRIE_BELOW_MAX */
};

#endif

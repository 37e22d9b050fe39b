/*
 * tok_tj_load.c - builds a kn_tokenizer from a Hugging Face tokenizer.json (and tokenizer_config.json).
 *
 * The vocabulary (model.vocab, then added_tokens, which win for their ids) fills the same token
 * table a GGUF vocabulary does, so kn_token_piece, the detokenizer and the accessors work unchanged:
 *   - added tokens with "special": true are control tokens (matched in text only with parse_special,
 *     hidden unless rendered), the others user-defined (always matched, shown);
 *   - with a ByteLevel decoder the pieces decode through the GPT-2 byte mapping (kind BPE), otherwise
 *     U+2581 decodes to a space and "<0xNN>" tokens of a byte_fallback model to their byte (kind SPM);
 *     WordPiece pieces drop "##" and get a leading space otherwise (kind WPM).
 * The normalizer, pre-tokenizer and post-processor become the pipelines of tok_tj.h; a type kiln does
 * not implement is KILN_ERR_UNSUPPORTED naming it and its JSON path, a wrong type or a missing field
 * is KILN_ERR_FORMAT with the path. Sizes are capped (KN_TJ_MAX_*).
 *
 * tokenizer_config.json gives bos_token / eos_token (strings or {"content": ...}) and chat_template
 * (a string, or a list of {"name", "template"}). Which special tokens an encoding adds comes from the
 * post-processor alone, as in the tokenizers library (the test oracle); add_bos_token is not read.
 */
#include "text/tok_json.h"
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KN_TJ_MAX_JSON   ((size_t)512 << 20) /* tokenizer.json */
#define KN_TJ_MAX_CONFIG ((size_t)64 << 20)  /* tokenizer_config.json */
#define KN_TJ_MAX_VOCAB  (1 << 24)
#define KN_TJ_MAX_STEPS  64 /* normalizer / pre-tokenizer steps after flattening Sequences */
#define KN_TJ_MAX_TOKEN  4096

typedef struct loader {
    kn_json j, c; /* tokenizer.json, tokenizer_config.json (c.v NULL when absent) */
    kn_tokenizer *t;
    kn_tj *tj;
} loader;

static kiln_status fmt(const char *path, const char *what) {
    return kn_error(KILN_ERR_FORMAT, "tokenizer.json: %s %s", path, what);
}

static char *dup_bytes(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* ---- vocabulary --------------------------------------------------------------------------------- */

/* The id of vocab member / added token node (already checked). */
static kiln_status read_vocab(loader *L, int32_t model) {
    kn_json *j = &L->j;
    kn_tokenizer *t = L->t;
    int32_t vocab = kn_json_get(j, model, "vocab");
    int32_t added = kn_json_get(j, 0, "added_tokens");
    bool unigram = L->tj->model == KN_TJ_UNIGRAM;
    if (kn_json_type(j, vocab) != (unigram ? KN_J_ARR : KN_J_OBJ))
        return fmt("model.vocab", unigram ? "is not an array" : "is not an object");
    if (added >= 0 && kn_json_type(j, added) != KN_J_ARR) return fmt("added_tokens", "is not an array");
    int64_t n = 0;
    uint64_t bytes = 0;
    uint32_t k = 0;
    char path[64];
    for (int32_t c = j->v[vocab].first; c >= 0; c = j->v[c].next, k++) {
        int64_t id;
        if (unigram) {
            int32_t piece = j->v[c].first, score = piece >= 0 ? j->v[piece].next : -1;
            double sc = 0;
            if (j->v[c].type != KN_J_ARR || j->v[c].n != 2 || kn_json_type(j, piece) != KN_J_STR ||
                !kn_json_num(j, score, &sc) || !isfinite(sc)) {
                snprintf(path, sizeof path, "model.vocab[%u]", k);
                return fmt(path, "is not a [piece, score] pair with a finite score");
            }
            id = k;
            bytes += j->v[piece].len;
        } else {
            if (!kn_json_int(j, c, 0, KN_TJ_MAX_VOCAB - 1, &id)) {
                char key[48];
                snprintf(key, sizeof key, "%.*s", (int)KN_MIN(j->v[c].key_len, 40u), j->buf + j->v[c].key_off);
                return kn_error(KILN_ERR_FORMAT, "tokenizer.json: model.vocab[\"%s\"] is not an id below %d", key,
                                KN_TJ_MAX_VOCAB);
            }
            bytes += j->v[c].key_len;
        }
        if (id + 1 > n) n = id + 1;
    }
    k = 0;
    for (int32_t c = added >= 0 ? j->v[added].first : -1; c >= 0; c = j->v[c].next, k++) {
        int64_t id;
        int32_t content = kn_json_get(j, c, "content");
        if (!kn_json_int(j, kn_json_get(j, c, "id"), 0, KN_TJ_MAX_VOCAB - 1, &id) ||
            kn_json_type(j, content) != KN_J_STR || j->v[content].len == 0) {
            snprintf(path, sizeof path, "added_tokens[%u]", k);
            return fmt(path, "has no id below 2^24 or no non-empty content");
        }
        bytes += j->v[content].len;
        if (id + 1 > n) n = id + 1;
    }
    if (n == 0) return fmt("model.vocab", "is empty");
    if (bytes > UINT32_MAX) return fmt("model.vocab", "holds more than 4 GiB of text");
    t->n_vocab = (int32_t)n;
    t->tok = calloc((size_t)n, sizeof *t->tok);
    t->text = malloc(bytes ? bytes : 1);
    L->tj->added = calloc((size_t)n, 1);
    if (!t->tok || !t->text || !L->tj->added)
        return kn_error(KILN_ERR_NOMEM, "out of memory for %lld tokens", (long long)n);
    uint32_t off = 0;
    k = 0;
    for (int32_t c = j->v[vocab].first; c >= 0; c = j->v[c].next, k++) {
        int64_t id = k;
        const char *s;
        uint32_t len;
        if (unigram) {
            int32_t piece = j->v[c].first;
            double score;
            kn_json_num(j, j->v[piece].next, &score);
            s = j->buf + j->v[piece].off;
            len = j->v[piece].len;
            /* within a float's range: the segmentation's unknown step scores below the lowest piece,
             * which must be finite for every text to have a segmentation (unigram.c) */
            t->tok[id].score = (float)fmax(-FLT_MAX, fmin(FLT_MAX, score));
        } else {
            kn_json_int(j, c, 0, KN_TJ_MAX_VOCAB - 1, &id);
            s = j->buf + j->v[c].key_off;
            len = j->v[c].key_len;
        }
        if (t->tok[id].attr) {
            snprintf(path, sizeof path, "model.vocab (id %lld)", (long long)id);
            return fmt(path, "gives one id to two tokens");
        }
        memcpy(t->text + off, s, len);
        t->tok[id].text_off = off;
        t->tok[id].text_len = len;
        t->tok[id].attr = KN_ATTR_NORMAL;
        off += len;
    }
    for (int32_t c = added >= 0 ? j->v[added].first : -1; c >= 0; c = j->v[c].next) {
        int64_t id;
        kn_json_int(j, kn_json_get(j, c, "id"), 0, KN_TJ_MAX_VOCAB - 1, &id);
        int32_t content = kn_json_get(j, c, "content");
        uint32_t len = j->v[content].len;
        memcpy(t->text + off, j->buf + j->v[content].off, len);
        t->tok[id].text_off = off;
        t->tok[id].text_len = len;
        bool special = kn_json_bool(j, kn_json_get(j, c, "special"), false);
        uint8_t attr = special ? KN_ATTR_CONTROL : KN_ATTR_USER_DEFINED;
        L->tj->added[id] = special ? 2 : 1;
        if (kn_json_bool(j, kn_json_get(j, c, "lstrip"), false)) attr |= KN_ATTR_LSTRIP;
        if (kn_json_bool(j, kn_json_get(j, c, "rstrip"), false)) attr |= KN_ATTR_RSTRIP;
        t->tok[id].attr = attr;
        off += len;
    }
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->tok[id].attr) t->tok[id].attr = KN_ATTR_UNUSED; /* an id nobody names */
        if (t->tok[id].text_len > t->max_token_len) t->max_token_len = t->tok[id].text_len;
    }
    return kn_tok_build_index(t);
}

/* Rebuilds the text -> id index so that added tokens win over model tokens of the same text (the
 * tokenizers library maps a text to the added token's id). */
static void prefer_added(kn_tokenizer *t) {
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!(t->tok[id].attr & (KN_ATTR_CONTROL | KN_ATTR_USER_DEFINED))) continue;
        const char *s = t->text + t->tok[id].text_off;
        int32_t other = kn_tok_lookup(t, s, t->tok[id].text_len);
        if (other >= 0 && other != id) {
            /* hide the model token's text from the index: it keeps its piece */
            uint64_t mask = t->by_text.mask;
            for (uint64_t i = 0; i <= mask; i++)
                if (t->by_text.slots[i] == other) {
                    t->by_text.slots[i] = id;
                    break;
                }
        }
    }
}

static kiln_status read_merges(loader *L, int32_t model) {
    kn_json *j = &L->j;
    kn_tokenizer *t = L->t;
    int32_t merges = kn_json_get(j, model, "merges");
    if (merges < 0 || kn_json_type(j, merges) == KN_J_NULL) return KILN_OK; /* a BPE without merges */
    if (kn_json_type(j, merges) != KN_J_ARR) return fmt("model.merges", "is not an array");
    uint32_t n = j->v[merges].n;
    size_t cnt = n ? n : 1;
    t->merge_off = malloc(cnt * sizeof *t->merge_off);
    t->merge_a_len = malloc(cnt * sizeof *t->merge_a_len);
    t->merge_len = malloc(cnt * sizeof *t->merge_len);
    uint64_t total = 0;
    for (int32_t c = j->v[merges].first; c >= 0; c = j->v[c].next) {
        if (j->v[c].type == KN_J_STR) total += j->v[c].len;
        else if (j->v[c].type == KN_J_ARR && j->v[c].n == 2)
            total += (uint64_t)j->v[j->v[c].first].len + j->v[j->v[j->v[c].first].next].len + 1;
    }
    if (total > UINT32_MAX) return fmt("model.merges", "hold more than 4 GiB of text");
    t->merge_text = malloc(total ? total : 1);
    if (!t->merge_off || !t->merge_a_len || !t->merge_len || !t->merge_text)
        return kn_error(KILN_ERR_NOMEM, "out of memory for %u merges", n);
    uint32_t i = 0, off = 0;
    char path[48];
    for (int32_t c = j->v[merges].first; c >= 0; c = j->v[c].next, i++) {
        const kn_jnode *m = &j->v[c];
        uint32_t an, bn;
        if (m->type == KN_J_STR) {
            const char *s = j->buf + m->off;
            const char *sp = m->len > 1 ? memchr(s + 1, ' ', m->len - 1) : NULL;
            if (!sp || (uint32_t)(sp - s) + 1 >= m->len) {
                snprintf(path, sizeof path, "model.merges[%u]", i);
                return fmt(path, "is not two tokens separated by a space");
            }
            an = (uint32_t)(sp - s);
            bn = m->len - an - 1;
            memcpy(t->merge_text + off, s, m->len);
        } else {
            int32_t a = m->first, b = a >= 0 ? j->v[a].next : -1;
            if (m->type != KN_J_ARR || m->n != 2 || kn_json_type(j, a) != KN_J_STR || kn_json_type(j, b) != KN_J_STR ||
                !j->v[a].len || !j->v[b].len) {
                snprintf(path, sizeof path, "model.merges[%u]", i);
                return fmt(path, "is not a pair of non-empty strings");
            }
            an = j->v[a].len;
            bn = j->v[b].len;
            memcpy(t->merge_text + off, j->buf + j->v[a].off, an);
            t->merge_text[off + an] = ' ';
            memcpy(t->merge_text + off + an + 1, j->buf + j->v[b].off, bn);
        }
        t->merge_off[i] = off;
        t->merge_a_len[i] = an;
        t->merge_len[i] = an + bn + 1;
        if (an + bn + 1 > t->max_merge_len) t->max_merge_len = an + bn + 1;
        off += an + bn + 1;
    }
    t->n_merges = n;
    return kn_bpe_build_index(t);
}

/* ---- normalizers and pre-tokenizers ---------------------------------------------------------- */

static kiln_status unsupported(const char *kind, const char *path, const kn_json *j, int32_t type) {
    size_t n = 0;
    const char *s = kn_json_str(j, type, &n);
    return kn_error(KILN_ERR_UNSUPPORTED, "tokenizer.json: %s type '%.*s' (at %s) is not supported", kind,
                    (int)KN_MIN(n, 64), s ? s : "", path);
}

/* A Hugging Face pattern: {"String": s} or {"Regex": r}; *lit gets a literal (NUL-terminated copy),
 * or *re a compiled regex. */
static kiln_status read_pattern(const kn_json *j, int32_t node, const char *path, char **lit, size_t *lit_len,
                                pcre2_code **re) {
    int32_t pat = kn_json_get(j, node, "pattern");
    int32_t s = kn_json_get(j, pat, "String"), r = kn_json_get(j, pat, "Regex");
    size_t n;
    const char *v;
    char where[96];
    snprintf(where, sizeof where, "%s.pattern", path);
    if ((v = kn_json_str(j, s, &n))) {
        if (!(*lit = dup_bytes(v, n))) return KILN_ERR_NOMEM;
        *lit_len = n;
        return KILN_OK;
    }
    if ((v = kn_json_str(j, r, &n))) return kn_tj_compile(v, n, where, re);
    return fmt(where, "is neither {\"String\": ...} nor {\"Regex\": ...}");
}

/* A step of a pipeline (normalizer, pre-tokenizer, post-processor) read at path. */
typedef kiln_status (*step_fn)(loader *L, int32_t node, const char *path, int depth);

/* When node is a {"type": "Sequence", key: [...]}: reads each element with fn (depth + 1) and sets
 * *done; otherwise leaves *done false. Sequences nest at most 8 deep. */
static kiln_status read_sequence(loader *L, int32_t node, const char *path, int depth, const char *key, step_fn fn,
                                 bool *done) {
    kn_json *j = &L->j;
    *done = false;
    if (!kn_json_str_eq(j, kn_json_get(j, node, "type"), "Sequence")) return KILN_OK;
    *done = true;
    int32_t arr = kn_json_get(j, node, key);
    if (kn_json_type(j, arr) != KN_J_ARR) {
        char what[64];
        snprintf(what, sizeof what, "(Sequence) has no %s array", key);
        return fmt(path, what);
    }
    if (depth > 8) return fmt(path, "nests Sequences too deeply");
    char sub[96];
    uint32_t i = 0;
    for (int32_t c = j->v[arr].first; c >= 0; c = j->v[c].next, i++) {
        snprintf(sub, sizeof sub, "%s.%s[%u]", path, key, i);
        kiln_status st = fn(L, c, sub, depth + 1);
        if (st) return st;
    }
    return KILN_OK;
}

static kiln_status add_norm(loader *L, int32_t node, const char *path, int depth) {
    kn_json *j = &L->j;
    kn_tj *tj = L->tj;
    if (kn_json_type(j, node) == KN_J_NULL) return KILN_OK;
    int32_t type = kn_json_get(j, node, "type");
    if (kn_json_type(j, type) != KN_J_STR) return fmt(path, "has no type");
    bool seq;
    kiln_status sst = read_sequence(L, node, path, depth, "normalizers", add_norm, &seq);
    if (seq) return sst;
    if (tj->n_norm >= KN_TJ_MAX_STEPS) return fmt(path, "has too many steps");
    kn_tj_norm nm = {0};
    kiln_status st = KILN_OK;
    if (kn_json_str_eq(j, type, "NFC")) nm.type = KN_TJN_NFC;
    else if (kn_json_str_eq(j, type, "NFD")) nm.type = KN_TJN_NFD;
    else if (kn_json_str_eq(j, type, "NFKC")) nm.type = KN_TJN_NFKC;
    else if (kn_json_str_eq(j, type, "NFKD")) nm.type = KN_TJN_NFKD;
    else if (kn_json_str_eq(j, type, "Lowercase")) nm.type = KN_TJN_LOWERCASE;
    else if (kn_json_str_eq(j, type, "StripAccents")) nm.type = KN_TJN_STRIP_ACCENTS;
    else if (kn_json_str_eq(j, type, "Strip")) {
        nm.type = KN_TJN_STRIP;
        nm.f[0] = kn_json_bool(j, kn_json_get(j, node, "strip_left"), false);
        nm.f[1] = kn_json_bool(j, kn_json_get(j, node, "strip_right"), false);
    } else if (kn_json_str_eq(j, type, "Prepend")) {
        nm.type = KN_TJN_PREPEND;
        size_t n;
        const char *s = kn_json_str(j, kn_json_get(j, node, "prepend"), &n);
        if (!s) return fmt(path, "(Prepend) has no prepend string");
        if (!(nm.str = dup_bytes(s, n))) return KILN_ERR_NOMEM;
        nm.str_len = n;
    } else if (kn_json_str_eq(j, type, "Replace")) {
        nm.type = KN_TJN_REPLACE;
        size_t n;
        const char *s = kn_json_str(j, kn_json_get(j, node, "content"), &n);
        if (!s) return fmt(path, "(Replace) has no content string");
        if (!(nm.content = dup_bytes(s, n))) return KILN_ERR_NOMEM;
        nm.content_len = n;
        st = read_pattern(j, node, path, &nm.str, &nm.str_len, &nm.re);
    } else if (kn_json_str_eq(j, type, "BertNormalizer")) {
        nm.type = KN_TJN_BERT;
        nm.f[0] = kn_json_bool(j, kn_json_get(j, node, "clean_text"), true);
        nm.f[1] = kn_json_bool(j, kn_json_get(j, node, "handle_chinese_chars"), true);
        nm.f[3] = kn_json_bool(j, kn_json_get(j, node, "lowercase"), true);
        /* strip_accents: null means "as lowercase" */
        nm.f[2] = kn_json_bool(j, kn_json_get(j, node, "strip_accents"), nm.f[3]);
    } else if (kn_json_str_eq(j, type, "Precompiled")) {
        nm.type = KN_TJN_PRECOMPILED;
        size_t n;
        const char *s = kn_json_str(j, kn_json_get(j, node, "precompiled_charsmap"), &n);
        if (!s || !n) return fmt(path, "(Precompiled) has no precompiled_charsmap string");
        char where[112];
        snprintf(where, sizeof where, "tokenizer.json: %s", path);
        st = kn_tj_charsmap_from_base64(s, n, where, &nm.cmap);
    } else {
        return unsupported("normalizer", path, j, type);
    }
    if (st) {
        kn_tj_norm_free(&nm);
        return st;
    }
    tj->norm[tj->n_norm++] = nm;
    return KILN_OK;
}

static kiln_status add_pre_step(kn_tj *tj, const kn_tj_pre *p, const char *path) {
    if (tj->n_pre >= KN_TJ_MAX_STEPS) return fmt(path, "has too many steps");
    tj->pre[tj->n_pre++] = *p;
    return KILN_OK;
}

/* Adds a split by a fixed regex (for the pre-tokenizers that are one). */
static kiln_status add_fixed_split(kn_tj *tj, const char *re, kn_tj_behavior b, bool invert, const char *path) {
    kn_tj_pre p = {.type = KN_TJP_SPLIT, .behavior = b, .invert = invert};
    kiln_status st = kn_tj_compile(re, strlen(re), path, &p.re);
    if (st) return st;
    if ((st = add_pre_step(tj, &p, path))) pcre2_code_free(p.re);
    return st;
}

static bool read_behavior(const kn_json *j, int32_t node, kn_tj_behavior dflt, kn_tj_behavior *b) {
    int32_t v = kn_json_get(j, node, "behavior");
    *b = dflt;
    if (v < 0 || kn_json_type(j, v) == KN_J_NULL) return true;
    static const char *const NAMES[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (kn_json_str_eq(j, v, NAMES[i])) {
            *b = (kn_tj_behavior)i;
            return true;
        }
    return false;
}

/* GPT-2's regex, which ByteLevel(use_regex) applies. */
#define RE_BYTELEVEL "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Punctuation as the tokenizers library defines it: ASCII punctuation and symbols, and \p{P}. */
#define RE_PUNCT     "[\\p{P}!-/:-@\\[-`{-~]"

static kiln_status add_pre(loader *L, int32_t node, const char *path, int depth) {
    kn_json *j = &L->j;
    kn_tj *tj = L->tj;
    if (kn_json_type(j, node) == KN_J_NULL) return KILN_OK;
    int32_t type = kn_json_get(j, node, "type");
    if (kn_json_type(j, type) != KN_J_STR) return fmt(path, "has no type");
    kiln_status st = KILN_OK;
    kn_tj_pre p = {0};
    bool seq;
    if ((st = read_sequence(L, node, path, depth, "pretokenizers", add_pre, &seq)) || seq) return st;
    if (kn_json_str_eq(j, type, "Split")) {
        p.type = KN_TJP_SPLIT;
        if (!read_behavior(j, node, KN_TJB_ISOLATED, &p.behavior)) return fmt(path, "has an unknown behavior");
        p.invert = kn_json_bool(j, kn_json_get(j, node, "invert"), false);
        if ((st = read_pattern(j, node, path, &p.str, &p.str_len, &p.re))) return st;
        size_t rn;
        const char *rs = kn_json_str(j, kn_json_get(j, kn_json_get(j, node, "pattern"), "Regex"), &rn);
        if (rs && !tj->split_regex && !(tj->split_regex = dup_bytes(rs, rn))) {
            kn_tj_pre_free(&p);
            return KILN_ERR_NOMEM;
        }
    } else if (kn_json_str_eq(j, type, "ByteLevel")) {
        bool prefix = kn_json_bool(j, kn_json_get(j, node, "add_prefix_space"), false);
        bool use_regex = kn_json_bool(j, kn_json_get(j, node, "use_regex"), true);
        p.type = KN_TJP_BYTELEVEL;
        p.f[0] = prefix;
        p.f[1] = use_regex;
        if (use_regex && (st = kn_tj_compile(RE_BYTELEVEL, strlen(RE_BYTELEVEL), path, &p.re))) return st;
    } else if (kn_json_str_eq(j, type, "Metaspace")) {
        p.type = KN_TJP_METASPACE;
        size_t n;
        const char *r = kn_json_str(j, kn_json_get(j, node, "replacement"), &n);
        if (!r) r = "\xe2\x96\x81", n = 3;
        if (!(p.str = dup_bytes(r, n))) return KILN_ERR_NOMEM;
        p.str_len = n;
        int32_t scheme = kn_json_get(j, node, "prepend_scheme");
        if (scheme >= 0 && kn_json_type(j, scheme) == KN_J_STR) {
            if (kn_json_str_eq(j, scheme, "always")) p.scheme = KN_TJ_PREPEND_ALWAYS;
            else if (kn_json_str_eq(j, scheme, "never")) p.scheme = KN_TJ_PREPEND_NEVER;
            else if (kn_json_str_eq(j, scheme, "first")) p.scheme = KN_TJ_PREPEND_FIRST;
            else {
                free(p.str);
                return fmt(path, "has an unknown prepend_scheme");
            }
        } else {
            p.scheme = kn_json_bool(j, kn_json_get(j, node, "add_prefix_space"), true) ? KN_TJ_PREPEND_ALWAYS
                                                                                       : KN_TJ_PREPEND_NEVER;
        }
        p.f[0] = kn_json_bool(j, kn_json_get(j, node, "split"), true);
    } else if (kn_json_str_eq(j, type, "Digits")) {
        bool each = kn_json_bool(j, kn_json_get(j, node, "individual_digits"), false);
        return add_fixed_split(tj, each ? "\\p{N}" : "\\p{N}+", KN_TJB_ISOLATED, false, path);
    } else if (kn_json_str_eq(j, type, "Whitespace")) {
        return add_fixed_split(tj, "\\w+|[^\\w\\s]+", KN_TJB_REMOVED, true, path);
    } else if (kn_json_str_eq(j, type, "WhitespaceSplit")) {
        return add_fixed_split(tj, "\\s+", KN_TJB_REMOVED, false, path);
    } else if (kn_json_str_eq(j, type, "Punctuation")) {
        kn_tj_behavior b;
        if (!read_behavior(j, node, KN_TJB_ISOLATED, &b)) return fmt(path, "has an unknown behavior");
        return add_fixed_split(tj, RE_PUNCT, b, false, path);
    } else if (kn_json_str_eq(j, type, "BertPreTokenizer")) {
        if ((st = add_fixed_split(tj, "\\s+", KN_TJB_REMOVED, false, path))) return st;
        return add_fixed_split(tj, RE_PUNCT, KN_TJB_ISOLATED, false, path);
    } else if (kn_json_str_eq(j, type, "Replace")) {
        p.type = KN_TJP_REPLACE;
        size_t n;
        const char *s = kn_json_str(j, kn_json_get(j, node, "content"), &n);
        if (!s) return fmt(path, "(Replace) has no content string");
        if (!(p.content = dup_bytes(s, n))) return KILN_ERR_NOMEM;
        p.content_len = n;
        if ((st = read_pattern(j, node, path, &p.str, &p.str_len, &p.re))) {
            kn_tj_pre_free(&p);
            return st;
        }
    } else if (kn_json_str_eq(j, type, "FixedLength")) {
        int64_t n;
        if (!kn_json_int(j, kn_json_get(j, node, "length"), 1, 1 << 20, &n)) return fmt(path, "has no length");
        p.type = KN_TJP_FIXEDLEN;
        p.n = (size_t)n;
    } else {
        return unsupported("pre-tokenizer", path, j, type);
    }
    if ((st = add_pre_step(tj, &p, path))) kn_tj_pre_free(&p);
    return st;
}

/* ---- post-processor --------------------------------------------------------------------------- */

static kiln_status push_special(loader *L, const char *s, size_t n, bool before, const char *path) {
    kn_tj *tj = L->tj;
    int32_t id = kn_tok_lookup(L->t, s, n);
    if (id < 0) return fmt(path, "names a special token that is not in the vocabulary");
    int32_t *arr = before ? tj->pre_ids : tj->post_ids;
    int *cnt = before ? &tj->n_pre_ids : &tj->n_post_ids;
    if (*cnt >= (int)KN_ARRAY_LEN(tj->pre_ids)) return fmt(path, "adds too many special tokens");
    arr[(*cnt)++] = id;
    return KILN_OK;
}

static kiln_status read_post(loader *L, int32_t node, const char *path, int depth) {
    kn_json *j = &L->j;
    if (kn_json_type(j, node) == KN_J_NULL) return KILN_OK;
    int32_t type = kn_json_get(j, node, "type");
    char sub[96];
    kiln_status st;
    bool seq;
    if ((st = read_sequence(L, node, path, depth, "processors", read_post, &seq)) || seq) return st;
    if (kn_json_str_eq(j, type, "ByteLevel")) return KILN_OK;
    if (kn_json_str_eq(j, type, "TemplateProcessing")) {
        int32_t single = kn_json_get(j, node, "single");
        if (kn_json_type(j, single) != KN_J_ARR) return fmt(path, "(TemplateProcessing) has no single template");
        bool before = true;
        uint32_t i = 0;
        for (int32_t c = j->v[single].first; c >= 0; c = j->v[c].next, i++) {
            snprintf(sub, sizeof sub, "%s.single[%u]", path, i);
            if (kn_json_get(j, c, "Sequence") >= 0) {
                before = false;
                continue;
            }
            size_t n;
            const char *s = kn_json_str(j, kn_json_get(j, kn_json_get(j, c, "SpecialToken"), "id"), &n);
            if (!s) return fmt(sub, "is neither a Sequence nor a SpecialToken");
            if ((st = push_special(L, s, n, before, sub))) return st;
        }
        return KILN_OK;
    }
    if (kn_json_str_eq(j, type, "RobertaProcessing") || kn_json_str_eq(j, type, "BertProcessing")) {
        size_t cn, sn;
        const char *cls =
            kn_json_str(j, kn_json_get(j, node, "cls") >= 0 ? j->v[kn_json_get(j, node, "cls")].first : -1, &cn);
        const char *sep =
            kn_json_str(j, kn_json_get(j, node, "sep") >= 0 ? j->v[kn_json_get(j, node, "sep")].first : -1, &sn);
        if (!cls || !sep) return fmt(path, "has no cls / sep [text, id] pairs");
        if ((st = push_special(L, cls, cn, true, path))) return st;
        return push_special(L, sep, sn, false, path);
    }
    return unsupported("post-processor", path, j, type);
}

/* ---- decoder ---------------------------------------------------------------------------------- */

/* Looks through the decoder for what the pieces need: ByteLevel (byte-mapped pieces), a Strip of
 * the first space or a Metaspace that prepends one. */
static void read_decoder(const kn_json *j, int32_t node, bool *byte_level, bool *strip_first, int depth) {
    if (kn_json_type(j, node) != KN_J_OBJ || depth > 8) return;
    int32_t type = kn_json_get(j, node, "type");
    if (kn_json_str_eq(j, type, "ByteLevel")) *byte_level = true;
    else if (kn_json_str_eq(j, type, "Strip")) {
        int64_t start = 0;
        kn_json_int(j, kn_json_get(j, node, "start"), 0, 1 << 20, &start);
        if (kn_json_str_eq(j, kn_json_get(j, node, "content"), " ") && start >= 1) *strip_first = true;
    } else if (kn_json_str_eq(j, type, "Metaspace")) {
        int32_t scheme = kn_json_get(j, node, "prepend_scheme");
        if (scheme >= 0 ? !kn_json_str_eq(j, scheme, "never")
                        : kn_json_bool(j, kn_json_get(j, node, "add_prefix_space"), true))
            *strip_first = true;
    } else if (kn_json_str_eq(j, type, "Sequence")) {
        int32_t arr = kn_json_get(j, node, "decoders");
        for (int32_t c = kn_json_type(j, arr) == KN_J_ARR ? j->v[arr].first : -1; c >= 0; c = j->v[c].next)
            read_decoder(j, c, byte_level, strip_first, depth + 1);
    }
}

/* WordPiece pieces: "##x" decodes to "x", any other token to " " + its text (the first space of a
 * text is dropped by the detokenizer). */
static kiln_status wordpiece_pieces(kn_tokenizer *t) {
    kn_bvec pool = {0};
    const kn_tj *tj = t->tj;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        kn_tok_info *ti = &t->tok[id];
        const char *s = t->text + ti->text_off;
        size_t n = ti->text_len, before = pool.n;
        bool ok;
        if (ti->attr & (KN_ATTR_CONTROL | KN_ATTR_UNKNOWN | KN_ATTR_UNUSED)) ok = kn_bvec_append(&pool, s, n);
        else if (tj->cont_prefix && n >= tj->cont_prefix_len && memcmp(s, tj->cont_prefix, tj->cont_prefix_len) == 0)
            ok = kn_bvec_append(&pool, s + tj->cont_prefix_len, n - tj->cont_prefix_len);
        else ok = kn_bvec_append(&pool, " ", 1) && kn_bvec_append(&pool, s, n);
        if (!ok || pool.n - before > KN_TOK_MAX_PIECE || pool.n > UINT32_MAX) {
            free(pool.v);
            return ok ? kn_error(KILN_ERR_FORMAT, "token %d is too long", id) : KILN_ERR_NOMEM;
        }
        ti->piece_off = (uint32_t)before;
        ti->piece_len = (uint32_t)(pool.n - before);
    }
    free(t->pieces);
    t->pieces = pool.v ? pool.v : malloc(1);
    return t->pieces ? KILN_OK : KILN_ERR_NOMEM;
}

/* ---- tokenizer_config.json -------------------------------------------------------------------- */

/* A token named in the config: "text" or {"content": "text"}; -1 when absent or unknown. */
static int32_t config_token(loader *L, const char *key) {
    const kn_json *c = &L->c;
    if (!c->v) return -1;
    int32_t v = kn_json_get(c, 0, key);
    if (kn_json_type(c, v) == KN_J_OBJ) v = kn_json_get(c, v, "content");
    size_t n;
    const char *s = kn_json_str(c, v, &n);
    return s ? kn_tok_lookup(L->t, s, n) : -1;
}

static kiln_status read_config(loader *L) {
    kn_json *c = &L->c;
    kn_tokenizer *t = L->t;
    kn_tj *tj = L->tj;
    int32_t bos = config_token(L, "bos_token"), eos = config_token(L, "eos_token");
    int32_t ab = c->v ? kn_json_get(c, 0, "add_bos_token") : -1;
    tj->cfg_add_bos = kn_json_type(c, ab) == KN_J_TRUE ? 1 : kn_json_type(c, ab) == KN_J_FALSE ? 0 : -1;
    tj->cfg_bos_named = bos >= 0;
    if (bos >= 0) t->bos = bos;
    if (eos >= 0) t->eos = eos;
    int32_t unk = config_token(L, "unk_token"), pad = config_token(L, "pad_token");
    if (unk >= 0 && t->unk < 0) t->unk = unk;
    if (pad >= 0) t->pad = pad;
    int32_t ct = c->v ? kn_json_get(c, 0, "chat_template") : -1;
    if (ct < 0 || kn_json_type(c, ct) == KN_J_NULL) return KILN_OK;
    size_t n;
    const char *s = kn_json_str(c, ct, &n);
    if (s) return (tj->chat_template = dup_bytes(s, n)) ? KILN_OK : KILN_ERR_NOMEM;
    if (kn_json_type(c, ct) != KN_J_ARR)
        return kn_error(KILN_ERR_FORMAT, "tokenizer_config.json: chat_template is neither a string nor a list");
    uint32_t cnt = c->v[ct].n, i = 0;
    tj->tmpl_names = calloc(cnt ? cnt : 1, sizeof(char *));
    tj->tmpl_texts = calloc(cnt ? cnt : 1, sizeof(char *));
    if (!tj->tmpl_names || !tj->tmpl_texts) return KILN_ERR_NOMEM;
    for (int32_t e = c->v[ct].first; e >= 0; e = c->v[e].next, i++) {
        size_t nn, tn;
        const char *name = kn_json_str(c, kn_json_get(c, e, "name"), &nn);
        const char *text = kn_json_str(c, kn_json_get(c, e, "template"), &tn);
        if (!name || !text)
            return kn_error(KILN_ERR_FORMAT, "tokenizer_config.json: chat_template[%u] has no name or template", i);
        if (!(tj->tmpl_names[tj->n_tmpl] = dup_bytes(name, nn))) return KILN_ERR_NOMEM;
        if (!(tj->tmpl_texts[tj->n_tmpl++] = dup_bytes(text, tn))) return KILN_ERR_NOMEM;
    }
    for (int k = 0; k < tj->n_tmpl; k++)
        if (strcmp(tj->tmpl_names[k], "default") == 0)
            return (tj->chat_template = strdup(tj->tmpl_texts[k])) ? KILN_OK : KILN_ERR_NOMEM;
    return KILN_OK;
}

/* ---- tries ------------------------------------------------------------------------------------ */

static kiln_status build_tries(loader *L) {
    kn_json *j = &L->j;
    kn_tokenizer *t = L->t;
    kn_tj *tj = L->tj;
    int32_t added = kn_json_get(j, 0, "added_tokens");
    kn_bvec norm = {0};
    kiln_status st = KILN_OK;
    for (int32_t c = added >= 0 ? j->v[added].first : -1; c >= 0 && !st; c = j->v[c].next) {
        int64_t id;
        kn_json_int(j, kn_json_get(j, c, "id"), 0, KN_TJ_MAX_VOCAB - 1, &id);
        bool special = kn_json_bool(j, kn_json_get(j, c, "special"), false);
        bool normalized = kn_json_bool(j, kn_json_get(j, c, "normalized"), !special);
        const char *s = t->text + t->tok[id].text_off;
        size_t n = t->tok[id].text_len;
        if (normalized && tj->n_norm > 0) {
            if ((st = kn_tj_normalize(tj, s, n, &norm))) break;
            if (norm.n) st = kn_tj_trie_add(&tj->normed, norm.v, norm.n, (int32_t)id);
        } else {
            st = kn_tj_trie_add(&tj->raw, s, n, (int32_t)id);
        }
    }
    free(norm.v);
    if (!st && tj->model == KN_TJ_UNIGRAM) st = kn_unigram_build_trie(t);
    return st;
}

/* ---- load ------------------------------------------------------------------------------------- */

static kiln_status load(loader *L) {
    kn_json *j = &L->j;
    kn_tokenizer *t = L->t;
    kn_tj *tj = L->tj;
    kiln_status st;
    if (kn_json_type(j, 0) != KN_J_OBJ) return fmt("(the document)", "is not an object");
    int32_t model = kn_json_get(j, 0, "model");
    if (kn_json_type(j, model) != KN_J_OBJ) return fmt("model", "is missing or not an object");
    int32_t mtype = kn_json_get(j, model, "type");
    if (mtype >= 0 && kn_json_type(j, mtype) != KN_J_STR) return fmt("model.type", "is not a string");
    if (mtype < 0) { /* older files: the model's shape says which it is */
        int32_t v = kn_json_get(j, model, "vocab");
        tj->model = kn_json_type(j, v) == KN_J_ARR         ? KN_TJ_UNIGRAM
                    : kn_json_get(j, model, "merges") >= 0 ? KN_TJ_BPE
                                                           : KN_TJ_WORDPIECE;
    } else if (kn_json_str_eq(j, mtype, "BPE")) tj->model = KN_TJ_BPE;
    else if (kn_json_str_eq(j, mtype, "WordPiece")) tj->model = KN_TJ_WORDPIECE;
    else if (kn_json_str_eq(j, mtype, "Unigram")) tj->model = KN_TJ_UNIGRAM;
    else return unsupported("model", "model.type", j, mtype);

    if ((st = read_vocab(L, model))) return st;
    size_t n;
    const char *s;
    if (tj->model == KN_TJ_BPE) {
        if ((st = read_merges(L, model))) return st;
        tj->byte_fallback = kn_json_bool(j, kn_json_get(j, model, "byte_fallback"), false);
        tj->fuse_unk = kn_json_bool(j, kn_json_get(j, model, "fuse_unk"), false);
        t->ignore_merges = kn_json_bool(j, kn_json_get(j, model, "ignore_merges"), false);
        if ((s = kn_json_str(j, kn_json_get(j, model, "continuing_subword_prefix"), &n)) && n) {
            if (!(tj->cont_prefix = dup_bytes(s, n))) return KILN_ERR_NOMEM;
            tj->cont_prefix_len = n;
        }
        if ((s = kn_json_str(j, kn_json_get(j, model, "end_of_word_suffix"), &n)) && n) {
            if (!(tj->eow_suffix = dup_bytes(s, n))) return KILN_ERR_NOMEM;
            tj->eow_suffix_len = n;
        }
    } else if (tj->model == KN_TJ_WORDPIECE) {
        s = kn_json_str(j, kn_json_get(j, model, "continuing_subword_prefix"), &n);
        if (!s) s = "##", n = 2;
        if (!(tj->cont_prefix = dup_bytes(s, n))) return KILN_ERR_NOMEM;
        tj->cont_prefix_len = n;
        int64_t mx = 100;
        kn_json_int(j, kn_json_get(j, model, "max_input_chars_per_word"), 1, 1 << 20, &mx);
        tj->max_word_chars = (int32_t)mx;
    } else {
        int64_t unk_id;
        if (kn_json_int(j, kn_json_get(j, model, "unk_id"), 0, t->n_vocab - 1, &unk_id)) tj->unk = (int32_t)unk_id;
        tj->byte_fallback = kn_json_bool(j, kn_json_get(j, model, "byte_fallback"), false);
        tj->fuse_unk = true;
        tj->unk_required = true;
        double mn = 0;
        for (int32_t id = 0; id < t->n_vocab; id++)
            if (t->tok[id].score < mn) mn = t->tok[id].score;
        tj->unigram_min_score = mn;
    }
    if (tj->model != KN_TJ_UNIGRAM) { /* WordPiece's unk_token defaults to "[UNK]"; a BPE may name none */
        s = kn_json_str(j, kn_json_get(j, model, "unk_token"), &n);
        if (!s && tj->model == KN_TJ_WORDPIECE) s = "[UNK]", n = 5;
        if (s) tj->unk = kn_tok_lookup(t, s, n), tj->unk_required = true;
    }
    t->unk = tj->unk;
    prefer_added(t);
    if (t->unk >= 0 && !(t->tok[t->unk].attr & KN_ATTR_CONTROL)) t->tok[t->unk].attr = KN_ATTR_UNKNOWN;

    if (!(tj->norm = calloc(KN_TJ_MAX_STEPS, sizeof *tj->norm)) ||
        !(tj->pre = calloc(KN_TJ_MAX_STEPS, sizeof *tj->pre)))
        return KILN_ERR_NOMEM;
    if ((st = add_norm(L, kn_json_get(j, 0, "normalizer"), "normalizer", 0))) return st;
    if ((st = add_pre(L, kn_json_get(j, 0, "pre_tokenizer"), "pre_tokenizer", 0))) return st;
    if ((st = read_post(L, kn_json_get(j, 0, "post_processor"), "post_processor", 0))) return st;

    bool byte_level = false;
    read_decoder(j, kn_json_get(j, 0, "decoder"), &byte_level, &tj->strip_first_space, 0);
    t->kind = tj->model == KN_TJ_WORDPIECE ? KN_TOK_WPM : byte_level ? KN_TOK_BPE : KN_TOK_SPM;
    t->add_space_prefix = tj->strip_first_space || tj->model == KN_TJ_WORDPIECE;

    /* byte tokens: the byte-level characters, or byte_fallback's <0xNN> */
    for (int b = 0; b < 256; b++) {
        t->byte_tok[b] = -1;
        if (t->kind == KN_TOK_BPE) {
            uint8_t enc[4];
            size_t k = kn_utf8_encode(kn_bpe_byte_char((uint8_t)b), enc);
            t->byte_tok[b] = kn_tok_lookup(t, (const char *)enc, k);
        } else {
            static const char HEX[] = "0123456789ABCDEF";
            char name[6] = {'<', '0', 'x', HEX[b >> 4], HEX[b & 15], '>'};
            t->byte_tok[b] = kn_tok_lookup(t, name, 6);
            if (t->byte_tok[b] >= 0 && (t->tok[t->byte_tok[b]].attr & KN_ATTR_NORMAL))
                t->tok[t->byte_tok[b]].attr = KN_ATTR_BYTE;
        }
    }

    /* special tokens: the post-processor's, then the config's */
    if (tj->n_pre_ids == 1) t->bos = tj->pre_ids[0];
    if (tj->n_post_ids >= 1) t->eos = tj->post_ids[tj->n_post_ids - 1];
    if (t->kind == KN_TOK_WPM && tj->n_post_ids == 1) t->sep = tj->post_ids[0];
    if ((st = read_config(L))) return st;
    t->add_bos = tj->n_pre_ids > 0;
    t->add_eos = tj->n_post_ids > 0;
    kn_tok_apply_eog_rules(t);
    if (t->eos >= 0) {
        t->tok[t->eos].eog = true;
        if (!kn_ivec_push(&tj->eos_ids, t->eos)) return KILN_ERR_NOMEM;
    }
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tok[id].eog && id != t->eos && !kn_ivec_push(&tj->eos_ids, id)) return KILN_ERR_NOMEM;

    /* the decoder maps added tokens that are not special like the model's own (U+2581 -> space,
     * byte characters -> bytes); special ones keep their text */
    uint8_t *user = calloc((size_t)(uint32_t)t->n_vocab + 1, 1);
    if (!user) return KILN_ERR_NOMEM;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tok[id].attr & KN_ATTR_USER_DEFINED) {
            user[id] = 1;
            t->tok[id].attr ^= KN_ATTR_USER_DEFINED | KN_ATTR_NORMAL;
        }
    st = kn_tok_build_pieces(t);
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (user[id]) t->tok[id].attr ^= KN_ATTR_USER_DEFINED | KN_ATTR_NORMAL;
    free(user);
    if (st) return st;
    if (t->kind == KN_TOK_WPM && (st = wordpiece_pieces(t))) return st;
    return build_tries(L);
}

kiln_status kn_tokenizer_load_hf(const char *tokenizer_json, size_t len, const char *tokenizer_config_json,
                                 size_t cfg_len, kn_tokenizer **out) {
    if (!out || (!tokenizer_json && len)) return kn_error(KILN_ERR_INVALID_ARG, "kn_tokenizer_load_hf: NULL argument");
    *out = NULL;
    if (len > KN_TJ_MAX_JSON)
        return kn_error(KILN_ERR_FORMAT, "tokenizer.json: %zu bytes is over the %zu MiB limit", len,
                        KN_TJ_MAX_JSON >> 20);
    if (tokenizer_config_json && cfg_len > KN_TJ_MAX_CONFIG)
        return kn_error(KILN_ERR_FORMAT, "tokenizer_config.json: %zu bytes is over the %zu MiB limit", cfg_len,
                        KN_TJ_MAX_CONFIG >> 20);
    loader L = {0};
    kiln_status st = kn_json_parse(tokenizer_json, len, "tokenizer.json", 64, &L.j);
    if (st) return st;
    if (tokenizer_config_json &&
        (st = kn_json_parse(tokenizer_config_json, cfg_len, "tokenizer_config.json", 64, &L.c))) {
        kn_json_free(&L.j);
        return st;
    }
    if (L.c.v && kn_json_type(&L.c, 0) != KN_J_OBJ) {
        kn_json_free(&L.j);
        kn_json_free(&L.c);
        return kn_error(KILN_ERR_FORMAT, "tokenizer_config.json: not a JSON object");
    }
    L.t = calloc(1, sizeof *L.t);
    L.tj = calloc(1, sizeof *L.tj);
    if (!L.t || !L.tj) {
        free(L.t);
        free(L.tj);
        kn_json_free(&L.j);
        kn_json_free(&L.c);
        return kn_error(KILN_ERR_NOMEM, "out of memory");
    }
    kn_tokenizer *t = L.t;
    t->tj = L.tj;
    t->bos = t->eos = t->eot = t->eom = t->unk = t->sep = t->pad = L.tj->unk = -1;
    st = load(&L);
    kn_json_free(&L.j);
    kn_json_free(&L.c);
    if (st) {
        if (st == KILN_ERR_NOMEM && !kn_error_msg()[0]) kn_error(st, "out of memory");
        kn_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

void kn_tj_free(kn_tj *tj) {
    if (!tj) return;
    for (int i = 0; i < tj->n_norm; i++) kn_tj_norm_free(&tj->norm[i]);
    for (int i = 0; i < tj->n_pre; i++) kn_tj_pre_free(&tj->pre[i]);
    free(tj->norm);
    free(tj->pre);
    free(tj->cont_prefix);
    free(tj->eow_suffix);
    kn_tj_trie_free(&tj->raw);
    kn_tj_trie_free(&tj->normed);
    kn_tj_ptrie_free(&tj->pieces);
    free(tj->chat_template);
    for (int i = 0; i < tj->n_tmpl; i++) {
        free(tj->tmpl_names[i]);
        free(tj->tmpl_texts[i]);
    }
    free(tj->tmpl_names);
    free(tj->tmpl_texts);
    free(tj->eos_ids.v);
    free(tj->split_regex);
    free(tj->added);
    free(tj);
}

/* ---- accessors -------------------------------------------------------------------------------- */

const char *kn_tok_chat_template(const kn_tokenizer *t, const char *name) {
    if (!t || !t->tj) return NULL;
    if (!name) return t->tj->chat_template;
    for (int i = 0; i < t->tj->n_tmpl; i++)
        if (strcmp(t->tj->tmpl_names[i], name) == 0) return t->tj->tmpl_texts[i];
    return NULL;
}

kiln_status kn_tok_add_eog(kn_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return kn_error(KILN_ERR_INVALID_ARG, "token id %d is out of range", id);
    if (t->tj && !t->tok[id].eog && !kn_ivec_push(&t->tj->eos_ids, id)) return KILN_ERR_NOMEM;
    t->tok[id].eog = true;
    return KILN_OK;
}

size_t kn_tok_eos_ids(const kn_tokenizer *t, const int32_t **ids) {
    *ids = NULL;
    if (!t || !t->tj) return 0;
    *ids = t->tj->eos_ids.v;
    return t->tj->eos_ids.n;
}

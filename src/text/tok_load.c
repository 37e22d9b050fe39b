/*
 * tok_load.c - builds a kn_tokenizer from a GGUF file's tokenizer.ggml.* metadata.
 *
 * Everything read from the file is checked before use: array types and lengths (scores and
 * token_type must have one entry per token), special token ids (inside the vocabulary), merge
 * strings (two non-empty parts separated by a space), the size of every token. Bad metadata gives
 * KILN_ERR_FORMAT with a message naming the key; an unknown tokenizer or pre-tokenizer gives
 * KILN_ERR_UNSUPPORTED. Everything the tokenizer needs is copied, so the GGUF can be closed after.
 *
 * Defaults where the metadata is silent follow llama.cpp, except that no token id is ever assumed:
 * a missing BOS/EOS/UNK/SEP id is looked up by the conventional token text ("<s>", "[CLS]", ...).
 */
#include "text/tok_internal.h"
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VOCAB (1 << 24)
#define KEY(x)    "tokenizer.ggml." x

/* ---- special ids ------------------------------------------------------------------------------ */

/* Reads an optional special-token id. Leaves *id alone when the key is absent; an explicit -1 or
 * 0xFFFFFFFF means "none". strict: an id outside the vocabulary (or a non-integer value) is a
 * format error; otherwise it is ignored with a warning. */
static kiln_status read_id(const kn_gguf *g, const char *key, int32_t n_vocab, bool strict, int32_t *id) {
    const kn_gguf_kv *kv = kn_gguf_find(g, key);
    if (!kv) return KILN_OK;
    int64_t v;
    bool is_int = kv->type <= KN_GGUF_INT32 || kv->type == KN_GGUF_UINT64 || kv->type == KN_GGUF_INT64;
    if (!is_int) {
        if (strict) return kn_error(KILN_ERR_FORMAT, "%s is not an integer (GGUF type %d)", key, kv->type);
        KN_LOGW("tokenizer: ignoring %s: not an integer", key);
        return KILN_OK;
    }
    if (kv->type == KN_GGUF_UINT32 && kv->v.u == UINT32_MAX) {
        *id = -1;
        return KILN_OK;
    }
    if (kv->type == KN_GGUF_UINT64 && (kv->v.u == UINT64_MAX || kv->v.u == UINT32_MAX)) {
        *id = -1;
        return KILN_OK;
    }
    if (!kn_gguf_get_i64(g, key, &v)) v = INT64_MAX;
    if (v == -1) {
        *id = -1;
        return KILN_OK;
    }
    if (v < 0 || v >= n_vocab) {
        if (strict)
            return kn_error(KILN_ERR_FORMAT, "%s = %lld is outside the vocabulary of %d tokens", key, (long long)v,
                            n_vocab);
        KN_LOGW("tokenizer: ignoring %s = %lld: outside the vocabulary of %d tokens", key, (long long)v, n_vocab);
        *id = -1;
        return KILN_OK;
    }
    *id = (int32_t)v;
    return KILN_OK;
}

/* Reads an optional boolean flag; a present key of another type is a format error. */
static kiln_status read_flag(const kn_gguf *g, const char *key, bool *val, bool *present) {
    const kn_gguf_kv *kv = kn_gguf_find(g, key);
    if (present) *present = kv != NULL;
    if (!kv) return KILN_OK;
    if (kv->type != KN_GGUF_BOOL) return kn_error(KILN_ERR_FORMAT, "%s is not a boolean", key);
    *val = kv->v.b;
    return KILN_OK;
}

static int32_t find_cstr(const kn_tokenizer *t, const char *s) { return kn_tok_lookup(t, s, strlen(s)); }

/* ---- token arrays ----------------------------------------------------------------------------- */

static kiln_status read_tokens(kn_tokenizer *t, const kn_gguf *g) {
    const kn_gguf_kv *kv = kn_gguf_find(g, KEY("tokens"));
    if (!kv) return kn_error(KILN_ERR_FORMAT, "missing " KEY("tokens"));
    if (kv->type != KN_GGUF_ARRAY || kv->arr_type != KN_GGUF_STRING)
        return kn_error(KILN_ERR_FORMAT, KEY("tokens") " is not an array of strings");
    if (kv->arr_n == 0 || kv->arr_n > MAX_VOCAB)
        return kn_error(KILN_ERR_FORMAT, KEY("tokens") " has %llu entries (expected 1..%d)",
                        (unsigned long long)kv->arr_n, MAX_VOCAB);
    t->n_vocab = (int32_t)kv->arr_n;
    t->tok = calloc((size_t)t->n_vocab, sizeof *t->tok);
    if (!t->tok) return kn_error(KILN_ERR_NOMEM, "out of memory for %d tokens", t->n_vocab);
    uint64_t total = 0;
    const uint8_t *cur = kv->arr_data;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        kn_str s = kn_gguf_next_str(&cur);
        if (s.len > UINT32_MAX || total + s.len > UINT32_MAX)
            return kn_error(KILN_ERR_FORMAT, KEY("tokens") " holds more than 4 GiB of text");
        t->tok[i].text_off = (uint32_t)total;
        t->tok[i].text_len = (uint32_t)s.len;
        total += s.len;
        if (s.len > t->max_token_len) t->max_token_len = (uint32_t)s.len;
    }
    t->text = malloc(total ? total : 1);
    if (!t->text) return kn_error(KILN_ERR_NOMEM, "out of memory for the vocabulary text");
    cur = kv->arr_data;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        kn_str s = kn_gguf_next_str(&cur);
        memcpy(t->text + t->tok[i].text_off, s.ptr, s.len);
    }
    return KILN_OK;
}

static kiln_status read_scores_types(kn_tokenizer *t, const kn_gguf *g) {
    const kn_gguf_kv *kv = kn_gguf_find(g, KEY("scores"));
    if (kv) {
        if (kv->type != KN_GGUF_ARRAY || (kv->arr_type != KN_GGUF_FLOAT32 && kv->arr_type != KN_GGUF_INT32))
            return kn_error(KILN_ERR_FORMAT, KEY("scores") " is not an array of float32 or int32");
        if (kv->arr_n != (uint64_t)t->n_vocab)
            return kn_error(KILN_ERR_FORMAT, KEY("scores") " has %llu entries for %d tokens",
                            (unsigned long long)kv->arr_n, t->n_vocab);
        for (int32_t i = 0; i < t->n_vocab; i++) {
            float f;
            if (kv->arr_type == KN_GGUF_FLOAT32) memcpy(&f, kv->arr_data + 4 * (size_t)i, 4);
            else {
                int32_t v;
                memcpy(&v, kv->arr_data + 4 * (size_t)i, 4);
                f = (float)v;
            }
            t->tok[i].score = isnan(f) ? -INFINITY : f;
        }
    }
    kv = kn_gguf_find(g, KEY("token_type"));
    if (kv) {
        if (kv->type != KN_GGUF_ARRAY || kv->arr_type != KN_GGUF_INT32)
            return kn_error(KILN_ERR_FORMAT, KEY("token_type") " is not an array of int32");
        if (kv->arr_n != (uint64_t)t->n_vocab)
            return kn_error(KILN_ERR_FORMAT, KEY("token_type") " has %llu entries for %d tokens",
                            (unsigned long long)kv->arr_n, t->n_vocab);
    }
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int32_t type = KN_TTYPE_NORMAL;
        if (kv) memcpy(&type, kv->arr_data + 4 * (size_t)i, 4);
        uint8_t attr = 0; /* undefined and unknown-valued types decode to nothing */
        switch (type) {
            case KN_TTYPE_NORMAL: attr = KN_ATTR_NORMAL; break;
            case KN_TTYPE_UNKNOWN: attr = KN_ATTR_UNKNOWN; break;
            case KN_TTYPE_CONTROL: attr = KN_ATTR_CONTROL; break;
            case KN_TTYPE_USER_DEFINED: attr = KN_ATTR_USER_DEFINED; break;
            case KN_TTYPE_UNUSED: attr = KN_ATTR_UNUSED; break;
            case KN_TTYPE_BYTE: attr = KN_ATTR_BYTE; break;
            default: break;
        }
        t->tok[i].attr = attr;
    }
    return KILN_OK;
}

static kiln_status read_merges(kn_tokenizer *t, const kn_gguf *g) {
    const kn_gguf_kv *kv = kn_gguf_find(g, KEY("merges"));
    if (!kv) return kn_error(KILN_ERR_FORMAT, "BPE vocabulary without " KEY("merges"));
    if (kv->type != KN_GGUF_ARRAY || kv->arr_type != KN_GGUF_STRING)
        return kn_error(KILN_ERR_FORMAT, KEY("merges") " is not an array of strings");
    if (kv->arr_n > INT32_MAX)
        return kn_error(KILN_ERR_FORMAT, KEY("merges") " has %llu entries", (unsigned long long)kv->arr_n);
    t->n_merges = (uint32_t)kv->arr_n;
    size_t n = t->n_merges ? t->n_merges : 1;
    t->merge_off = malloc(n * sizeof *t->merge_off);
    t->merge_a_len = malloc(n * sizeof *t->merge_a_len);
    t->merge_len = malloc(n * sizeof *t->merge_len);
    if (!t->merge_off || !t->merge_a_len || !t->merge_len)
        return kn_error(KILN_ERR_NOMEM, "out of memory for %u merges", t->n_merges);
    uint64_t total = 0;
    const uint8_t *cur = kv->arr_data;
    for (uint32_t i = 0; i < t->n_merges; i++) {
        kn_str s = kn_gguf_next_str(&cur);
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp || (uint64_t)(sp - s.ptr) + 1 >= s.len)
            return kn_error(KILN_ERR_FORMAT, KEY("merges") "[%u] is not two tokens separated by a space", i);
        if (total + s.len > UINT32_MAX)
            return kn_error(KILN_ERR_FORMAT, KEY("merges") " holds more than 4 GiB of text");
        t->merge_off[i] = (uint32_t)total;
        t->merge_a_len[i] = (uint32_t)(sp - s.ptr);
        t->merge_len[i] = (uint32_t)s.len;
        if (s.len > t->max_merge_len) t->max_merge_len = (uint32_t)s.len;
        total += s.len;
    }
    t->merge_text = malloc(total ? total : 1);
    if (!t->merge_text) return kn_error(KILN_ERR_NOMEM, "out of memory for the merges");
    cur = kv->arr_data;
    for (uint32_t i = 0; i < t->n_merges; i++) {
        kn_str s = kn_gguf_next_str(&cur);
        memcpy(t->merge_text + t->merge_off[i], s.ptr, s.len);
    }
    return kn_bpe_build_index(t);
}

/* ---- name-based attributes and end-of-generation tokens --------------------------------------- */

/* Texts of tokens that end a generation (llama.cpp's list). */
static const char *const EOG_TEXTS[] = {
    "<|eot_id|>",    "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",        "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>",   "_<EOT>",     "<|end_of_text|>", "<end_of_utterance>",
};
/* Texts that identify the end-of-turn token when the metadata names none, in order of preference. */
static const char *const EOT_TEXTS[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>",
};

/* A token found by its text: it ends generation and is a control token whatever its type says. */
static void mark_eog_text(kn_tokenizer *t, int32_t id) {
    if (id < 0) return;
    t->tok[id].eog = true;
    t->tok[id].attr |= KN_ATTR_CONTROL;
}

static bool name_has_phi3(const kn_gguf *g) {
    kn_str name;
    if (!kn_gguf_get_str(g, "general.name", &name)) return false;
    for (uint64_t i = 0; i < name.len; i++) {
        size_t rest = name.len - i;
        const char *p = name.ptr + i;
        if (rest >= 5 && tolower((unsigned char)p[0]) == 'p' && tolower((unsigned char)p[1]) == 'h' &&
            tolower((unsigned char)p[2]) == 'i' && p[3] == '-' && p[4] == '3')
            return true;
        if (rest >= 4 && tolower((unsigned char)p[0]) == 'p' && tolower((unsigned char)p[1]) == 'h' &&
            tolower((unsigned char)p[2]) == 'i' && p[3] == '3')
            return true;
    }
    return false;
}

void kn_tok_apply_eog_rules(kn_tokenizer *t) {
    if (t->eot < 0)
        for (size_t i = 0; i < KN_ARRAY_LEN(EOT_TEXTS) && t->eot < 0; i++) {
            t->eot = find_cstr(t, EOT_TEXTS[i]);
            mark_eog_text(t, t->eot);
        }
    if (t->eom < 0) {
        t->eom = find_cstr(t, "<|eom_id|>");
        mark_eog_text(t, t->eom);
    }
    for (size_t i = 0; i < KN_ARRAY_LEN(EOG_TEXTS); i++) mark_eog_text(t, find_cstr(t, EOG_TEXTS[i]));
    if (t->eos >= 0) t->tok[t->eos].eog = true;
    if (t->eot >= 0) t->tok[t->eot].eog = true;
    if (t->eom >= 0) t->tok[t->eom].eog = true;
    /* gpt-oss: these are shown as text; with <|return|> and <|call|> present, <|end|> ends a
     * message but not the generation */
    static const char *const SHOWN[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < KN_ARRAY_LEN(SHOWN); i++) {
        int32_t id = find_cstr(t, SHOWN[i]);
        if (id >= 0) t->tok[id].attr = KN_ATTR_USER_DEFINED;
    }
    int32_t ret = find_cstr(t, "<|return|>"), call = find_cstr(t, "<|call|>"), end = find_cstr(t, "<|end|>");
    if (ret >= 0 && call >= 0 && end >= 0 && end != t->eos) {
        t->tok[end].eog = false;
        t->tok[end].attr = KN_ATTR_USER_DEFINED;
        if (t->eot == end) t->eot = -1;
    }
}

static void apply_name_rules(kn_tokenizer *t, const kn_gguf *g) {
    kn_tok_apply_eog_rules(t);
    /* Phi-3's added tokens strip the whitespace after them (rstrip in its tokenizer.json) */
    if (name_has_phi3(g)) {
        for (int32_t id = 0; id < t->n_vocab; id++)
            if (t->tok[id].attr & (KN_ATTR_CONTROL | KN_ATTR_USER_DEFINED | KN_ATTR_UNKNOWN))
                t->tok[id].attr |= KN_ATTR_RSTRIP;
        int32_t eos_text = find_cstr(t, "</s>");
        if (eos_text >= 0) t->tok[eos_text].attr |= KN_ATTR_RSTRIP;
        static const char *const KEEP[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < KN_ARRAY_LEN(KEEP); i++) {
            int32_t id = find_cstr(t, KEEP[i]);
            if (id >= 0) t->tok[id].attr &= (uint8_t)~KN_ATTR_RSTRIP;
        }
    }
}

/* ---- pieces ----------------------------------------------------------------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a "<0xHH>" token text, or -1. */
static int byte_of(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Appends the decoded piece of token id to pool. */
static bool decode_piece(const kn_tokenizer *t, int32_t id, kn_bvec *pool) {
    const kn_tok_info *ti = &t->tok[id];
    const char *s = t->text + ti->text_off;
    size_t n = ti->text_len;
    if (ti->attr & (KN_ATTR_UNKNOWN | KN_ATTR_CONTROL | KN_ATTR_USER_DEFINED)) return kn_bvec_append(pool, s, n);
    if (ti->attr & KN_ATTR_BYTE) {
        int b = byte_of(s, n);
        if (b >= 0) {
            uint8_t c = (uint8_t)b;
            return kn_bvec_append(pool, &c, 1);
        }
    } else if (!(ti->attr & KN_ATTR_NORMAL)) {
        return true; /* undefined / unused: no text */
    }
    if (t->kind == KN_TOK_BPE) {
        for (size_t i = 0; i < n;) {
            size_t adv;
            uint32_t cp = kn_utf8_decode((const uint8_t *)s + i, n - i, &adv);
            int b = cp == KN_UTF8_INVALID ? -1 : kn_bpe_char_byte(cp);
            if (b >= 0) {
                uint8_t c = (uint8_t)b;
                if (!kn_bvec_append(pool, &c, 1)) return false;
            } else if (!kn_bvec_append(pool, s + i, adv)) {
                return false; /* not a byte character: kept as it is */
            }
            i += adv;
        }
        return true;
    }
    /* SPM / WPM: U+2581 -> space */
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            if (!kn_bvec_append(pool, " ", 1)) return false;
            i += 3;
        } else {
            if (!kn_bvec_append(pool, s + i, 1)) return false;
            i++;
        }
    }
    return true;
}

kiln_status kn_tok_build_pieces(kn_tokenizer *t) {
    kn_bvec pool = {0};
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t before = pool.n;
        if (!decode_piece(t, id, &pool)) {
            free(pool.v);
            return KILN_ERR_NOMEM;
        }
        size_t len = pool.n - before;
        if (len > KN_TOK_MAX_PIECE) {
            free(pool.v);
            return kn_error(KILN_ERR_FORMAT, "token %d is %zu bytes long (the limit is %d)", id, len, KN_TOK_MAX_PIECE);
        }
        if (pool.n > UINT32_MAX) {
            free(pool.v);
            return kn_error(KILN_ERR_FORMAT, "vocabulary too large");
        }
        t->tok[id].piece_off = (uint32_t)before;
        t->tok[id].piece_len = (uint32_t)len;
    }
    t->pieces = pool.v ? pool.v : malloc(1);
    return t->pieces ? KILN_OK : kn_error(KILN_ERR_NOMEM, "out of memory");
}

/* ---- special tokens --------------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Lists the tokens the input text is partitioned on (longest text first, then lowest id) and
 * builds a byte trie over their texts. */
kiln_status kn_tok_build_specials(kn_tokenizer *t) {
    int32_t n = 0;
    uint64_t bytes = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if ((t->tok[id].attr & (KN_ATTR_CONTROL | KN_ATTR_USER_DEFINED | KN_ATTR_UNKNOWN)) && t->tok[id].text_len > 0) {
            n++;
            bytes += t->tok[id].text_len;
        }
    t->special_rank = malloc((size_t)t->n_vocab * sizeof *t->special_rank);
    t->special = malloc((size_t)(n ? n : 1) * sizeof *t->special);
    uint64_t *keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    t->trie_term = malloc((size_t)(bytes + 1) * sizeof *t->trie_term);
    if (!t->special_rank || !t->special || !keys || !t->trie_term) {
        free(keys);
        return kn_error(KILN_ERR_NOMEM, "out of memory for %d special tokens", n);
    }
    memset(t->special_rank, 0xff, (size_t)t->n_vocab * sizeof *t->special_rank);
    int32_t k = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if ((t->tok[id].attr & (KN_ATTR_CONTROL | KN_ATTR_USER_DEFINED | KN_ATTR_UNKNOWN)) && t->tok[id].text_len > 0)
            keys[k++] = ((uint64_t)(UINT32_MAX - t->tok[id].text_len) << 32) | (uint32_t)id;
    qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
    for (int32_t r = 0; r < n; r++) {
        t->special[r] = (int32_t)(keys[r] & 0xFFFFFFFFu);
        t->special_rank[t->special[r]] = r;
    }
    free(keys);
    t->n_special = n;

    kiln_status st = kn_u64map_init(&t->trie_edges, bytes);
    if (st) return st;
    t->trie_nodes = 1;
    t->trie_term[0] = -1;
    for (int32_t r = 0; r < n; r++) {
        int32_t id = t->special[r];
        const uint8_t *s = (const uint8_t *)t->text + t->tok[id].text_off;
        int32_t node = 0;
        for (uint32_t i = 0; i < t->tok[id].text_len; i++) {
            uint64_t key = ((uint64_t)node << 8) | s[i];
            int32_t child = kn_u64map_get(&t->trie_edges, key);
            if (child < 0) {
                child = t->trie_nodes++;
                t->trie_term[child] = -1;
                if ((st = kn_u64map_put(&t->trie_edges, key, child))) return st;
            }
            node = child;
        }
        if (t->trie_term[node] < 0) t->trie_term[node] = id;
        t->trie_first[s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
    }
    return KILN_OK;
}

/* True if some token has a U+2581 preceded by something other than U+2581 (then SPM merges can
 * cross word starts and the text must be merged as a whole). */
static bool has_inner_space_mark(const kn_tokenizer *t) {
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = t->text + t->tok[id].text_off;
        uint32_t n = t->tok[id].text_len;
        for (uint32_t k = 1; k + 3 <= n; k++)
            if (memcmp(s + k, "\xe2\x96\x81", 3) == 0 && (k < 3 || memcmp(s + k - 3, "\xe2\x96\x81", 3) != 0))
                return true;
    }
    return false;
}

/* ---- load ------------------------------------------------------------------------------------- */

static kiln_status load(kn_tokenizer *t, const kn_gguf *g) {
    kiln_status st;
    kn_str model;
    if (!kn_gguf_get_str(g, KEY("model"), &model))
        return kn_error(KILN_ERR_FORMAT, "missing or non-string " KEY("model"));
    if (kn_str_eq(model, "llama")) t->kind = KN_TOK_SPM;
    else if (kn_str_eq(model, "gpt2")) t->kind = KN_TOK_BPE;
    else if (kn_str_eq(model, "bert")) t->kind = KN_TOK_WPM;
    else
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "tokenizer model '%.*s' is not supported (kiln supports "
                        "llama, gpt2 and bert)",
                        (int)KN_MIN(model.len, 64), model.ptr);

    if ((st = read_tokens(t, g)) || (st = read_scores_types(t, g)) || (st = kn_tok_build_index(t))) return st;

    /* defaults by kind */
    bool add_bos_default = t->kind != KN_TOK_BPE;
    t->add_space_prefix = t->kind == KN_TOK_SPM;
    t->add_sep = t->kind == KN_TOK_WPM;
    if (t->kind == KN_TOK_SPM) {
        t->bos = find_cstr(t, "<s>");
        t->eos = find_cstr(t, "</s>");
        t->unk = find_cstr(t, "<unk>");
    } else if (t->kind == KN_TOK_WPM) {
        t->bos = find_cstr(t, "[CLS]");
        t->sep = find_cstr(t, "[SEP]");
        t->unk = find_cstr(t, "[UNK]");
        t->pad = find_cstr(t, "[PAD]");
    }

    if (t->kind == KN_TOK_BPE) {
        if ((st = read_merges(t, g))) return st;
        kn_str pre = {NULL, 0};
        if (!kn_gguf_get_str(g, KEY("pre"), &pre))
            KN_LOGW("tokenizer: no " KEY("pre") "; using the default BPE pre-tokenizer");
        kn_pretok_traits traits;
        if ((st = kn_pretok_create(pre.ptr, pre.len, &t->pretok, &traits))) return st;
        t->ignore_merges = traits.ignore_merges;
        add_bos_default = traits.add_bos;
    }

    if ((st = read_id(g, KEY("bos_token_id"), t->n_vocab, true, &t->bos)) ||
        (st = read_id(g, KEY("eos_token_id"), t->n_vocab, true, &t->eos)) ||
        (st = read_id(g, KEY("eot_token_id"), t->n_vocab, true, &t->eot)) ||
        (st = read_id(g, KEY("eom_token_id"), t->n_vocab, true, &t->eom)) ||
        (st = read_id(g, KEY("unknown_token_id"), t->n_vocab, true, &t->unk)) ||
        (st = read_id(g, KEY("seperator_token_id"), t->n_vocab, false, &t->sep)) ||
        (st = read_id(g, KEY("padding_token_id"), t->n_vocab, false, &t->pad)))
        return st;
    if (t->kind == KN_TOK_WPM && !kn_gguf_find(g, KEY("bos_token_id")) &&
        (st = read_id(g, KEY("cls_token_id"), t->n_vocab, false, &t->bos)))
        return st;

    bool has_bos_flag, has_eos_flag, has_sep_flag;
    t->add_bos = add_bos_default;
    if ((st = read_flag(g, KEY("add_bos_token"), &t->add_bos, &has_bos_flag)) ||
        (st = read_flag(g, KEY("add_eos_token"), &t->add_eos, &has_eos_flag)) ||
        (st = read_flag(g, KEY("add_sep_token"), &t->add_sep, &has_sep_flag)) ||
        (st = read_flag(g, KEY("add_space_prefix"), &t->add_space_prefix, NULL)))
        return st;
    if (t->add_bos && t->bos < 0) {
        if (has_bos_flag) return kn_error(KILN_ERR_FORMAT, KEY("add_bos_token") " is true but there is no BOS token");
        t->add_bos = false;
    }
    if (t->add_eos && t->eos < 0)
        return kn_error(KILN_ERR_FORMAT, KEY("add_eos_token") " is true but there is no EOS token");
    if (t->add_sep && t->sep < 0) {
        if (has_sep_flag)
            return kn_error(KILN_ERR_FORMAT, KEY("add_sep_token") " is true but there is no separator token");
        t->add_sep = false;
    }

    if (t->kind == KN_TOK_WPM) {
        t->wpm_lowercase = true;
        if ((st = read_flag(g, KEY("normalizer.lowercase"), &t->wpm_lowercase, NULL))) return st;
        t->wpm_strip_accents = t->wpm_lowercase;
        if ((st = read_flag(g, KEY("normalizer.strip_accents"), &t->wpm_strip_accents, NULL))) return st;
    }

    /* byte tokens */
    for (int b = 0; b < 256; b++) {
        t->byte_tok[b] = -1;
        if (t->kind == KN_TOK_SPM) {
            static const char HEX[] = "0123456789ABCDEF";
            char name[6] = {'<', '0', 'x', HEX[b >> 4], HEX[b & 15], '>'};
            char one = (char)b;
            t->byte_tok[b] = kn_tok_lookup(t, name, 6);
            if (t->byte_tok[b] < 0) t->byte_tok[b] = kn_tok_lookup(t, &one, 1);
        } else if (t->kind == KN_TOK_BPE) {
            uint8_t enc[4];
            size_t n = kn_utf8_encode(kn_bpe_byte_char((uint8_t)b), enc);
            t->byte_tok[b] = kn_tok_lookup(t, (const char *)enc, n);
        }
    }

    if (t->kind == KN_TOK_SPM) t->spm_split_ok = !has_inner_space_mark(t);
    apply_name_rules(t, g);
    if ((st = kn_tok_build_pieces(t))) return st;
    return kn_tok_build_specials(t);
}

kiln_status kn_tokenizer_load(const kn_gguf *g, kn_tokenizer **out) {
    *out = NULL;
    kn_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return kn_error(KILN_ERR_NOMEM, "out of memory");
    t->bos = t->eos = t->eot = t->eom = t->unk = t->sep = t->pad = -1;
    kiln_status st = load(t, g);
    if (st) {
        kn_error_prefix("tokenizer");
        kn_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

void kn_tokenizer_free(kn_tokenizer *t) {
    if (!t) return;
    free(t->tok);
    free(t->text);
    free(t->pieces);
    free(t->by_text.slots);
    kn_pretok_free(t->pretok);
    free(t->merge_text);
    free(t->merge_off);
    free(t->merge_a_len);
    free(t->merge_len);
    free(t->merge_slots);
    free(t->special);
    free(t->special_rank);
    free(t->trie_term);
    kn_u64map_free(&t->trie_edges);
    kn_tj_free(t->tj);
    free(t);
}

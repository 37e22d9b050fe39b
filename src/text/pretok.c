/*
 * pretok.c - the BPE pre-tokenizers: the regex sets that cut text into words before byte-level BPE,
 * one set per tokenizer.ggml.pre value, compiled with PCRE2 in UTF + Unicode-property mode.
 *
 * A set is a sequence of regexes applied like a Hugging Face "Sequence" of "Split(Isolated)"
 * pre-tokenizers: the first regex splits the text into its matches and the gaps between them, the
 * next one splits each of those pieces the same way, and so on. The lists follow the
 * tokenizer.json files the models ship (as llama.cpp transcribes them); where llama.cpp rewrites a
 * regex for std::regex (case-insensitive groups, \p{Lu}...), the original form is used, since PCRE2
 * supports it. Text that is not valid UTF-8 is matched with PCRE2_MATCH_INVALID_UTF: ill-formed
 * bytes never match and so become pieces of their own.
 */
#include "text/tok_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

#define MAX_REGEX 6

/* GPT-2's regex (tokenizer.json ByteLevel). */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Llama 3 (also the base of several later ones). */
#define RE_LLAMA3                                                                                                      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"                                          \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                                       \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"                                               \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* CJK ranges used by the DeepSeek sets: U+4E00-U+9FA5, U+0800-U+4E00, U+AC00-U+D7FF. */
#define RE_DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* DeepSeek LLM's cased-letter class (as written in its tokenizer.json). */
#define RE_DEEPSEEK_LETTERS                                                                                            \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"               \
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"             \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"                    \
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"                  \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"                  \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"                             \
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"                            \
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"                  \
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"                    \
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"                             \
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"                             \
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"                   \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"                  \
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"                                 \
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"                             \
    "\\x{1E900}-\\x{1E943}]+"
#define RE_DEEPSEEK_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"
#define RE_DEEPSEEK3_MAIN                                                                                              \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"               \
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Not split at: whitespace and sentence punctuation (BLOOM, Poro, Viking, GPT3-Finnish). */
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"
#define RE_CASED_WORDS(suffix)                                                                                         \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" suffix "|"             \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" suffix
#define RE_CONTRACTION_OPT "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"

typedef struct pretok_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *regex[MAX_REGEX];
    kn_pretok_traits traits;
} pretok_def;

static const pretok_def DEFS[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, {false, false}},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", {RE_LLAMA3}, {true, true}},
    {"dbrx|smaug-bpe|chatglm-bpe|glm4", {RE_LLAMA3}, {false, false}},
    {"deepseek-llm",
     {"[\\r\\n]", RE_DEEPSEEK_LETTERS, RE_DEEPSEEK_PUNCT, "\\s+$", RE_DEEPSEEK_CJK, "\\p{N}+"},
     {false, false}},
    {"deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DEEPSEEK_CJK, "\\p{N}"}, {false, false}},
    {"deepseek-v3|hunyuan-dense",
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", RE_DEEPSEEK3_MAIN},
     {false, false}},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, {false, false}},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2}, {false, false}},
    {"gpt-2|phi-2|mpt|olmo|jais|trillion|granite-docling|jina-es|jina-de|gigachat|jina-v2-es|"
     "jina-v2-de|a.x-4.0|mellum|exaone4|jina-v1-en|jina-v2-code|roberta-bpe|modern-bert",
     {RE_GPT2},
     {false, false}},
    {"qwen2|deepseek-r1-qwen|kormo|megrez|stablelm2|hunyuan", {RE_QWEN2}, {false, false}},
    {"poro-chat|bloom|gpt3-finnish", {RE_PORO}, {false, false}},
    {"viking", {RE_PORO, "\\p{N}"}, {false, false}},
    {"tekken",
     {RE_CASED_WORDS("") "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     {true, true}},
    {"gpt-4o|llama4",
     {RE_CASED_WORDS(RE_CONTRACTION_OPT) "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     {false, false}},
    {"chameleon",
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2},
     {false, true}},
    {"seed-coder",
     {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     {false, false}},
    {"bailingmoe|bailingmoe2|llada-moe",
     {"'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|"
      "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
     {false, false}},
};

struct kn_pretok {
    int n;
    pcre2_code *code[MAX_REGEX];
};

/* True if `name` (not NUL-terminated) is one of the '|'-separated names. */
static bool name_in(const char *names, const char *name, size_t n) {
    for (const char *p = names;;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0) return true;
        if (!bar) return false;
        p = bar + 1;
    }
}

void kn_pretok_free(kn_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->code[i]);
    free(p);
}

kiln_status kn_pretok_create(const char *name, size_t name_len, kn_pretok **out, kn_pretok_traits *traits) {
    *out = NULL;
    const pretok_def *def = NULL;
    if (!name || name_len == 0) def = &DEFS[0];
    for (size_t i = 0; !def && i < KN_ARRAY_LEN(DEFS); i++)
        if (name_in(DEFS[i].names, name, name_len)) def = &DEFS[i];
    if (!def)
        return kn_error(KILN_ERR_UNSUPPORTED, "unknown BPE pre-tokenizer '%.*s' (tokenizer.ggml.pre)",
                        (int)KN_MIN(name_len, 64), name);
    kn_pretok *p = calloc(1, sizeof *p);
    if (!p) return kn_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < MAX_REGEX && def->regex[i]; i++) {
        int err;
        PCRE2_SIZE erroff;
        pcre2_code *code =
            pcre2_compile((PCRE2_SPTR)def->regex[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err, &erroff, NULL);
        if (!code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            kn_pretok_free(p);
            return kn_error(KILN_ERR_INTERNAL,
                            "pre-tokenizer regex %d of '%.*s' does not compile at "
                            "offset %zu: %s",
                            i, (int)KN_MIN(name_len, 64), name ? name : "", (size_t)erroff, (const char *)msg);
        }
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
        p->code[p->n++] = code;
    }
    *traits = def->traits;
    *out = p;
    return KILN_OK;
}

static bool push_span(kn_spanvec *v, size_t off, size_t len) {
    if (len == 0) return true;
    if (v->n == v->cap && !kn_reserve((void **)&v->v, &v->cap, v->n + 1, sizeof *v->v)) return false;
    v->v[v->n++] = (kn_span){off, len};
    return true;
}

/* Splits text[off, off+len) by one regex into matches and gaps, appending to out. A match error
 * (e.g. a backtracking limit on hostile input) leaves the rest of the piece as one gap. */
static kiln_status split_one(const pcre2_code *code, pcre2_match_data *md, const char *text, size_t off, size_t len,
                             kn_spanvec *out) {
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + off);
    size_t pos = 0, gap = 0;
    while (pos <= len) {
        int rc = pcre2_match(code, subj, len, pos, 0, md, NULL);
        if (rc < 0) break; /* PCRE2_ERROR_NOMATCH or a resource limit */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e <= s) { /* empty match: skip one character */
            if (s >= len) break;
            pos = s + 1;
            while (pos < len && (subj[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        if (s > gap && !push_span(out, off + gap, s - gap)) return KILN_ERR_NOMEM;
        if (!push_span(out, off + s, e - s)) return KILN_ERR_NOMEM;
        gap = pos = e;
    }
    if (gap < len && !push_span(out, off + gap, len - gap)) return KILN_ERR_NOMEM;
    return KILN_OK;
}

kiln_status kn_pretok_split(const kn_pretok *p, const char *text, size_t len, kn_spanvec *out) {
    if (len == 0) return KILN_OK;
    kn_spanvec cur = {0}, next = {0};
    kiln_status rc = KILN_OK;
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    if (!md || !push_span(&cur, 0, len)) {
        rc = kn_error(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int r = 0; r < p->n; r++) {
        next.n = 0;
        for (size_t i = 0; i < cur.n && rc == KILN_OK; i++)
            rc = split_one(p->code[r], md, text, cur.v[i].off, cur.v[i].len, &next);
        if (rc) goto done;
        kn_spanvec tmp = cur;
        cur = next;
        next = tmp;
    }
    for (size_t i = 0; i < cur.n; i++)
        if (!push_span(out, cur.v[i].off, cur.v[i].len)) {
            rc = KILN_ERR_NOMEM;
            goto done;
        }
done:
    pcre2_match_data_free(md);
    free(cur.v);
    free(next.v);
    return rc;
}

/*
 * toolcall_grammar.c - kiln_tool_grammar: the grammar of tool calls written in a format's markup,
 * which a generation runs to enforce tool_choice (a lazy grammar for "auto", an eager one for
 * "required" or a named function).
 *
 * The grammar is GBNF text assembled here and compiled once (kn_gbnf_compile_ex, as a generated
 * grammar: larger than a client's grammar text may be, bounded by the program's size):
 *   - each allowed tool's "parameters" schema is converted on its own (JSON Schema) and the GBNF it
 *     converted to is spliced in with its rule names prefixed "t<i>-" (tool i), so the rules of two
 *     schemas (each has its "root", "string", "ws", ...) cannot collide; its arguments are rule
 *     t<i>-root. The XML-like formats (Qwen3-Coder, GLM) write one element per parameter: a
 *     parameter whose schema admits a string is raw text up to the element's close (one of its
 *     values when the schema lists them: a string enum or const), any other is
 *     JSON under its own schema (prefix "t<i>p<j>-"); the elements come in any order, each at most
 *     once and the required ones all present (one rule per set of parameters written so far, up to
 *     XML_EXACT_MAX parameters; beyond, any sequence of the declared parameters);
 *   - the wrapper's own rules have names no prefixed name can take: "root", "body", "call", "w"
 *     (white space between markup: a space, a line break or two and an indent), "wt" (white space at
 *     the end), "s" (an optional space: after a JSON key, around a colon), "u<k>-<q>" (text up to a closing marker, a
 * KMP automaton over code points), "x<i>-<set>" (XML parameters), "t<i>e<j>" (the listed values
 * of parameter j), "py..." (Llama's built-in calls);
 *   - a format is a row of FORMATS: the block's opener, one call (a pattern where @N is the
 *     function's name and @A its arguments rule, @P its XML parameters), the separator between
 *     calls, the block's close, and the lazy grammar's triggers (the openers). gpt-oss, Llama 3.x
 *     and Functionary v3.2 have a little code of their own.
 * With "required" or a named function the reply may begin with the format's reasoning block (the
 * parser's reasoning markers) when the template writes them and the prompt did not close the block,
 * or starts inside it when the prompt left it open; the eager grammar ends with the last call's
 * close (white space after it is not written, an end-of-generation token may follow). A lazy grammar
 * starts at its trigger, so it has no reasoning prefix; in formats with reasoning markers it allows
 * text up to the reasoning's close and a second block of calls after the first (a model that wrote
 * a call while thinking, then the real one).
 */
#include "base/json.h"
#include "sample/grammar.h"
#include "sample/grammar_prog.h"
#include "sample/schema.h"
#include "text/toolcall.h"

#include <stdio.h>
#include <stdlib.h>

#define XML_EXACT_MAX 8  /* parameters of an XML-like call tracked exactly (2^n rules) */
#define MAX_CP        64 /* code points of a closing marker */

enum { F_JSON, F_XML, F_HARMONY, F_LLAMA3, F_FV32 };

typedef struct fdesc {
    const char *name;
    int kind;
    const char *open, *call, *sep, *close; /* GBNF text; call: @N name, @A arguments rule, @P parameters */
    bool multi;                            /* the markup holds several calls */
    const char *trig[3];                   /* the lazy grammar's triggers */
    const char *param;                     /* F_XML: a parameter element, @K its name, @V the value rule */
    const char *vclose;                    /* F_XML: the literal that ends a value */
} fdesc;

#define JCALL(nk, ak) "\"{\" w \"\\\"" nk "\\\"\" s \":\" s \"\\\"@N\\\"\" s \",\" w \"\\\"" ak "\\\"\" s \":\" s @A w "
#define ID_OPT        "(\",\" w \"\\\"id\\\"\" s \":\" s \"\\\"\" [A-Za-z0-9_-]{1,64} \"\\\"\" w)? "

/* clang-format off */
static const fdesc FORMATS[] = {
    {"hermes", F_JSON, "", "\"<tool_call>\" w " JCALL("name", "arguments") "\"}\" w \"</tool_call>\"", "w", "", true,
     {"<tool_call>"}, NULL, NULL},
    {"generic", F_JSON, "\"{\" w \"\\\"tool_calls\\\"\" w \":\" w \"[\" w", JCALL("name", "arguments") ID_OPT "\"}\"",
     "w \",\" w", "w \"]\" w \"}\"", true, {"{\"tool_call"}, NULL, NULL},
    {"qwen3-coder", F_XML, "", "\"<tool_call>\" w \"<function=@N>\" w @P \"</function>\" w \"</tool_call>\"", "w", "",
     true, {"<tool_call>"}, "\"<parameter=@K>\" @V w", "</parameter>"},
    {"glm-4.5", F_XML, "", "\"<tool_call>\" w \"@N\" w @P \"</tool_call>\"", "w", "", true, {"<tool_call>"},
     "\"<arg_key>@K</arg_key>\" w \"<arg_value>\" @V w", "</arg_value>"},
    {"mistral-nemo", F_JSON, "\"[TOOL_CALLS]\" w \"[\" w", JCALL("name", "arguments") ID_OPT "\"}\"", "w \",\" w",
     "w \"]\"", true, {"[TOOL_CALLS]"}, NULL, NULL},
    {"mistral", F_JSON, "", "\"[TOOL_CALLS]\" w \"@N\" w (\"[CALL_ID]\" w [A-Za-z0-9_-]{1,64} w)? \"[ARGS]\" w @A", "w",
     "", true, {"[TOOL_CALLS]"}, NULL, NULL},
    {"deepseek-r1", F_JSON, "\"<｜tool▁calls▁begin｜>\" w",
     "\"<｜tool▁call▁begin｜>function<｜tool▁sep｜>@N\\n```json\\n\" w @A w \"```\" w \"<｜tool▁call▁end｜>\"", "w",
     "w \"<｜tool▁calls▁end｜>\"", true, {"<｜tool▁calls▁begin｜>"}, NULL, NULL},
    {"deepseek-v3.1", F_JSON, "\"<｜tool▁calls▁begin｜>\" w",
     "\"<｜tool▁call▁begin｜>@N<｜tool▁sep｜>\" w @A w \"<｜tool▁call▁end｜>\"", "w", "w \"<｜tool▁calls▁end｜>\"", true,
     {"<｜tool▁calls▁begin｜>"}, NULL, NULL},
    {"kimi-k2", F_JSON, "\"<|tool_calls_section_begin|>\" w",
     "\"<|tool_call_begin|>\" w \"functions.@N:\" [0-9]{1,6} w \"<|tool_call_argument_begin|>\" w @A w "
     "\"<|tool_call_end|>\"", "w", "w \"<|tool_calls_section_end|>\"", true, {"<|tool_calls_section_begin|>"}, NULL,
     NULL},
    {"command-r7b", F_JSON, "\"<|START_ACTION|>\" w \"[\" w",
     "\"{\" w \"\\\"tool_call_id\\\"\" w \":\" w \"\\\"\" [A-Za-z0-9_-]{1,32} \"\\\"\" w \",\" w "
     "\"\\\"tool_name\\\"\" w \":\" w \"\\\"@N\\\"\" w \",\" w \"\\\"parameters\\\"\" w \":\" w @A w \"}\"",
     "w \",\" w", "w \"]\" w \"<|END_ACTION|>\"", true, {"<|START_ACTION|>"}, NULL, NULL},
    {"functionary-v3.1", F_JSON, "", "\"<function=@N>\" w @A w \"</function>\"", "w", "", true, {"<function="}, NULL,
     NULL},
    {"firefunction-v2", F_JSON, "\"functools[\" w", JCALL("name", "arguments") "\"}\"", "w \",\" w", "w \"]\"", true,
     {"functools["}, NULL, NULL},
    {"granite", F_JSON, "\"<|tool_call|>\" w \"[\" w", JCALL("name", "arguments") "\"}\"", "w \",\" w", "w \"]\"", true,
     {"<|tool_call|>"}, NULL, NULL},
    {"llama3", F_LLAMA3, "", "\"{\" w (\"\\\"type\\\"\" w \":\" w \"\\\"function\\\"\" w \",\" w)? \"\\\"name\\\"\" w \":\" w "
     "\"\\\"@N\\\"\" w \",\" w \"\\\"parameters\\\"\" w \":\" w @A w \"}\"", "w", "w", false,
     {"{\"name\"", "{\"type\"", "<|python_tag|>"}, NULL, NULL},
    {"functionary-v3.2", F_FV32, "", "\"@N\\n\" w @A", "w", "", true, {">>>"}, NULL, NULL},
    {"gpt-oss", F_HARMONY, "", NULL, NULL, NULL, false, {"<|channel|>commentary to=", " to=functions."}, NULL, NULL},
};
/* clang-format on */

/* Llama 3.x built-in tools, called as <|python_tag|>name.call(key="value", ...). */
static const char *const LLAMA_BUILTINS[] = {"python", "code_interpreter", "brave_search", "wolfram_alpha"};

typedef struct gb {
    FILE *f;
    const fdesc *fd;
    const kn_tc_format *tf;
    json_t *fns[KN_TC_MAX_CALLS]; /* the allowed functions (borrowed from tools) */
    size_t idx[KN_TC_MAX_CALLS];  /* their indices in tools */
    size_t n;
    int n_until;
    kiln_status st;
    char approx[KN_ERRMSG_MAX]; /* the first approximation of a tool's schema ("" while none) */
} gb;

/* ---- GBNF text ---------------------------------------------------------------------------------- */

/* Writes s[n] as a GBNF literal. */
static void lit_n(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02X", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void lit(FILE *f, const char *s) { lit_n(f, s, strlen(s)); }

/* Appends gbnf with every rule name prefixed by prefix: names are the word runs ([A-Za-z0-9-]+)
 * outside string literals, character classes, repetition braces, counter operations (@count,
 * @+N{lo,hi}) and comments. */
static void splice(FILE *f, const char *g, const char *prefix) {
    for (size_t i = 0; g[i];) {
        char c = g[i];
        if (c == '"' || c == '[') {
            char close = c == '"' ? '"' : ']';
            fputc(g[i++], f);
            while (g[i] && g[i] != close) {
                if (g[i] == '\\' && g[i + 1]) fputc(g[i++], f);
                fputc(g[i++], f);
            }
            if (g[i]) fputc(g[i++], f);
        } else if (c == '@') {
            fputc(g[i++], f);
            while ((g[i] >= 'a' && g[i] <= 'z') || (g[i] >= '0' && g[i] <= '9') || g[i] == '+') fputc(g[i++], f);
        } else if (c == '{' || c == '#') {
            char close = c == '{' ? '}' : '\n';
            while (g[i] && g[i] != close) fputc(g[i++], f);
            if (g[i]) fputc(g[i++], f);
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-') {
            fputs(prefix, f);
            while ((g[i] >= 'a' && g[i] <= 'z') || (g[i] >= 'A' && g[i] <= 'Z') || (g[i] >= '0' && g[i] <= '9') ||
                   g[i] == '-')
                fputc(g[i++], f);
        } else fputc(g[i++], f);
    }
    fputc('\n', f);
}

/* Decodes UTF-8 s into code points (with their byte ranges); the count, or -1 when s is not valid or
 * longer than MAX_CP. */
static int decode(const char *s, uint32_t *cp, size_t *off, size_t *len) {
    int n = 0;
    for (size_t i = 0; s[i];) {
        const unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >> 5 == 6 ? 2 : c >> 4 == 14 ? 3 : c >> 3 == 30 ? 4 : 0;
        if (!k || n == MAX_CP) return -1;
        uint32_t v = k == 1 ? c : c & (0x7f >> k);
        for (size_t j = 1; j < k; j++) {
            if (((unsigned char)s[i + j] & 0xc0) != 0x80) return -1;
            v = v << 6 | ((unsigned char)s[i + j] & 0x3f);
        }
        cp[n] = v;
        off[n] = i;
        len[n++] = k;
        i += k;
    }
    return n;
}

/* Writes one code point inside a character class. */
static void class_cp(FILE *f, const char *s, size_t len, uint32_t v) {
    if (v < 0x80) fprintf(f, "\\x%02X", (unsigned)v);
    else fwrite(s, 1, len, f);
}

/* Emits rules matching any text that does not contain stop, followed by stop (a KMP automaton over
 * the code points of stop: rule u<k>-<q> is the state with q code points of stop matched). Returns
 * k, or -1 when stop cannot be used (not UTF-8, too long). */
static int until(gb *b, const char *stop) {
    uint32_t cp[MAX_CP];
    size_t off[MAX_CP], len[MAX_CP];
    const int n = decode(stop, cp, off, len);
    if (n <= 0) return -1;
    int fail[MAX_CP];
    fail[0] = 0;
    for (int i = 1, k = 0; i < n; i++) {
        while (k && cp[i] != cp[k]) k = fail[k - 1];
        if (cp[i] == cp[k]) k++;
        fail[i] = k;
    }
    const int u = b->n_until++;
    for (int q = 0; q < n; q++) {
        fprintf(b->f, "u%d-%d ::= [^", u, q);
        for (int j = 0; j < n; j++) {
            bool seen = false;
            for (int i = 0; i < j; i++) seen |= cp[i] == cp[j];
            if (!seen) class_cp(b->f, stop + off[j], len[j], cp[j]);
        }
        fprintf(b->f, "] u%d-0", u);
        for (int j = 0; j < n; j++) { /* each distinct code point of stop: where it leads from q */
            bool seen = false;
            for (int i = 0; i < j; i++) seen |= cp[i] == cp[j];
            if (seen) continue;
            int d = q;
            while (d && cp[d] != cp[j]) d = fail[d - 1];
            if (cp[d] == cp[j]) d++;
            fputs(" | ", b->f);
            lit_n(b->f, stop + off[j], len[j]);
            if (d < n) fprintf(b->f, " u%d-%d", u, d);
        }
        fputc('\n', b->f);
    }
    return u;
}

/* ---- schemas -------------------------------------------------------------------------------------- */

static kiln_status fail(gb *b, kiln_status st, size_t tool, const char *what, const char *why) {
    b->st = st == KILN_ERR_NOMEM ? st : KILN_ERR_INVALID_ARG;
    if (st == KILN_ERR_NOMEM) return kn_error(KILN_ERR_NOMEM, "out of memory building the tool-call grammar");
    char cause[KN_ERRMSG_MAX];
    snprintf(cause, sizeof cause, "%s", why);
    return kn_error(b->st, "tools[%zu].function.parameters%s: %s", tool, what, cause);
}

/* Keeps how (NULL: nothing) as the grammar's approximation, naming tool's parameters and what in
 * them, unless an earlier one is kept. */
static void note_approx(gb *b, size_t tool, const char *what, const char *how) {
    if (how && !b->approx[0])
        snprintf(b->approx, sizeof b->approx, "tools[%zu].function.parameters%s: %s", tool, what, how);
}

/* Converts schema (NULL: any object) to GBNF and splices it with prefix; false after fail(). The
 * whole grammar is compiled once, at the end. A schema with a $ref is compiled on its own too, as
 * kiln_grammar_compile does: only a recursion through a $ref can make a converted schema match no
 * finite value, which the compile finds, and its error then names this tool (in the whole grammar
 * that tool's calls would just be impossible). */
static bool schema_rules(gb *b, size_t tool, const json_t *schema, bool strict, const char *prefix, const char *what) {
    char *text = schema ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{\"type\":\"object\"}");
    if (!text) return fail(b, KILN_ERR_NOMEM, tool, what, ""), false;
    const size_t len = strlen(text);
    kiln_status st;
    char *gbnf = NULL;
    kiln_grammar *g = NULL;
    kn_schema_info info = {0};
    if (len > KILN_GRAMMAR_MAX_TEXT) { /* kiln_grammar_compile's own bound, for both paths */
        st = kn_error(KILN_ERR_INVALID_ARG, "the schema is %zu bytes; at most %u are accepted", len,
                      KILN_GRAMMAR_MAX_TEXT);
    } else if (strstr(text, "\"$ref\"")) {
        kiln_grammar_params gp = kiln_grammar_default_params();
        gp.kind = KILN_GRAMMAR_JSON_SCHEMA;
        gp.strict = strict;
        st = kiln_grammar_compile(text, len, &gp, &g);
    } else {
        st = kn_schema_to_gbnf_info(text, len, strict, &gbnf, &info);
    }
    free(text);
    if (st) return fail(b, st, tool, what, kn_error_msg()), false;
    note_approx(b, tool, what, g ? kiln_grammar_approximation(g) : info.approx ? info.approx_what : NULL);
    splice(b->f, g ? kiln_grammar_gbnf(g) : gbnf, prefix);
    kiln_grammar_free(g);
    free(gbnf);
    return true;
}

/* Whether parameter schema s (its $ref looked through) of the parameters schema root admits a
 * string (its value is then written as raw text): one that says so (kn_tc_schema_is_string), or one
 * that says nothing of its type at all (no type, enum, const, combinator, properties or items: any
 * value; or no object). */
static bool admits_string(const json_t *root, const json_t *s) {
    static const char *const says[] = {"type",  "enum",       "const", "anyOf", "oneOf",
                                       "allOf", "properties", "items", "$ref"};
    bool any = true; /* also a schema that is no object (true, or nonsense the compiler refuses) */
    for (size_t i = 0; any && i < sizeof says / sizeof *says; i++) any = !json_object_get(s, says[i]);
    return any || kn_tc_schema_is_string(root, s);
}

/* Writes pattern with @N (name), @A (arguments rule of allowed tool t), @P (its parameters rule),
 * @K (key) and @V (value rule v). */
static void expand(gb *b, const char *pat, size_t t, const char *key, const char *v) {
    const char *name = json_string_value(json_object_get(b->fns[t], "name"));
    for (const char *p = pat; *p; p++) {
        if (*p != '@') {
            fputc(*p, b->f);
            continue;
        }
        switch (*++p) {
            case 'N': fputs(name, b->f); break;
            case 'A': fprintf(b->f, "t%zu-root", b->idx[t]); break;
            case 'P': fprintf(b->f, "x%zu-0", b->idx[t]); break;
            case 'K': fputs(key, b->f); break;
            case 'V': fputs(v, b->f); break;
            default: fputc(*p, b->f);
        }
    }
}

/* The values a string parameter of an XML-like format may take when its schema s lists them (an
 * enum whose members are all strings, or a string const): a JSON array (a new reference) for the
 * grammar to write those only, as the raw text of the value; NULL when s lists none, or when a value
 * could not be told apart from the markup around it (it holds the close marker, or begins or ends
 * with a newline the format trims), which leaves the value free text up to the close. */
static json_t *raw_choices(const json_t *s, const char *close, bool trim) {
    const json_t *c = json_object_get(s, "const"), *e = json_object_get(s, "enum");
    json_t *v = json_is_string(c)                        ? json_pack("[O]", c)
                : json_is_array(e) && json_array_size(e) ? json_incref((json_t *)e)
                                                         : NULL;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        const char *t = json_string_value(x);
        const size_t n = json_string_length(x);
        if (!t || memchr(t, 0, n) || strstr(t, close) || (trim && n && (t[0] == '\n' || t[n - 1] == '\n'))) {
            json_decref(v);
            return NULL;
        }
    }
    return v;
}

/* The XML parameters of allowed tool t: rule x<i>-<set> is the rest of the call once the parameters
 * in set are written. False after fail(). */
static bool xml_params(gb *b, size_t t) {
    const size_t ti = b->idx[t];
    json_t *schema = json_object_get(b->fns[t], "parameters");
    json_t *props = json_object_get(schema, "properties");
    json_t *req = json_object_get(schema, "required");
    const bool strict = json_is_true(json_object_get(b->fns[t], "strict"));
    /* whether the parser drops a value's first and last newline (toolcall_xml.c) */
    const bool trim = b->tf->family == &kn_tc_fam_xml && ((const kn_tc_xml_cfg *)b->tf->cfg)->trim_newline;
    size_t np = json_is_object(props) ? json_object_size(props) : 0;
    const char *keys[64];
    char vrule[64][64];
    uint64_t required = 0;
    if (np > 64) return fail(b, KILN_ERR_INVALID_ARG, ti, "", "more than 64 parameters"), false;
    size_t j = 0;
    const char *key;
    json_t *ps;
    json_object_foreach(props, key, ps) {
        for (const char *c = key; *c; c++)
            if (*c == '"' || *c == '\\' || *c == '<' || *c == '>' || (unsigned char)*c < 0x20)
                return fail(b, KILN_ERR_INVALID_ARG, ti, ".properties", "a parameter name this format cannot write"),
                       false;
        keys[j] = key;
        for (size_t r = 0; r < json_array_size(req); r++)
            if (json_is_string(json_array_get(req, r)) && strcmp(json_string_value(json_array_get(req, r)), key) == 0)
                required |= 1ull << j;
        const json_t *pd = kn_tc_deref(schema, ps); /* a $ref'd parameter: the schema it names */
        const bool raw = admits_string(schema, pd);
        json_t *choices = raw ? raw_choices(pd, b->fd->vclose, trim) : NULL;
        if (choices) { /* one of the listed strings, as the parser will read it (trimmed) */
            const char *nl = trim ? "\"\\n\"? " : "";
            fprintf(b->f, "t%zue%zu ::= %s(", ti, j, nl);
            size_t i;
            json_t *x;
            json_array_foreach(choices, i, x) {
                if (i) fputs(" | ", b->f);
                lit_n(b->f, json_string_value(x), json_string_length(x));
            }
            fprintf(b->f, ") %s", nl);
            lit_n(b->f, b->fd->vclose, strlen(b->fd->vclose));
            fputc('\n', b->f);
            json_decref(choices);
            snprintf(vrule[j], sizeof vrule[j], "t%zue%zu", ti, j);
        } else if (raw) {
            /* the first keyword of the parameter's schema that raw text leaves unchecked */
            static const char *const kws[] = {"enum",  "const", "pattern", "format", "minLength", "maxLength",
                                              "allOf", "anyOf", "oneOf",   "not",    "if"};
            for (size_t k = 0; k < sizeof kws / sizeof *kws; k++)
                if (json_object_get(pd, kws[k])) {
                    char what[96], how[96];
                    snprintf(what, sizeof what, ".properties.%s", key);
                    snprintf(how, sizeof how, "#/%s: the value is raw text up to its close, %s is not enforced", kws[k],
                             kws[k]);
                    note_approx(b, ti, what, how);
                    break;
                }
            int u = until(b, b->fd->vclose);
            if (u < 0) return fail(b, KILN_ERR_INTERNAL, ti, "", "bad closing marker"), false;
            snprintf(vrule[j], sizeof vrule[j], "u%d-0", u);
        } else {
            char prefix[32], what[96];
            snprintf(prefix, sizeof prefix, "t%zup%zu-", ti, j);
            snprintf(what, sizeof what, ".properties.%s", key);
            json_t *alone = kn_tc_schema_alone(schema, pd); /* its own $refs into $defs resolve */
            if (!alone) return fail(b, KILN_ERR_NOMEM, ti, what, ""), false;
            const bool ok = schema_rules(b, ti, alone, strict, prefix, what);
            json_decref(alone);
            if (!ok) return false;
            snprintf(vrule[j], sizeof vrule[j], "(w t%zup%zu-root w \"%s\")", ti, j, b->fd->vclose);
        }
        j++;
    }
    if (np <= XML_EXACT_MAX) {
        for (uint64_t set = 0; set < (1ull << np); set++) {
            fprintf(b->f, "x%zu-%llu ::= (", ti, (unsigned long long)set);
            bool any = false;
            for (size_t k = 0; k < np; k++) {
                if (set >> k & 1) continue;
                fputs(any ? " | " : "", b->f);
                expand(b, b->fd->param, t, keys[k], vrule[k]);
                fprintf(b->f, " x%zu-%llu", ti, (unsigned long long)(set | 1ull << k));
                any = true;
            }
            if (!any) fputs("\"\"", b->f);
            fprintf(b->f, ")%s\n", any && (set & required) == required ? "?" : "");
        }
    } else {
        fprintf(b->f, "x%zu-0 ::= (", ti);
        for (size_t k = 0; k < np; k++) {
            fputs(k ? " | " : "", b->f);
            expand(b, b->fd->param, t, keys[k], vrule[k]);
        }
        fputs(")*\n", b->f);
    }
    return true;
}

/* ---- formats ---------------------------------------------------------------------------------------- */

/* Llama 3.x built-in calls of the allowed tools with a built-in name, as alternatives of rule
 * "pycall"; false when there are none. */
static bool llama_builtins(gb *b) {
    bool any = false;
    for (size_t t = 0; t < b->n; t++) {
        const char *name = json_string_value(json_object_get(b->fns[t], "name"));
        for (size_t k = 0; k < sizeof LLAMA_BUILTINS / sizeof *LLAMA_BUILTINS; k++) {
            if (strcmp(name, LLAMA_BUILTINS[k]) != 0) continue;
            fputs(any ? " | " : "pycall ::= ", b->f);
            fprintf(b->f, "\"%s.call(\" w pyargs? w \")\"", name);
            any = true;
        }
    }
    if (any)
        fputs("\npyargs ::= pykv (w \",\" w pykv)*\npykv ::= [A-Za-z_] [A-Za-z0-9_]{0,63} w \"=\" w pyval\n"
              "pyval ::= pystr | \"-\"? [0-9]+ (\".\" [0-9]+)? | \"True\" | \"False\" | \"None\"\n"
              "pystr ::= \"\\\"\" ([^\"\\\\\\x00-\\x1F] | \"\\\\\" [^\\x00-\\x1F])* \"\\\"\"\n",
              b->f);
    return any;
}

/* The rule "call": one call of any allowed tool. */
static void call_rule(gb *b) {
    fputs("call ::= ", b->f);
    for (size_t t = 0; t < b->n; t++) {
        fputs(t ? " | " : "", b->f);
        fputc('(', b->f);
        expand(b, b->fd->call, t, "", "");
        fputc(')', b->f);
    }
    fputc('\n', b->f);
}

/* The rule "body": the block of calls (one call when !parallel or the format holds one). */
static void body_rule(gb *b, bool parallel, bool lazy) {
    const fdesc *fd = b->fd;
    const bool multi = parallel && fd->multi;
    if (fd->kind == F_HARMONY) {
        /* a commentary message to functions.NAME, the recipient in the channel line or before it */
        fputs("body ::= ", b->f);
        for (size_t t = 0; t < b->n; t++) {
            fputs(t ? " | " : "", b->f);
            expand(b,
                   "(\"<|channel|>commentary to=functions.@N\" con \"<|message|>\" w @A w | "
                   "\" to=functions.@N<|channel|>\" (\"commentary\" | \"analysis\") con \"<|message|>\" w @A w)",
                   t, "", "");
        }
        fputs("\ncon ::= (\" \"? \"<|constrain|>\" [a-z]{1,16})?\n", b->f);
        if (!lazy) fputs("hstart ::= (\"<|start|>assistant\")?\n", b->f);
        return;
    }
    if (fd->kind == F_FV32) {
        /* the first recipient is written right after the prompt's ">>>", later ones after ">>>" */
        if (lazy) fprintf(b->f, "body ::= \">>>\" call%s\n", multi ? " (w \">>>\" call)*" : "");
        else fprintf(b->f, "body ::= call%s\n", multi ? " (w \">>>\" call)*" : "");
        return;
    }
    if (fd->kind == F_LLAMA3) {
        bool py = llama_builtins(b);
        fprintf(b->f, "body ::= (\"<|python_tag|>\" w)? call%s\n", py ? " | \"<|python_tag|>\" w pycall" : "");
        return;
    }
    fprintf(b->f, "body ::= %s call", fd->open);
    if (multi) fprintf(b->f, " (%s call)*", fd->sep);
    fprintf(b->f, " %s\n", fd->close);
}

/* Whether the prompt ends with marker, white space aside (of both). */
static bool prompt_ends_with(const char *prompt, const char *marker) {
    if (!prompt || !marker) return false;
    size_t n = strlen(prompt), k = strlen(marker);
    while (n && strchr(" \t\r\n", prompt[n - 1])) n--;
    while (k && strchr(" \t\r\n", marker[k - 1])) k--;
    return n >= k && memcmp(prompt + n - k, marker, k) == 0;
}

/* Whether the prompt leaves the format's reasoning block open. */
static bool prompt_opens_think(const kn_tc_format *f, const char *prompt) {
    return prompt_ends_with(prompt, f->think[0].open);
}

/* The rule "root". */
static bool root_rule(gb *b, const kiln_tool_grammar_params *p) {
    const bool lazy = p->choice == KILN_TOOL_CHOICE_AUTO;
    const char *topen = b->tf->think[0].open, *tclose = b->tf->think[0].close;
    if (b->fd->kind == F_HARMONY) {
        if (lazy) fputs("root ::= body wt\n", b->f);
        else {
            int u = until(b, "<|end|>");
            fprintf(b->f, "root ::= (\"<|channel|>analysis<|message|>\" u%d-0 \"<|start|>assistant\")? hstart body\n",
                    u);
        }
        return true;
    }
    if (lazy) {
        int u = tclose ? until(b, tclose) : -1;
        if (u >= 0) fprintf(b->f, "root ::= body wt (u%d-0 w body wt)?\n", u);
        else fputs("root ::= body wt\n", b->f);
        return true;
    }
    /* a reasoning block only where the model thinks: the prompt opened it, or the template writes
     * the markers and the prompt did not close the block already (thinking disabled) */
    const bool open = prompt_opens_think(b->tf, p->prompt);
    if (!topen ||
        (!open && (!p->chat_template || !strstr(p->chat_template, topen) || prompt_ends_with(p->prompt, tclose)))) {
        fputs("root ::= body\n", b->f);
        return true;
    }
    int u = until(b, tclose);
    if (u < 0) return false;
    if (open) fprintf(b->f, "root ::= u%d-0 w body\n", u);
    else {
        fputs("root ::= (", b->f);
        lit(b->f, topen);
        fprintf(b->f, " u%d-0 w)? body\n", u);
    }
    return true;
}

/* ---- public ------------------------------------------------------------------------------------------ */

kiln_tool_grammar_params kiln_tool_grammar_default_params(void) {
    return (kiln_tool_grammar_params){.choice = KILN_TOOL_CHOICE_AUTO, .parallel = true};
}

/* The function object of tools[i] (either shape), or NULL. */
static json_t *function_of(json_t *e) {
    json_t *fn = json_object_get(e, "function");
    return json_is_object(fn) ? fn : json_is_object(e) && json_object_get(e, "name") ? e : NULL;
}

kiln_status kiln_tool_grammar(const kiln_tool_grammar_params *params, kiln_grammar **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!params || !params->format || !params->tools)
        return kn_error(KILN_ERR_INVALID_ARG, "a tool grammar needs a format and tools");
    const kn_tc_format *tf = kn_tc_format_find(params->format);
    if (!tf) return kn_error(KILN_ERR_INVALID_ARG, "unknown tool-call format '%s'", params->format);
    const fdesc *fd = NULL;
    for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++)
        if (strcmp(FORMATS[i].name, tf->name) == 0) fd = &FORMATS[i];
    if (!fd)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "kiln has no tool-call grammar for the format %s (see docs/tool-calls.md)", tf->name);
    if (params->choice == KILN_TOOL_CHOICE_NAMED && !params->name)
        return kn_error(KILN_ERR_INVALID_ARG, "a named tool choice needs the function's name");
    json_error_t jerr;
    json_t *tools = kn_json_loads(params->tools, JSON_REJECT_DUPLICATES, &jerr);
    if (!tools && kn_json_status(&jerr, KILN_OK)) return kn_error(KILN_ERR_NOMEM, "out of memory");
    if (!json_is_array(tools) || !json_array_size(tools)) {
        json_decref(tools);
        return kn_error(KILN_ERR_INVALID_ARG, "tools: a non-empty JSON array of functions is required");
    }
    gb b = {.fd = fd, .tf = tf};
    kiln_status st = KILN_OK;
    const unsigned mark = kn_json_mark(); /* values built below (a schema alone, a list of choices) */
    for (size_t i = 0; i < json_array_size(tools) && !st; i++) {
        json_t *fn = function_of(json_array_get(tools, i));
        json_t *name = json_object_get(fn, "name");
        const char *nm = json_string_value(name);
        bool ok = nm && *nm && strlen(nm) <= 64;
        for (const char *c = nm; ok && *c; c++)
            ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
                 *c == '-' || *c == '.';
        if (!ok)
            st =
                kn_error(KILN_ERR_INVALID_ARG, "tools[%zu].function.name: 1 to 64 letters, digits, '_', '-' or '.'", i);
        else if (params->choice != KILN_TOOL_CHOICE_NAMED || strcmp(nm, params->name) == 0) {
            json_t *ps = json_object_get(fn, "parameters");
            if (ps && !json_is_null(ps) && !json_is_object(ps))
                st = kn_error(KILN_ERR_INVALID_ARG, "tools[%zu].function.parameters: not a JSON Schema object", i);
            else if (b.n == KN_TC_MAX_CALLS)
                st = kn_error(KILN_ERR_INVALID_ARG, "tools: more than %d functions", KN_TC_MAX_CALLS);
            else {
                b.fns[b.n] = fn;
                b.idx[b.n++] = i;
            }
        }
    }
    if (!st && !b.n)
        st = kn_error(KILN_ERR_INVALID_ARG, "tool_choice names the function '%s', which tools do not declare",
                      params->name);
    char *text = NULL;
    size_t len = 0;
    if (!st && !(b.f = open_memstream(&text, &len))) st = kn_error(KILN_ERR_NOMEM, "out of memory");
    if (!st) {
        const bool lazy = params->choice == KILN_TOOL_CHOICE_AUTO;
        /* white space between markup: little of it, so that a weak model does not wander */
        fputs("w ::= \" \"? (\"\\n\" \"\\n\"? [ \\t]{0,8})?\nwt ::= [ \\t\\r\\n]{0,64}\ns ::= \" \"?\n", b.f);
        for (size_t t = 0; t < b.n && !b.st; t++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "t%zu-", b.idx[t]);
            if (fd->kind == F_XML) xml_params(&b, t);
            else
                schema_rules(&b, b.idx[t], json_object_get(b.fns[t], "parameters"),
                             json_is_true(json_object_get(b.fns[t], "strict")), prefix, "");
        }
        if (!b.st) {
            if (fd->call) call_rule(&b);
            body_rule(&b, params->parallel, lazy);
            if (!root_rule(&b, params)) b.st = kn_error(KILN_ERR_INTERNAL, "bad reasoning markers");
        }
        st = b.st;
        if (fclose(b.f) && !st) st = kn_error(KILN_ERR_NOMEM, "out of memory");
        if (!st && kn_json_failed_since(mark)) st = kn_error(KILN_ERR_NOMEM, "out of memory");
        if (!st) {
            const char *trig[4];
            size_t nt = 0;
            for (; nt < 3 && fd->trig[nt]; nt++) trig[nt] = fd->trig[nt];
            /* generated text: the GBNF compiler's cap on program size bounds it, not the cap on a
             * client's grammar text (the XML-like formats write one schema's rules per parameter) */
            st = kn_gbnf_compile_ex(text, len, KN_GBNF_GENERATED, out);
            if (!st && ((lazy && (st = kn_grammar_set_triggers(*out, trig, nt))) ||
                        (st = kn_grammar_set_approx(*out, b.approx)))) {
                kiln_grammar_free(*out);
                *out = NULL;
            }
            if (st && st != KILN_ERR_NOMEM) {
                char cause[KN_ERRMSG_MAX];
                snprintf(cause, sizeof cause, "%s", kn_error_msg());
                st = kn_error(st, "the tool-call grammar does not compile: %s", cause);
            }
        }
    }
    free(text);
    json_decref(tools);
    return st;
}

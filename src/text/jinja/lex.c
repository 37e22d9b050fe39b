/*
 * lex.c - the Jinja2 lexer: source text -> tokens.
 *
 * The source is first normalized as Jinja2 does (\r\n and \r become \n; one trailing newline is
 * dropped since keep_trailing_newline is off). The lexer then alternates between data and tags:
 *   {{ ... }}  an expression to print      {% ... %}  a statement      {# ... #}  a comment
 * and applies Hugging Face's whitespace settings exactly as Jinja2's lexer does:
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it;
 *   - lstrip_blocks: before a "{%" or "{#" tag (not "{{"), the spaces and tabs (any whitespace)
 *     between the start of the line and the tag are removed, unless the tag is written "{%+";
 *     "start of the line" also holds right after a tag whose match ended with a newline;
 *   - trim_blocks: the first newline after "%}" or "#}" is removed (not after "}}"; "+%}" keeps it).
 * "{% raw %}...{% endraw %}" becomes data. Inside tags, brackets are balanced so that "}}" in
 * "{{ {'a': {'b': 1}} }}" does not end the tag early. Each token keeps its byte offset for error
 * positions ("line L, column C").
 */
#include "text/jinja/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *kn_jlex_normalize(const char *src, size_t len, size_t *out_len) {
    char *o = malloc(len + 1);
    if (!o) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            o[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            o[n++] = src[i];
        }
    }
    if (n > 0 && o[n - 1] == '\n') n--;
    o[n] = '\0';
    *out_len = n;
    return o;
}

void kn_jlinecol(const char *src, size_t len, size_t off, unsigned *line, unsigned *col) {
    unsigned l = 1, c = 1;
    if (off > len) off = len;
    for (size_t i = 0; i < off;) {
        if (src[i] == '\n') {
            l++;
            c = 1;
            i++;
            continue;
        }
        i = kn_ju_next(src, len, i);
        c++;
    }
    *line = l;
    *col = c;
}

typedef struct lexer {
    const char *s;
    size_t n;
    size_t pos;
    bool line_starting; /* the previous match ended with a newline */
    bool prev_dot;      /* the previous token was "." (digits after it are an integer) */
    kn_jtoks *out;
    uint8_t brackets[KN_JINJA_MAX_PARSE_DEPTH];
    int depth;
} lexer;

static kiln_status lex_error(const lexer *L, size_t off, const char *what) {
    unsigned line, col;
    kn_jlinecol(L->s, L->n, off, &line, &col);
    return kn_error(KILN_ERR_FORMAT, "line %u, column %u: %s", line, col, what);
}

/* Appends a token. */
static kiln_status emit(lexer *L, uint8_t type, uint8_t op, size_t off, size_t len) {
    kn_jtoks *t = L->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        kn_jtok *v = realloc(t->v, cap * sizeof *v);
        if (!v) return kn_error(KILN_ERR_NOMEM, "out of memory while reading the template");
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = (kn_jtok){type, op, 0, (uint32_t)off, (uint32_t)len};
    return KILN_OK;
}

/* Length of the whitespace character (Python \s) at i, 0 if none. */
static size_t ws_at(const lexer *L, size_t i) {
    if (i >= L->n) return 0;
    unsigned char c = (unsigned char)L->s[i];
    if (c < 0x80) return kn_ju_isspace(c) ? 1 : 0;
    size_t adv;
    uint32_t cp = kn_ju_cp(L->s, L->n, i, &adv);
    return kn_ju_isspace(cp) ? adv : 0;
}

/* First non-whitespace position at or after i. */
static size_t skip_ws(const lexer *L, size_t i) {
    size_t k;
    while ((k = ws_at(L, i)) > 0) i += k;
    return i;
}

/* End of s[a..b) once trailing whitespace is removed (Python str.rstrip()). */
static size_t rstrip_ws(const lexer *L, size_t a, size_t b) {
    size_t end = a;
    for (size_t i = a; i < b;) {
        size_t k = ws_at(L, i);
        if (k) {
            i += k;
            continue;
        }
        i = kn_ju_next(L->s, L->n, i);
        end = i;
    }
    return end;
}

static bool starts(const lexer *L, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return i + k <= L->n && memcmp(L->s + i, lit, k) == 0;
}

/* Emits the data s[a..b) before a tag whose modifier is mod ('-', '+' or 0), applying "-" and
 * lstrip_blocks (block and comment tags only). */
static kiln_status emit_data_before_tag(lexer *L, size_t a, size_t b, char mod, bool lstrip_ok, bool raw) {
    if (mod == '-') {
        b = rstrip_ws(L, a, b);
    } else if (mod != '+' && lstrip_ok) {
        size_t l = a;
        bool nl = false;
        for (size_t i = b; i > a; i--) {
            if (L->s[i - 1] == '\n') {
                l = i;
                nl = true;
                break;
            }
        }
        if ((nl || L->line_starting) && l < b && skip_ws(L, l) >= b) b = l;
    }
    if (b > a) {
        kiln_status st = emit(L, KN_T_DATA, 0, a, b - a);
        if (st) return st;
        if (raw) L->out->v[L->out->n - 1].raw = 1;
    }
    return KILN_OK;
}

/* After "-%}" (and "-}}", "-#}") all whitespace goes; after "%}" / "#}" one newline. Sets
 * line_starting from the last consumed character. */
static void after_tag_end(lexer *L, size_t end, char mode) {
    if (mode == '-') end = skip_ws(L, end);
    else if (mode == 't' && end < L->n && L->s[end] == '\n') end++;
    L->line_starting = end > 0 && L->s[end - 1] == '\n';
    L->pos = end;
}

/* Whether "{%" at t starts "{% raw %}"; sets *body (first byte of the raw text) and *mode. */
static bool raw_begin(const lexer *L, size_t t, size_t *body, char *mode) {
    size_t i = t + 2;
    if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) i++;
    i = skip_ws(L, i);
    if (!starts(L, i, "raw")) return false;
    i = skip_ws(L, i + 3);
    if (starts(L, i, "-%}")) {
        *body = i + 3;
        *mode = '-';
        return true;
    }
    if (starts(L, i, "%}")) {
        *body = i + 2;
        *mode = 0;
        return true;
    }
    return false;
}

/* Lexes a raw block whose text starts at body. */
static kiln_status lex_raw(lexer *L, size_t tag, size_t body) {
    for (size_t k = body; k + 1 < L->n; k++) {
        if (L->s[k] != '{' || L->s[k + 1] != '%') continue;
        size_t i = k + 2;
        char mod = 0;
        if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) mod = L->s[i++];
        i = skip_ws(L, i);
        if (!starts(L, i, "endraw")) continue;
        i = skip_ws(L, i + 6);
        char mode;
        if (starts(L, i, "+%}")) {
            mode = '+';
            i += 3;
        } else if (starts(L, i, "-%}")) {
            mode = '-';
            i += 3;
        } else if (starts(L, i, "%}")) {
            mode = 't';
            i += 2;
        } else continue;
        kiln_status st = emit_data_before_tag(L, body, k, mod, true, true);
        if (st) return st;
        after_tag_end(L, i, mode);
        return KILN_OK;
    }
    return lex_error(L, tag, "missing end of raw directive");
}

/* Lexes a comment; the text after "{#" (and its modifier) starts at p. */
static kiln_status lex_comment(lexer *L, size_t tag, size_t p) {
    for (size_t e = p; e + 1 < L->n; e++) {
        if (L->s[e] != '#' || L->s[e + 1] != '}') continue;
        char mode = 't';
        if (e > p && L->s[e - 1] == '-') mode = '-';
        else if (e > p && L->s[e - 1] == '+') mode = '+';
        after_tag_end(L, e + 2, mode);
        return KILN_OK;
    }
    return lex_error(L, tag, "missing end of comment tag");
}

/* End of a run of digits of base at i, with single underscores between digits. */
static size_t scan_digits(const lexer *L, size_t i, int base) {
    /* digits with single underscores between them */
    size_t start = i;
    for (;;) {
        if (i >= L->n) break;
        char c = L->s[i];
        bool ok = base == 16  ? ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))
                  : base == 8 ? (c >= '0' && c <= '7')
                  : base == 2 ? (c == '0' || c == '1')
                              : (c >= '0' && c <= '9');
        if (ok) {
            i++;
            continue;
        }
        if (c == '_' && i > start && i + 1 < L->n) {
            char d = L->s[i + 1];
            bool ok2 = base == 16  ? ((d >= '0' && d <= '9') || (d >= 'a' && d <= 'f') || (d >= 'A' && d <= 'F'))
                       : base == 8 ? (d >= '0' && d <= '7')
                       : base == 2 ? (d == '0' || d == '1')
                                   : (d >= '0' && d <= '9');
            if (ok2) {
                i++;
                continue;
            }
        }
        break;
    }
    return i;
}

/* A number token at i: float (digits with "." digits and/or an exponent) or integer (decimal,
 * 0x, 0o, 0b). Returns its end and whether it is a float. */
static size_t lex_number(const lexer *L, size_t i, bool *is_float) {
    *is_float = false;
    if (!L->prev_dot) {
        size_t j = scan_digits(L, i, 10);
        size_t k = j;
        bool frac = false;
        if (k + 1 < L->n && L->s[k] == '.' && L->s[k + 1] >= '0' && L->s[k + 1] <= '9') {
            k = scan_digits(L, k + 1, 10);
            frac = true;
        }
        size_t e = k;
        if (e < L->n && (L->s[e] == 'e' || L->s[e] == 'E')) {
            size_t x = e + 1;
            if (x < L->n && (L->s[x] == '+' || L->s[x] == '-')) x++;
            if (x < L->n && L->s[x] >= '0' && L->s[x] <= '9') {
                *is_float = true;
                return scan_digits(L, x, 10);
            }
        }
        if (frac) {
            *is_float = true;
            return k;
        }
    }
    if (L->s[i] == '0' && i + 2 < L->n) {
        char p = L->s[i + 1];
        int base = (p == 'x' || p == 'X') ? 16 : (p == 'o' || p == 'O') ? 8 : (p == 'b' || p == 'B') ? 2 : 0;
        if (base) {
            size_t j = i + 2;
            if (j < L->n && L->s[j] == '_') j++;
            size_t k = scan_digits(L, j, base);
            if (k > j) return k;
        }
    }
    if (L->s[i] == '0') {
        /* 0(_?0)* */
        size_t j = i + 1;
        while (j < L->n && (L->s[j] == '0' || (L->s[j] == '_' && j + 1 < L->n && L->s[j + 1] == '0'))) j++;
        return j;
    }
    return scan_digits(L, i, 10);
}

static const struct {
    const char *s;
    uint8_t op;
} ops[] = {
    {"//", KN_TO_FLOORDIV}, {"**", KN_TO_POW},   {"==", KN_TO_EQ},      {"!=", KN_TO_NE},      {">=", KN_TO_GE},
    {"<=", KN_TO_LE},       {"+", KN_TO_ADD},    {"-", KN_TO_SUB},      {"/", KN_TO_DIV},      {"*", KN_TO_MUL},
    {"%", KN_TO_MOD},       {"~", KN_TO_TILDE},  {"[", KN_TO_LBRACKET}, {"]", KN_TO_RBRACKET}, {"(", KN_TO_LPAREN},
    {")", KN_TO_RPAREN},    {"{", KN_TO_LBRACE}, {"}", KN_TO_RBRACE},   {">", KN_TO_GT},       {"<", KN_TO_LT},
    {"=", KN_TO_ASSIGN},    {".", KN_TO_DOT},    {":", KN_TO_COLON},    {"|", KN_TO_PIPE},     {",", KN_TO_COMMA},
    {";", KN_TO_SEMICOLON},
};

/* Lexes the inside of a "{{" (block = false) or "{%" tag from p up to and including its end. */
static kiln_status lex_tag(lexer *L, size_t tag, size_t p, bool block) {
    kiln_status st = emit(L, block ? KN_T_BLOCK_BEGIN : KN_T_VAR_BEGIN, 0, tag, p - tag);
    if (st) return st;
    L->depth = 0;
    L->prev_dot = false;
    size_t i = p;
    for (;;) {
        i = skip_ws(L, i);
        if (i >= L->n)
            return lex_error(L, tag,
                             block ? "unexpected end of template: unclosed '{%'"
                                   : "unexpected end of template: unclosed '{{'");
        if (L->depth == 0) {
            if (block) {
                char mode = 0;
                size_t e = 0;
                if (starts(L, i, "-%}")) {
                    mode = '-';
                    e = i + 3;
                } else if (starts(L, i, "+%}")) {
                    mode = '+';
                    e = i + 3;
                } else if (starts(L, i, "%}")) {
                    mode = 't';
                    e = i + 2;
                }
                if (mode) {
                    if ((st = emit(L, KN_T_BLOCK_END, 0, i, e - i))) return st;
                    after_tag_end(L, e, mode);
                    return KILN_OK;
                }
            } else {
                char mode = 0;
                size_t e = 0;
                if (starts(L, i, "-}}")) {
                    mode = '-';
                    e = i + 3;
                } else if (starts(L, i, "}}")) {
                    mode = 'v';
                    e = i + 2;
                }
                if (mode) {
                    if ((st = emit(L, KN_T_VAR_END, 0, i, e - i))) return st;
                    after_tag_end(L, e, mode);
                    return KILN_OK;
                }
            }
        }
        char c = L->s[i];
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < L->n && L->s[j] != c) j += (L->s[j] == '\\' && j + 1 < L->n) ? 2 : 1;
            if (j >= L->n) return lex_error(L, i, "unterminated string");
            if ((st = emit(L, KN_T_STRING, 0, i, j + 1 - i))) return st;
            L->prev_dot = false;
            i = j + 1;
            continue;
        }
        if (c >= '0' && c <= '9') {
            bool fl;
            size_t j = lex_number(L, i, &fl);
            if ((st = emit(L, fl ? KN_T_FLOAT : KN_T_INT, 0, i, j - i))) return st;
            L->prev_dot = false;
            i = j;
            continue;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = i + 1;
            while (j < L->n && ((L->s[j] >= 'a' && L->s[j] <= 'z') || (L->s[j] >= 'A' && L->s[j] <= 'Z') ||
                                (L->s[j] >= '0' && L->s[j] <= '9') || L->s[j] == '_'))
                j++;
            if ((st = emit(L, KN_T_NAME, 0, i, j - i))) return st;
            L->prev_dot = false;
            i = j;
            continue;
        }
        size_t k;
        for (k = 0; k < KN_ARRAY_LEN(ops); k++)
            if (starts(L, i, ops[k].s)) break;
        if (k == KN_ARRAY_LEN(ops)) {
            char what[64];
            if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
                snprintf(what, sizeof what, "unexpected char '%c'", c);
            else snprintf(what, sizeof what, "unexpected char (byte 0x%02x)", (unsigned char)c);
            return lex_error(L, i, what);
        }
        uint8_t op = ops[k].op;
        if (op == KN_TO_LPAREN || op == KN_TO_LBRACKET || op == KN_TO_LBRACE) {
            if (L->depth >= KN_JINJA_MAX_PARSE_DEPTH) return lex_error(L, i, "brackets nested too deeply");
            L->brackets[L->depth++] = op;
        } else if (op == KN_TO_RPAREN || op == KN_TO_RBRACKET || op == KN_TO_RBRACE) {
            uint8_t want = op == KN_TO_RPAREN ? KN_TO_LPAREN : op == KN_TO_RBRACKET ? KN_TO_LBRACKET : KN_TO_LBRACE;
            if (L->depth == 0) {
                char what[32];
                snprintf(what, sizeof what, "unexpected '%c'", c);
                return lex_error(L, i, what);
            }
            if (L->brackets[L->depth - 1] != want) {
                uint8_t o = L->brackets[L->depth - 1];
                char what[48];
                snprintf(what, sizeof what, "unexpected '%c', expected '%c'", c,
                         o == KN_TO_LPAREN     ? ')'
                         : o == KN_TO_LBRACKET ? ']'
                                               : '}');
                return lex_error(L, i, what);
            }
            L->depth--;
        }
        if ((st = emit(L, KN_T_OP, op, i, strlen(ops[k].s)))) return st;
        L->prev_dot = op == KN_TO_DOT;
        i += strlen(ops[k].s);
    }
}

kiln_status kn_jlex(const char *src, size_t len, kn_jtoks *out) {
    lexer L = {.s = src, .n = len, .pos = 0, .line_starting = true, .out = out};
    kiln_status st;
    while (L.pos < L.n) {
        /* the next tag start */
        size_t t = L.pos;
        const char *hit = NULL;
        while (t < L.n) {
            hit = memchr(src + t, '{', L.n - t);
            if (!hit) break;
            t = (size_t)(hit - src);
            if (t + 1 < L.n && (src[t + 1] == '{' || src[t + 1] == '%' || src[t + 1] == '#')) break;
            t++;
            hit = NULL;
        }
        if (!hit) {
            if ((st = emit(&L, KN_T_DATA, 0, L.pos, L.n - L.pos))) return st;
            L.pos = L.n;
            break;
        }
        char kind = src[t + 1];
        char mod = 0;
        if (t + 2 < L.n && (src[t + 2] == '-' || src[t + 2] == '+')) mod = src[t + 2];
        size_t body;
        char rmode;
        if (kind == '%' && raw_begin(&L, t, &body, &rmode)) {
            if ((st = emit_data_before_tag(&L, L.pos, t, mod, true, false))) return st;
            size_t b = body;
            if (rmode == '-') b = skip_ws(&L, b);
            L.line_starting = b > 0 && src[b - 1] == '\n';
            if ((st = lex_raw(&L, t, b))) return st;
            continue;
        }
        if ((st = emit_data_before_tag(&L, L.pos, t, mod, kind != '{', false))) return st;
        size_t p = t + 2 + (mod ? 1 : 0);
        if (kind == '#') st = lex_comment(&L, t, p);
        else st = lex_tag(&L, t, p, kind == '%');
        if (st) return st;
    }
    return emit(&L, KN_T_EOF, 0, L.n, 0);
}

/*
 * toolcall.h - the tool-call and reasoning parser (kiln_chat_parser in kiln.h): the internal contract
 * between its parts.
 *
 * A model's reply is text that mixes an answer, thinking ("reasoning") and tool calls written in
 * the markup of the model's family (<tool_call>{json}</tool_call>, [TOOL_CALLS]name[ARGS]{...},
 * harmony channels, ...). The parser reads that text incrementally, as the model produces it, and
 * turns it into an OpenAI message: content, reasoning_content and tool_calls. It decides every
 * byte once and never takes output back, so what it has released (the deltas) is final:
 *   - text that might be the start of markup is held back until it is known (like stop strings);
 *   - a tool call is released once its name is known (and its id, for formats that write one),
 *     then its arguments stream as JSON fragments whose concatenation is the final arguments.
 *
 * The parts, one concept per file:
 *   toolcall.c          the parser handle and public API: input, output, deltas, the final message
 *   toolcall_scan.c     the driver: content and reasoning text, markers, held-back text, openers
 *   toolcall_formats.c  the format table and the detection of a format from a chat template
 *   toolcall_json.c     calls written as JSON objects (Hermes, Mistral Nemo, Command R7B, generic...)
 *   toolcall_named.c    calls written as a name header then JSON arguments (DeepSeek, Kimi, Mistral,
 *                       Functionary), and Functionary v3.2's recipient lines
 *   toolcall_xml.c      calls with XML-like parameters (Qwen3-Coder, MiniMax, DeepSeek V3.2, GLM)
 *   toolcall_py.c       calls as Python-like expressions (LFM2, Llama 3.x built-ins) and Gemma 4's
 *   toolcall_harmony.c  gpt-oss harmony channels
 *   toolcall_util.c     the growable buffers, JSON string escaping, regexes, value conversion
 *
 * Formats are rows of one table (toolcall_formats.c): reasoning markers, markers to drop, the
 * "openers" (regexes that start a tool-call block) and the family whose code reads the block. A
 * family is a pair of functions (begin, step) working on the parser's input at p->pos.
 */
#ifndef KN_TOOLCALL_H
#define KN_TOOLCALL_H

#include "base/base.h"

#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>

/* Limits (beyond one: KILN_ERR_INVALID_ARG from feed, or the call ends where the limit hit). */
#define KN_TC_MAX_INPUT  (64u << 20) /* bytes of reply text a parser accepts */
#define KN_TC_MAX_NAME   256         /* bytes of a function name, a parameter name, a JSON key */
#define KN_TC_MAX_ID     128         /* bytes of a tool-call id */
#define KN_TC_MAX_CALLS  1024        /* tool calls per reply */
#define KN_TC_MAX_VALUE  (4u << 20)  /* bytes of one argument value that must be seen whole */
#define KN_TC_MAX_DEPTH  128         /* nesting of a JSON or Python value */
#define KN_TC_MAX_HEADER 512         /* bytes of a call header or harmony message header */

/* ---- growable byte buffers ------------------------------------------------------------------- */

typedef struct kn_tcbuf {
    char *p; /* NUL-terminated when non-NULL */
    size_t n, cap;
} kn_tcbuf;

bool kn_tcbuf_add(kn_tcbuf *b, const char *s, size_t n);
/* The allocation failures kn_tcbuf_add met in this thread: kn_tc_scan fails the parser when a step met
 * one, whatever the step made of it (a reader that took it for "no value here" turns a call into
 * content). */
extern _Thread_local unsigned long kn_tcbuf_nomem;
static inline bool kn_tcbuf_addc(kn_tcbuf *b, char c) { return kn_tcbuf_add(b, &c, 1); }
static inline bool kn_tcbuf_adds(kn_tcbuf *b, const char *s) { return kn_tcbuf_add(b, s, strlen(s)); }
/* Appends s[n] as the body of a JSON string (escaped, no quotes). */
bool kn_tcbuf_add_jstr(kn_tcbuf *b, const char *s, size_t n);
void kn_tcbuf_free(kn_tcbuf *b);

/* ---- formats --------------------------------------------------------------------------------- */

typedef struct kn_tcp kn_tcp;

/* Result of one step of reading. */
typedef enum kn_tc_step {
    KN_TC_NEED = 0, /* more input is needed to decide (never returned once the input has ended) */
    KN_TC_MORE,     /* progress was made; step again */
    KN_TC_DONE,     /* the block ended: back to content */
} kn_tc_step;

typedef struct kn_tc_family kn_tc_family;

/* A tool-call opener: where a block of calls starts in content. */
typedef struct kn_tc_opener {
    const char *re;          /* PCRE2 pattern; "%TOOLS%" stands for the alternation of the declared tool
                                names. Named group "name" captures a function name, "id" a call id; the
                                block's reader starts at the start of group "body" when it matched, else at
                                the end of the match. */
    const kn_tc_family *fam; /* the reader of the block; NULL: the format's family */
    const void *cfg;         /* that reader's description; NULL: the format's cfg */
    uint8_t kind;            /* which reading of the family this opener starts (family-specific) */
    uint8_t flags;           /* KN_OP_* */
    const char *close;       /* literal that ends the block (may be NULL), family-specific use */
} kn_tc_opener;

enum {
    KN_OP_START = 1,  /* only at the start of the reply's content (no content or call before it) */
    KN_OP_TOOLS = 2,  /* only when tools are declared ("%TOOLS%" needs them) */
    KN_OP_ALWAYS = 4, /* also when tool calls are not parsed (harmony's channels) */
};

struct kn_tc_family {
    const char *name;
    /* An opener matched at [ms, me) (its named groups can be read with kn_tc_group(p, re, ...)
     * until the next match). p->pos is me; p->blk is cleared with its opener, kind, fam and cfg
     * set. Sets up the block's state and p->pos. */
    void (*begin)(kn_tcp *p, const pcre2_code *re, size_t ms, size_t me);
    /* Reads the block from p->pos (see kn_tc_step). */
    kn_tc_step (*step)(kn_tcp *p);
};

/* A pair of reasoning markers: text between them is reasoning. */
typedef struct kn_tc_think {
    const char *open, *close;
} kn_tc_think;

#define KN_TC_MAX_OPENERS 8
#define KN_TC_MAX_THINK   2
#define KN_TC_MAX_STRIP   6
#define KN_TC_MAX_FRE     6

typedef struct kn_tc_format {
    const char *name;   /* kiln's name, e.g. "hermes" (the --tool-format value) */
    const char *models; /* one line: the model families that write it */
    kn_tc_think think[KN_TC_MAX_THINK];
    const char *strip[KN_TC_MAX_STRIP]; /* markers dropped from content wherever they appear */
    kn_tc_opener open[KN_TC_MAX_OPENERS];
    const kn_tc_family *family;     /* NULL: content and reasoning only */
    const void *cfg;                /* the family's description of this format */
    const char *fre[KN_TC_MAX_FRE]; /* the family's own patterns (call headers inside a block...),
                                       compiled once per parser into p->fre */
    uint16_t flags;                 /* KN_FMT_* */
} kn_tc_format;

enum {
    KN_FMT_CALL_ENDS_THINK = 1, /* a tool-call opener inside reasoning ends the reasoning */
    KN_FMT_ID9 = 2,             /* generated ids are 9 alphanumerics (Mistral's templates need them) */
    KN_FMT_RECIPIENT = 4,       /* the reply starts with a recipient line (Functionary v3.2) */
    KN_FMT_HARMONY = 8,         /* the reply starts inside a harmony message header (gpt-oss) */
};

/* The table. kn_tc_format_find: by name (case-insensitive, also a few aliases), or NULL. */
extern const kn_tc_format kn_tc_formats[];
extern const size_t kn_tc_n_formats;
const kn_tc_format *kn_tc_format_find(const char *name);
/* The format a chat template's text writes (never NULL: "generic" when nothing matches). */
const kn_tc_format *kn_tc_format_detect(const char *tmpl);

/* ---- the parser ------------------------------------------------------------------------------ */

typedef struct kn_tc_call {
    kn_tcbuf id, name, args;
    bool released; /* its first delta may be given (name and id are final) */
    bool closed;
} kn_tc_call;

typedef enum kn_tc_evkind { KN_EV_CONTENT, KN_EV_REASONING, KN_EV_CALL } kn_tc_evkind;

/* One pending delta: a range of content, of reasoning, or of a call's arguments. */
typedef struct kn_tc_event {
    uint8_t kind;
    bool first; /* a call's first delta (carries id and name) */
    int32_t call;
    size_t off, len;
} kn_tc_event;

/* Text states of the driver. */
typedef enum kn_tc_mode { KN_MODE_CONTENT, KN_MODE_THINK, KN_MODE_BLOCK } kn_tc_mode;

/* A compiled regex with its flags. */
typedef struct kn_re {
    pcre2_code *code;
    uint8_t flags, kind;
    int16_t index; /* the opener's index in the format, or a marker's index */
} kn_re;

/* A JSON value being streamed (kn_tc_json_value); all zero at the start of a value. */
typedef struct kn_tc_jv {
    int st, depth;
    bool in_str, esc;
    char stack[KN_TC_MAX_DEPTH];
} kn_tc_jv;

/* A JSON string being decoded as it streams (kn_tc_jstr_stream); all zero before its quote. */
typedef struct kn_tc_jdec {
    int st;     /* 0 before the opening quote, 1 inside, 2 after a backslash, 3 in \u digits */
    int ucount; /* hex digits of \u seen */
    uint32_t u, hi;
} kn_tc_jdec;

/* Where decoded or copied text goes: a call's arguments (call >= 0), a buffer, or the content. */
typedef struct kn_tc_sink {
    int32_t call;
    kn_tcbuf *buf;
    bool content;
} kn_tc_sink;

/* The state of the open block (one block is open at a time); the family owns its meaning. */
typedef struct kn_tc_block {
    const kn_tc_family *fam; /* the block's reader */
    const void *cfg;         /* its description of the format */
    int opener;              /* the opener's index in the format (-1: the reply started in the block) */
    int kind;                /* its kind */
    int st, ret;             /* family state; a state to return to */
    int role;                /* what the value being read means */
    int32_t call;            /* the call being read, -1 when none */
    int nparams;             /* parameters written to the call's arguments */
    bool is_string;          /* the current parameter value is a string */
    bool lead_done;          /* its leading newline was dealt with */
    bool flag;               /* family-specific */
    char quote;              /* the quote a Python string value started with */
    kn_tc_jv jv;
    kn_tc_jdec jd;
    kn_tcbuf key, val, aux, pend;
    char close[64];  /* a closer chosen at the opener (e.g. "</tool_call>") */
    char close2[16]; /* a second one (e.g. a code fence) */
} kn_tc_block;

struct kn_tcp {
    const kn_tc_format *fmt;
    kiln_reasoning_format rfmt;
    bool parse_calls;
    json_t *tools; /* the declared tools (an array, owned), or NULL */
    uint64_t id_seed;

    /* input */
    kn_tcbuf in;
    size_t pos;   /* first byte not yet decided */
    char utf8[8]; /* the start of a UTF-8 character that the next feed completes */
    size_t n_utf8;
    bool at_end; /* finish was called: no more input comes */

    /* driver state */
    kn_tc_mode mode;
    int think_pair;      /* the reasoning pair in effect (mode THINK) */
    bool think_started;  /* this reasoning block has released non-space text */
    kn_tcbuf think_ws;   /* trailing spaces of reasoning, held until more text follows */
    bool failed;         /* a limit was hit or memory ran out: input is ignored from there */
    kiln_status fail_st; /* why (feed and finish return it) */
    bool after_call;     /* a block of calls just ended: white space is dropped */
    kn_tc_block blk;

    /* compiled markers */
    kn_re *marks;
    size_t n_marks;
    pcre2_code *fre[KN_TC_MAX_FRE];
    pcre2_match_data *md;
    kn_tcbuf think_prefix; /* reasoning NONE with a thinking block the prompt opened: the prompt's
                             text from the marker on, to show before the block's first text */

    /* output: the message so far and the deltas not yet taken */
    kn_tcbuf content, reasoning;
    kn_tc_call *calls;
    size_t n_calls, cap_calls;
    kn_tc_event *ev;
    size_t n_ev, ev_head, cap_ev;
    kn_tcbuf delta_id, delta_name; /* the strings of the delta last returned */
    char errmsg[KN_ERRMSG_MAX];
};

/* Matching: runs re on the input from p->pos. anchored: at p->pos only. Returns 1 (full match,
 * *ms and *me set, absolute offsets), 0 (none), or -1 (a partial match at *ms: more input could make it
 * match; only while input may still come). */
int kn_tc_match(kn_tcp *p, const pcre2_code *re, bool anchored, size_t *ms, size_t *me);
/* The span of named group `name` of the last match: false when it did not take part. */
bool kn_tc_group(kn_tcp *p, const pcre2_code *re, const char *name, size_t *s, size_t *e);
/* Compiles pattern (with %TOOLS% expanded) into *out: KILN_ERR_NOMEM, or KILN_ERR_INTERNAL for a pattern
 * that does not compile, with the error recorded. */
kiln_status kn_tc_compile(kn_tcp *p, const char *pattern, pcre2_code **out);

/* Output, used by the driver and the families. Each returns false when out of memory or past a
 * limit (the parser then stops; feed reports it). */
bool kn_tc_emit_content(kn_tcp *p, const char *s, size_t n);
bool kn_tc_emit_reasoning(kn_tcp *p, const char *s, size_t n);
/* Starts a call named name[nn] with id[ni] (ni 0: the parser makes one unless id_later). A call
 * whose id may still follow (id_later) is released at kn_tc_call_id or kn_tc_call_end. Returns the
 * call's index, or -1: a name that is empty or has control characters is not a call (the reader
 * ends its block), or a limit or out of memory stopped the parser. */
int32_t kn_tc_call_begin(kn_tcp *p, const char *name, size_t nn, const char *id, size_t ni, bool id_later);
bool kn_tc_call_id(kn_tcp *p, int32_t call, const char *id, size_t ni);
bool kn_tc_call_args(kn_tcp *p, int32_t call, const char *s, size_t n);
void kn_tc_call_end(kn_tcp *p, int32_t call);
/* Opens a block read by fam with cfg (p->blk cleared, mode BLOCK). */
void kn_tc_block_reset(kn_tcp *p, const kn_tc_family *fam, const void *cfg);
/* Ends the open block: the current call (if any) is closed and the driver reads content again
 * from p->pos. Returns KN_TC_DONE. */
kn_tc_step kn_tc_block_end(kn_tcp *p);
/* Records a failure (out of memory, a limit) and stops the parser. Returns KN_TC_DONE. */
kn_tc_step kn_tc_fail(kn_tcp *p, kiln_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The driver (toolcall_scan.c): sets up the markers of p->fmt and the initial state from the
 * prompt, and advances over the input. */
kiln_status kn_tc_scan_init(kn_tcp *p, const char *prompt, bool thinking_open);
void kn_tc_scan_free(kn_tcp *p);
void kn_tc_scan(kn_tcp *p);

/* ---- reading helpers (toolcall_util.c) -------------------------------------------------------- */

/* The unread input. */
static inline const char *kn_tc_rest(const kn_tcp *p) { return p->in.p + p->pos; }
static inline size_t kn_tc_avail(const kn_tcp *p) { return p->in.n - p->pos; }
/* Skips spaces, tabs and newlines at p->pos. */
void kn_tc_skip_ws(kn_tcp *p);
/* At p->pos: 1 when lit follows (consumed), 0 when something else does, -1 when the input so far
 * is a proper prefix of lit (more input needed). */
int kn_tc_lit(kn_tcp *p, const char *lit);
/* kn_tc_lit after spaces; the spaces are consumed only with the literal. */
int kn_tc_ws_lit(kn_tcp *p, const char *lit);
/* The length of the longest suffix of s[n] that is a proper prefix of lit (text to hold back). */
size_t kn_tc_hold_len(const char *s, size_t n, const char *lit);
/* Reads a whole JSON string token at p->pos (after spaces) into out, decoded. 1: read (consumed);
 * 0: not a string or malformed or longer than cap; -1: incomplete. */
int kn_tc_read_jstring(kn_tcp *p, kn_tcbuf *out, size_t cap);
/* Reads a JSON scalar token (number, true, false, null) at p->pos into out (raw). Same results. */
int kn_tc_read_jscalar(kn_tcp *p, kn_tcbuf *out);

/* Streams one JSON value from p->pos into sink (minified: spaces outside strings are dropped; a
 * sink of all zero/NULL with call -1 discards), tracking nesting in *jv. Returns 1 when the value
 * is complete, 0 when the input stops being JSON (the value ends there), -1 when more input is
 * needed. */
int kn_tc_json_value(kn_tcp *p, kn_tc_jv *jv, kn_tc_sink sink);
/* Streams a JSON string token from p->pos (after spaces), decoded, into sink. Same results. */
int kn_tc_jstr_stream(kn_tcp *p, kn_tc_jdec *jd, kn_tc_sink sink);
/* Appends s[n] to sink. */
bool kn_tc_sink_add(kn_tcp *p, kn_tc_sink sink, const char *s, size_t n);

/* Whether schema s (inside the document root) admits only-or-also strings: type "string" or a type
 * list with "string" in it, an enum of strings, a string const, or such a schema in anyOf / oneOf /
 * allOf; local $refs looked through (kn_tc_deref). A schema that says none of these: false. */
bool kn_tc_schema_is_string(const json_t *root, const json_t *s);
/* kn_tc_schema_is_string of parameter key of tool name. Unknown tools and parameters: false. */
bool kn_tc_param_is_string(const kn_tcp *p, const char *tool, const char *key);
/* The schema s stands for in the document root: while s is an object whose "$ref" is a local JSON
 * pointer ("#", "#/$defs/Name", "#/properties/a/items", with ~0 / ~1 escapes), the value it points
 * to, up to 8 hops; s itself when it has no such $ref or the pointer does not resolve. */
const json_t *kn_tc_deref(const json_t *root, const json_t *s);
/* A copy of schema s able to stand alone inside the document root: when s is an object, root's definition
 * containers ("$defs", "definitions") are added where s has none, so that the local $refs of
 * generated schemas ("#/$defs/Name", as Pydantic writes them) still resolve. A new reference; NULL
 * when out of memory. Other pointers into root ("#/properties/...") do not resolve in the copy. */
json_t *kn_tc_schema_alone(const json_t *root, const json_t *s);
/* Appends value[n] to the call's arguments as a JSON value: a string when as_string, else the text
 * itself when it is valid JSON (trimmed), else a string. */
bool kn_tc_args_value(kn_tcp *p, int32_t call, const char *value, size_t n, bool as_string);

/* ---- families --------------------------------------------------------------------------------- */

/* JSON calls (toolcall_json.c). Opener kinds: one call object, an array of them, or the generic
 * envelope {"tool_calls": [...]} / {"tool_call": {...}} / {"response": "..."}. The opener's close
 * literal (or, for a matched group "tag" such as <tool_call>, its closing tag; for a group "fence",
 * a code fence) may follow the block. */
enum { KN_J_OBJECT = 0, KN_J_ARRAY, KN_J_ENVELOPE };
typedef struct kn_tc_json_cfg {
    const char *name_keys[3]; /* keys of the function name ("name", "tool_name") */
    const char *args_keys[3]; /* keys of the arguments ("arguments", "parameters") */
    const char *id_keys[3];   /* keys of the call id ("id", "tool_call_id") */
    bool name_is_key;         /* {"function_name": {arguments}} */
    bool id_later;            /* the id may follow the arguments: a call is released at its id or end */
} kn_tc_json_cfg;

/* Name-then-arguments calls (toolcall_named.c). Opener kinds: a call header (groups name, id)
 * followed by JSON arguments and the opener's close literal (or cfg close); a block of such calls
 * whose headers match fre[hdr] until block_close; Python code to the end as {"code": ...}. */
enum { KN_N_CALL = 0, KN_N_BLOCK, KN_N_CODE };
typedef struct kn_tc_named_cfg {
    int hdr;                 /* fre index of the header of a call inside a block */
    int close_re;            /* fre index of what ends a call (-1: close literal or nothing) */
    const char *close;       /* literal that ends a call (when close_re < 0), may be NULL */
    const char *block_close; /* literal that ends a block */
} kn_tc_named_cfg;

/* XML-parameter calls (toolcall_xml.c). Opener kinds: a block of invokes, or one invoke (the
 * opener is its header, with group name). */
enum { KN_X_BLOCK = 0, KN_X_INVOKE };
typedef struct kn_tc_xml_cfg {
    int invoke;               /* fre index of an invoke header, group name */
    const char *invoke_close; /* what ends an invoke's parameters */
    int param;                /* fre index of a parameter header: group key, optional group str
                                 ("true" / "false": the value is a string or JSON) */
    const char *param_close;  /* what ends a parameter value */
    const char *block_close;  /* what ends a block of invokes (NULL: one invoke per block) */
    bool trim_newline;        /* a value loses one leading and one trailing newline */
} kn_tc_xml_cfg;

/* Python-like calls (toolcall_py.c): a list [f(a=1), g()] or one name.call(a=1). */
enum { KN_P_LIST = 0, KN_P_DOTCALL };

extern const kn_tc_family kn_tc_fam_json, kn_tc_fam_named, kn_tc_fam_recipient, kn_tc_fam_xml, kn_tc_fam_py,
    kn_tc_fam_gemma, kn_tc_fam_harmony;

/* Harmony's reply starts inside a message header: the driver hands the whole reply to it. */
void kn_tc_harmony_start(kn_tcp *p);
/* Functionary v3.2's reply starts with a recipient line. */
void kn_tc_recipient_start(kn_tcp *p);

#endif

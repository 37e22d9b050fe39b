/*
 * jinja.h - kiln's Jinja2 interpreter for chat templates: the internal API that chat.c and the
 * tests use. The language is the subset real chat templates use (see src/text/jinja/parse.c for the
 * statements and expressions), rendered with the semantics of Hugging Face's apply_chat_template:
 * jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loop
 * controls, the globals raise_exception(msg) and strftime_now(fmt), and tojson as Python's
 * json.dumps(ensure_ascii=False). Values print the way Python prints them (1.0, True, None,
 * {'a': 1}), and undefined variables follow jinja2.Undefined.
 *
 * The implementation is split by concept:
 *   lex.c       source normalization, the lexer (tags, whitespace control, trim/lstrip_blocks)
 *   parse.c     tokens -> syntax tree, symbol interning, filter/test name resolution
 *   value.c     values (refcounted strings, lists, dicts...), Python str()/repr(), equality
 *   eval.c      the renderer: scopes, statements, expressions, macros, loops, limits
 *   ops.c       iteration, attribute/item access, slicing, operators (Python semantics)
 *   builtins.c  filters, and the argument binding every builtin uses
 *   predicates.c  tests (`x is defined`)
 *   globals.c   global functions (range, namespace, dict, raise_exception, strftime_now)
 *   methods.c   str / dict / list methods (s.split(), d.get(), ...)
 *   json.c      JSON context -> values (jansson) and tojson output
 * impl.h holds the declarations those files share.
 *
 * Hostile input is expected: templates and contexts are bounded in nesting depth, macro
 * recursion, loop iterations, evaluation steps, output size and value size; every failure is a
 * clean KILN_ERR_FORMAT with "line L, column C: ..." (never a crash, never output on stdout).
 * With these limits parsing and rendering use at most about 256 KiB of C stack (optimized build;
 * sanitizer builds need a few times more).
 */
#ifndef KN_JINJA_H
#define KN_JINJA_H

#include "base/base.h"

#include <jansson.h>

/* Limits (a template that reaches one fails with KILN_ERR_FORMAT). */
#define KN_JINJA_MAX_SOURCE      (16u << 20)    /* template bytes */
#define KN_JINJA_MAX_OUTPUT      (64u << 20)    /* bytes of output, and of any one string value */
#define KN_JINJA_MAX_PARSE_DEPTH 200            /* nesting of expressions and blocks in the source */
#define KN_JINJA_MAX_CALL_DEPTH  200            /* macro calls in progress */
#define KN_JINJA_MAX_EVAL_DEPTH  1500           /* nested evaluations in progress */
#define KN_JINJA_MAX_VALUE_DEPTH 512            /* nesting of lists and dicts in a value */
#define KN_JINJA_MAX_RANGE       100000         /* items of range(), as Jinja2's sandbox allows */
#define KN_JINJA_MAX_HELD        (256ull << 20) /* bytes of namespaces, macros and closed-over scopes */
/* Evaluation steps (nodes, loop iterations), and bytes copied while rendering (values made, output);
 * the fuzzing builds set less of both (Makefile: FUZZ_DEFS). */
#ifndef KN_JINJA_MAX_STEPS
#define KN_JINJA_MAX_STEPS 20000000ull
#endif
#ifndef KN_JINJA_MAX_WORK
#define KN_JINJA_MAX_WORK (512ull << 20)
#endif

typedef struct kn_jtmpl kn_jtmpl;

/* Parses a template (len bytes; NUL bytes allowed). On success *out owns the template, which is
 * immutable and may be rendered from several threads at once. Syntax errors: KILN_ERR_FORMAT with
 * "line L, column C: ..."; KILN_ERR_NOMEM. */
kiln_status kn_jinja_parse(const char *src, size_t len, kn_jtmpl **out);
void kn_jinja_free(kn_jtmpl *t);

/* Renders t with the keys of ctx (a JSON object, borrowed) as variables. On success *out is a
 * malloc'd NUL-terminated string (the caller frees it) of *out_len bytes. Template errors and
 * raise_exception: KILN_ERR_FORMAT with "line L, column C: ..."; a context nested too deeply or
 * holding a number kiln cannot represent: KILN_ERR_INVALID_ARG. */
kiln_status kn_jinja_render(const kn_jtmpl *t, const json_t *ctx, char **out, size_t *out_len);

#endif

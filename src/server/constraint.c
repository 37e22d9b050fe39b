/*
 * constraint.c - the output constraint of a chat or completions request, from its wire fields to
 * a compiled kiln_grammar.
 *
 * A request may constrain its output in one of four ways: OpenAI's response_format
 * {"type": "json_object"} (JSON mode: any JSON object) or {"type": "json_schema", "json_schema":
 * {"name", "schema", "strict"}}, llama-server's {"type": "json_object", "schema": {...}} and its
 * top-level "json_schema" (a schema) and "grammar" (GBNF text). {"type": "text"}, a null field and
 * an empty grammar mean no constraint. Every other shape is a 400 naming the field, and so is a
 * request that gives two constraints at once (nothing says which should win) and a schema or
 * grammar that does not compile: a constrained request never runs unconstrained.
 *
 * Compiled grammars are kept in a small process-wide cache keyed by (kind, strict, text), so a
 * client that sends the same schema with every request compiles it once. The cache holds at most
 * CACHE_ENTRIES grammars and CACHE_TEXT_MAX bytes of their texts, evicting the least recently
 * used; a grammar is shared read-only (the library allows that), and an entry in use by a request
 * stays alive after its eviction until the request lets go of it. Failures are not cached.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_ENTRIES  32
#define CACHE_TEXT_MAX ((size_t)8 << 20)

/* A compiled grammar and the text it came from. refs counts the requests holding it plus one for
 * the cache while it is listed; all fields but refs and used are immutable once made. */
struct srv_grammar {
    kiln_grammar *g;
    kiln_grammar_kind kind;
    bool strict;
    uint64_t hash;
    char *text; /* [len], the cache key */
    size_t len;
    int refs;      /* under cache.mu */
    uint64_t used; /* under cache.mu: the cache clock at the last lookup */
};

static struct {
    pthread_mutex_t mu;
    srv_grammar *e[CACHE_ENTRIES]; /* the first n are used */
    size_t n;
    size_t bytes; /* text bytes of the listed entries */
    uint64_t clock;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void grammar_destroy(srv_grammar *sg) {
    kiln_grammar_free(sg->g);
    free(sg->text);
    free(sg);
}

/* Drops one reference (cache.mu held); returns the entry when that was the last, for the caller
 * to destroy after unlocking. */
static srv_grammar *drop_locked(srv_grammar *sg) { return --sg->refs == 0 ? sg : NULL; }

void srv_grammar_release(srv_grammar *sg) {
    if (!sg) return;
    pthread_mutex_lock(&cache.mu);
    srv_grammar *dead = drop_locked(sg);
    pthread_mutex_unlock(&cache.mu);
    if (dead) grammar_destroy(dead);
}

const kiln_grammar *srv_grammar_get(const srv_grammar *sg) { return sg ? sg->g : NULL; }

static uint64_t key_hash(kiln_grammar_kind kind, bool strict, const char *text, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)kind << 1 | (uint64_t)strict);
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)text[i]) * 0x100000001b3ull;
    return h;
}

/* The listed entry equal to the key, or NULL (cache.mu held). */
static srv_grammar *find_locked(kiln_grammar_kind kind, bool strict, uint64_t hash, const char *text, size_t len) {
    for (size_t i = 0; i < cache.n; i++) {
        srv_grammar *sg = cache.e[i];
        if (sg->hash == hash && sg->kind == kind && sg->strict == strict && sg->len == len &&
            memcmp(sg->text, text, len) == 0)
            return sg;
    }
    return NULL;
}

/* The listed entry for the key with a new reference, or NULL. */
static srv_grammar *cache_find(kiln_grammar_kind kind, bool strict, uint64_t hash, const char *text, size_t len) {
    pthread_mutex_lock(&cache.mu);
    srv_grammar *found = find_locked(kind, strict, hash, text, len);
    if (found) {
        found->refs++;
        found->used = ++cache.clock;
    }
    pthread_mutex_unlock(&cache.mu);
    return found;
}

/* Lists sg (which holds the caller's reference) unless an equal entry was listed meanwhile (by a
 * request that compiled the same text at the same time): then that one is returned with a
 * reference and sg is destroyed. Least recently used entries leave until the new one fits. */
static srv_grammar *cache_add(srv_grammar *sg) {
    srv_grammar *dead[CACHE_ENTRIES + 1];
    size_t n_dead = 0;
    pthread_mutex_lock(&cache.mu);
    srv_grammar *other = find_locked(sg->kind, sg->strict, sg->hash, sg->text, sg->len);
    if (other) {
        other->refs++;
        other->used = ++cache.clock;
        dead[n_dead++] = sg;
        sg = other;
    } else {
        while (cache.n && (cache.n == CACHE_ENTRIES || cache.bytes + sg->len > CACHE_TEXT_MAX)) {
            size_t lru = 0;
            for (size_t i = 1; i < cache.n; i++)
                if (cache.e[i]->used < cache.e[lru]->used) lru = i;
            srv_grammar *old = cache.e[lru];
            cache.e[lru] = cache.e[--cache.n];
            cache.bytes -= old->len;
            if ((old = drop_locked(old))) dead[n_dead++] = old;
        }
        sg->refs++; /* the cache's */
        sg->used = ++cache.clock;
        cache.e[cache.n++] = sg;
        cache.bytes += sg->len;
    }
    pthread_mutex_unlock(&cache.mu);
    for (size_t i = 0; i < n_dead; i++) grammar_destroy(dead[i]);
    return sg;
}

/* ---- request fields ----------------------------------------------------------------------------- */

#define BAD(r, param, ...) srv_send_error(r, 400, "invalid_request_error", param, "invalid_value", __VA_ARGS__)

/* The cache's kind of a tool-call grammar (kiln_tool_grammar): its key text is the request's
 * parameters, serialized by tools_key. */
#define KIND_TOOLS ((kiln_grammar_kind)0x100)

/* One constraint a request gives: where it came from and what to compile. */
typedef struct wanted {
    const char *param; /* the field, as error messages name it */
    kiln_grammar_kind kind;
    bool strict;
    json_t *schema;   /* JSON_SCHEMA: the schema value (borrowed) */
    const char *text; /* GBNF: the grammar; KIND_TOOLS: the key (borrowed) */
    size_t len;
    const kiln_tool_grammar_params *tgp; /* KIND_TOOLS: what to build */
    bool quiet;                          /* on failure send nothing (the caller decides) */
} wanted;

static bool is_schema(json_t *v) { return json_is_object(v) || json_is_boolean(v); }

static bool present(json_t *v) { return v && !json_is_null(v); }

/* response_format into *w (w->param stays NULL when it asks for no constraint); false after
 * sending 400. */
static bool parse_response_format(srv_req *r, json_t *rf, wanted *w) {
    if (!json_is_object(rf)) {
        BAD(r, "response_format",
            "'response_format' must be an object: {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
            "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}");
        return false;
    }
    json_t *type = json_object_get(rf, "type");
    if (!json_is_string(type)) {
        BAD(r, "response_format.type", "'response_format.type' must be a string: text, json_object or json_schema");
        return false;
    }
    const char *t = json_string_value(type);
    if (strcmp(t, "text") == 0) return true;
    if (strcmp(t, "json_object") == 0) {
        json_t *schema = json_object_get(rf, "schema"); /* llama-server's JSON mode with a schema */
        if (!present(schema)) {
            *w = (wanted){.param = "response_format", .kind = KILN_GRAMMAR_JSON_OBJECT};
            return true;
        }
        if (!is_schema(schema)) {
            BAD(r, "response_format.schema", "'response_format.schema' must be a JSON Schema (an object or a boolean)");
            return false;
        }
        *w = (wanted){.param = "response_format.schema", .kind = KILN_GRAMMAR_JSON_SCHEMA, .schema = schema};
        return true;
    }
    if (strcmp(t, "json_schema") == 0) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js)) {
            BAD(r, "response_format.json_schema",
                "'response_format.json_schema' must be an object with 'name', 'schema' and optionally 'strict'");
            return false;
        }
        json_t *name = json_object_get(js, "name"), *schema = json_object_get(js, "schema");
        json_t *strict = json_object_get(js, "strict");
        if (present(name) && !json_is_string(name)) {
            BAD(r, "response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
            return false;
        }
        if (!present(schema)) {
            BAD(r, "response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
            return false;
        }
        if (!is_schema(schema)) {
            BAD(r, "response_format.json_schema.schema",
                "'response_format.json_schema.schema' must be a JSON Schema (an object or a boolean)");
            return false;
        }
        if (present(strict) && !json_is_boolean(strict)) {
            BAD(r, "response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
            return false;
        }
        *w = (wanted){.param = "response_format.json_schema.schema",
                      .kind = KILN_GRAMMAR_JSON_SCHEMA,
                      .strict = json_is_true(strict),
                      .schema = schema};
        return true;
    }
    BAD(r, "response_format.type", "response_format type '%s' is not supported: use text, json_object or json_schema",
        t);
    return false;
}

/* Sends the error of a tool-call grammar that failed with st: 400 naming the field the library's
 * message starts with ("tools[1].function.parameters: ..."), or tool_choice for a format without a
 * grammar. */
static void tools_error(srv_req *r, const kiln_tool_grammar_params *p, kiln_status st) {
    const char *msg = kiln_last_error();
    if (st == KILN_ERR_NOMEM) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory building the tool-call grammar");
    } else if (st == KILN_ERR_UNSUPPORTED && p->choice == KILN_TOOL_CHOICE_AUTO) {
        BAD(r, "tools", "a strict tool's calls cannot be enforced: %s", msg);
    } else if (st == KILN_ERR_UNSUPPORTED) {
        BAD(r, "tool_choice", "tool_choice %s cannot be enforced: %s; use \"auto\"",
            p->choice == KILN_TOOL_CHOICE_NAMED ? "naming a function" : "\"required\"", msg);
    } else {
        char param[96] = "tools";
        size_t k = strcspn(msg, ": ");
        if (strncmp(msg, "tools", 5) == 0 && k < sizeof param) snprintf(param, sizeof param, "%.*s", (int)k, msg);
        BAD(r, param, "%s cannot be enforced for tool calls: %s", param, msg);
    }
}

/* Notes on r the first approximation of a grammar it uses, escaped for a header: bytes outside
 * printable ASCII become \xHH (a property name may hold any character). */
static void note_approx(srv_req *r, const srv_grammar *sg) {
    const char *a = kiln_grammar_approximation(sg->g);
    if (!a || r->approx[0]) return;
    size_t n = 0;
    for (; *a && n + 5 < sizeof r->approx; a++) {
        const unsigned char c = (unsigned char)*a;
        if (c >= 0x20 && c < 0x7f) r->approx[n++] = (char)c;
        else n += (size_t)snprintf(r->approx + n, sizeof r->approx - n, "\\x%02X", c);
    }
    r->approx[n] = 0;
}

/* Compiles w (through the cache) into *out, noting an approximation on r; false after sending the
 * error (unless w->quiet). */
static bool compile(srv_req *r, const wanted *w, srv_grammar **out) {
    char *dumped = NULL;
    const char *text = "";
    size_t len = 0;
    if (w->kind == KILN_GRAMMAR_JSON_SCHEMA) {
        /* The schema as compact JSON, members in the order the client sent them. */
        if (!(dumped = json_dumps(w->schema, JSON_COMPACT | JSON_ENCODE_ANY))) {
            srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
            return false;
        }
        text = dumped;
        len = strlen(dumped);
    } else if (w->kind == KILN_GRAMMAR_GBNF || w->kind == KIND_TOOLS) {
        text = w->text;
        len = w->len;
    }
    if (len > KILN_GRAMMAR_MAX_TEXT && !w->quiet) {
        BAD(r, w->param, "'%s' is %zu bytes%s; at most %u bytes are accepted", w->param, len,
            dumped ? " as compact JSON" : "", KILN_GRAMMAR_MAX_TEXT);
        free(dumped);
        return false;
    }
    const uint64_t hash = key_hash(w->kind, w->strict, text, len);
    srv_grammar *sg = cache_find(w->kind, w->strict, hash, text, len);
    if (sg) {
        free(dumped);
        note_approx(r, sg);
        *out = sg;
        return true;
    }
    sg = calloc(1, sizeof *sg);
    char *copy = malloc(len + 1);
    if (!sg || !copy) {
        free(sg);
        free(copy);
        free(dumped);
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    free(dumped);
    kiln_grammar_params gp = kiln_grammar_default_params();
    gp.kind = w->kind;
    gp.strict = w->strict;
    kiln_status st =
        w->kind == KIND_TOOLS ? kiln_tool_grammar(w->tgp, &sg->g) : kiln_grammar_compile(copy, len, &gp, &sg->g);
    if (st) {
        free(copy);
        free(sg);
        if (w->quiet) return false;
        if (w->kind == KIND_TOOLS) tools_error(r, w->tgp, st);
        else if (st == KILN_ERR_NOMEM)
            srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory compiling '%s'", w->param);
        else if (w->kind == KILN_GRAMMAR_JSON_OBJECT)
            BAD(r, w->param, "JSON mode is not available: %s", kiln_last_error());
        else BAD(r, w->param, "'%s' does not compile: %s", w->param, kiln_last_error());
        return false;
    }
    *sg = (srv_grammar){
        .g = sg->g, .kind = w->kind, .strict = w->strict, .hash = hash, .text = copy, .len = len, .refs = 1};
    *out = cache_add(sg);
    note_approx(r, *out);
    return true;
}

bool srv_constraint(srv_req *r, json_t *req, srv_grammar **out) {
    *out = NULL;
    wanted w[3];
    size_t n = 0;
    json_t *rf = json_object_get(req, "response_format");
    if (present(rf)) {
        w[n] = (wanted){0};
        if (!parse_response_format(r, rf, &w[n])) return false;
        if (w[n].param) n++;
    }
    json_t *js = json_object_get(req, "json_schema");
    if (present(js)) {
        if (!is_schema(js)) {
            BAD(r, "json_schema", "'json_schema' must be a JSON Schema (an object or a boolean)");
            return false;
        }
        w[n++] = (wanted){.param = "json_schema", .kind = KILN_GRAMMAR_JSON_SCHEMA, .schema = js};
    }
    json_t *gr = json_object_get(req, "grammar");
    if (present(gr)) {
        if (!json_is_string(gr)) {
            BAD(r, "grammar", "'grammar' must be a string (a GBNF grammar)");
            return false;
        }
        if (json_string_length(gr) > 0)
            w[n++] = (wanted){.param = "grammar",
                              .kind = KILN_GRAMMAR_GBNF,
                              .text = json_string_value(gr),
                              .len = json_string_length(gr)};
    }
    if (n > 1) {
        BAD(r, w[1].param,
            "'%s' and '%s' both constrain the output; give only one of response_format, json_schema "
            "and grammar",
            w[0].param, w[1].param);
        return false;
    }
    return n == 0 || compile(r, &w[0], out);
}

bool srv_grammar_gbnf(srv_req *r, const char *param, const char *text, size_t len, srv_grammar **out) {
    *out = NULL;
    wanted w = {.param = param, .kind = KILN_GRAMMAR_GBNF, .text = text, .len = len};
    return compile(r, &w, out);
}

/* The cache key of a tool-call grammar: every parameter the library reads, the prompt by its end
 * (all the library looks at), the template whole. Caller frees; NULL when memory runs out. */
static char *tools_key(const kiln_tool_grammar_params *p, size_t *len) {
    char *key = NULL;
    FILE *f = open_memstream(&key, len);
    if (!f) return NULL;
    const char *prompt = p->prompt ? p->prompt : "";
    const size_t pl = strlen(prompt), tail = pl > 64 ? 64 : pl;
    fprintf(f, "%s%c%d%c%s%c%d%c%s%c", p->format, 0, (int)p->choice, 0, p->name ? p->name : "", 0, (int)p->parallel, 0,
            prompt + pl - tail, 0);
    fputs(p->tools, f);
    fputc(0, f);
    if (p->chat_template) fputs(p->chat_template, f);
    if (fclose(f) != 0) {
        free(key);
        return NULL;
    }
    return key;
}

bool srv_grammar_tools(srv_req *r, const kiln_tool_grammar_params *p, bool quiet, srv_grammar **out) {
    *out = NULL;
    size_t len = 0;
    char *key = tools_key(p, &len);
    if (!key) {
        if (!quiet) srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    wanted w = {.param = "tools", .kind = KIND_TOOLS, .text = key, .len = len, .tgp = p, .quiet = quiet};
    bool ok = compile(r, &w, out);
    free(key);
    return ok;
}

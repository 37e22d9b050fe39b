/*
 * server.h - kiln's OpenAI-compatible HTTP server: the pieces and how they fit.
 *
 *   http.c     libmicrohttpd glue: one thread per connection under a read/write timeout and
 *              connection limits (total and per client address), body collection under a size
 *              cap, API-key check, routing, JSON / error / server-sent-event responses, and
 *              detection of clients that went away.
 *   guard.c    what a request must be before it is served: a Host that names this server (DNS
 *              rebinding), no cross-origin caller unless allowed (--cors, preflight), a JSON body
 *              type; and the CORS headers of allowed origins.
 *   text.c     the one sanitizer of text put into responses: valid UTF-8, cut at a character.
 *   routes.c   the small routes: /health, /v1/models, /tokenize, /detokenize, /apply-template,
 *              /metrics, /stats, /admin/cache/flush.
 *   openai.c   /v1/chat/completions and /v1/completions: request validation into generation
 *              parameters, and the response and stream-chunk shapes.
 *   ollama.c   Ollama's API under /api/ (chat, generate, tags, show, ps, version): its requests
 *              translated for the shared code above, its NDJSON stream and error shapes.
 *   responses.c  /v1/responses (OpenAI's Responses API): the request translated into a chat
 *              request, output items and typed stream events, and the bounded store of responses
 *              that previous_response_id continues.
 *   responses_db.c  the stored responses also kept in the SSD tier's SQLite database (--ssd-cache).
 *   anthropic.c  /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API): its request
 *              translated into a chat request for the shared code above, its response, event
 *              stream and error shapes.
 *   embeddings.c  /v1/embeddings, and the inputs and engine call Ollama's /api/embed shares.
 *   job.c      a generation job: what a request hands to the engine (kiln_engine, continuously
 *              batched) and the state its connection waits on.
 *   tools.c    a chat request's tools: validation of tools, tool_choice and tool messages, and the
 *              grammar that enforces the calls (lazy under tool_choice "auto").
 *   constraint.c  a request's output constraint (response_format, json_schema, grammar) compiled
 *              into a kiln_grammar, through a small cache of compiled grammars.
 *   stats.c    request / token / error counters behind /metrics and /stats.
 *   web.c      the browser chat page at "/" (files from web/, embedded in the binary).
 *   supervise.c  crash isolation (isolate.h): the parent's supervisor that hands connections to
 *              the engine's child process, answers for it when it dies, and restarts it.
 *   pool.c     the model pool (pool.h): the model a request names, loading on first use and
 *              unloading the least recently used; one engine child per model under isolation.
 *
 * Like every kiln front end, the server uses only include/kiln.h (plus jansson and
 * libmicrohttpd). Handlers never generate themselves: they validate, render and tokenize (the model
 * is immutable and safe to share) and hand a job to the engine.
 */
#ifndef KILN_SERVER_H
#define KILN_SERVER_H

#include "kiln.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct MHD_Connection;
struct MHD_Daemon;
struct MHD_Response;

/* Request limits beyond the body cap (srv_config.max_body): messages of a chat request (after any
 * API's translation) and tools it declares; more gets 400. They bound the work a request can ask
 * for before generation (template rendering, the tools' name check) within any body size. */
#define SRV_MAX_MESSAGES 8192
#define SRV_MAX_TOOLS    512

/* ---- configuration (resolved once by `kiln serve`) ------------------------------------------ */

typedef struct srv_config {
    const char *host;             /* default "127.0.0.1" */
    int port;                     /* 0: an ephemeral port (printed at start) */
    const char *api_key;          /* NULL: no authentication; else needed on every route but /health
                                     and the chat page's files */
    int max_tokens;               /* default max_tokens when a request gives none; -1 = to context end */
    int max_tokens_limit;         /* the most new tokens a request gets, whatever it asks (0: no limit) */
    size_t max_body;              /* request body cap in bytes (413 beyond) */
    int max_queue;                /* requests waiting for a row (429 beyond) */
    unsigned timeout_s;           /* a connection waiting this long on its client (for request bytes,
                                     between requests, or to take response bytes) is closed */
    unsigned max_conns;           /* open connections at most; more are closed at once */
    unsigned max_conns_per_ip;    /* open connections from one client address at most */
    const char *cors;             /* origins allowed to call cross-origin, comma-separated ("*": any);
                                     NULL: none (same-origin callers need no CORS) */
    const char *allow_hosts;      /* Host names accepted besides IP addresses, localhost and the
                                     --host name, comma-separated ("*": any) */
    kiln_sampler_params sampling; /* defaults: flags over the model's metadata over the library's */
    const char *chat_template;    /* --chat-template-file's text, replacing the model's; NULL: the model's */
    const char *tool_format;      /* --tool-format: the chat parser's format; NULL: detected from the template */
    /* The models on this machine besides the served one (`kiln ls`), as a JSON array of {"name",
     * "path", "size", "modified" (unix seconds), "arch", "n_params", "weight_type", "n_ctx_train"},
     * a new reference; the served file (served_path) is left out. NULL: none are listed. */
    json_t *(*list_models)(const char *served_path);
    bool verbose; /* one log line per request */
    /* --ssd-cache's directory: stored responses are also kept in DIR/responses.sqlite; NULL: none. */
    const char *ssd_dir;
} srv_config;

/* ---- counters -------------------------------------------------------------------------------- */

/* Error responses are counted by class: each status the server sends itself, then any other 4xx
 * and any 5xx (the latter only for faults of the server, never for a client's bad input). */
typedef enum srv_error_class {
    SRV_ERR_400,
    SRV_ERR_401,
    SRV_ERR_403,
    SRV_ERR_404,
    SRV_ERR_405,
    SRV_ERR_413,
    SRV_ERR_415,
    SRV_ERR_429,
    SRV_ERR_4XX, /* any other 4xx */
    SRV_ERR_5XX, /* any 5xx */
    SRV_ERR_CLASSES
} srv_error_class;

typedef struct srv_stats {
    pthread_mutex_t mu;
    uint64_t requests;    /* every HTTP request */
    uint64_t completions; /* generations finished (any reason) */
    uint64_t prompt_tokens;
    uint64_t gen_tokens;
    double prompt_ms; /* summed prefill wall time */
    double gen_ms;    /* summed generation wall time */
    uint64_t errors[SRV_ERR_CLASSES];
} srv_stats;

void srv_stats_init(srv_stats *s);
void srv_stats_destroy(srv_stats *s);
void srv_stats_error(srv_stats *s, unsigned status);
void srv_stats_request(srv_stats *s);
/* Prometheus text exposition / JSON object of the counters, the engine's figures and the open
 * connections; caller frees. */
char *srv_stats_prometheus(srv_stats *s, const kiln_engine_stats *es, unsigned connections);
json_t *srv_stats_json(srv_stats *s, const kiln_engine_stats *es, unsigned connections);

/* ---- generation jobs ------------------------------------------------------------------------- */

typedef struct srv_job srv_job;
typedef struct srv srv;
typedef struct srv_grammar srv_grammar;

/* Called on the engine's thread for each token event and once at the end (ev == NULL, with
 * status and result set), with the job's lock held. */
typedef void (*srv_job_event_fn)(srv_job *job, const kiln_token_event *ev);

struct srv_job {
    /* set by the route, read-only once submitted */
    kiln_token *prompt; /* [n_prompt], owned */
    size_t n_prompt;
    kiln_generate_params gp; /* stop, logit_bias point into the owned arrays below */
    char **stop;             /* [n_stop] owned strings */
    kiln_logit_bias *bias;   /* owned */
    srv_grammar *grammar;    /* the output constraint (a reference, released with the job), or NULL;
                                gp.grammar is its compiled grammar */
    srv_job_event_fn on_event;
    void *user; /* owned by the route that made the job (freed by free_user) */
    void (*free_user)(void *user);
    srv_stats *stats;

    /* shared state, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    kiln_request *req;  /* the engine's handle once submitted */
    bool done;          /* the engine finished with the job */
    kiln_status status; /* the generation's status once done */
    char error[512];    /* why the generation failed (the engine's message) */
    /* Output was lost: an append or a jansson allocation failed while an event was made. The
     * generation then stops and ends as failed (KILN_ERR_NOMEM, an error event in a stream); set
     * after the end, the end itself was lost: a stream is cut off after the events before it (no
     * part of the end, such as a success marker, goes out). */
    bool lost;
    kiln_generate_result result;
    char *out; /* bytes produced for the client and not yet sent (streaming) */
    size_t n_out, cap_out;
    atomic_bool cancel; /* the client went away */
    unsigned abort_at;  /* --debug-crash: the process aborts at this token event (0: never; isolate.h) */
    unsigned n_events;  /* token events so far (counted only with abort_at) */
    bool hang;          /* --debug-crash: at abort_at the engine's thread hangs instead */
};

/* A new job with one reference; NULL when out of memory. */
srv_job *srv_job_new(void);
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);
/* Appends bytes to j->out (lock held). False (and j->lost set) when out of memory. */
bool srv_job_append(srv_job *j, const char *s, size_t n);
/* jansson's allocations that failed on this thread (http.c counts them). */
unsigned srv_json_alloc_failures(void);
/* Points jansson at the server's counting allocator (its reserve mapped): once per process, before
 * the first parse. */
void srv_json_alloc_install(void);
/* Resets this thread's count of failures and maps the reserve again if a failure used it: before
 * work whose JSON must be whole (a request's parse). */
void srv_json_alloc_begin(void);
/* Hands the job to the engine (which holds a reference until it is done), its max_tokens at most
 * s->cfg.max_tokens_limit. KILN_ERR_BUSY when the queue is full or the server is stopping. */
kiln_status srv_job_submit(srv *s, srv_job *j);
/* The client went away: the request stops at the engine's next step (or never starts). */
void srv_job_cancel(srv_job *j);

/* ---- the server ------------------------------------------------------------------------------ */

struct srv {
    srv_config cfg;
    kiln_model *model;
    kiln_engine *engine;
    const char *model_id;   /* file name without .gguf */
    const char *model_path; /* the served model's file, or NULL */
    int32_t n_ctx;          /* context of each row */
    char fingerprint[24];   /* system_fingerprint: "fp_" + 12 hex of the model fingerprint */
    long started;           /* unix time the server started */
    srv_stats stats;
    struct MHD_Daemon *daemon;
    int bound_port;
    atomic_uint conns; /* open connections */
    atomic_bool stopping;
};

/* The API a route speaks, which decides the shape of its error responses (srv_send_error). */
typedef enum srv_api {
    SRV_API_OPENAI = 0, /* {"error": {"message", "type", "param", "code"}} */
    SRV_API_OLLAMA,     /* {"error": "message"} */
    SRV_API_ANTHROPIC,  /* {"type": "error", "error": {"type", "message"}} */
} srv_api;

/* One request as routes see it. */
typedef struct srv_req {
    srv *server;
    struct MHD_Connection *conn;
    const char *method;
    const char *url;
    srv_api api;      /* srv_route_api(url), set before anything is answered */
    const char *body; /* NUL-terminated */
    size_t body_len;
    unsigned status; /* status of the response queued (for the log line) */
    /* The first approximation of the request's schemas (kiln_grammar_approximation), as printable
     * ASCII; sent as SRV_APPROX_HEADER and logged. "" when its output is enforced exactly. */
    char approx[400];
} srv_req;

/* The response header that says a request's schema (response_format, a tool's parameters) is
 * enforced approximately, and where: "#/properties/host/format: the format's usual shape ...". */
#define SRV_APPROX_HEADER "X-Kiln-Schema-Approximation"

/* Starts listening (MHD daemon with its own threads). Prints nothing; the caller reports
 * s->bound_port. False with a message on stderr when the address cannot be bound. */
bool srv_http_start(srv *s);
/* Stops accepting new connections (existing ones finish). */
void srv_http_quiesce(srv *s);
void srv_http_stop(srv *s);

/* Responses (each queues exactly one response on the request). srv_send_response queues resp
 * (taking it; NULL counts as a 500 sent) with the CORS headers the request's origin may get. */
void srv_send_response(srv_req *r, unsigned status, struct MHD_Response *resp);
void srv_send_json(srv_req *r, unsigned status, json_t *body); /* steals body */
void srv_send_text(srv_req *r, unsigned status, const char *content_type, const char *text, size_t len);
/* OpenAI's error shape {"error": {"message", "type", "param", "code"}}; param/code may be NULL.
 * On a route of another API (r->api) the error takes that API's shape instead, its type following
 * from the status. The message may quote anything a client sent: it is made valid UTF-8 and cut at
 * a character (srv_text_sanitize), so a bad request always gets its 4xx. */
void srv_send_error(srv_req *r, unsigned status, const char *type, const char *param, const char *code, const char *fmt,
                    ...) __attribute__((format(printf, 6, 7)));
/* A server-sent-event stream fed from job->out until the job is done. Takes a job reference. */
void srv_send_stream(srv_req *r, srv_job *job);
/* The same for newline-delimited JSON (application/x-ndjson, Ollama's streams): no keep-alive
 * comments, which that format has no room for. */
void srv_send_ndjson(srv_req *r, srv_job *job);
/* Blocks until the job is done, cancelling it if the client disconnects first. True when the
 * client is still there. */
bool srv_wait_job(srv_req *r, srv_job *job);

/* Route handlers (routes.c, openai.c, ollama.c, anthropic.c, responses.c). */
void srv_route(srv_req *r);
/* The API whose error shape a URL's responses take. */
srv_api srv_route_api(const char *url);
void srv_chat_completions(srv_req *r);
void srv_completions(srv_req *r);
void srv_apply_template(srv_req *r);
/* Ollama's routes: an /api/ URL; false (nothing sent) for any other. */
bool srv_ollama_route(srv_req *r);
void srv_messages(srv_req *r);
void srv_messages_count_tokens(srv_req *r);
void srv_responses(srv_req *r);
/* GET (the stored response) or DELETE (drops it) /v1/responses/{id}; 404 when none is stored. */
void srv_response_by_id(srv_req *r, const char *id);
/* Anthropic's error body {"type": "error", "error": {"type", "message"}} for an HTTP status
 * (400 invalid_request_error, 401 authentication_error, 403 permission_error, 404 not_found_error,
 * 413 request_too_large, 429 rate_limit_error, 503 overloaded_error, other 5xx api_error); NULL
 * when out of memory. */
json_t *srv_anthropic_error(unsigned status, const char *message);

/* ---- embeddings (embeddings.c) --------------------------------------------------------------- */

void srv_embeddings(srv_req *r);

/* A request's inputs as token lists: tok[i][len[i]], each malloc'd. */
typedef struct srv_embed_inputs {
    kiln_token **tok;
    size_t *len;
    size_t n;
} srv_embed_inputs;

/* Reads `input` (the field named param): a string, an array of strings, an array of token ids or
 * an array of such arrays, at most KILN_EMBED_MAX_INPUTS; texts are tokenized with the model's
 * special tokens. False after sending a 400 naming param (an empty string, a bad shape or id). */
bool srv_embed_inputs_read(srv_req *r, json_t *input, const char *param, srv_embed_inputs *in);
void srv_embed_inputs_free(srv_embed_inputs *in);
/* Embeds the inputs on the engine as one batch: a malloc'd [in->n][res->dim] array, or NULL after
 * sending the error: 400 for a model that makes no embeddings, dimensions beyond its width, an
 * input over its limit (code context_length_exceeded, naming the limit and "truncate"); 503 when
 * the engine is stopping; 500 when out of memory. */
float *srv_embed_run(srv_req *r, const char *param, const srv_embed_inputs *in, const kiln_embed_params *p,
                     kiln_embed_result *res);
/* A vector as JSON: an array of numbers, or (b64) a base64 string of its little-endian float32
 * bytes; NULL when out of memory. */
json_t *srv_embed_vector(const float *v, size_t dim, bool b64);

/* The browser chat page (web.c): its files, embedded at build time by scripts/embed into the
 * generated web_assets.c, ending with an entry whose path is NULL. */
typedef struct srv_web_asset {
    const char *path; /* "/index.html", "/app.js", ... */
    const char *content_type;
    const char *etag;          /* quoted, e.g. "\"123-456\"" */
    const unsigned char *data; /* [len] */
    size_t len;
} srv_web_asset;
extern const srv_web_asset srv_web_assets[];
/* Serves the chat page ("/" is /index.html) and its files on GET and HEAD without an API key (the
 * page asks for it); 405 for other methods on those paths. False (nothing sent) for any other
 * path. */
bool srv_web_serve(srv_req *r);

/* Request guards (guard.c). srv_guard checks what a request's headers say (its Host, its Origin)
 * and answers OPTIONS: false after it sent the refusal (403) or the preflight answer.
 * srv_json_body: whether the body is declared JSON; false after sending 415.
 * srv_cors_headers: Access-Control-Allow-Origin on a response to an origin --cors allows. */
bool srv_guard(srv_req *r);
bool srv_json_body(srv_req *r);
void srv_cors_headers(srv_req *r, struct MHD_Response *resp);

/* Writes in[0..n) to out (capacity cap > 0, NUL-terminated) as text that is valid UTF-8: every
 * well-formed character is kept, every other byte and every control character but tab (and
 * newline when keep_newlines) becomes the four characters \xHH. Text that does not fit is cut
 * between two characters and ends with "...". Returns the length written. (text.c) */
size_t srv_text_sanitize(char *out, size_t cap, const char *in, size_t n, bool keep_newlines);

/* Appends s[0..len) to the growing buffer *text (*n bytes used, *cap allocated; all zero to start),
 * keeping it NUL-terminated; the capacity doubles from 4096. False when out of memory (the buffer
 * is then unchanged). (text.c) */
bool srv_text_append(char **text, size_t *n, size_t *cap, const char *s, size_t len);
/* srv_text_append of s[0..len) made valid UTF-8: each byte that starts no well-formed character
 * becomes U+FFFD. False when out of memory (the buffer is then as it was). (text.c) */
bool srv_text_append_utf8(char **text, size_t *n, size_t *cap, const char *s, size_t len);

/* Shared helpers. */
json_t *srv_parse_body(srv_req *r); /* a JSON object, or NULL after sending 415 or 400 */
/* An optional boolean field: *out is left as it is when the field is absent or null; any other
 * type sends 400 naming the field and returns false. */
bool srv_get_bool(srv_req *r, json_t *o, const char *key, bool *out);
/* Tokenizes a rendered prompt (kiln_tokenize_chat). Returns a malloc'd array or NULL after
 * sending the error (400 naming param when it does not leave room in the context for one new
 * token). */
kiln_token *srv_tokenize_prompt(srv_req *r, const char *param, const char *text, size_t len, size_t *n_out);
/* Sends the error of a failed kiln_tokenize(_chat) that returned st: 400 naming param for text the
 * model's tokenizer cannot encode (KILN_ERR_INVALID_ARG), 500 for anything else. */
void srv_send_tokenize_error(srv_req *r, const char *param, kiln_status st);
/* Renders a chat request's messages with the model's template into a malloc'd prompt; NULL after
 * sending 400. */
char *srv_render_chat(srv_req *r, json_t *req, size_t *len);
/* The generation parameters of a chat or completions request (openai.c): max_tokens and
 * max_completion_tokens, the sampling fields, seed, ignore_eos, stop, logit_bias and the output
 * constraint, over the server's defaults, into j->gp (and j->stop, j->bias, j->grammar); `n` is
 * the OpenAI routes' own (openai.c). False after sending a 400 naming the field (or the model, when
 * it is an embedding model). */
bool srv_generation_params(srv_req *r, json_t *req, srv_job *j);
/* out = prefix + 24 random characters from [A-Za-z0-9] (cut to cap, NUL-terminated). */
void srv_make_id(char *out, size_t cap, const char *prefix);

/* ---- output constraints (constraint.c) ------------------------------------------------------- */

/* The output constraint request req asks for: response_format ({"type": "text" | "json_object" |
 * "json_schema"}, with llama-server's "schema" in json_object), llama-server's top-level
 * "json_schema" and "grammar" (GBNF). *out is a reference to the compiled grammar (shared through a
 * bounded process-wide cache; release it with srv_grammar_release), or NULL when the request is
 * unconstrained. False after sending the error: 400 naming the field for a bad shape, two
 * constraints at once, text over KILN_GRAMMAR_MAX_TEXT or a schema or grammar that does not compile
 * (the message then quotes kiln_last_error()); 500 when memory runs out. */
bool srv_constraint(srv_req *r, json_t *req, srv_grammar **out);
/* The compiled grammar of sg (NULL for NULL), valid while the reference is held. */
const kiln_grammar *srv_grammar_get(const srv_grammar *sg);
/* Drops a reference from srv_constraint; NULL is a no-op. Thread-safe. */
void srv_grammar_release(srv_grammar *sg);
/* Compiles a GBNF grammar the server built (through the same cache) into *out; false after sending
 * the error (400 naming param when it does not compile, 500 when memory runs out). */
bool srv_grammar_gbnf(srv_req *r, const char *param, const char *text, size_t len, srv_grammar **out);

/* Builds the tool-call grammar p asks for (kiln_tool_grammar, through the same cache) into *out.
 * False when it cannot be built: after sending the error (400 naming the tool's field, or
 * tool_choice for a format without a grammar), or, when quiet, without sending anything. */
bool srv_grammar_tools(srv_req *r, const kiln_tool_grammar_params *p, bool quiet, srv_grammar **out);

/* ---- tools (tools.c) ------------------------------------------------------------------------- */

typedef enum srv_tool_choice { SRV_TOOL_AUTO, SRV_TOOL_NONE, SRV_TOOL_REQUIRED, SRV_TOOL_NAMED } srv_tool_choice;

typedef struct srv_tools {
    json_t *tools; /* the request's non-empty "tools" array (borrowed), or NULL */
    srv_tool_choice choice;
    const char *named; /* SRV_TOOL_NAMED: the function's name (borrowed) */
    bool parallel;     /* parallel_tool_calls, default true */
    kiln_reasoning_format reasoning;
} srv_tools;

/* Reads and validates tools, tool_choice, parallel_tool_calls and reasoning_format; false after
 * sending a 400 naming the field. */
bool srv_tools_parse(srv_req *r, json_t *req, srv_tools *t);
/* Checks history message msg (messages[idx], whose role is known): a tool message needs a
 * tool_call_id, an assistant message's tool_calls must be well-formed. Arguments given as a JSON
 * string of an object become that object in copy (the message the template sees). False after
 * sending a 400. */
bool srv_tools_message(srv_req *r, json_t *msg, size_t idx, json_t *copy);
/* The grammar that enforces the request's tool calls in format's markup (kiln_tool_grammar) into
 * *out: for "required" or a named function, eager (one call, or one or more with
 * parallel_tool_calls); for "auto", lazy (free text until the format's call opener), or NULL when
 * the format has no grammar or a schema cannot be enforced and no tool asks for "strict". tmpl and
 * prompt are the chat template and the rendered prompt (whether the model thinks, and a thinking
 * block the prompt left open or closed). False after sending the error (400 for a
 * format without a grammar under "required", or a parameter schema that cannot be enforced where
 * it must be). */
bool srv_tools_grammar(srv_req *r, const srv_tools *t, const char *format, const char *tmpl, const char *prompt,
                       srv_grammar **out);

/* The reply's parser of a chat request (openai.c), with t its validated tools and prompt its
 * rendered prompt: a chat with tools (unless tool_choice is "none") or whose template's format
 * writes reasoning (unless reasoning is "none") gets one in *parser (the caller frees it, also
 * after a failure); any other chat gets NULL and keeps the plain path. The calls' grammar of
 * srv_tools_grammar goes to j->grammar (enforcing a required or named call; lazy under "auto",
 * unless an output constraint is already set). Sets j->gp.render_special for the
 * format. False after sending the error. */
bool srv_chat_parser_setup(srv_req *r, srv_job *j, const srv_tools *t, const char *prompt, kiln_chat_parser **parser);
/* Feeds len bytes of the reply to job j's parser (finish: then ends its input), unless the parser
 * has failed before (*failed). A parser that fails keeps what it parsed before, and the rest of the
 * reply goes unparsed (*failed set); one that ran out of memory lost part of the reply, and marks
 * the job lost (it ends as failed). Called on the engine's thread with the job's lock held. */
void srv_chat_parser_step(srv_job *j, kiln_chat_parser *parser, bool *failed, const char *text, size_t len,
                          bool finish);

#endif

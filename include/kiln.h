/*
 * kiln.h - the one public header of libkiln, a local LLM inference engine.
 *
 * An application links libkiln and generates text in-process. The kiln CLI and server are built on
 * exactly this header. Conventions:
 *   - Opaque handles with create/free pairs: kiln_model (weights + tokenizer, immutable once loaded,
 *     shareable between sessions) and kiln_session (one generation context: KV cache, sampler state,
 *     scratch buffers; used by one thread at a time).
 *   - Params structs are obtained from kiln_*_default_params() and then edited field by field, so new
 *     fields can be added without breaking callers.
 *   - Every fallible call returns a kiln_status. The message describing the last failure is available
 *     from the handle (kiln_model_last_error, kiln_session_last_error, a request's result.error) or,
 *     for calls that create a handle, from kiln_last_error() on the calling thread.
 *   - Ownership: a pointer returned by the library stays owned by the library and is valid until the
 *     handle it came from is freed (or until the next call on that handle when stated). Buffers passed
 *     in stay owned by the caller.
 *   - The library never prints to stdout and never exits the process; diagnostics go through the log
 *     callback (default: warnings and errors to stderr).
 *   - Memory sizes, in params, results, statistics and estimates alike, are counts of bytes in a
 *     uint64_t (the *_bytes fields, kv_budget, prompt_cache, the statistics' *_budget). Where a
 *     size has an "automatic" value, it is a named constant (e.g. KILN_PROMPT_CACHE_AUTO), never a
 *     negative number.
 *   - Policy that front ends share (default context, prompt-cache size, KV bytes per token,
 *     sampling parameter ranges) is defined once, here and in the library; the kiln CLI and server
 *     read it from this header instead of restating it.
 */
#ifndef KILN_H
#define KILN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* KILN_API marks every function libkiln exports. The library is compiled with -fvisibility=hidden,
 * so libkiln.so exports these and nothing else; for an application, in C or C++, the mark changes
 * nothing. Compilers without GCC attributes get an empty mark; a build may define its own first. */
#ifndef KILN_API
#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR  0
#define KILN_VERSION_MINOR  1
#define KILN_VERSION_PATCH  0
#define KILN_VERSION_STRING "0.1.0"

/* ---- status codes ---------------------------------------------------------------------------- */

/* One list, two uses: the enum below and kiln_status_str()'s strings are both generated from it, so
 * a status cannot exist without its description. X(name, description). */
#define KILN_STATUS_LIST(X)                                                                                            \
    X(KILN_OK, "success")                                                                                              \
    X(KILN_ERR_INVALID_ARG, "invalid argument")  /* a parameter is out of range or NULL */                             \
    X(KILN_ERR_IO, "I/O error")                  /* a file is missing, unreadable, or special */                       \
    X(KILN_ERR_FORMAT, "file format error")      /* a file is truncated, corrupt, inconsistent */                      \
    X(KILN_ERR_UNSUPPORTED, "unsupported")       /* valid, but kiln does not implement it */                           \
    X(KILN_ERR_NOMEM, "out of memory")           /* an allocation failed */                                            \
    X(KILN_ERR_BUFFER_SMALL, "buffer too small") /* the needed size was reported */                                    \
    X(KILN_ERR_CONTEXT_FULL, "context full")     /* the tokens do not fit in the context */                            \
    X(KILN_ERR_CANCELLED, "cancelled")           /* the caller asked to stop */                                        \
    X(KILN_ERR_INTERNAL, "internal error")       /* a bug in kiln */                                                   \
    X(KILN_ERR_BUSY, "busy: the queue is full")  /* the engine's queue is full; retry later */

#define KILN_STATUS_ENUM_(name, description) name,
typedef enum kiln_status { KILN_STATUS_LIST(KILN_STATUS_ENUM_) KILN_STATUS_COUNT } kiln_status;
#undef KILN_STATUS_ENUM_

/* A short constant English description of a status, e.g. "file format error". Never NULL. */
KILN_API const char *kiln_status_str(kiln_status status);

/* The message of the last failure of a call made on this thread, "" if none. Valid until the next
 * kiln call on this thread. */
KILN_API const char *kiln_last_error(void);

/* Library version string, e.g. "0.1.0". */
KILN_API const char *kiln_version(void);

/* ---- logging --------------------------------------------------------------------------------- */

typedef enum kiln_log_level { KILN_LOG_ERROR = 0, KILN_LOG_WARN, KILN_LOG_INFO, KILN_LOG_DEBUG } kiln_log_level;

/* msg is one line without a trailing newline. Called from any thread that runs kiln code. */
typedef void (*kiln_log_fn)(kiln_log_level level, const char *msg, void *user);

/* Replaces the process-wide log sink. fn == NULL restores the default (stderr) sink; max_level
 * filters: messages above it are dropped. */
KILN_API void kiln_set_log(kiln_log_fn fn, void *user, kiln_log_level max_level);

/* ---- model ----------------------------------------------------------------------------------- */

typedef struct kiln_model kiln_model;
typedef int32_t kiln_token;

/* Which compute kernels run the model: the fastest the CPU supports, or the scalar reference
 * kernels (the source of truth, for checking). Both give the same greedy tokens. */
typedef enum kiln_kernels { KILN_KERNELS_AUTO = 0, KILN_KERNELS_REF = 1 } kiln_kernels;

typedef struct kiln_model_params {
    bool vocab_only;      /* load metadata and tokenizer only (works on files without tensors) */
    bool use_mmap;        /* keep weights in the file mapping instead of copying them to memory */
    kiln_kernels kernels; /* default AUTO */
    /* Load progress: called on the loading thread as the weights are read, with the fraction done
     * in [0, 1], non-decreasing, first 0 and last 1 (a vocab_only load makes no calls). Returning
     * false cancels the load: kiln_model_load then returns KILN_ERR_CANCELLED and frees everything.
     * NULL (default): no calls. */
    bool (*progress)(float fraction, void *user);
    void *progress_user; /* passed to progress */
} kiln_model_params;

KILN_API kiln_model_params kiln_model_default_params(void);

/* Loads a GGUF model from path. On success *out owns the model; on failure *out is NULL and
 * kiln_last_error() names what is wrong (e.g. which tensor is missing or which offset is out of
 * range). Status: KILN_ERR_IO, KILN_ERR_FORMAT, KILN_ERR_UNSUPPORTED, KILN_ERR_NOMEM. */
KILN_API kiln_status kiln_model_load(const char *path, const kiln_model_params *params, kiln_model **out);

KILN_API void kiln_model_free(kiln_model *model);

/* The message of the most recent failed call on this model (kiln_tokenize, kiln_tokenize_chat,
 * kiln_token_piece, kiln_chat_apply), from whichever thread made it; "" when none failed. A model is
 * shared between threads, so the text is copied to a buffer of the calling thread, valid until this
 * thread calls kiln_model_last_error again. With model == NULL: kiln_last_error(). */
KILN_API const char *kiln_model_last_error(const kiln_model *model);

/* Architecture name from the file ("llama", "qwen2", "qwen3"). */
KILN_API const char *kiln_model_arch(const kiln_model *model);
/* Name of the kernel set the model runs with ("ref", "avx2", "avx512"). */
KILN_API const char *kiln_model_kernels(const kiln_model *model);
/* A one-line human description, e.g. "llama 64d 5L 8H/4KV ff172 F32, vocab 512, 0.29 M params"
 * (architecture, embedding width, layers, query/KV heads, feed-forward width, the type of the first
 * layer's weights, vocabulary, parameters). */
KILN_API const char *kiln_model_desc(const kiln_model *model);
/* Hex SHA-256 (64 characters) over the architecture metadata, the tensor table (names, types,
 * shapes) and a sample of every tensor's data (its first and last 4 KiB), so two files of the same
 * shape with other weights differ. Equal files give equal fingerprints; caches are keyed on it. */
KILN_API const char *kiln_model_fingerprint(const kiln_model *model);
/* Hex SHA-256 (64 characters) over the tokenizer metadata (every tokenizer.* key and value except
 * the chat template): equal for models that turn every text into the same token ids. Part of the
 * key of SSD cache entries. */
KILN_API const char *kiln_model_tokenizer_hash(const kiln_model *model);

KILN_API int32_t kiln_model_n_vocab(const kiln_model *model);
KILN_API int32_t kiln_model_n_ctx_train(const kiln_model *model);
KILN_API int32_t kiln_model_n_embd(const kiln_model *model);
KILN_API int32_t kiln_model_n_layer(const kiln_model *model);
KILN_API uint64_t kiln_model_n_params(const kiln_model *model);
KILN_API uint64_t kiln_model_size_bytes(const kiln_model *model);

/* What a GGUF file's header says, read without loading the model (for listings and for choosing a
 * model): the file is mapped, its header, metadata and tensor table are validated like a load does,
 * and no tensor data is read. Strings are NUL-terminated, printable ASCII (other bytes become '?'),
 * truncated to their arrays. Any part of a split model (NAME-0000i-of-0000N.gguf) is read with every
 * other part, as kiln_model_load opens it: the tensor fields count the whole model and the metadata
 * is the first part's. */
typedef struct kiln_model_info {
    char arch[32];         /* general.architecture; "" when absent */
    char name[128];        /* general.name; "" when absent */
    bool runnable;         /* kiln runs this architecture and the file holds tensors (a load may
                              still fail on a missing or malformed tensor) */
    int32_t n_ctx_train;   /* {arch}.context_length; 0 when absent */
    int32_t n_embd;        /* {arch}.embedding_length; 0 when absent */
    int32_t n_layer;       /* {arch}.block_count; 0 when absent */
    int32_t n_head;        /* {arch}.attention.head_count; 0 when absent */
    int32_t n_head_kv;     /* {arch}.attention.head_count_kv, else n_head */
    int32_t head_dim;      /* {arch}.attention.key_length, else n_embd / n_head */
    uint64_t n_tensors;    /* tensors in this file */
    uint64_t n_params;     /* elements of every tensor in this file */
    uint64_t tensor_bytes; /* bytes of tensor data in this file (about the weights' memory) */
    char weight_type[16];  /* the tensor type holding the most bytes, e.g. "Q4_0"; "" when
                              the file has no tensors */
    uint64_t file_bytes;   /* size of the file */
    int32_t split_no;      /* split.no: index of this part of a split model (0 otherwise) */
    int32_t split_count;   /* split.count: parts of a split model (1 otherwise) */
} kiln_model_info;

/* Fills *out from the file at path. Status: KILN_ERR_IO (missing, unreadable, not a regular file),
 * KILN_ERR_FORMAT (not a GGUF file, truncated, inconsistent), KILN_ERR_UNSUPPORTED (a GGUF version
 * kiln does not read), KILN_ERR_NOMEM; kiln_last_error() says which. An unsupported architecture is
 * not an error: runnable is then false. */
KILN_API kiln_status kiln_model_info_read(const char *path, kiln_model_info *out);

/* ---- inspecting a model file ------------------------------------------------------------------ */

/* A GGUF file, or a Hugging Face / MLX model directory (config.json + safetensors), opened to show what
 * it holds (`kiln inspect`): its format, metadata (a GGUF's key/values; a directory's config.json
 * members) and tensor table as stored, and any tensor's values. Headers are validated as a load does;
 * no tensor data is read until asked for. */
typedef struct kiln_file kiln_file;

typedef struct kiln_file_tensor {
    const char *name; /* as the file names it; valid while the file is open */
    const char *type; /* "Q4_K", "F32", "BF16", "U32", ... */
    int32_t n_dims;
    int64_t shape[8];            /* outermost first: a matrix is rows, then columns */
    uint64_t n_bytes;            /* bytes stored */
    uint64_t n_values;           /* floats kiln_file_dequant writes (an MLX weight: its unpacked count) */
    int32_t mlx_bits, mlx_group; /* an MLX-quantized weight's bits and group size; 0 otherwise */
} kiln_file_tensor;

/* Opens path (errors as kiln_model_load's: KILN_ERR_IO, KILN_ERR_FORMAT, KILN_ERR_UNSUPPORTED). */
KILN_API kiln_status kiln_file_open(const char *path, kiln_file **out);
KILN_API void kiln_file_close(kiln_file *f);
/* "gguf", "safetensors" (a directory of float tensors) or "mlx" (a directory with MLX quantization). */
KILN_API const char *kiln_file_format(const kiln_file *f);
KILN_API size_t kiln_file_n_meta(const kiln_file *f);
/* Metadata entry i: returns its key and writes its value as text into value[cap] (NUL-terminated,
 * cut to fit; long strings and arrays are abbreviated). NULL when i is out of range. */
KILN_API const char *kiln_file_meta(const kiln_file *f, size_t i, char *value, size_t cap);
KILN_API size_t kiln_file_n_tensors(const kiln_file *f);
/* Tensor i's description into *out; false when i is out of range. */
KILN_API bool kiln_file_tensor_info(const kiln_file *f, size_t i, kiln_file_tensor *out);
/* The index of the tensor named name, or -1. */
KILN_API int64_t kiln_file_find(const kiln_file *f, const char *name);
/* Tensor i's values as float32 into out[n_values], row-major: float types converted exactly, GGUF
 * quantized types by kiln's reference dequantizer, an MLX weight as scale * q + bias (f32).
 * KILN_ERR_UNSUPPORTED for other integer tensors; KILN_ERR_INVALID_ARG for a bad index. */
KILN_API kiln_status kiln_file_dequant(const kiln_file *f, size_t i, float *out);

/* ---- machine --------------------------------------------------------------------------------- */

/* Physical cores of this machine (at least 1): the thread count used when a params struct says 0. */
KILN_API int32_t kiln_physical_cores(void);
/* Bytes of physical memory of this machine; 0 when unknown. */
KILN_API uint64_t kiln_physical_memory(void);

/* ---- checksums ------------------------------------------------------------------------------- */

/* The SHA-256 of the whole file at path, as 64 lowercase hex characters and a terminator in hex
 * (for checking a download against its published digest). KILN_ERR_IO when it cannot be opened or
 * read, with kiln_last_error() saying why; hex is then "". */
KILN_API kiln_status kiln_sha256_file(const char *path, char hex[65]);

/* ---- tokenizer ------------------------------------------------------------------------------- */

/* Special tokens; -1 when the model has none. */
KILN_API kiln_token kiln_token_bos(const kiln_model *model);
KILN_API kiln_token kiln_token_eos(const kiln_model *model);
KILN_API kiln_token kiln_token_eot(const kiln_model *model);
/* True for tokens that end a generation (EOS, EOT and other end-of-generation tokens). */
KILN_API bool kiln_token_is_eog(const kiln_model *model, kiln_token token);
/* Whether the model's metadata asks for BOS to be prepended. */
KILN_API bool kiln_model_add_bos(const kiln_model *model);

/* Tokenizes len bytes of text. add_special: prepend BOS (and append EOS) as the model's metadata
 * says. parse_special: text such as "<|eot_id|>" becomes the special token instead of plain text.
 * Writes up to cap ids to out and the total count to *n_out. KILN_ERR_BUFFER_SMALL when cap is too
 * small (*n_out then holds the needed count). KILN_ERR_INVALID_ARG, kiln_last_error() naming the
 * character, when the text holds one the tokenizer cannot encode (a tokenizer.json whose model has no
 * unknown token, where Hugging Face's tokenizers fails too); nothing is dropped silently. */
KILN_API kiln_status kiln_tokenize(const kiln_model *model, const char *text, size_t len, bool add_special,
                                   bool parse_special, kiln_token *out, size_t cap, size_t *n_out);

/* Tokenizes a rendered chat prompt (the output of kiln_chat_apply): special-token text is parsed,
 * and BOS is prepended when the model asks for it unless the text already starts with it (chat
 * templates often write bos_token themselves). Same buffer contract as kiln_tokenize. */
KILN_API kiln_status kiln_tokenize_chat(const kiln_model *model, const char *text, size_t len, kiln_token *out,
                                        size_t cap, size_t *n_out);

/* The bytes a token stands for in decoded text (a byte token gives its byte, which may be part of a
 * UTF-8 character). Special tokens give their text only when render_special. Writes up to cap bytes
 * (no terminator) and the full length to *n_out; KILN_ERR_BUFFER_SMALL when cap is too small. */
KILN_API kiln_status kiln_token_piece(const kiln_model *model, kiln_token token, bool render_special, char *buf,
                                      size_t cap, size_t *n_out);

/* ---- chat templates -------------------------------------------------------------------------- */

/* The model's chat template (GGUF tokenizer.chat_template), or NULL when the file has none. */
KILN_API const char *kiln_model_chat_template(const kiln_model *model);

/* Renders a Jinja2 template with a context given as a JSON object, the way Hugging Face's
 * apply_chat_template does: trim_blocks and lstrip_blocks on, loop controls (break/continue), the
 * globals raise_exception(msg) and strftime_now(fmt), and tojson as Python's
 * json.dumps(ensure_ascii=False). On success *out is a NUL-terminated string owned by the caller
 * (release it with kiln_free) and *out_len its length. A template error (syntax, runtime error or
 * raise_exception) returns KILN_ERR_FORMAT with kiln_last_error() reading "line L, column C: ...";
 * a context that is not a JSON object returns KILN_ERR_INVALID_ARG. */
KILN_API kiln_status kiln_template_render(const char *tmpl, size_t tmpl_len, const char *context_json,
                                          size_t context_len, char **out, size_t *out_len);

/* Renders a chat for the model: chat_json is a JSON object with "messages" (required) and optional
 * "tools", "add_generation_prompt" (default true) and any further keys, which the template sees as
 * variables (e.g. "enable_thinking"). bos_token and eos_token come from the model unless given.
 * A model without a chat template gets the plain fallback: the messages' contents joined by "\n\n",
 * with no role markers and no generation prompt, so a base model continues the text. Output and
 * errors as kiln_template_render. */
KILN_API kiln_status kiln_chat_apply(const kiln_model *model, const char *chat_json, size_t len, char **out,
                                     size_t *out_len);

/* Releases memory the library handed to the caller (kiln_template_render, kiln_chat_apply,
 * kiln_chat_parser_message). */
KILN_API void kiln_free(void *p);

/* ---- tool calls and reasoning: reading a model's reply ---------------------------------------- */

/* A chat parser reads a model's reply, as it is generated, and turns it into an OpenAI message:
 * content (the answer), reasoning_content (the thinking) and tool_calls, from the markup the
 * model's family writes (<tool_call>{...}</tool_call>, [TOOL_CALLS]name[ARGS]{...}, harmony
 * channels, <think>...</think>, ...). It is fed text in pieces of any size (a piece may end in the
 * middle of a marker or of a UTF-8 character) and hands out deltas the way OpenAI streams them:
 * content and reasoning text, and per tool call a first delta with its index, id and name and then
 * fragments of its arguments, whose concatenation is the final arguments JSON. Deltas are final:
 * text that might be the start of markup is held back until it is known, so markup never appears
 * as content. A parser is used by one thread at a time. */
typedef struct kiln_chat_parser kiln_chat_parser;

typedef enum kiln_reasoning_format {
    KILN_REASONING_AUTO = 0, /* thinking text goes to reasoning_content (default) */
    KILN_REASONING_NONE,     /* thinking stays in content, with its markers */
    KILN_REASONING_DEEPSEEK, /* as AUTO (the name OpenAI-compatible servers use for it) */
} kiln_reasoning_format;

typedef struct kiln_chat_parser_params {
    const char *format;              /* a format name (kiln_chat_format_get), or NULL / "auto" (default):
                                        detected from chat_template (kiln_chat_format_detect) */
    const char *chat_template;       /* the model's chat template (Jinja text), for detection; may be NULL */
    const char *tools;               /* the request's "tools": a JSON array of {"type": "function",
                                        "function": {"name", "parameters"}} (or of the inner objects);
                                        NULL: none. Parameter types decide how typeless formats' values
                                        are read (a string parameter stays a string); formats that
                                        mark calls by no markup at all (a bare [name(...)]) need them */
    kiln_reasoning_format reasoning; /* default AUTO */
    const char *prompt;              /* the rendered prompt (at least its end), or NULL: tells what state
                                        the generation prompt leaves, e.g. a thinking block it opened */
    bool thinking_open;              /* the prompt left a thinking block open (also detected from
                                        prompt): the reply starts inside reasoning */
    bool parse_tool_calls;           /* default true; false: tool-call markup stays content (harmony
                                        calls, which are not content, are dropped) */
    uint64_t id_seed;                /* ids of calls the model writes without one are made from it;
                                        0 (default): a random seed */
} kiln_chat_parser_params;

KILN_API kiln_chat_parser_params kiln_chat_parser_default_params(void);

/* Creates a parser. KILN_ERR_INVALID_ARG for an unknown format name or tools that are not a JSON
 * array of functions with names (kiln_last_error() says which); KILN_ERR_NOMEM. */
KILN_API kiln_status kiln_chat_parser_new(const kiln_chat_parser_params *params, kiln_chat_parser **out);
KILN_API void kiln_chat_parser_free(kiln_chat_parser *parser);
/* The name of the format the parser reads (e.g. "hermes"). */
KILN_API const char *kiln_chat_parser_format(const kiln_chat_parser *parser);

/* Adds len bytes of the reply. KILN_ERR_INVALID_ARG after finish or past a limit (64 MiB of reply,
 * 1,024 tool calls, 4 MiB for an argument value read whole), KILN_ERR_NOMEM; the message keeps what
 * was parsed before, and later feeds return the same error. */
KILN_API kiln_status kiln_chat_parser_feed(kiln_chat_parser *parser, const char *text, size_t len);
/* Ends the input: text held back is decided (markup that never completed is content), an open
 * tool call is closed with the arguments it has. */
KILN_API kiln_status kiln_chat_parser_finish(kiln_chat_parser *parser);

typedef enum kiln_chat_delta_kind {
    KILN_DELTA_CONTENT = 0,
    KILN_DELTA_REASONING,
    KILN_DELTA_TOOL_CALL,
} kiln_chat_delta_kind;

/* One piece of the message. Strings are owned by the parser, valid until its next call. */
typedef struct kiln_chat_delta {
    kiln_chat_delta_kind kind;
    const char *text; /* content or reasoning text; for a tool call a fragment of its arguments
                         (may be empty on its first delta) */
    size_t len;
    int32_t index;    /* tool call: its index in the message (0, 1, ...) */
    const char *id;   /* tool call: its id on its first delta, else NULL */
    const char *name; /* tool call: its function name on its first delta, else NULL */
} kiln_chat_delta;

/* Takes the next delta in the order the reply produced them (reasoning before the content that
 * followed it); false when none is pending. Consecutive text of one kind comes as one delta. */
KILN_API bool kiln_chat_parser_next(kiln_chat_parser *parser, kiln_chat_delta *out);

/* The message so far as an OpenAI assistant message, {"role": "assistant", "content": ...,
 * "reasoning_content": ..., "tool_calls": [{"id", "type": "function", "function": {"name",
 * "arguments"}}]}: content is null when it is empty and there are tool calls, reasoning_content
 * and tool_calls are left out when empty. Before finish it also shows a tool call whose first delta is held back
 * because its id may still follow. *json is NUL-terminated and owned by the caller (kiln_free). */
KILN_API kiln_status kiln_chat_parser_message(const kiln_chat_parser *parser, char **json, size_t *len);
/* Tool calls in the message so far (a reply with calls ends with finish_reason "tool_calls"). */
KILN_API int32_t kiln_chat_parser_n_tool_calls(const kiln_chat_parser *parser);
/* The message of the parser's last failed call, "" when none failed. */
KILN_API const char *kiln_chat_parser_last_error(const kiln_chat_parser *parser);

/* The format a chat template writes tool calls and reasoning in ("generic" when it names none of
 * kiln's: a JSON object {"tool_calls": [...]} or {"response": "..."} when tools are declared).
 * tmpl may be NULL. The name is static. */
KILN_API const char *kiln_chat_format_detect(const char *tmpl);
/* Format i of kiln's table (0, 1, ...): its name and a line naming the models that write it;
 * false past the end. Strings are static. */
KILN_API bool kiln_chat_format_get(size_t i, const char **name, const char **models);
/* Whether a generation read by a parser of this format must render special tokens
 * (kiln_generate_params.render_special): true where the format's markers are special tokens of the
 * vocabulary (gpt-oss, Kimi, DeepSeek, ...), false where its markup is plain text (hermes,
 * qwen3-coder, generic). */
KILN_API bool kiln_chat_format_renders_special(const char *format);

/* ---- tool calls: the grammar that enforces them ------------------------------------------------ */

typedef enum kiln_tool_choice {
    KILN_TOOL_CHOICE_AUTO = 0, /* a LAZY grammar (kiln_grammar_params.triggers): the reply is free until
                                  the format's call opener appears; from it on only well-formed calls
                                  of the declared tools, then what the format allows after them */
    KILN_TOOL_CHOICE_REQUIRED, /* the reply is calls of the declared tools (after the format's reasoning
                                  block, where the format has one) */
    KILN_TOOL_CHOICE_NAMED,    /* as REQUIRED, of the function `name` only */
} kiln_tool_choice;

typedef struct kiln_tool_grammar_params {
    const char *format;        /* a format name or alias (kiln_chat_format_get); required */
    const char *tools;         /* a JSON array of {"type": "function", "function": {"name", "parameters",
                                  "strict"}} (or of the inner objects); required, non-empty */
    kiln_tool_choice choice;   /* default AUTO */
    const char *name;          /* NAMED: the function's name */
    bool parallel;             /* true (default): one call or more; false: exactly one */
    const char *prompt;        /* the rendered prompt (its end is enough), or NULL: a prompt that
                                  leaves the format's thinking block open makes REQUIRED / NAMED
                                  replies start inside it; one that closed it (thinking disabled)
                                  allows none */
    const char *chat_template; /* the chat template, or NULL: REQUIRED / NAMED replies may begin with
                                  the format's reasoning block only when the template writes its
                                  reasoning markers (a thinking model) */
} kiln_tool_grammar_params;

KILN_API kiln_tool_grammar_params kiln_tool_grammar_default_params(void);

typedef struct kiln_grammar kiln_grammar; /* see "constrained output" below */

/* Compiles the grammar of tool calls in the markup of params->format into *out: each call's
 * arguments are valid under its function's "parameters" schema (strict when the function says
 * "strict": true; objects' properties in the schema's order in JSON arguments, in any order in the
 * XML-like formats, whose string values are raw text). Formats: see docs/tool-calls.md; one that has
 * no call grammar gives KILN_ERR_UNSUPPORTED naming it. Bad tools or a schema kiln cannot enforce
 * give KILN_ERR_INVALID_ARG with kiln_last_error() starting with the field, e.g.
 * "tools[1].function.parameters: ...". Free with kiln_grammar_free. */
KILN_API kiln_status kiln_tool_grammar(const kiln_tool_grammar_params *params, kiln_grammar **out);

/* ---- sampling -------------------------------------------------------------------------------- */

typedef struct kiln_logit_bias {
    kiln_token token;
    float bias; /* added to the logit; -INFINITY bans the token */
} kiln_logit_bias;

/* The sampler chain, applied in this order:
 *   1. repetition, presence and frequency penalties over the last penalty_last_n tokens
 *   2. logit bias
 *   3. temperature 0: greedy (highest logit, lowest id on ties) and the rest is skipped
 *   4. top-k, 5. temperature, 6. softmax, 7. top-p, 8. min-p, 9. draw with the seeded RNG. */
typedef struct kiln_sampler_params {
    float temperature;                 /* default 0.8; 0 means greedy */
    int32_t top_k;                     /* default 40; 0 disables */
    float top_p;                       /* default 0.95; 1 disables */
    float min_p;                       /* default 0.05; 0 disables */
    float repeat_penalty;              /* default 1.0 (off); llama.cpp's multiplicative penalty */
    float presence_penalty;            /* default 0 (off) */
    float frequency_penalty;           /* default 0 (off) */
    int32_t penalty_last_n;            /* default 64; window of recent tokens the penalties look at */
    uint64_t seed;                     /* default 0xFFFFFFFF...: choose a random seed */
    const kiln_logit_bias *logit_bias; /* borrowed for the duration of the generate call */
    size_t n_logit_bias;
} kiln_sampler_params;

#define KILN_SEED_RANDOM UINT64_MAX

KILN_API kiln_sampler_params kiln_sampler_default_params(void);

/* The numeric sampling parameters, for the table of their ranges below. */
typedef enum kiln_sampler_param {
    KILN_SAMPLER_TEMPERATURE = 0,
    KILN_SAMPLER_TOP_K,
    KILN_SAMPLER_TOP_P,
    KILN_SAMPLER_MIN_P,
    KILN_SAMPLER_REPEAT_PENALTY,
    KILN_SAMPLER_PRESENCE_PENALTY,
    KILN_SAMPLER_FREQUENCY_PENALTY,
    KILN_SAMPLER_PENALTY_LAST_N,
    KILN_SAMPLER_PARAM_COUNT
} kiln_sampler_param;

/* One row of the table of sampling parameter ranges. The table is the single definition of what
 * kiln accepts: the library's validation (kiln_generate, kiln_engine_submit), the CLI's flags and
 * chat /set, the HTTP API's request fields and a model file's general.sampling.* settings all read
 * it, so a value one of them accepts, every one accepts. The ranges, both ends included:
 *   temperature        [0, 2]        as OpenAI documents it (0 = greedy)
 *   top_k              [0, 2^30]     0 = off; more than the vocabulary = all of it
 *   top_p              [0, 1]        as OpenAI (1 = off)
 *   min_p              [0, 1]        0 = off
 *   repeat_penalty     [0.001, 100]  1 = off; the multiplicative penalty stays finite over this range
 *   presence_penalty   [-2, 2]       as OpenAI
 *   frequency_penalty  [-2, 2]       as OpenAI
 *   penalty_last_n     [0, 2^20]     0 = the penalties look at nothing
 * Where OpenAI documents a range, kiln uses it, so a request valid for OpenAI is valid for kiln and
 * the CLI accepts the same values as the server; the other ranges are what the sampler handles
 * sanely (finite logits, bounded buffers). */
typedef struct kiln_sampler_range {
    const char *name; /* the kiln_sampler_params field, e.g. "temperature" */
    double min, max;  /* accepted values, both included */
    double def;       /* the library default (kiln_sampler_default_params) */
    bool integer;     /* an int32_t field (top_k, penalty_last_n): integral values only */
} kiln_sampler_range;

/* The row of param, or NULL for a value outside the enum. The table is constant and static. */
KILN_API const kiln_sampler_range *kiln_sampler_param_range(kiln_sampler_param param);

/* Sets param in *params to value after checking it against the table: KILN_ERR_INVALID_ARG (and
 * kiln_last_error() naming the parameter and its range) for a value outside it, NaN, or a
 * non-integral value of an integer parameter; *params is then unchanged. */
KILN_API kiln_status kiln_sampler_param_set(kiln_sampler_params *params, kiln_sampler_param param, double value);

/* The library defaults overridden by the settings the model file recommends (GGUF keys
 * general.sampling.temp, top_k, top_p, min_p, penalty_repeat, penalty_last_n). A value outside
 * kiln_sampler_param_range is ignored with a warning. */
KILN_API kiln_sampler_params kiln_model_sampler_params(const kiln_model *model);

/* ---- session (one generation context) -------------------------------------------------------- */

typedef struct kiln_session kiln_session;

/* Speculative decoding: a step proposes several tokens of a row and the model verifies them in one
 * batched pass (decode is bound by memory bandwidth, so checking k tokens costs little more than
 * one). Lossless: a greedy row's output is bit-identical to decoding without it, and a sampled
 * row's is identical for the same seed (each committed token is drawn from the target's own
 * distribution at its position; a proposal is kept when the draw equals it, which is the standard
 * acceptance rule min(1, p/q) with the residual max(0, p - q) for a proposal that is a point mass).
 * The number of proposed tokens adapts per row to its recent acceptance and falls to none where it
 * does not pay. */
typedef enum kiln_spec_method {
    KILN_SPEC_NONE = 0,  /* one token per step */
    KILN_SPEC_NGRAM = 1, /* prompt lookup: the continuation of the longest recent n-gram match in
                            the row's own prompt and output */
    KILN_SPEC_DRAFT = 2  /* a smaller draft model with the same vocabulary proposes greedily */
} kiln_spec_method;
#define KILN_SPEC_METHODS     3  /* entries of the per-method statistics */
#define KILN_SPEC_MAX_LIMIT   16 /* spec_max at most */
#define KILN_SPEC_MAX_DEFAULT 8  /* spec_max when 0 */

/* "none", "ngram" or "draft" into *out; KILN_ERR_INVALID_ARG (naming the choices) otherwise. */
KILN_API kiln_status kiln_spec_method_parse(const char *name, kiln_spec_method *out);
/* The name of a method ("none", "ngram", "draft"); "?" outside the enum. */
KILN_API const char *kiln_spec_method_name(kiln_spec_method method);

/* The formats of the KV cache (--kv-type). Bytes per element of a 128-element head: f16/bf16 2,
 * f32 4, q8_0 1.0625, q4_0 0.5625, tq4 0.516, tq3 0.391 (kiln_kv_bytes_per_token gives the exact
 * figure for a model). q8_0 and q4_0 are blocks of 32 along the head dimension (fewer for heads of
 * another size), tq4 and tq3 TurboQuant's MSE stage (rotated, per-vector norm, Lloyd-Max codes). */
typedef enum kiln_kv_type {
    KILN_KV_F16 = 0,
    KILN_KV_F32 = 1,
    KILN_KV_BF16 = 2,
    KILN_KV_Q8_0 = 3,
    KILN_KV_Q4_0 = 4,
    KILN_KV_TQ4 = 5,
    KILN_KV_TQ3 = 6,
    KILN_KV_SAME = -1 /* kv_type_v only: the type of the keys */
} kiln_kv_type;

/* The randomized Hadamard rotation of K and V head vectors (query rotated alike, output rotated
 * back): AUTO = on for q8_0, q4_0, tq4 and tq3 (always on for the last two), off for f16, bf16 and
 * f32 (measured: docs/benchmarks.md). */
typedef enum kiln_kv_rotation {
    KILN_KV_ROTATE_AUTO = 0,
    KILN_KV_ROTATE_OFF = 1,
    KILN_KV_ROTATE_ON = 2
} kiln_kv_rotation;

/* The name of a KV type ("f16", "q8_0", ...); NULL for a value outside the enum (and KILN_KV_SAME). */
KILN_API const char *kiln_kv_type_name(kiln_kv_type type);
/* Every KV type name, comma-separated ("f16, f32, ..."), for messages. */
KILN_API const char *kiln_kv_type_list(void);
/* The KV type called name (case-insensitive); KILN_ERR_INVALID_ARG, with kiln_last_error() listing the
 * types, for any other name. */
KILN_API kiln_status kiln_kv_type_parse(const char *name, kiln_kv_type *out);

typedef struct kiln_session_params {
    int32_t n_ctx;        /* context length in tokens; 0 = kiln_default_n_ctx: the model's training
                             length, capped at KILN_N_CTX_DEFAULT_MAX */
    int32_t n_batch;      /* prompt tokens per forward chunk (prefill); default 256 */
    int32_t n_threads;    /* 0 = number of physical cores */
    kiln_kv_type kv_type; /* default F16 */
    bool logits_all;      /* keep logits for every position of an eval chunk (n_batch x n_vocab
                             floats); needed by kiln_session_eval(..., all_logits = true) */

    kiln_spec_method spec;   /* speculative decoding of kiln_generate*; default KILN_SPEC_NONE */
    kiln_model *draft_model; /* KILN_SPEC_DRAFT: the draft (same vocabulary, else kiln_session_new
                                fails); must outlive the session */
    int32_t spec_max;        /* tokens proposed per step at most, 1..KILN_SPEC_MAX_LIMIT; 0 = default */
    /* Keys and values apart (kiln_kv_type), and their rotation. */
    kiln_kv_type kv_type_v;     /* type of the values; KILN_KV_SAME (default) = kv_type */
    kiln_kv_rotation kv_rotate; /* default KILN_KV_ROTATE_AUTO */
} kiln_session_params;

KILN_API kiln_session_params kiln_session_default_params(void);

/* Creates a session on model (which must outlive it). Every buffer the generation loop needs (KV,
 * activations, logits) is allocated here; the token loop allocates nothing. */
KILN_API kiln_status kiln_session_new(kiln_model *model, const kiln_session_params *params, kiln_session **out);
KILN_API void kiln_session_free(kiln_session *session);
KILN_API const char *kiln_session_last_error(const kiln_session *session);
KILN_API int32_t kiln_session_n_ctx(const kiln_session *session);
/* Worker threads the session runs with (the resolved value when n_threads was 0). */
KILN_API int32_t kiln_session_n_threads(const kiln_session *session);

/* Forgets every token in the session (the KV cache becomes empty). */
KILN_API void kiln_session_reset(kiln_session *session);
/* Number of tokens currently held in the session's KV cache. */
KILN_API int32_t kiln_session_n_past(const kiln_session *session);

/* Low-level evaluation: appends n tokens after the ones already in the session and runs the
 * forward pass in chunks of n_batch. If all_logits (the session must have been created with
 * logits_all, and n must be <= n_batch), the logits of every one of the n positions are kept;
 * otherwise only the last. KILN_ERR_CONTEXT_FULL when the tokens do not fit and
 * KILN_ERR_INVALID_ARG for a token outside the vocabulary (the session is left unchanged). */
KILN_API kiln_status kiln_session_eval(kiln_session *session, const kiln_token *tokens, size_t n, bool all_logits);
/* Logits [n_vocab] of position i of the last eval (i = -1: its last position). NULL when that
 * position's logits were not kept. Valid until the next call on the session. */
KILN_API const float *kiln_session_logits(const kiln_session *session, int32_t i);

/* One of the most likely tokens at a generation step. */
typedef struct kiln_top_logprob {
    kiln_token token;
    float logprob;
} kiln_top_logprob;

#define KILN_MAX_TOP_LOGPROBS 20

/* One generated token, as given to the token callback. */
typedef struct kiln_token_event {
    kiln_token token;            /* -1 for the final event that only flushes held-back text */
    const char *text;            /* text released with this token: whole UTF-8 characters. With stop
                                    strings, text that could begin a stop string is held back and released
                                    with a later token (or dropped when it turns out to be a stop string). */
    size_t text_len;             /* may be 0 (e.g. the first half of a multi-byte character) */
    float logprob;               /* natural-log probability of token under the model's distribution (the
                                    softmax of the raw logits; with a grammar, of the logits of the
                                    allowed tokens: the constrained distribution); 0 when logprobs
                                    were not requested */
    const kiln_top_logprob *top; /* the n_top most likely tokens, most likely first (lowest id on
                                    ties); valid during the callback only */
    size_t n_top;
    bool prompt; /* an event of a prompt token (prompt_logprobs): token is the prompt's,
                    logprob and top its distribution at that position; no text */
} kiln_token_event;

/* Called for every generated token; returning non-zero stops the generation (KILN_ERR_CANCELLED). */
typedef int (*kiln_token_fn)(const kiln_token_event *event, void *user);

typedef enum kiln_stop_reason {
    KILN_STOP_NONE = 0,
    KILN_STOP_EOS,       /* the model produced an end-of-generation token */
    KILN_STOP_LENGTH,    /* max_tokens reached */
    KILN_STOP_CONTEXT,   /* the context is full */
    KILN_STOP_CANCELLED, /* the token callback asked to stop */
    KILN_STOP_STRING     /* a stop string appeared in the output */
} kiln_stop_reason;

/* ---- constrained output: GBNF grammars, JSON Schema, JSON mode --------------------------------- */

/* A compiled constraint on a generation's output text. With one set, every token a generation emits
 * is one whose bytes continue a sentence of the grammar's language (tokens are byte strings; a token
 * may end in the middle of a UTF-8 character), and end-of-generation is allowed exactly when the text
 * so far is a whole sentence: the output is valid by construction, unless max_tokens or the context
 * cuts it first (the result then says KILN_STOP_LENGTH / KILN_STOP_CONTEXT). A compiled grammar does
 * not depend on a model: it is immutable, reference counted and may be shared by any number of
 * generations on any models and threads. */
typedef struct kiln_grammar kiln_grammar;

typedef enum kiln_grammar_kind {
    KILN_GRAMMAR_GBNF,        /* text: a GBNF grammar (rules "name ::= ...", a "root" rule) */
    KILN_GRAMMAR_JSON_SCHEMA, /* text: a JSON Schema; the output is one JSON value valid under it,
                                 its objects' properties in the schema's order (what is enforced
                                 exactly or approximately: docs/structured-output.md) */
    KILN_GRAMMAR_JSON_OBJECT, /* JSON mode: any JSON object; text is unused (may be NULL) */
} kiln_grammar_kind;

typedef struct kiln_grammar_params {
    kiln_grammar_kind kind;      /* default KILN_GRAMMAR_GBNF */
    bool strict;                 /* JSON Schema: strict mode: an object admits only the properties its
                                    schema lists unless it says otherwise (additionalProperties
                                    defaults to false instead of true); default false */
    const char *const *triggers; /* NULL (default): the grammar constrains the whole output. Else a
                                    LAZY grammar: the output is free (no mask is computed, only each
                                    token's bytes are scanned) until one of these strings appears
                                    in it; from that occurrence's first byte on, the rest of the
                                    output must be a sentence of the grammar, so the grammar's
                                    sentences begin with a trigger (e.g. root ::= "<tool_call>" ...).
                                    The occurrence that completes first counts (the earlier start on
                                    a tie); it may span tokens. Triggers are matched on each token's
                                    text as output, special tokens included when render_special is
                                    set (so "<|python_tag|>" can be a trigger). A token that would
                                    complete a trigger but whose bytes from it on cannot begin a
                                    sentence is never emitted (it is excluded and the token drawn
                                    again). Before the trigger, end-of-generation and ignore_eos act
                                    as unconstrained. Copied at compile time; each trigger must
                                    begin a sentence (else KILN_ERR_INVALID_ARG names it) */
    size_t n_triggers;           /* at most KILN_GRAMMAR_MAX_TRIGGERS, each 1 to
                                    KILN_GRAMMAR_MAX_TRIGGER_LEN bytes */
} kiln_grammar_params;

#define KILN_GRAMMAR_MAX_TEXT        (1u << 20) /* bytes of grammar or schema text at most */
#define KILN_GRAMMAR_MAX_TRIGGERS    16         /* triggers of a lazy grammar at most */
#define KILN_GRAMMAR_MAX_TRIGGER_LEN 256        /* bytes per trigger */

KILN_API kiln_grammar_params kiln_grammar_default_params(void);

/* Compiles text[len] (a GBNF grammar or JSON Schema per params->kind; params NULL = defaults) into
 * *out. Fails closed: text that does not compile, or a schema keyword kiln cannot enforce, returns
 * KILN_ERR_INVALID_ARG (KILN_ERR_UNSUPPORTED for a feature kiln does not implement, KILN_ERR_NOMEM)
 * and kiln_last_error() names the place: "line L, column C: ..." in a grammar, the JSON pointer of
 * the keyword in a schema. Free with kiln_grammar_free. */
KILN_API kiln_status kiln_grammar_compile(const char *text, size_t len, const kiln_grammar_params *params,
                                          kiln_grammar **out);

/* Drops the caller's reference; generations that use the grammar hold their own. NULL is a no-op. */
KILN_API void kiln_grammar_free(kiln_grammar *grammar);

/* The GBNF text the grammar runs (for a JSON Schema or JSON mode: what it compiled to). Owned by the
 * grammar. */
KILN_API const char *kiln_grammar_gbnf(const kiln_grammar *grammar);

/* NULL when the grammar enforces what it was compiled from exactly: always for GBNF and JSON mode,
 * and for a JSON Schema whose every keyword kiln enforces exactly. Else the first keyword it enforces
 * only approximately (a superset: every valid instance is still admitted, some invalid ones too;
 * docs/structured-output.md lists each), as its JSON pointer and what is enforced, e.g.
 * "#/properties/host/format: the format's usual shape is enforced, not its full grammar"; for a tool
 * grammar (kiln_tool_grammar) prefixed with the tool's parameters, "tools[0].function.parameters: ...".
 * Owned by the grammar. Use it to warn a user, or to refuse a schema where only exact will do. */
KILN_API const char *kiln_grammar_approximation(const kiln_grammar *grammar);

/* Whether text[len], as a whole, is a sentence of the grammar's language; for a lazy grammar
 * (triggers), whether it has no trigger, or is a sentence from its first trigger on. */
KILN_API bool kiln_grammar_accepts(const kiln_grammar *grammar, const char *text, size_t len);

#define KILN_MAX_STOP     16   /* stop strings per generation */
#define KILN_MAX_STOP_LEN 1024 /* bytes per stop string */

struct kiln_generate_result;
/* Called once at the end of every generation, after its last token event, with the final status
 * (KILN_OK, KILN_ERR_CANCELLED, ...) and result. */
typedef void (*kiln_done_fn)(kiln_status status, const struct kiln_generate_result *result, void *user);

typedef struct kiln_generate_params {
    int32_t max_tokens;  /* new tokens at most; default 256; < 0 = until EOS or context end */
    bool ignore_eos;     /* keep going past end-of-generation tokens */
    bool add_special;    /* prepend BOS per the model's metadata; default true */
    bool parse_special;  /* parse special-token text in the prompt; default false */
    bool render_special; /* the output text (token events, stop-string matching) includes the text of
                            special tokens such as "<|channel|>" or "<|tool_calls_section_begin|>",
                            for a chat parser of a family whose markup is special tokens; default
                            false. End-of-generation tokens that end the generation give no text.
                            A grammar then matches special tokens by their texts */
    kiln_sampler_params sampling;
    const char *const *stop;     /* stop strings (non-empty, NUL-terminated), matched on the decoded
                                    text; the output ends before the first match, which is never
                                    emitted. Borrowed for the call. */
    size_t n_stop;               /* at most KILN_MAX_STOP */
    int32_t logprobs;            /* -1 (default): none; 0: the chosen token's logprob in each event;
                                    N in 1..KILN_MAX_TOP_LOGPROBS: also the N most likely tokens */
    int32_t prompt_logprobs;     /* -1 (default): none; N in 0..KILN_MAX_TOP_LOGPROBS: before the
                                    generated tokens, an event (prompt = true) for each prompt token
                                    after the first, with its logprob given the tokens before it
                                    (the raw logits' softmax, no grammar) and the N most likely tokens
                                    there. The prompt is then computed whole: no cached prefix is
                                    restored for it (an engine computes such a prompt in chunks of a
                                    few dozen tokens) */
    const kiln_grammar *grammar; /* NULL (default): unconstrained; else every token is masked to the
                                    grammar (see kiln_grammar). The generation takes its own
                                    reference (the caller may free its grammar at once); logprobs
                                    then report the constrained distribution. An end-of-generation
                                    token, allowed only when the text is a whole sentence, ends a
                                    constrained generation with KILN_STOP_EOS even with ignore_eos;
                                    so does a token after which nothing may follow. When no token
                                    can continue, the generation fails and result.error says
                                    why: KILN_ERR_UNSUPPORTED for the grammar's own property (text
                                    the vocabulary cannot spell, a state too ambiguous),
                                    KILN_ERR_NOMEM when the matcher ran out of memory */
    kiln_token_fn on_token;      /* may be NULL */
    kiln_done_fn on_done;        /* may be NULL; called once when the generation ends */
    void *user;                  /* passed to on_token and on_done */

    bool speculative;  /* default true: use the session's or engine's speculative method; false:
                          decode this generation one token per step */
    bool share_prompt; /* engine with a prompt cache: the prompt's KV goes to the prefix cache as
                          soon as it is computed, so requests of the same prompt submitted
                          after this one's first token event restore it instead of
                          computing it again (the choices of n > 1); default false */
} kiln_generate_params;

KILN_API kiln_generate_params kiln_generate_default_params(void);

typedef struct kiln_generate_result {
    int32_t n_prompt;    /* prompt tokens evaluated */
    int32_t n_generated; /* tokens generated */
    int32_t n_cached;    /* prompt tokens whose KV came from the prefix cache (engine only) */
    double prompt_ms;    /* wall time of prefill */
    double gen_ms;       /* wall time of generation (from the first sampled token on) */
    kiln_stop_reason stop;
    int32_t stop_index; /* with KILN_STOP_STRING: which stop string matched; else -1 */
    const char *error;  /* never NULL: "" when the generation succeeded, else why it failed
                           (e.g. the KV memory a request could not get); owned by the library,
                           valid until the request is freed (engine) or the session's next
                           call */

    int32_t n_spec_proposed; /* speculative decoding: tokens proposed, and of them accepted */
    int32_t n_spec_accepted;
} kiln_generate_result;

/* Resets the session, tokenizes prompt, evaluates it and generates until a stop condition, calling
 * on_token for each token. result may be NULL. An empty prompt starts from BOS alone. */
KILN_API kiln_status kiln_generate(kiln_session *session, const char *prompt, const kiln_generate_params *params,
                                   kiln_generate_result *result);

/* Same as kiln_generate but from token ids (used as given: no BOS is added). */
KILN_API kiln_status kiln_generate_tokens(kiln_session *session, const kiln_token *prompt, size_t n_prompt,
                                          const kiln_generate_params *params, kiln_generate_result *result);

/* ---- engine: many generations on one model, continuously batched ------------------------------ */

/* An engine owns a scheduler thread that advances up to max_rows generations together: each step
 * reads every weight once for all rows (one decode token per running row, plus prompt chunks of
 * rows that are joining). Requests join at step boundaries and leave the moment they finish or are
 * cancelled. Greedy output of a request is bit-identical whether it runs alone or in any batch. */
typedef struct kiln_engine kiln_engine;
typedef struct kiln_request kiln_request;

typedef struct kiln_engine_params {
    int32_t n_ctx;         /* context per row; 0 = kiln_default_n_ctx (the model's training length,
                              at most KILN_N_CTX_DEFAULT_MAX) */
    int32_t max_rows;      /* generations advanced together; default 8 (1 = one at a time) */
    int32_t max_queue;     /* requests waiting for a row; default 64; beyond: KILN_ERR_BUSY */
    int32_t prefill_chunk; /* prompt tokens a prefilling row adds per step; default 64 (measured:
                              bench/chunk.mjs in docs/benchmarks.md) */
    int32_t n_threads;     /* 0 = number of physical cores */
    kiln_kv_type kv_type;  /* default F16 */
    uint64_t kv_budget;    /* bytes of KV all rows may hold together; 0 = max_rows full rows. A
                              budget below one row still runs one row (estimates are advisory) */
    uint64_t prompt_cache; /* bytes of the prefix cache (KV of earlier requests, reused by later
                              ones that start with the same tokens); 0 = off;
                              KILN_PROMPT_CACHE_AUTO (default) = kiln_default_prompt_cache(
                              kiln_physical_memory()) */
    /* The prefix cache's SSD tier: entries leaving RAM (and entries idle in RAM) are written to
     * files in ssd_dir by a background thread, and a later request, also after a restart of the
     * process, restores its prefix from them instead of recomputing it. Files are keyed by model
     * fingerprint, tokenizer hash and KV format; damaged or mismatched files are moved to
     * ssd_dir/quarantine and never loaded. */
    const char *ssd_dir;       /* directory (created when missing, with its parents); NULL (default)
                                  = no SSD tier. Copied by kiln_engine_new. An unusable directory
                                  fails kiln_engine_new with KILN_ERR_IO. */
    uint64_t ssd_max_bytes;    /* bytes of cache files the directory may hold (all models together);
                                  the least recently used files are deleted beyond it; default 20 GB */
    int32_t ssd_demote_idle_s; /* seconds an entry stays unused in RAM before it is also written to
                                  SSD (it stays in RAM); default 30; 0 = as soon as it is cached */
    bool ssd_verify;           /* check every tensor checksum when restoring; default true. The
                                  header checksum (which covers the token ids) is always checked;
                                  false skips the tensor checksums (for benchmarks only: a damaged
                                  file's K/V is then loaded and can change the output). */

    kiln_spec_method spec;   /* speculative decoding of every request that allows it; default none */
    kiln_model *draft_model; /* KILN_SPEC_DRAFT: the draft (same vocabulary, else kiln_engine_new
                                fails); must outlive the engine */
    int32_t spec_max;        /* tokens proposed per row and step at most, 1..KILN_SPEC_MAX_LIMIT;
                                0 = KILN_SPEC_MAX_DEFAULT */
    /* Keys and values apart (kiln_kv_type), and their rotation. */
    kiln_kv_type kv_type_v;     /* type of the values; KILN_KV_SAME (default) = kv_type */
    kiln_kv_rotation kv_rotate; /* default KILN_KV_ROTATE_AUTO */
    /* Paged KV: rows and the prefix cache hold KV in blocks of 16 positions from one pool sized by
     * kv_budget (0: max_rows full rows plus prompt_cache); a prefix-cache hit maps the cached
     * blocks into the row instead of copying them (rows sharing a prompt hold it once). Output is
     * the same bits either way. Default true; false = one contiguous cache per row (copying
     * prefix cache). */
    bool kv_paging;
} kiln_engine_params;

/* kiln_engine_params.prompt_cache: size the prefix cache from the machine's memory. */
#define KILN_PROMPT_CACHE_AUTO UINT64_MAX

KILN_API kiln_engine_params kiln_engine_default_params(void);

KILN_API kiln_status kiln_engine_new(kiln_model *model, const kiln_engine_params *params, kiln_engine **out);

/* Makes the SSD tier durable: hands every prefix cache entry not yet on SSD to the writer and
 * returns once every write queued before or by this call is on disk (file and directory synced,
 * index committed). Waits at most timeout_ms (< 0: no limit); KILN_ERR_BUSY when writes are still
 * pending then (they continue in the background). KILN_OK at once when the engine has no SSD
 * tier. Safe from any thread, also after kiln_engine_shutdown (the entries of the requests that
 * finished before it are flushed too). kiln_engine_free does not wait for pending writes: call
 * this first to keep them. */
KILN_API kiln_status kiln_engine_flush_cache(kiln_engine *engine, int timeout_ms);

/* Stops taking requests, cancels the queued ones, gives running ones up to grace_ms to finish,
 * cancels the rest and joins the scheduler. Their on_done callbacks have run when it returns.
 * May be called again, also from another thread while a first call waits out its grace: the
 * second call cancels what still runs at once. kiln_engine_free calls it with grace 0. */
KILN_API void kiln_engine_shutdown(kiln_engine *engine, int grace_ms);
KILN_API void kiln_engine_free(kiln_engine *engine);

KILN_API int32_t kiln_engine_n_ctx(const kiln_engine *engine);
KILN_API int32_t kiln_engine_n_threads(const kiln_engine *engine);

/* Queues a generation of prompt[n_prompt] (copied; used as given, no BOS added). params is copied,
 * including its stop strings and logit bias; on_token and on_done are called on the engine's
 * thread (keep them short), on_token returning non-zero cancels this request only. On success
 * *out is a handle the caller must release with kiln_request_free. KILN_ERR_BUSY when the queue
 * is full; KILN_ERR_INVALID_ARG / KILN_ERR_CONTEXT_FULL for a bad prompt or parameters (checked
 * here, so an accepted request fails only by cancellation, or with KILN_ERR_NOMEM when the memory of
 * its row cannot be had; its result's error then says why). */
KILN_API kiln_status kiln_engine_submit(kiln_engine *engine, const kiln_token *prompt, size_t n_prompt,
                                        const kiln_generate_params *params, kiln_request **out);

/* Asks the engine to stop the request (thread-safe, any time): a queued request never starts, a
 * running one leaves the batch at the next step. Its on_done reports KILN_ERR_CANCELLED. */
KILN_API void kiln_request_cancel(kiln_request *request);
/* Blocks until the request has ended; returns its status and fills *result (may be NULL). Call it
 * only while the engine exists (after kiln_engine_shutdown every request has ended). */
KILN_API kiln_status kiln_request_wait(kiln_request *request, kiln_generate_result *result);
/* Releases the caller's handle; a request still running is cancelled first (without waiting).
 * Handles may be freed before or after their engine. */
KILN_API void kiln_request_free(kiln_request *request);

typedef struct kiln_engine_stats {
    int32_t active;         /* rows generating or prefilling */
    int32_t queued;         /* requests waiting for a row */
    int32_t max_rows;       /* rows the KV budget allows */
    uint64_t kv_bytes;      /* KV memory held by rows (allocated on first use, then kept) */
    uint64_t kv_bytes_used; /* of which holding tokens of running requests */
    uint64_t steps;         /* forward passes run */
    int32_t cache_entries;  /* prefix cache: entries held */
    uint64_t cache_bytes;   /* bytes they hold (of cache_budget) */
    uint64_t cache_budget;
    uint64_t cache_hits; /* requests that reused a cached prefix */
    uint64_t cache_misses;
    uint64_t cache_hit_tokens; /* prompt tokens not recomputed thanks to the cache */
    /* SSD tier (all 0 without one) */
    bool ssd_enabled;
    int32_t ssd_entries;      /* files of this model and KV format */
    uint64_t ssd_bytes;       /* bytes of all cache files in the directory (every model) */
    uint64_t ssd_budget;      /* ssd_max_bytes */
    uint64_t ssd_hits;        /* requests whose prefix was restored from SSD (also in cache_hits) */
    uint64_t ssd_hit_tokens;  /* prompt tokens restored from SSD */
    uint64_t ssd_writes;      /* files written */
    int32_t ssd_pending;      /* writes queued or in progress */
    uint64_t ssd_evictions;   /* files deleted to stay within ssd_max_bytes */
    uint64_t ssd_quarantined; /* damaged, truncated or mismatched files moved to quarantine/ */
    uint64_t ssd_errors;      /* failed writes or reads (disk full, I/O errors); the entry is
                                 then simply not cached */

    /* speculative decoding, by kiln_spec_method: tokens proposed, and of them accepted */
    uint64_t spec_proposed[KILN_SPEC_METHODS];
    uint64_t spec_accepted[KILN_SPEC_METHODS];
    /* the rows\' KV format */
    uint64_t kv_bytes_per_token; /* KV bytes one position of a row takes (K and V, all layers) */
    kiln_kv_type kv_type_k, kv_type_v;
    bool kv_rotate_k, kv_rotate_v; /* whether keys / values are stored rotated */
    /* paged KV (all 0 when off): the pool's blocks in all, those holding KV (of rows or the prefix
     * cache), those held by more than one (shared prefixes), and positions per block; kv_bytes is
     * then the memory of the blocks made so far (made on first use, then kept) */
    int32_t kv_blocks_total, kv_blocks_used, kv_blocks_shared, kv_block_tokens;
    uint64_t kv_block_bytes; /* bytes of one block */
} kiln_engine_stats;

KILN_API void kiln_engine_get_stats(kiln_engine *engine, kiln_engine_stats *out);

/* ---- embeddings: one vector per input, on the engine --------------------------------------------- */

/* An embedding model turns a text into one vector: an encoder (bert, nomic-bert: bidirectional
 * attention, no output head, it does not generate) or a decoder whose file names a pooling
 * ({arch}.pooling_type, e.g. Qwen3-Embedding: the last token's state). The token states of an input
 * are pooled as the file says: "mean", "cls" (the first token's) or "last". */

/* Whether the model makes embeddings (an encoder, or a file that names its pooling). */
KILN_API bool kiln_model_is_embedding(const kiln_model *model);
/* Whether the model generates text (false for encoders such as bert). */
KILN_API bool kiln_model_can_generate(const kiln_model *model);
/* The model's pooling: "mean", "cls", "last", "rank" (a reranker, which kiln does not run) or "none"
 * (not an embedding model). */
KILN_API const char *kiln_model_pooling(const kiln_model *model);

/* Inputs one kiln_engine_embed call takes at most. */
#define KILN_EMBED_MAX_INPUTS 2048

typedef struct kiln_embed_params {
    bool normalize;     /* scale each vector to unit (L2) length; default true */
    int32_t dimensions; /* 0 (default): the model's width (kiln_model_n_embd); else keep the first
                           `dimensions` values (Matryoshka truncation) before normalizing; more than
                           the model's width is KILN_ERR_INVALID_ARG */
    bool truncate;      /* an input longer than kiln_engine_embed_max_tokens keeps its first tokens
                           instead of failing with KILN_ERR_CONTEXT_FULL; default false */
} kiln_embed_params;

KILN_API kiln_embed_params kiln_embed_default_params(void);

typedef struct kiln_embed_result {
    int32_t dim;         /* values per vector */
    int64_t n_tokens;    /* tokens evaluated, all inputs together (after truncation) */
    int32_t n_truncated; /* inputs cut to the limit (params.truncate) */
} kiln_embed_result;

/* The most tokens one input of kiln_engine_embed may hold: the engine's context, and for a model
 * with absolute position embeddings at most their count. */
KILN_API int32_t kiln_engine_embed_max_tokens(const kiln_engine *engine);

/* Embeds n_inputs inputs (inputs[i] holds n_tokens[i] ids, used as given: kiln_tokenize with
 * add_special adds what the model's metadata asks for, such as bert's [CLS] and [SEP]) into
 * out[n_inputs][dim] (out_cap floats available; dim as result->dim says). Blocks until done: the
 * engine's scheduler runs the inputs as the rows of one batch (several passes of at most
 * kiln_engine_embed_max_tokens tokens when they are more), each pass between two generation steps,
 * so generation goes on meanwhile. An input's vector is the same bits whatever inputs share its
 * call. Thread-safe. Status: KILN_ERR_UNSUPPORTED (the model is not an embedding model),
 * KILN_ERR_INVALID_ARG (no inputs or more than KILN_EMBED_MAX_INPUTS, an empty input, an id outside
 * the vocabulary, dimensions out of range), KILN_ERR_CONTEXT_FULL (an input over the limit without
 * truncate), KILN_ERR_BUFFER_SMALL (out_cap), KILN_ERR_BUSY (the engine is shutting down),
 * KILN_ERR_NOMEM; kiln_last_error() says which input and why. result may be NULL. */
KILN_API kiln_status kiln_engine_embed(kiln_engine *engine, const kiln_token *const *inputs, const size_t *n_tokens,
                                       size_t n_inputs, const kiln_embed_params *params, float *out, size_t out_cap,
                                       kiln_embed_result *result);

/* ---- policy: the defaults and estimates front ends plan with ---------------------------------- */

/* The context a session or engine row gets when its params say 0: the model's training length, at
 * most KILN_N_CTX_DEFAULT_MAX tokens. The cap keeps the default KV of a long-context model modest
 * without knowing the machine; a front end that plans with the machine's memory may choose longer
 * contexts explicitly (kiln serve's automatic mode does, when the KV of its rows fits). */
#define KILN_N_CTX_DEFAULT_MAX   4096
/* The training length assumed for a model file that does not state one ({arch}.context_length). */
#define KILN_N_CTX_TRAIN_ASSUMED 4096

/* Limits of the params: the largest context, thread count and prompt chunk a session or engine
 * accepts (beyond: KILN_ERR_INVALID_ARG). */
#define KILN_N_CTX_MAX     (1 << 24)
#define KILN_N_THREADS_MAX 1024
#define KILN_N_BATCH_MAX   65536

/* The default context for a model trained on n_ctx_train tokens (<= 0: not stated, so
 * KILN_N_CTX_TRAIN_ASSUMED): min(n_ctx_train, KILN_N_CTX_DEFAULT_MAX). */
KILN_API int32_t kiln_default_n_ctx(int32_t n_ctx_train);

/* The automatic prompt-cache size (KILN_PROMPT_CACHE_AUTO) for a machine with memory_bytes of
 * memory: 1/KILN_PROMPT_CACHE_MEMORY_SHARE of it, at most KILN_PROMPT_CACHE_MAX_AUTO bytes (0 when
 * memory_bytes is 0). */
#define KILN_PROMPT_CACHE_MEMORY_SHARE 8
#define KILN_PROMPT_CACHE_MAX_AUTO     ((uint64_t)8 << 30)
KILN_API uint64_t kiln_default_prompt_cache(uint64_t memory_bytes);

/* Bytes of KV one token of context takes for the model a header read describes, with KV type
 * type: K and V of every layer, 2 * n_layer * n_head_kv head vectors of head_dim elements in the
 * type's format (for f16: 2 bytes an element; see kiln_kv_type for the others). A session
 * or an engine row of n_ctx tokens allocates exactly n_ctx times this, so a listing or an automatic
 * model choice can plan memory before loading anything. 0 when the info lacks the dimensions or the
 * type is unknown; UINT64_MAX when the dimensions are too large to multiply. */
KILN_API uint64_t kiln_kv_bytes_per_token(const kiln_model_info *info, kiln_kv_type type);
/* The same for a loaded model. */
KILN_API uint64_t kiln_model_kv_bytes_per_token(const kiln_model *model, kiln_kv_type type);
/* The same with keys of type k and values of type v (KILN_KV_SAME: k). */
KILN_API uint64_t kiln_kv_bytes_per_token_kv(const kiln_model_info *info, kiln_kv_type k, kiln_kv_type v);
KILN_API uint64_t kiln_model_kv_bytes_per_token_kv(const kiln_model *model, kiln_kv_type k, kiln_kv_type v);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */

/*
 * common.c - argument parsing, usage texts, model loading and chat rendering shared by the CLI verbs.
 */
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct usage_entry {
    const char *verb;
    const char *text;
    bool sampling; /* followed by the sampling flags (print_sampling_flags) */
} usage_entry;

/* The sampling flags: each sets one parameter of the library's table (kiln_sampler_param_range),
 * which gives its accepted range and default, so help, parsing and the library cannot disagree. */
typedef struct sampling_flag {
    const char *flag;
    const char *arg;
    kiln_sampler_param param;
    unsigned bit; /* CLI_SP_* */
    const char *help;
} sampling_flag;

static const sampling_flag sampling_flags[] = {
    {"--temp", "T", KILN_SAMPLER_TEMPERATURE, CLI_SP_TEMP, "temperature; 0 = greedy"},
    {"--top-k", "K", KILN_SAMPLER_TOP_K, CLI_SP_TOP_K, "keep the K most likely tokens; 0 = off"},
    {"--top-p", "P", KILN_SAMPLER_TOP_P, CLI_SP_TOP_P, "nucleus sampling mass; 1 = off"},
    {"--min-p", "P", KILN_SAMPLER_MIN_P, CLI_SP_MIN_P, "drop tokens below P x the best probability; 0 = off"},
    {"--repeat-penalty", "R", KILN_SAMPLER_REPEAT_PENALTY, CLI_SP_REPEAT, "penalize recent tokens; 1 = off"},
    {"--repeat-last-n", "N", KILN_SAMPLER_PENALTY_LAST_N, CLI_SP_REPEAT_N, "window of the penalties"},
    {"--presence-penalty", "P", KILN_SAMPLER_PRESENCE_PENALTY, CLI_SP_PRESENCE, "OpenAI-style presence penalty"},
    {"--frequency-penalty", "F", KILN_SAMPLER_FREQUENCY_PENALTY, CLI_SP_FREQUENCY, "OpenAI-style frequency penalty"},
};

/* One help line per sampling flag, with its range and default from the library's table. */
static void print_sampling_flags(FILE *f) {
    for (size_t i = 0; i < sizeof sampling_flags / sizeof sampling_flags[0]; i++) {
        const sampling_flag *sf = &sampling_flags[i];
        const kiln_sampler_range *r = kiln_sampler_param_range(sf->param);
        char head[48];
        snprintf(head, sizeof head, "%s %s", sf->flag, sf->arg);
        if (strlen(head) > 20) fprintf(f, "  %s\n", head); /* too wide for the column: help on the next line */
        fprintf(f, "  %-20s %s (%.10g to %.10g, default %.10g)\n", strlen(head) > 20 ? "" : head, sf->help, r->min,
                r->max, r->def);
    }
    fputs("  -s, --seed S         RNG seed (default: random)\n", f);
}

#define STR_(x) #x
#define STR(x)  STR_(x)

#define MODEL_FLAGS                                                                                                    \
    "  -m, --model FILE     GGUF model file, or a model's name as kiln ls shows it\n"                                  \
    "  -t, --threads N      worker threads (default: physical cores)\n"                                                \
    "  -c, --ctx-size N     context length (default: the model's, at most " STR(                                       \
        KILN_N_CTX_DEFAULT_MAX) ")\n"                                                                                  \
                                "  -b, --batch-size N   prompt tokens per forward chunk (default 256)\n"               \
                                "  --kv-type T          KV cache type: f16 (default), bf16, f32, q8_0, q4_0, tq4,\n"   \
                                "                       tq3; --kv-type-k / --kv-type-v (or --cache-type-k / -v)\n"     \
                                "                       set keys and values apart\n"                                   \
                                "  --kv-rotate auto|on|off  Hadamard rotation of K/V (auto: on for q*, tq*)\n"         \
                                "  --mmap               keep weights in the file mapping instead of memory\n"          \
                                "  -v, --verbose        log more to stderr\n"

#define SPEC_FLAGS                                                                                                     \
    "  --spec METHOD        speculative decoding: none (default), ngram (prompt lookup) or draft\n"                    \
    "  --draft-model MODEL  the draft model of --spec draft (same vocabulary; alone it means draft)\n"                 \
    "  --spec-max K         tokens proposed per step at most, 1-16 (default 8; adapts per row)\n"

/* run, chat and serve check the memory before loading (hub_fit.c) */
#define FIT_FLAGS                                                                                                      \
    "  --fit on|off         before loading, check that the model, its KV and buffers fit in the\n"                     \
    "                       memory available and refuse when not (default on; off loads anyway)\n"

static const usage_entry usages[] = {
    {"run",
     "usage: kiln run -m MODEL [-p PROMPT | -f FILE] [-n N] [options]\n"
     "Prints the prompt, then streams the model's continuation to stdout; a summary of prompt and\n"
     "generation speed goes to stderr.\n"
     "  -p, --prompt TEXT    prompt text (default: empty, start from BOS)\n"
     "  -f, --file FILE      read the prompt from FILE\n"
     "  --raw                send the prompt as it is (special-token text such as <|im_start|>\n"
     "                       becomes the special token); by default a model with a chat template\n"
     "                       gets it as a user message rendered by the template (then only the\n"
     "                       reply is printed)\n"
     "  --system TEXT        a system message before the prompt (with the chat template)\n"
     "  -n, --n-predict N    new tokens at most (default 256; -1 = until end of text)\n"
     "  --ignore-eos         keep generating past end-of-text tokens\n"
     "  --grammar-file FILE  constrain the output to a GBNF grammar (--grammar TEXT: given inline)\n"
     "  --json-schema SCHEMA constrain the output to JSON valid under a JSON Schema (the schema's\n"
     "                       text, or a file holding it); --strict: objects admit only the\n"
     "                       properties their schema lists\n"
     "  --json-object        constrain the output to a JSON object (JSON mode)\n"
     "  --chat-template-file FILE  use this Jinja chat template instead of the model's\n" SPEC_FLAGS FIT_FLAGS
         MODEL_FLAGS,
     true},
    {"chat",
     "usage: kiln chat [-m MODEL] [--system TEXT] [-n N] [--stop-at blank|line|none] [options]\n"
     "An interactive chat in the terminal (without -m: $KILN_MODEL, else the model kiln serve would\n"
     "pick). The whole conversation is rendered with the model's chat\n"
     "template every turn (the KV of the turns before is reused) and the reply streams to stdout.\n"
     "Line editing and history (~/.cache/kiln/chat_history). Commands: /clear, /system TEXT,\n"
     "/set NAME VALUE (temp, top_p, top_k, min_p, repeat_penalty, seed, max_tokens, stop_at), /help,\n"
     "/quit. Ctrl-C stops a reply; Ctrl-D or /quit leaves. Keys typed during a reply wait for the next\n"
     "prompt. A full context drops the oldest turns. When stdin is not a terminal, each line is a\n"
     "user turn (or a command) and each reply is printed followed by a newline.\n"
     "  --system TEXT        the system prompt\n"
     "  -n, --n-predict N    new tokens per reply at most (default -1: to the end of the turn; 256\n"
     "                       for a model without a chat template)\n"
     "  --stop-at WHERE      what else ends a reply: blank (a blank line; the default without a chat\n"
     "                       template), line (a line break) or none (the default with one)\n"
     "  --ignore-eos         keep generating past end-of-text tokens\n"
     "  --chat-template-file FILE  use this Jinja chat template instead of the model's\n"
     "  --tool-format NAME   how replies write reasoning and tool calls (default auto: from the template;\n"
     "                       generic: show replies as they come)\n" SPEC_FLAGS FIT_FLAGS MODEL_FLAGS,
     true},
    {"serve",
     "usage: kiln serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [options]\n"
     "       kiln [options]   (the same, with automatic choices)\n"
     "Serves the model over an OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions,\n"
     "/v1/models, /health, /metrics, /stats, /tokenize, /detokenize, /apply-template,\n"
     "/admin/cache/flush (makes the SSD cache durable).\n"
     "The model: -m, else $KILN_MODEL, else the largest model kiln ls finds whose weights and KV\n"
     "fit in 60% of the machine's memory. Unset values come from the model and the machine:\n"
     "threads = physical cores, context per row = the model's training length (at most 16384,\n"
     "less when memory is short), prompt cache = 1/8 of memory.\n"
     "  --print-config       print every resolved setting and where it came from, then exit\n"
     "  --host ADDR          address to listen on (default 127.0.0.1, loopback only)\n"
     "  --port N             port (default $KILN_PORT or 8080, then the next 20 when taken; an\n"
     "                       explicit port that is taken is an error; 0 picks a free one)\n"
     "  --no-open            do not open the browser (opened when stdin and stdout are terminals\n"
     "                       and DISPLAY or WAYLAND_DISPLAY is set)\n"
     "  --api-key KEY        require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every\n"
     "                       route but the chat page (/) and /health\n"
     "  --timeout S          close a connection whose client sends or takes nothing for S\n"
     "                       seconds (default 5; 0 = never); the server's own waits do not count\n"
     "  --max-connections N  open connections at most (default 1024); more are closed at once\n"
     "  --max-connections-per-ip N  open connections from one client address (default 256)\n"
     "  --cors ORIGIN[,...]  let web pages of these origins call the API ('*': any; default none)\n"
     "  --allow-host NAME[,...]  Host names accepted besides IP addresses, localhost and --host\n"
     "                       (for reverse proxies; '*': any); others get 403\n"
     "  --max-models N       models loaded at once (default: no count limit; memory decides);\n"
     "                       a request names any model `kiln ls` lists in its \"model\" field\n"
     "  --models-memory GB   planned memory of the loaded models at most (default: 60% of the\n"
     "                       machine's); the least recently used idle model is unloaded first\n"
     "  --model-load-timeout S  a request waits this long for its model to load (default 300)\n"
     "  --model-alias NAME=MODEL  another name for a model (repeatable)\n"
     "  --no-isolation       run the engine in the server's process (default: in a child process\n"
     "                       that a supervisor restarts when it crashes)\n"
     "  --engine-timeout S   restart an isolated engine that has work and makes no progress for S\n"
     "                       seconds (default 60; 0 = never)\n"
     "  --debug-crash        tests only: the header 'X-Kiln-Debug-Crash: N' aborts the engine\n"
     "  --chat-template-file FILE  use this Jinja chat template instead of the model's\n"
     "  --tool-format NAME   how replies write tool calls and reasoning (default auto: detected\n"
     "                       from the chat template; `kiln parse --list-formats` names them)\n"
     "  --max-tokens N       new tokens when a request gives no max_tokens (default -1: to the\n"
     "                       end of text or of the context)\n"
     "  --max-tokens-limit N the most new tokens any request gets: a larger max_tokens, or none,\n"
     "                       ends at N with finish_reason \"length\" (default 0: no limit)\n"
     "  --batch N            requests generated together, continuously batched (default 8;\n"
     "                       1 = one at a time)\n"
     "  --max-queue N        requests that may wait for a free row (default 64; beyond: 429)\n"
     "  --prefill-chunk N    prompt tokens a joining request adds per step (default 64)\n"
     "  --kv-budget GB       KV memory all rows may use together (default: --batch full rows);\n"
     "                       -c sets the context of each row\n"
     "  --kv-paging on|off   KV in shared blocks of 16 positions: rows starting with a cached\n"
     "                       prompt hold it once (default on; off: one contiguous cache per row)\n"
     "  --prompt-cache GB    memory for the prefix cache: KV of earlier requests reused by later\n"
     "                       ones with the same beginning (default: 1/8 of RAM, at most 8 GiB;\n"
     "                       0 turns it off)\n"
     "  --ssd-cache [DIR]    also keep cached prefixes as files in DIR (default ~/.cache/kiln/kv),\n"
     "                       restored after a restart; off unless given\n"
     "  --ssd-cache-max GB   bytes of cache files DIR may hold; least recently used files are\n"
     "                       deleted beyond it (default 20)\n"
     "  --ssd-demote-idle S  also write a cached prefix unused for S seconds (default 30; 0 = at\n"
     "                       once); prefixes leaving the RAM cache are always written\n"
     "  --no-ssd-cache-verify\n"
     "                       skip the tensor checksums when restoring a file, for benchmarks only:\n"
     "                       damaged K/V is then loaded (checked by default: --ssd-cache-verify)\n"
     "  --max-body-mb N      largest request body in MiB (default 8; beyond: 413)\n"
     "Sampling flags set the defaults of requests that do not give a value; the model's own\n"
     "recommended settings come next, then the library's defaults.\n" SPEC_FLAGS FIT_FLAGS MODEL_FLAGS,
     true},
    {"ls",
     "usage: kiln ls [--json] [-v]\n"
     "Lists the GGUF models found on this machine (and model directories kiln pull fetched), one\n"
     "row each: name, architecture, parameters,\n"
     "weight type, size, training context and path. kiln looks in ~/.cache/kiln/models, in every\n"
     "directory or file of $KILN_MODELS (colon-separated), and in the Hugging Face cache\n"
     "($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub). A name works as -m NAME.\n"
     "Unusable files are left out with a reason on stderr; split models are left out too.\n"
     "  --json               one JSON array of objects (name, path, file, source, architecture,\n"
     "                       model_name, parameters, weight_type, size_bytes, context_length,\n"
     "                       kv_bytes_per_token (F16 KV per token of context), runnable)\n",
     false},
    {"pull",
     "usage: kiln pull ORG/NAME[:QUANT] [--revision REV]\n"
     "Downloads a model from the Hugging Face Hub into the Hugging Face cache, where kiln ls and\n"
     "-m ORG/NAME[:QUANT] find it (and Python tools share it). ORG/NAME fetches the repository's\n"
     "safetensors, configs and tokenizer files (not other frameworks' weights); a repository of GGUF\n"
     "files gets its Q4_K_M. ORG/NAME:QUANT fetches that GGUF quant (case-insensitive; every part of\n"
     "a split one); an unknown quant lists those available. It first says whether the model fits\n"
     "this machine. Files are checked against their sha256; an interrupted download resumes when the\n"
     "command runs again, and files already in the cache are not downloaded again.\n"
     "  --revision REV       a branch, tag or commit (default main)\n"
     "Environment: HF_TOKEN (gated or private models), HF_ENDPOINT (another hub), HF_HUB_OFFLINE=1\n"
     "(the cache only), HF_HUB_CACHE / HF_HOME (where the cache is).\n",
     false},
    {"rm",
     "usage: kiln rm ORG/NAME[:QUANT] [-y]\n"
     "Removes a pulled model from the Hugging Face cache: ORG/NAME the whole repository, ORG/NAME:QUANT\n"
     "that quant's files (and the blobs no other snapshot uses). Asks first on a terminal.\n"
     "  -y, --yes            do not ask\n",
     false},
    {"perplexity",
     "usage: kiln perplexity -m MODEL -f TEXT [-c CTX] [options]\n"
     "Perplexity of the model on a text, by llama.cpp's llama-perplexity method: the tokens are split\n"
     "into chunks of CTX, each starting with BOS; the second half of each chunk is scored. Prints the\n"
     "running value per chunk and the final estimate with its error.\n"
     "  -f, --file FILE      the text (needs at least 2 x CTX tokens)\n"
     "  --kl-save FILE       write the next-token distributions of the scored positions to FILE\n"
     "  --kl-base FILE       compare with a --kl-save FILE: mean KL divergence, same top token\n" MODEL_FLAGS,
     false},
    {"bench",
     "usage: kiln bench -m MODEL [-p 512] [-n 128] [-t 1,2] [-r 5] [--json] [options]\n"
     "Measures prompt processing (ppP: P prompt tokens in one pass) and token generation (tgN: N\n"
     "tokens one at a time), each after a warm-up run, R times; prints the median and the spread in\n"
     "tokens/s, one row per thread count and test (or one JSON object per line with --json).\n"
     "  -p, --n-prompt P     prompt tokens (default 512; 0 skips the pp test)\n"
     "  -n, --n-gen N        generated tokens (default 128; 0 skips the tg test)\n"
     "  -t, --threads LIST   thread counts, comma-separated (default: physical cores)\n"
     "  -r, --repetitions R  measured runs per test (default 5)\n"
     "  -d, --depth D        evaluate D tokens first; the runs follow in that context (default 0)\n"
     "  --json               JSON lines instead of a table\n" SPEC_FLAGS MODEL_FLAGS,
     false},
    {"grammar",
     "usage: kiln grammar (--schema FILE | --gbnf FILE | --json-object) [--strict] [--check INSTANCE.json]...\n"
     "                    [--print-gbnf]\n"
     "Compiles an output constraint as kiln serve and kiln run do: a JSON Schema, a GBNF grammar or\n"
     "JSON mode (any JSON object). Without --check or --print-gbnf it prints '<source>: compiles'.\n"
     "  --schema FILE        a JSON Schema (also --json-schema-file FILE, or --json-schema TEXT)\n"
     "  --gbnf FILE          a GBNF grammar (also --grammar-file FILE, or --grammar TEXT)\n"
     "  --json-object        JSON mode\n"
     "  --strict             a schema in strict mode: objects admit only the properties they list\n"
     "  --check FILE         whether the JSON instance in FILE is in the language: it must be\n"
     "                       accepted both serialized compactly and pretty-printed with indent 2\n"
     "                       (may be repeated)\n"
     "  --print-gbnf         print the GBNF the constraint runs (what a schema compiles to)\n"
     "Exit status: 0 compiled and every instance accepted; 1 an instance is not in the language\n"
     "(stderr says which form was rejected); 2 bad usage, an unreadable file, a schema or grammar\n"
     "that does not compile (stderr names the place: line and column, or the JSON pointer), an\n"
     "instance that is not JSON.\n",
     false},
    {"tokenize",
     "usage: kiln tokenize -m MODEL [-p TEXT | -f FILE] [--ids] [--no-bos] [--parse-special]\n"
     "Prints the tokens of a text, one 'id -> 'piece'' per line (works on vocab-only files).\n"
     "  -p, --prompt TEXT    the text\n"
     "  -f, --file FILE      read the text from FILE\n"
     "  --ids                print only the ids, space-separated, on one line\n"
     "  --no-bos             do not add BOS / EOS\n"
     "  --parse-special      turn special-token text such as <|eot_id|> into special tokens\n"
     "  -m, --model FILE     GGUF model or vocabulary file\n",
     false},
    {"inspect",
     "usage: kiln inspect MODEL [--tensor NAME [--dequant]]\n"
     "Shows what a GGUF file or a Hugging Face / MLX model directory holds: its format (gguf,\n"
     "safetensors or mlx), metadata (a directory's config.json) and tensor table as stored.\n"
     "  --tensor NAME        show only that tensor\n"
     "  --dequant            with --tensor: write its values to stdout as little-endian float32\n"
     "                       (an MLX weight as scale * q + bias) and nothing else\n",
     false},
    {"embed",
     "usage: kiln embed -m MODEL [-p TEXT | -f FILE] [--plain] [--dimensions N] [--no-normalize] [--truncate]\n"
     "Prints the embedding of a text from an embedding model (bert, nomic-bert, Qwen3-Embedding): with -p\n"
     "one text; else every non-empty line of FILE or of standard input, embedded as one batch. One JSON\n"
     "array per text (default), or with --plain the numbers separated by spaces, one text per line.\n"
     "  -p, --prompt TEXT    the text\n"
     "  -f, --file FILE      one text per line of FILE (default: standard input)\n"
     "  --plain              numbers separated by spaces instead of JSON arrays\n"
     "  --dimensions N       keep the first N values (then normalize)\n"
     "  --no-normalize       print the pooled vectors as they are (default: unit length)\n"
     "  --truncate           cut a text longer than the model's limit instead of failing\n"
     "  -c, --ctx-size N     the limit of one text in tokens (default: the model's, at most 4096)\n"
     "  -t, --threads N      threads (default: physical cores)\n"
     "  -m, --model FILE     GGUF embedding model\n",
     false},
    {"template",
     "usage: kiln template (--template FILE | -m MODEL) [--context JSON_FILE]\n"
     "Renders a Jinja2 chat template as Hugging Face's apply_chat_template does and prints the result\n"
     "to stdout exactly (no newline added). The context is a JSON object whose keys become template\n"
     "variables (messages, tools, add_generation_prompt, ...). A template error exits with status 1.\n"
     "  --template FILE      the template to render\n"
     "  -m, --model FILE     render this GGUF model's chat template instead: bos_token and eos_token\n"
     "                       come from the model and add_generation_prompt defaults to true\n"
     "  --context FILE       the JSON object of variables (default: {})\n"
     "kiln template --batch OUTDIR TEMPLATE... -- CONTEXT... renders every template with every context\n"
     "and writes OUTDIR/T__C.out (the output) or OUTDIR/T__C.err (the error), T and C the file names\n"
     "without folder and extension.\n",
     false},
    {"parse",
     "usage: kiln parse --template FILE [--tools TOOLS.json] [--reasoning-format none|auto|deepseek]\n"
     "                  [--chat-template-kwargs JSON] [--tool-format NAME] [--deltas [--chunk N]] < RAW\n"
     "       kiln parse --list-formats\n"
     "Reads a model's raw reply on standard input and prints the OpenAI message kiln makes of it\n"
     "(content, reasoning_content, tool_calls) as one line of JSON. The reply answers a conversation\n"
     "rendered with the template, whose generation prompt may leave a thinking block open.\n"
     "  --template FILE      the model's chat template (Jinja): its tool-call format and prompt\n"
     "  --tools FILE         the request's tools (a JSON array of OpenAI function tools)\n"
     "  --reasoning-format F none: thinking stays in content; auto / deepseek (default auto):\n"
     "                       thinking goes to reasoning_content\n"
     "  --chat-template-kwargs JSON  extra template variables, e.g. '{\"enable_thinking\": false}'\n"
     "  --tool-format NAME   read this format instead of the template's (--list-formats names them)\n"
     "  --no-tool-calls      leave tool-call markup in content\n"
     "  --deltas             also print each streamed delta as a JSON line first\n"
     "  --chunk N            with --deltas: feed the reply N bytes at a time (default: all at once)\n"
     "  --seed N             seed of the ids made for calls the model writes without one\n",
     false},
};

void cli_usage(const char *verb, bool to_stderr) {
    FILE *f = to_stderr ? stderr : stdout;
    if (verb) {
        for (size_t i = 0; i < sizeof usages / sizeof usages[0]; i++) {
            if (strcmp(usages[i].verb, verb) == 0) {
                fputs(usages[i].text, f);
                if (usages[i].sampling) print_sampling_flags(f);
                return;
            }
        }
        fprintf(f, "kiln: unknown command '%s'\n", verb);
    }
    fputs("usage: kiln COMMAND [options]\n"
          "kiln " KILN_VERSION_STRING ": local LLM inference.\n\n"
          "commands:\n"
          "  run          generate text from a prompt\n"
          "  chat         chat with a model in the terminal\n"
          "  serve        serve a model over an OpenAI-compatible HTTP API (the default: kiln alone\n"
          "               serves the most suitable local model)\n"
          "  ls           list the models found on this machine\n"
          "  pull         download a model from Hugging Face (kiln pull ORG/NAME[:QUANT])\n"
          "  rm           remove a pulled model\n"
          "  perplexity   measure a model's perplexity on a text\n"
          "  tokenize     show how a text is tokenized\n"
          "  inspect      show a model file's metadata and tensors\n"
          "  embed        print the embedding vectors of texts\n"
          "  bench        measure prompt and generation speed\n"
          "  template     render a chat template with a JSON context\n"
          "  grammar      compile a JSON Schema or GBNF grammar; check JSON against it\n"
          "  parse        turn a model's raw reply into content, reasoning and tool calls\n"
          "  help [CMD]   show help for a command\n\n"
          "  --version    print the version\n",
          f);
}

void cli_common_init(cli_common *c) {
    memset(c, 0, sizeof *c);
    c->n_predict = 256;
    c->batch = 256;
    c->kv_type = KILN_KV_F16;
    c->kv_type_v = KILN_KV_SAME;
    c->kv_rotate = KILN_KV_ROTATE_AUTO;
    c->sp = kiln_sampler_default_params();
}

bool cli_int(const char *name, const char *v, long lo, long hi, int *out) {
    if (!v) {
        fprintf(stderr, "kiln: %s needs a value\n", name);
        return false;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "kiln: %s must be an integer in [%ld, %ld], got '%s'\n", name, lo, hi, v);
        return false;
    }
    *out = (int)x;
    return true;
}

bool cli_float(const char *name, const char *v, double lo, double hi, float *out) {
    if (!v) {
        fprintf(stderr, "kiln: %s needs a value\n", name);
        return false;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "kiln: %s must be a number in [%g, %g], got '%s'\n", name, lo, hi, v);
        return false;
    }
    *out = (float)x;
    return true;
}

bool cli_sampler_value(const char *name, const char *v, kiln_sampler_param param, kiln_sampler_params *sp) {
    const kiln_sampler_range *r = kiln_sampler_param_range(param);
    if (!v) {
        fprintf(stderr, "kiln: %s needs a value\n", name);
        return false;
    }
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (errno || end == v || *end || kiln_sampler_param_set(sp, param, x) != KILN_OK) {
        fprintf(stderr, "kiln: %s must be %s in [%.10g, %.10g], got '%s'\n", name,
                r->integer ? "an integer" : "a number", r->min, r->max, v);
        return false;
    }
    return true;
}

static bool is(const char *a, const char *s, const char *l) {
    return (s && strcmp(a, s) == 0) || (l && strcmp(a, l) == 0);
}

int cli_parse_common(int argc, char **argv, int *i, cli_common *c) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
#define TAKE(ok)                                                                                                       \
    do {                                                                                                               \
        if (!(ok)) return -1;                                                                                          \
        (*i)++;                                                                                                        \
        return 1;                                                                                                      \
    } while (0)
#define TAKE_SP(bit, ok)                                                                                               \
    do {                                                                                                               \
        if (!(ok)) return -1;                                                                                          \
        c->sp_set |= (bit);                                                                                            \
        (*i)++;                                                                                                        \
        return 1;                                                                                                      \
    } while (0)
    if (is(a, "-m", "--model")) {
        if (!v) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        c->model = v;
        (*i)++;
        return 1;
    }
    if (is(a, "-p", "--prompt")) {
        if (!v) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        c->prompt = v;
        (*i)++;
        return 1;
    }
    if (is(a, "-f", "--file")) {
        if (!v) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        c->file = v;
        (*i)++;
        return 1;
    }
    if (is(a, "-n", "--n-predict")) TAKE(cli_int(a, v, -1, CLI_MAX_TOKENS_MAX, &c->n_predict));
    if (is(a, "-t", "--threads")) TAKE(cli_int(a, v, 1, KILN_N_THREADS_MAX, &c->threads));
    if (is(a, "-c", "--ctx-size")) TAKE(cli_int(a, v, 1, KILN_N_CTX_MAX, &c->ctx));
    if (is(a, "-b", "--batch-size")) TAKE(cli_int(a, v, 1, KILN_N_BATCH_MAX, &c->batch));
    for (size_t k = 0; k < sizeof sampling_flags / sizeof sampling_flags[0]; k++)
        if (is(a, NULL, sampling_flags[k].flag))
            TAKE_SP(sampling_flags[k].bit, cli_sampler_value(a, v, sampling_flags[k].param, &c->sp));
    if (is(a, "-s", "--seed")) {
        if (!v) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') {
            fprintf(stderr, "kiln: %s must be a non-negative integer, got '%s'\n", a, v);
            return -1;
        }
        c->sp.seed = s;
        c->sp_set |= CLI_SP_SEED;
        (*i)++;
        return 1;
    }
    if (is(a, NULL, "--kv-type") || is(a, NULL, "--kv-type-k") || is(a, NULL, "--kv-type-v") ||
        is(a, NULL, "--cache-type-k") || is(a, NULL, "--cache-type-v")) {
        kiln_kv_type t;
        if (kiln_kv_type_parse(v, &t) != KILN_OK) {
            fprintf(stderr, "kiln: %s: unknown KV type '%s' (types: %s)\n", a, v ? v : "", kiln_kv_type_list());
            return -1;
        }
        if (strcmp(a, "--kv-type") == 0) { /* keys and values */
            c->kv_type = t;
            c->kv_type_v = KILN_KV_SAME;
        } else if (a[strlen(a) - 1] == 'k') { /* keys only: values keep their type */
            if (c->kv_type_v == KILN_KV_SAME) c->kv_type_v = c->kv_type;
            c->kv_type = t;
        } else {
            c->kv_type_v = t;
        }
        (*i)++;
        return 1;
    }
    if (is(a, NULL, "--kv-rotate")) {
        if (v && strcmp(v, "auto") == 0) c->kv_rotate = KILN_KV_ROTATE_AUTO;
        else if (v && strcmp(v, "on") == 0) c->kv_rotate = KILN_KV_ROTATE_ON;
        else if (v && strcmp(v, "off") == 0) c->kv_rotate = KILN_KV_ROTATE_OFF;
        else {
            fprintf(stderr, "kiln: --kv-rotate must be auto, on or off\n");
            return -1;
        }
        (*i)++;
        return 1;
    }
    if (is(a, NULL, "--kernels")) {
        if (v && strcmp(v, "auto") == 0) c->kernels = KILN_KERNELS_AUTO;
        else if (v && strcmp(v, "ref") == 0) c->kernels = KILN_KERNELS_REF;
        else {
            fprintf(stderr, "kiln: --kernels must be auto or ref\n");
            return -1;
        }
        (*i)++;
        return 1;
    }
    if (is(a, NULL, "--ignore-eos")) {
        c->ignore_eos = true;
        return 1;
    }
    if (is(a, NULL, "--mmap")) {
        c->mmap = true;
        return 1;
    }
    if (is(a, "-v", "--verbose")) {
        c->verbose = true;
        return 1;
    }
#undef TAKE
#undef TAKE_SP
    return 0;
}

kiln_sampler_params cli_sampler_params(const cli_common *c, const kiln_model *m) {
    kiln_sampler_params p = kiln_model_sampler_params(m);
    const kiln_sampler_params *f = &c->sp;
    if (c->sp_set & CLI_SP_TEMP) p.temperature = f->temperature;
    if (c->sp_set & CLI_SP_TOP_K) p.top_k = f->top_k;
    if (c->sp_set & CLI_SP_TOP_P) p.top_p = f->top_p;
    if (c->sp_set & CLI_SP_MIN_P) p.min_p = f->min_p;
    if (c->sp_set & CLI_SP_REPEAT) p.repeat_penalty = f->repeat_penalty;
    if (c->sp_set & CLI_SP_REPEAT_N) p.penalty_last_n = f->penalty_last_n;
    if (c->sp_set & CLI_SP_PRESENCE) p.presence_penalty = f->presence_penalty;
    if (c->sp_set & CLI_SP_FREQUENCY) p.frequency_penalty = f->frequency_penalty;
    if (c->sp_set & CLI_SP_SEED) p.seed = f->seed;
    return p;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kiln: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap > ((size_t)1 << 32)) {
            free(buf);
            buf = NULL;
            fprintf(stderr, "kiln: '%s' is too large\n", path);
            break;
        }
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        }
        buf = nb;
    }
    if (buf && ferror(f)) {
        fprintf(stderr, "kiln: cannot read '%s': %s\n", path, strerror(errno));
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}

static bool g_verbose;

static void log_sink(kiln_log_level level, const char *msg, void *user) {
    (void)user;
    static const char *const tags[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "kiln: %s: %s\n", tags[level], msg);
}

void cli_setup_log(bool verbose) {
    g_verbose = verbose;
    kiln_set_log(log_sink, NULL, verbose ? KILN_LOG_DEBUG : KILN_LOG_WARN);
}

/* The load progress bar: drawn on stderr only when it is a terminal, redrawn when the percentage
 * changes. The callback also cancels the load when SIGINT or SIGTERM is pending (`kiln serve`
 * blocks them to take them with sigwait, so they would otherwise wait for the load to end). */
typedef struct load_bar {
    const char *label;
    bool tty;
    int shown; /* percentage drawn last; -1 before the first */
} load_bar;

static bool load_progress(float fraction, void *user) {
    load_bar *b = user;
    sigset_t pending;
    if (sigpending(&pending) == 0 && (sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1))
        return false;
    if (!b->tty) return true;
    const int pct = (int)(fraction * 100.0f + 0.5f), width = 30, fill = pct * width / 100;
    if (pct == b->shown) return true;
    b->shown = pct;
    fprintf(stderr, "\rkiln: loading %.40s [", b->label);
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %3d%%", pct);
    fflush(stderr);
    return true;
}

kiln_model *cli_load_model(const cli_common *c, bool vocab_only) {
    if (!c->model) {
        fprintf(stderr, "kiln: no model given (use -m FILE)\n");
        return NULL;
    }
    char *path = cli_model_resolve(c->model, c->verbose); /* a file, or a name from kiln ls */
    if (!path) {
        fprintf(stderr, "kiln: out of memory\n");
        return NULL;
    }
    const char *base = strrchr(path, '/');
    load_bar bar = {.label = base ? base + 1 : path, .tty = isatty(STDERR_FILENO) == 1, .shown = -1};
    kiln_model_params mp = kiln_model_default_params();
    mp.vocab_only = vocab_only;
    mp.use_mmap = c->mmap;
    mp.kernels = c->kernels;
    mp.progress = load_progress;
    mp.progress_user = &bar;
    kiln_model *m = NULL;
    kiln_status st = kiln_model_load(path, &mp, &m);
    if (bar.shown >= 0) fputs("\r\033[K", stderr); /* clear the bar's line */
    free(path);
    if (st == KILN_ERR_CANCELLED) {
        fprintf(stderr, "kiln: loading the model was cancelled by a signal\n");
        return NULL;
    }
    if (st) {
        fprintf(stderr, "kiln: cannot load model: %s (%s)\n", kiln_last_error(), kiln_status_str(st));
        return NULL;
    }
    if (g_verbose) fprintf(stderr, "kiln: loaded %s (kernels: %s)\n", kiln_model_desc(m), kiln_model_kernels(m));
    return m;
}

/* --chat-template-file's text (read once at start, never freed), or NULL. */
static char *g_chat_template;

const char *cli_chat_template(const kiln_model *m) {
    return g_chat_template ? g_chat_template : kiln_model_chat_template(m);
}

kiln_status cli_chat_render(const kiln_model *m, json_t *messages, char **out) {
    *out = NULL;
    json_t *chat = json_pack("{s:O, s:b}", "messages", messages, "add_generation_prompt", 1);
    if (chat && g_chat_template) { /* kiln_chat_apply's context, rendered with the replacement */
        kiln_token ids[2] = {kiln_token_bos(m), kiln_token_eos(m)};
        const char *keys[2] = {"bos_token", "eos_token"};
        for (int k = 0; k < 2; k++) {
            char piece[256];
            size_t n = 0;
            if (ids[k] < 0 || kiln_token_piece(m, ids[k], true, piece, sizeof piece, &n) != KILN_OK) n = 0;
            json_t *v = json_stringn(piece, n);
            json_object_set_new(chat, keys[k], v ? v : json_string(""));
        }
    }
    char *js = chat ? json_dumps(chat, JSON_COMPACT) : NULL;
    json_decref(chat);
    if (!js) return KILN_ERR_NOMEM;
    size_t len;
    kiln_status st = g_chat_template
                         ? kiln_template_render(g_chat_template, strlen(g_chat_template), js, strlen(js), out, &len)
                         : kiln_chat_apply(m, js, strlen(js), out, &len);
    free(js);
    return st;
}

int cli_parse_template_flags(int argc, char **argv, int *i, const char **template_file, const char **tool_format) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    const bool tf = strcmp(a, "--chat-template-file") == 0;
    if (!tf && !(tool_format && strcmp(a, "--tool-format") == 0)) return 0;
    if (!v) {
        fprintf(stderr, "kiln: %s needs a value\n", a);
        return -1;
    }
    (*i)++;
    if (tf) {
        *template_file = v;
        return 1;
    }
    const char *name, *models;
    for (size_t k = 0; kiln_chat_format_get(k, &name, &models); k++)
        if (strcmp(name, v) == 0 || strcmp(v, "auto") == 0) {
            *tool_format = strcmp(v, "auto") == 0 ? NULL : v;
            return 1;
        }
    fprintf(stderr, "kiln: unknown --tool-format '%s'; the formats are: auto", v);
    for (size_t k = 0; kiln_chat_format_get(k, &name, &models); k++) fprintf(stderr, ", %s", name);
    fputc('\n', stderr);
    return -1;
}

bool cli_use_chat_template(const char *path, const kiln_model *m) {
    if (!path) return true;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kiln: cannot read the chat template '%s': %s\n", path, strerror(errno));
        return false;
    }
    const size_t cap = (size_t)1 << 20;
    char *text = malloc(cap + 1);
    size_t n = text ? fread(text, 1, cap + 1, f) : 0;
    const bool err = ferror(f);
    fclose(f);
    if (!text || err || n > cap || memchr(text, 0, n)) {
        fprintf(stderr, "kiln: cannot read the chat template '%s': %s\n", path,
                !text     ? "out of memory"
                : err     ? "read error"
                : n > cap ? "larger than 1 MiB"
                          : "it contains a NUL byte");
        free(text);
        return false;
    }
    text[n] = 0;
    free(g_chat_template);
    g_chat_template = text;
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "Hello");
    char *out = NULL;
    kiln_status st = msgs ? cli_chat_render(m, msgs, &out) : KILN_ERR_NOMEM;
    json_decref(msgs);
    kiln_free(out);
    if (st) {
        fprintf(stderr, "kiln: the chat template '%s' does not render a conversation: %s\n", path, kiln_last_error());
        free(g_chat_template);
        g_chat_template = NULL;
        return false;
    }
    return true;
}

kiln_status cli_tokenize_chat(const kiln_model *m, const char *text, kiln_token **ids, size_t *n) {
    /* A token covers at least one byte; BOS and EOS may come on top. */
    const size_t len = strlen(text), cap = len + 2;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return KILN_ERR_NOMEM;
    kiln_status st = kiln_tokenize_chat(m, text, len, *ids, cap, n);
    if (st) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return st;
}

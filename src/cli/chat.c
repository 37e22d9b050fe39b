/*
 * chat.c - `kiln chat`: an interactive multi-turn chat with a model in the terminal.
 *
 * The conversation is a list of {role, content} messages. Each turn appends the user's line,
 * renders the whole conversation with the model's chat template (add_generation_prompt on; a model
 * without a template gets kiln_chat_apply's plain fallback, so a base model continues the text),
 * tokenizes it and generates the reply, streaming it to stdout; the reply then joins the
 * conversation as an assistant message.
 *
 * Reasoning and tool calls: when the template's format (kiln_chat_format_detect, or --tool-format)
 * is one kiln's chat parser reads, the reply is fed to a kiln_chat_parser as it streams, and what it
 * hands out is shown by kind: the answer as it is, thinking dimmed on a terminal (or after a
 * "[reasoning] " prefix otherwise), and a tool call as "[tool call NAME] ARGUMENTS" on its own line,
 * so that markup is never shown as text. The conversation keeps the raw reply.
 *
 * KV reuse across turns: generation runs on a one-row kiln_engine with a small prefix cache rather
 * than on a kiln_session (whose generate calls always start from an empty KV). The row's tokens,
 * prompt and reply, are published to the cache when a turn ends, so the next turn, whose rendered
 * prompt starts with the same tokens, copies their KV instead of recomputing it and only prefills
 * what is new. The output is the same as a full re-prefill (the engine's invariant).
 *
 * A base model (no chat template) rarely ends its turn: its replies stop at a blank line (setting
 * stop_at: "blank", "line" or "none") and after 256 tokens unless -n says otherwise. When the
 * conversation outgrows the context, its oldest turns are dropped (one dim line on stderr says so)
 * until the prompt leaves room for a reply; only a message that alone does not fit is refused.
 *
 * Input: with a terminal on stdin and stdout, lines come from libedit (editing, history kept in
 * ~/.cache/kiln/chat_history); text typed while a reply streams is not echoed into it: the
 * terminal's echo is off during the turn and the keys wait in its input queue, so they appear at
 * the next prompt, ready to edit (an Enter typed ahead sends the line, as in a shell). Otherwise
 * every line of stdin is a user turn or a /command, and every reply is printed followed by one
 * newline, which makes the chat scriptable. Interrupts: Ctrl-C during a reply stops it (what was
 * generated stays in the conversation, as it was shown; a reply stopped before its first token
 * takes the user's message with it); Ctrl-C at the prompt discards the line being typed, and a
 * second one in a row prints how to leave; Ctrl-D on an empty line or /quit leaves. Ctrl-C while
 * reading a pipe exits with 130.
 *
 * Before loading, the model, one row of KV and the prefix cache are checked against the memory
 * available (hub_fit.c): a model that does not fit is refused unless --fit off.
 */
#include "cli.h"
#include "hub_fit.h"

#include <errno.h>
#include <histedit.h>
#include <jansson.h>
#include <limits.h>
#include <locale.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>
#include <wchar.h>

#define HISTORY_MAX     1000              /* lines kept in the history file */
#define REPLY_MAX       ((size_t)1 << 30) /* bytes of one reply kept for the conversation */
#define CANCEL_POLL_MS  100               /* how often a waiting reply looks at the Ctrl-C flag */
#define EXIT_SIGINT     130               /* the shell's status for a process ended by SIGINT (128 + 2) */
#define BASE_MAX_TOKENS 256               /* a reply's default cap for a model without a chat template */
#define N_PREDICT_UNSET INT_MIN           /* -n not given: the default depends on the template */

static volatile sig_atomic_t g_sigint;

static void on_sigint(int sig) {
    (void)sig;
    g_sigint = 1;
}

typedef struct chat {
    kiln_model *m;
    kiln_engine *eng;
    int32_t n_ctx;
    bool interactive, verbose;
    json_t *msgs;            /* the conversation; a system message first when one is set */
    char *system;            /* the system prompt (malloc'd) or NULL */
    kiln_generate_params gp; /* max_tokens, ignore_eos and sampling of every turn */
    const char *stop_at;     /* what ends a reply besides its end token (setting stop_at): "\n\n" (blank,
                                the default for base models), "\n" (line), or NULL (none) */
    bool dim_err;            /* stderr is a terminal: notes there are dimmed */
    /* The reply being generated: written by the engine's thread during a turn, read by the main
     * thread after the turn ended (kiln_request_wait orders the two). */
    char *reply;
    size_t reply_len, reply_cap;
    bool reply_truncated;
    const char *tool_format;    /* --tool-format, or NULL: detected from the template */
    kiln_chat_parser *parser;   /* the reply's parser during a turn, or NULL: the text as it comes */
    bool color;                 /* stdout is a terminal: thinking is shown dimmed */
    bool render_special;        /* the format's markers are special tokens: generate their text */
    kiln_chat_delta_kind shown; /* the kind of what was shown last in this reply */
    bool shown_any;
    int done_pipe[2]; /* on_done writes one byte: the main thread wakes */
} chat;

/* ---- the conversation ------------------------------------------------------------------------- */

static bool add_message(json_t *msgs, const char *role, const char *content, size_t len) {
    json_t *s = json_stringn(content, len);
    if (!s) return false;
    return json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", role, "content", s)) == 0;
}

/* Index of the first message after the system prompt. */
static size_t first_turn(const chat *ch) { return ch->system ? 1 : 0; }

/* Drops the oldest turn: the first user message after the system prompt and the messages that
 * follow it up to the next user message. False when nothing may be dropped: the last user message
 * (the one being answered) is always kept. */
static bool drop_oldest_turn(chat *ch) {
    const size_t first = first_turn(ch), n = json_array_size(ch->msgs);
    size_t end = first + 1;
    while (end < n && strcmp(json_string_value(json_object_get(json_array_get(ch->msgs, end), "role")), "user") != 0)
        end++;
    if (end >= n) return false; /* the first turn is the last one */
    for (size_t k = first; k < end; k++) json_array_remove(ch->msgs, first);
    return true;
}

/* Forgets the conversation, keeping the system prompt. */
static void clear_conversation(chat *ch) {
    json_array_clear(ch->msgs);
    if (ch->system) add_message(ch->msgs, "system", ch->system, strlen(ch->system));
}

/* ---- generation ------------------------------------------------------------------------------- */

#define ANSI_DIM   "\033[2m"
#define ANSI_RESET "\033[0m"

/* Shows one delta of the reply's parser: content as it is; reasoning dimmed on a terminal, else
 * after a "[reasoning] " prefix; a tool call's first delta as "[tool call NAME] " on a line of its
 * own, then its argument fragments. A change of kind ends what was shown before (the dim style, or
 * the line of a call or of reasoning). */
static void show_delta(chat *ch, const kiln_chat_delta *d) {
    const bool new_call = d->kind == KILN_DELTA_TOOL_CALL && d->name;
    const bool change = !ch->shown_any || ch->shown != d->kind || new_call;
    if (ch->shown_any && change) {
        if (ch->shown == KILN_DELTA_REASONING && ch->color) fputs(ANSI_RESET, stdout);
        fputc('\n', stdout);
    }
    if (change) {
        if (d->kind == KILN_DELTA_REASONING) fputs(ch->color ? ANSI_DIM : "[reasoning] ", stdout);
        if (new_call) printf("[tool call %s] ", d->name);
    }
    ch->shown = d->kind;
    ch->shown_any = true;
    fwrite(d->text, 1, d->len, stdout);
}

/* Shows the parser's pending deltas. */
static void show_parsed(chat *ch) {
    kiln_chat_delta d;
    while (kiln_chat_parser_next(ch->parser, &d)) show_delta(ch, &d);
    fflush(stdout);
}

/* Engine thread: streams the text (through the parser when there is one) and keeps it for the
 * conversation; a pending Ctrl-C stops. */
static int on_token(const kiln_token_event *ev, void *user) {
    chat *ch = user;
    if (ev->text_len) {
        if (ch->parser && kiln_chat_parser_feed(ch->parser, ev->text, ev->text_len) == KILN_OK) {
            show_parsed(ch);
        } else {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
        }
        if (ch->reply_len + ev->text_len > ch->reply_cap) {
            size_t cap = ch->reply_cap ? ch->reply_cap : 256;
            while (cap < ch->reply_len + ev->text_len && cap <= REPLY_MAX) cap *= 2;
            char *nr = cap <= REPLY_MAX ? realloc(ch->reply, cap) : NULL;
            if (nr) {
                ch->reply = nr;
                ch->reply_cap = cap;
            }
        }
        if (ch->reply_len + ev->text_len <= ch->reply_cap) {
            memcpy(ch->reply + ch->reply_len, ev->text, ev->text_len);
            ch->reply_len += ev->text_len;
        } else {
            ch->reply_truncated = true;
        }
    }
    return g_sigint ? 1 : 0;
}

/* Engine thread: the turn ended. */
static void on_done(kiln_status st, const kiln_generate_result *res, void *user) {
    (void)st;
    (void)res;
    chat *ch = user;
    ssize_t w;
    do w = write(ch->done_pipe[1], "x", 1);
    while (w < 0 && errno == EINTR);
}

/* Starts the parser of a reply to the rendered prompt when the chat has a template whose format
 * kiln reads (the "generic" JSON format is left out: a chat declares no tools). False: the reply is
 * shown as it comes. */
static bool start_parser(chat *ch, const char *rendered) {
    ch->shown_any = false;
    const char *tmpl = cli_chat_template(ch->m);
    if (!tmpl) return false;
    const char *format = ch->tool_format ? ch->tool_format : kiln_chat_format_detect(tmpl);
    if (strcmp(format, "generic") == 0) return false;
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    pp.format = format;
    pp.chat_template = tmpl;
    pp.prompt = rendered;
    if (kiln_chat_parser_new(&pp, &ch->parser) != KILN_OK) {
        ch->parser = NULL;
        return false;
    }
    ch->render_special = kiln_chat_format_renders_special(kiln_chat_parser_format(ch->parser));
    return true;
}

static void stop_parser(chat *ch) {
    kiln_chat_parser_free(ch->parser);
    ch->parser = NULL;
}

static void print_context_full(const chat *ch, size_t n) {
    fprintf(stderr,
            "kiln chat: the message no longer fits the context (%zu tokens; the context holds %d); "
            "/clear starts a new conversation%s\n",
            n, ch->n_ctx, ch->n_ctx < kiln_model_n_ctx_train(ch->m) ? " (or give a larger -c)" : "");
}

/* Tokens a prompt leaves free for the reply before older turns are dropped: the reply's cap, but
 * at most half the context; a quarter of it for a reply without a cap. */
static size_t reply_room(const chat *ch) {
    const size_t half = (size_t)ch->n_ctx / 2;
    if (ch->gp.max_tokens > 0) return (size_t)ch->gp.max_tokens < half ? (size_t)ch->gp.max_tokens : half;
    return (size_t)ch->n_ctx / 4;
}

/* Renders and tokenizes the conversation into *ids / *n (freed by the caller; *rendered too, with
 * kiln_free). While the prompt leaves less than reply_room() of the context, the oldest turns are
 * dropped from the conversation; *dropped counts them. False (said on stderr) when it cannot be
 * rendered or tokenized, or the last message alone does not fit. */
static bool render_fitting(chat *ch, char **rendered, kiln_token **ids, size_t *n, int *dropped) {
    for (;;) {
        *rendered = NULL;
        *ids = NULL;
        *n = 0;
        kiln_status st = cli_chat_render(ch->m, ch->msgs, rendered);
        if (st) {
            fprintf(stderr, "kiln chat: the chat template failed: %s\n",
                    *kiln_last_error() ? kiln_last_error() : kiln_status_str(st));
            return false;
        }
        st = cli_tokenize_chat(ch->m, *rendered, ids, n);
        if (st) {
            fprintf(stderr, "kiln chat: cannot tokenize the conversation: %s\n", kiln_last_error());
            return false;
        }
        if (*n + reply_room(ch) <= (size_t)ch->n_ctx || !drop_oldest_turn(ch)) break;
        kiln_free(*rendered);
        free(*ids);
        (*dropped)++;
    }
    if (*n >= (size_t)ch->n_ctx) {
        print_context_full(ch, *n);
        return false;
    }
    if (*n == 0) {
        fprintf(stderr, "kiln chat: the conversation renders to no tokens\n");
        return false;
    }
    return true;
}

/* One turn: the user's text joins the conversation, the reply is generated and streamed, then
 * joins it too (also when Ctrl-C stopped it, as far as it got). When the conversation outgrows the
 * context, its oldest turns are dropped first. A turn that cannot run (template error, a message
 * too long for the context) or is stopped before its first token takes the user's message out of
 * the conversation again, and says why on stderr. */
static void turn(chat *ch, const char *text) {
    if (!add_message(ch->msgs, "user", text, strlen(text))) {
        fprintf(stderr, "kiln chat: the message is not valid UTF-8 text\n");
        return;
    }
    char *rendered = NULL;
    kiln_token *ids = NULL;
    size_t n = 0;
    int dropped = 0;
    const bool fits = render_fitting(ch, &rendered, &ids, &n, &dropped);
    if (dropped)
        fprintf(stderr, "%s(the context is full: the %d oldest turn%s dropped)%s\n", ch->dim_err ? ANSI_DIM : "",
                dropped, dropped == 1 ? " was" : "s were", ch->dim_err ? ANSI_RESET : "");
    const bool parsed = fits && start_parser(ch, rendered);
    kiln_free(rendered);
    if (!fits) goto undo;

    g_sigint = 0;
    ch->reply_len = 0;
    ch->reply_truncated = false;
    kiln_generate_params gp = ch->gp;
    if (ch->stop_at) {
        gp.stop = &ch->stop_at;
        gp.n_stop = 1;
    }
    gp.render_special = parsed && ch->render_special;
    gp.on_token = on_token;
    gp.on_done = on_done;
    gp.user = ch;
    kiln_request *req = NULL;
    kiln_status st = kiln_engine_submit(ch->eng, ids, n, &gp, &req);
    free(ids);
    ids = NULL;
    if (st == KILN_ERR_CONTEXT_FULL) {
        print_context_full(ch, n);
        goto undo;
    }
    if (st) {
        fprintf(stderr, "kiln chat: %s\n", kiln_last_error());
        goto undo;
    }
    /* Wait for on_done; a Ctrl-C (the handler interrupts poll, or the next tick sees the flag)
     * cancels the request, which also stops a long prompt between two prefill chunks. */
    bool cancelled = false;
    for (;;) {
        struct pollfd pfd = {.fd = ch->done_pipe[0], .events = POLLIN};
        int r = poll(&pfd, 1, CANCEL_POLL_MS);
        if (r > 0) break;
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "kiln chat: poll: %s\n", strerror(errno));
            kiln_request_cancel(req);
            break;
        }
        if (g_sigint && !cancelled) {
            kiln_request_cancel(req);
            cancelled = true;
        }
    }
    kiln_generate_result res;
    st = kiln_request_wait(req, &res);
    kiln_request_free(req);
    char byte;
    while (read(ch->done_pipe[0], &byte, 1) < 0 && errno == EINTR) {}
    if (ch->parser) { /* what was held back, then the end of the dim style */
        kiln_chat_parser_finish(ch->parser);
        show_parsed(ch);
        if (ch->shown_any && ch->shown == KILN_DELTA_REASONING && ch->color) fputs(ANSI_RESET, stdout);
        stop_parser(ch);
    }
    fputs(ch->interactive ? "\n\n" : "\n", stdout);
    fflush(stdout);
    if (st && st != KILN_ERR_CANCELLED) {
        fprintf(stderr, "kiln chat: the reply failed: %s\n", kiln_status_str(st));
        goto undo;
    }
    if (st == KILN_ERR_CANCELLED) {
        fprintf(stderr, "[reply stopped]\n");
        if (!ch->reply_len) goto undo;
    }
    if (ch->reply_truncated) fprintf(stderr, "kiln chat: the reply is too long to keep whole\n");
    if (!add_message(ch->msgs, "assistant", ch->reply ? ch->reply : "", ch->reply_len)) {
        fprintf(stderr, "kiln chat: the reply is not valid UTF-8 text; it is kept empty\n");
        add_message(ch->msgs, "assistant", "", 0);
    }
    if (res.stop == KILN_STOP_CONTEXT)
        fprintf(stderr,
                "kiln chat: the context (%d tokens) is full: the reply was cut (the next turn drops the oldest)\n",
                ch->n_ctx);
    if (ch->verbose)
        fprintf(stderr, "kiln: prompt %d tokens (%d reused), %.1f tok/s | generated %d tokens, %.1f tok/s\n",
                res.n_prompt, res.n_cached,
                res.prompt_ms > 0 ? (res.n_prompt - res.n_cached) * 1000.0 / res.prompt_ms : 0.0, res.n_generated,
                res.gen_ms > 0 ? res.n_generated * 1000.0 / res.gen_ms : 0.0);
    return;
undo: /* the user's message is the last one: nothing was added after it */
    stop_parser(ch);
    free(ids);
    json_array_remove(ch->msgs, json_array_size(ch->msgs) - 1);
}

/* ---- commands --------------------------------------------------------------------------------- */

static const char chat_help[] =
    "Type a message and press Enter; the reply streams below it.\n"
    "  /clear              forget the conversation (the system prompt stays)\n"
    "  /system [TEXT]      set the system prompt (none without TEXT); clears the conversation\n"
    "  /set NAME VALUE     change a setting: temp, top_p, top_k, min_p, repeat_penalty,\n"
    "                      seed (a number or 'random'), max_tokens (or n; -1 = no limit),\n"
    "                      stop_at (blank: a blank line ends a reply; line; none)\n"
    "  /set                show the settings\n"
    "  /help               this text\n"
    "  /quit               leave (also /exit, or Ctrl-D on an empty line)\n"
    "  //TEXT              send a message that starts with '/'\n"
    "Ctrl-C stops a reply (the part shown stays in the conversation); at the prompt it discards\n"
    "the line.\n";

/* The value of stop_at (--stop-at, /set stop_at): "blank" (a blank line ends a reply), "line" (a
 * line break does) or "none", into *stop (the stop string or NULL). False (said on stderr) for
 * another value. */
static bool stop_at_value(const char *v, const char **stop) {
    if (!strcmp(v, "blank")) *stop = "\n\n";
    else if (!strcmp(v, "line")) *stop = "\n";
    else if (!strcmp(v, "none")) *stop = NULL;
    else {
        fprintf(stderr, "kiln chat: stop_at is 'blank' (a blank line ends a reply), 'line' or 'none', got '%s'\n", v);
        return false;
    }
    return true;
}

static const char *stop_at_name(const char *stop) {
    return !stop ? "none" : strcmp(stop, "\n") == 0 ? "line" : "blank";
}

static void show_settings(const chat *ch) {
    const kiln_sampler_params *s = &ch->gp.sampling;
    printf("temp %g  top_k %d  top_p %g  min_p %g  repeat_penalty %g  seed ", s->temperature, s->top_k, s->top_p,
           s->min_p, s->repeat_penalty);
    if (s->seed == KILN_SEED_RANDOM) printf("random");
    else printf("%llu", (unsigned long long)s->seed);
    printf("  max_tokens %d  stop_at %s\n", ch->gp.max_tokens, stop_at_name(ch->stop_at));
}

/* `/set NAME VALUE`: false (with a one-line error on stderr) for an unknown name or a bad value. */
static bool set_setting(chat *ch, const char *name, const char *v) {
    kiln_sampler_params *s = &ch->gp.sampling;
    if (!strcmp(name, "temp") || !strcmp(name, "temperature"))
        return cli_sampler_value(name, v, KILN_SAMPLER_TEMPERATURE, s);
    if (!strcmp(name, "top_p") || !strcmp(name, "top-p")) return cli_sampler_value(name, v, KILN_SAMPLER_TOP_P, s);
    if (!strcmp(name, "top_k") || !strcmp(name, "top-k")) return cli_sampler_value(name, v, KILN_SAMPLER_TOP_K, s);
    if (!strcmp(name, "min_p") || !strcmp(name, "min-p")) return cli_sampler_value(name, v, KILN_SAMPLER_MIN_P, s);
    if (!strcmp(name, "repeat_penalty") || !strcmp(name, "repeat-penalty"))
        return cli_sampler_value(name, v, KILN_SAMPLER_REPEAT_PENALTY, s);
    if (!strcmp(name, "max_tokens") || !strcmp(name, "n"))
        return cli_int(name, v, -1, CLI_MAX_TOKENS_MAX, &ch->gp.max_tokens);
    if (!strcmp(name, "stop_at") || !strcmp(name, "stop-at")) return stop_at_value(v, &ch->stop_at);
    if (!strcmp(name, "seed")) {
        if (!strcmp(v, "random")) {
            s->seed = KILN_SEED_RANDOM;
            return true;
        }
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-' || x == KILN_SEED_RANDOM) {
            fprintf(stderr, "kiln: seed must be a non-negative integer or 'random', got '%s'\n", v);
            return false;
        }
        s->seed = x;
        return true;
    }
    fprintf(stderr,
            "kiln chat: no setting '%s' (temp, top_p, top_k, min_p, repeat_penalty, seed, max_tokens, stop_at)\n",
            name);
    return false;
}

static char *skip_space(char *p) {
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

/* Runs a line that starts with '/'. Returns false for /quit. */
static bool command(chat *ch, char *line) {
    char *p = line + 1;
    char *name = p;
    while (*p && *p != ' ' && *p != '\t') p++;
    const size_t nlen = (size_t)(p - name);
    char *arg = skip_space(p);
#define IS(s) (nlen == strlen(s) && strncmp(name, s, nlen) == 0)
    if (IS("quit") || IS("exit") || IS("bye")) return false;
    if (IS("help") || IS("?")) {
        fputs(chat_help, stdout);
    } else if (IS("clear")) {
        clear_conversation(ch);
        if (ch->interactive) printf("(conversation cleared)\n");
    } else if (IS("system")) {
        json_t *probe = json_string(arg);
        if (!probe) {
            fprintf(stderr, "kiln chat: the system prompt is not valid UTF-8 text\n");
            return true;
        }
        json_decref(probe);
        free(ch->system);
        ch->system = *arg ? strdup(arg) : NULL;
        clear_conversation(ch);
        if (ch->interactive)
            printf(*arg ? "(system prompt set; conversation cleared)\n" : "(no system prompt; conversation cleared)\n");
    } else if (IS("set")) {
        if (!*arg) {
            show_settings(ch);
            return true;
        }
        char *sname = arg;
        char *q = sname;
        while (*q && *q != ' ' && *q != '\t') q++;
        char *value = *q ? skip_space(q) : q;
        *q = '\0';
        char *vend = value;
        while (*vend && *vend != ' ' && *vend != '\t') vend++;
        if (!*value || *skip_space(vend)) {
            fprintf(stderr, "kiln chat: usage: /set NAME VALUE\n");
            return true;
        }
        *vend = '\0';
        set_setting(ch, sname, value);
    } else {
        fprintf(stderr, "kiln chat: unknown command '/%.*s' (/help lists the commands)\n", (int)nlen, name);
    }
#undef IS
    return true;
}

/* Handles one input line (without its newline). Returns false when the chat should end. */
static bool handle_line(chat *ch, char *line) {
    char *p = skip_space(line);
    if (!*p) return true;
    if (p[0] == '/' && p[1] != '/') return command(ch, p);
    turn(ch, p[0] == '/' ? p + 1 : line);
    return true;
}

static void chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
}

/* ---- input loops ------------------------------------------------------------------------------ */

/* Lines from a pipe or file: no prompts. Returns the exit code. */
static int loop_plain(chat *ch) {
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        errno = 0;
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) {
            if (g_sigint) rc = EXIT_SIGINT;
            else if (ferror(stdin)) {
                fprintf(stderr, "kiln chat: cannot read stdin: %s\n", strerror(errno));
                rc = CLI_EXIT_FAIL;
            }
            break;
        }
        if (strlen(line) != (size_t)got) {
            fprintf(stderr, "kiln chat: skipped a line with a NUL byte\n");
            continue;
        }
        chomp(line);
        if (!handle_line(ch, line)) break;
    }
    free(line);
    return rc;
}

static const char *prompt_fn(EditLine *el) {
    (void)el;
    return ">>> ";
}

/* Waits until fd is readable: 1, or -1 with errno EINTR once a Ctrl-C is pending (also one that
 * came just before the wait: SIGINT is blocked between the check and the wait, which ppoll ends
 * atomically), or -1 with another errno. */
static int wait_input(int fd) {
    sigset_t block, orig;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &orig);
    int ret;
    for (;;) {
        if (g_sigint) {
            errno = EINTR;
            ret = -1;
            break;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = ppoll(&pfd, 1, NULL, &orig);
        if (r > 0) {
            ret = 1;
            break;
        }
        if (r < 0 && errno != EINTR) {
            ret = -1;
            break;
        }
    }
    const int e = errno;
    pthread_sigmask(SIG_SETMASK, &orig, NULL);
    errno = e;
    return ret;
}

/* libedit's character reader (EL_GETCFN): one character of the locale's encoding from stdin.
 * Returns 1 with *wc set, 0 at end of input, -1 on an error or a Ctrl-C (errno EINTR), which
 * makes el_gets discard the line. A byte that does not decode is passed on as it is. */
static int read_char_fn(EditLine *el, wchar_t *wc) {
    (void)el;
    mbstate_t mbs;
    memset(&mbs, 0, sizeof mbs);
    unsigned char first = 0;
    for (int n = 0; n < (int)MB_LEN_MAX; n++) {
        if (wait_input(STDIN_FILENO) < 0) return -1;
        char byte;
        ssize_t got = read(STDIN_FILENO, &byte, 1);
        if (got == 0) return 0;
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                n--;
                continue;
            }
            return -1;
        }
        if (n == 0) first = (unsigned char)byte;
        const size_t k = mbrtowc(wc, &byte, 1, &mbs);
        if (k == (size_t)-2) continue; /* more bytes of this character to come */
        if (k == (size_t)-1) *wc = first;
        return 1;
    }
    *wc = first;
    return 1;
}

/* The history file, ~/.cache/kiln/chat_history, with its folders created; NULL without HOME or
 * when it cannot be created (the chat then keeps history in memory only). */
static char *history_path(void) {
    const char *home = getenv("HOME");
    if (!home || !*home) return NULL;
    const char *tail = "/.cache/kiln/chat_history";
    size_t n = strlen(home) + strlen(tail) + 1;
    char *path = malloc(n);
    if (!path) return NULL;
    snprintf(path, n, "%s%s", home, tail);
    /* create ~/.cache and ~/.cache/kiln */
    for (char *slash = path + strlen(home) + 1; (slash = strchr(slash, '/')); slash++) {
        *slash = '\0';
        int r = mkdir(path, 0755);
        int e = errno;
        *slash = '/';
        if (r && e != EEXIST) {
            free(path);
            return NULL;
        }
    }
    return path;
}

/* The terminal's settings while hold_typed_input has changed them (g_tty_held), for a signal
 * that ends the process meanwhile (SIGTERM, SIGHUP, Ctrl-\'s SIGQUIT) to put back first. */
static struct termios g_tty_saved;
static volatile sig_atomic_t g_tty_held;

static void on_fatal_signal(int sig) {
    if (g_tty_held) tcsetattr(STDIN_FILENO, TCSANOW, &g_tty_saved);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* While a line runs (a reply streams), the terminal does not echo what is typed: echo and line
 * editing are off, so the keys wait in its input queue, and at the next prompt libedit reads them
 * as if typed there. NOFLSH keeps them across a Ctrl-C that stops the reply. Returns false (and
 * changes nothing) when the terminal's settings cannot be read or set; release_typed_input puts
 * them back. */
static bool hold_typed_input(void) {
    if (tcgetattr(STDIN_FILENO, &g_tty_saved)) return false;
    struct termios t = g_tty_saved;
    t.c_lflag &= ~(tcflag_t)(ECHO | ECHONL | ICANON);
    t.c_lflag |= NOFLSH;
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    g_tty_held = 1;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0) return true;
    g_tty_held = 0;
    return false;
}

static void release_typed_input(void) {
    tcsetattr(STDIN_FILENO, TCSANOW, &g_tty_saved);
    g_tty_held = 0;
}

/* Lines from libedit on a terminal. Returns the exit code. */
static int loop_edit(chat *ch) {
    EditLine *el = el_init("kiln", stdin, stdout, stderr);
    History *hist = history_init();
    if (!el || !hist) {
        if (el) el_end(el);
        if (hist) history_end(hist);
        fprintf(stderr, "kiln chat: cannot set up line editing; reading lines without it\n");
        return loop_plain(ch);
    }
    struct sigaction fatal;
    memset(&fatal, 0, sizeof fatal);
    fatal.sa_handler = on_fatal_signal;
    sigemptyset(&fatal.sa_mask);
    const int fatal_signals[] = {SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++)
        sigaction(fatal_signals[i], &fatal, NULL);
    HistEvent hev;
    history(hist, &hev, H_SETSIZE, HISTORY_MAX);
    history(hist, &hev, H_SETUNIQUE, 1);
    el_set(el, EL_PROMPT, prompt_fn);
    el_set(el, EL_EDITOR, "emacs");
    el_set(el, EL_SIGNAL, 1);
    el_set(el, EL_GETCFN, read_char_fn);
    el_set(el, EL_HIST, history, hist);
    el_source(el, NULL); /* the user's ~/.editrc, if any */
    char *hpath = history_path();
    if (hpath) history(hist, &hev, H_LOAD, hpath);

    int interrupts = 0;
    for (;;) {
        g_sigint = 0;
        int count = 0;
        const char *got = el_gets(el, &count);
        if (!got || count <= 0) {
            if (count < 0 && (g_sigint || errno == EINTR)) {
                /* Ctrl-C at the prompt: the line is discarded. */
                fputs("\n", stdout);
                if (++interrupts >= 2) fputs("(to leave: /quit or Ctrl-D)\n", stdout);
                fflush(stdout);
                continue;
            }
            fputs("\n", stdout); /* Ctrl-D: end the prompt's line */
            break;
        }
        interrupts = 0;
        char *line = strdup(got);
        if (!line) {
            fprintf(stderr, "kiln chat: out of memory\n");
            break;
        }
        chomp(line);
        if (*skip_space(line)) {
            history(hist, &hev, H_ENTER, line);
            if (hpath) history(hist, &hev, H_SAVE, hpath);
        }
        const bool held = hold_typed_input();
        const bool go_on = handle_line(ch, line);
        if (held) release_typed_input();
        free(line);
        if (!go_on) break;
    }
    free(hpath);
    history_end(hist);
    el_end(el);
    return 0;
}

/* ---- the verb --------------------------------------------------------------------------------- */

/* The prefix cache of a chat holds the previous turns: CACHE_ROWS full rows of KV, plus
 * CACHE_SLACK_BYTES for the entries' bookkeeping. */
#define CACHE_ROWS        2
#define CACHE_SLACK_BYTES ((uint64_t)1 << 20)

/* Bytes the prefix cache may hold for a chat with n_ctx tokens of context. */
static uint64_t cache_budget(const kiln_model *m, int32_t n_ctx, kiln_kv_type kv, kiln_kv_type kv_v) {
    const uint64_t row = kiln_model_kv_bytes_per_token_kv(m, kv, kv_v) * (uint64_t)n_ctx;
    return CACHE_ROWS * row + CACHE_SLACK_BYTES;
}

int cli_chat(int argc, char **argv) {
    cli_common c;
    cli_common_init(&c);
    c.n_predict = N_PREDICT_UNSET; /* -1 with a chat template, else BASE_MAX_TOKENS */
    const char *system_prompt = NULL, *template_file = NULL, *ch_tool_format = NULL, *stop_at = NULL;
    cli_spec spec = {0};
    bool fit = true; /* --fit: check the memory before loading */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            cli_usage("chat", false);
            return 0;
        }
        if (strcmp(argv[i], "--system") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kiln chat: --system needs a value\n");
                return CLI_EXIT_USAGE;
            }
            system_prompt = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--stop-at") == 0) {
            const char *unused;
            if (i + 1 >= argc || !stop_at_value(argv[i + 1], &unused)) {
                if (i + 1 >= argc) fprintf(stderr, "kiln chat: --stop-at needs a value (blank, line or none)\n");
                return CLI_EXIT_USAGE;
            }
            stop_at = argv[++i];
            continue;
        }
        int r = cli_parse_template_flags(argc, argv, &i, &template_file, &ch_tool_format);
        if (r == 0) r = cli_parse_spec(argc, argv, &i, &spec, "chat");
        if (r == 0) r = cli_parse_fit(argc, argv, &i, &fit);
        if (r == 0) r = cli_parse_common(argc, argv, &i, &c);
        if (r == 1 && (c.prompt || c.file)) {
            fprintf(stderr, "kiln chat: -p and -f are not used: type the messages, or pipe them on stdin\n");
            r = -1;
        }
        if (r == 1) continue;
        if (r == 0) fprintf(stderr, "kiln chat: unknown option '%s'\n", argv[i]);
        cli_usage("chat", true);
        return CLI_EXIT_USAGE;
    }
    if (!cli_spec_resolve(&spec, "chat")) return CLI_EXIT_USAGE;
    cli_setup_log(c.verbose);

    chat ch;
    memset(&ch, 0, sizeof ch);
    ch.done_pipe[0] = ch.done_pipe[1] = -1;
    int rc = CLI_EXIT_FAIL;
    char *chosen = NULL, *fitted = NULL;
    kiln_model *draft = NULL;
    bool draft_ok = true;
    if (!c.model) { /* as kiln serve: $KILN_MODEL, else the largest local model that fits */
        char src[256];
        const uint64_t mem = cli_machine_memory();
        if (!(chosen = cli_models_choose(NULL, c.verbose, mem ? mem : CLI_MEMORY_ASSUMED, src, sizeof src))) goto out;
        fprintf(stderr, "kiln chat: %s (%s)\n", chosen, src);
        c.model = chosen;
    }
    /* the model's file, checked before loading against the memory available: one row of KV and
     * the prefix cache's CACHE_ROWS (which fills as the chat goes on) */
    if (!(fitted = cli_fit_resolve_check("chat", &c, CACHE_ROWS, spec.draft, fit))) goto out;
    c.model = fitted;
    ch.m = cli_load_model(&c, false);
    if (!ch.m || !cli_use_chat_template(template_file, ch.m)) goto out;
    if (!(draft = cli_load_draft(&spec, &c, "chat", &draft_ok)) && !draft_ok) goto out;
    kiln_engine_params ep = kiln_engine_default_params();
    ep.spec = spec.method;
    ep.draft_model = draft;
    ep.spec_max = spec.max;
    ep.n_ctx = c.ctx ? c.ctx : kiln_default_n_ctx(kiln_model_n_ctx_train(ch.m));
    ep.max_rows = 1;
    ep.max_queue = 1;
    ep.prefill_chunk = c.batch;
    ep.n_threads = c.threads;
    ep.kv_type = c.kv_type;
    ep.kv_type_v = c.kv_type_v;
    ep.kv_rotate = c.kv_rotate;
    ep.prompt_cache = cache_budget(ch.m, ep.n_ctx, c.kv_type, c.kv_type_v);
    /* SIGINT goes to the main thread only (to interrupt its reads and waits): the engine's threads
     * start with it blocked. Until the handler is installed, Ctrl-C ends the process (e.g. while a
     * large model loads). */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    kiln_status st = kiln_engine_new(ch.m, &ep, &ch.eng);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: a blocking read or poll returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (st) {
        fprintf(stderr, "kiln chat: cannot start: %s\n", kiln_last_error());
        goto out;
    }
    if (pipe(ch.done_pipe)) {
        fprintf(stderr, "kiln chat: pipe: %s\n", strerror(errno));
        goto out;
    }
    ch.n_ctx = kiln_engine_n_ctx(ch.eng);
    ch.verbose = c.verbose;
    ch.interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    ch.color = isatty(STDOUT_FILENO);
    ch.tool_format = ch_tool_format;
    ch.gp = kiln_generate_default_params();
    /* A base model rarely ends its turn: its replies stop at a blank line, and are capped. */
    const bool base = !cli_chat_template(ch.m);
    ch.gp.max_tokens = c.n_predict != N_PREDICT_UNSET ? c.n_predict : base ? BASE_MAX_TOKENS : -1;
    ch.stop_at = base ? "\n\n" : NULL;
    if (stop_at) stop_at_value(stop_at, &ch.stop_at);
    ch.dim_err = isatty(STDERR_FILENO);
    ch.gp.ignore_eos = c.ignore_eos;
    ch.gp.sampling = cli_sampler_params(&c, ch.m);
    ch.msgs = json_array();
    if (!ch.msgs) goto out;
    if (system_prompt) {
        json_t *probe = json_string(system_prompt);
        if (!probe) {
            fprintf(stderr, "kiln chat: the system prompt is not valid UTF-8 text\n");
            rc = CLI_EXIT_USAGE;
            goto out;
        }
        json_decref(probe);
        ch.system = strdup(system_prompt);
    }
    clear_conversation(&ch);
    if (ch.interactive) {
        setlocale(LC_CTYPE, ""); /* line editing of the terminal's multibyte characters */
        printf("kiln chat: %s%s\n/help lists the commands; Ctrl-D or /quit leaves.\n\n", kiln_model_desc(ch.m),
               base ? " (no chat template: the conversation goes in as plain text; a reply stops at a blank line)"
                    : "");
        fflush(stdout);
        rc = loop_edit(&ch);
    } else {
        rc = loop_plain(&ch);
    }
out:
    if (ch.eng) kiln_engine_free(ch.eng);
    if (ch.m) kiln_model_free(ch.m);
    kiln_model_free(draft);
    if (ch.done_pipe[0] >= 0) close(ch.done_pipe[0]);
    if (ch.done_pipe[1] >= 0) close(ch.done_pipe[1]);
    json_decref(ch.msgs);
    free(ch.system);
    free(ch.reply);
    free(chosen);
    free(fitted);
    return rc;
}

/*
 * run.c - `kiln run`: print the prompt, stream the continuation to stdout, summarize on stderr.
 *
 * A model with a chat template gets the prompt as one user message rendered by the template (and
 * only the reply is printed), as users of chat models expect; --raw sends the text as it is.
 * --grammar-file, --json-schema and --json-object constrain the output (compiled by grammar.c).
 * The text always ends with one newline, written and flushed before the summary goes to stderr, so
 * that a log holding both (2>&1) has the summary on a line of its own. Before loading, the model's
 * weights, the KV of -c tokens and the compute buffers are checked against the memory available
 * (hub_fit.c); a model that does not fit is refused unless --fit off.
 */
#include "cli.h"
#include "hub_fit.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int on_token(const kiln_token_event *ev, void *user) {
    (void)user;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
    }
    return 0;
}

/* The model's chat template applied to an optional system message and one user message. */
static kiln_status render_chat(kiln_model *m, const char *system_prompt, const char *prompt, char **out) {
    json_t *msgs = json_array();
    int bad = !msgs;
    if (system_prompt)
        bad |= json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system_prompt));
    bad |= json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", prompt));
    if (bad) {
        json_decref(msgs);
        fprintf(stderr, "kiln run: the prompt is not valid UTF-8 text\n");
        return KILN_ERR_INVALID_ARG;
    }
    kiln_status st = cli_chat_render(m, msgs, out);
    json_decref(msgs);
    return st;
}

int cli_run(int argc, char **argv) {
    cli_common c;
    cli_common_init(&c);
    bool raw = false;
    const char *system_prompt = NULL;
    cli_constraint con = {0};
    const char *template_file = NULL;
    cli_spec spec = {0};
    bool fit = true; /* --fit: check the memory before loading */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            cli_usage("run", false);
            return 0;
        }
        if (strcmp(argv[i], "--raw") == 0) {
            raw = true;
            continue;
        }
        if (strcmp(argv[i], "--system") == 0 && i + 1 < argc) {
            system_prompt = argv[++i];
            continue;
        }
        int r = cli_parse_constraint(argc, argv, &i, &con, "run");
        if (r == 0) r = cli_parse_template_flags(argc, argv, &i, &template_file, NULL);
        if (r == 0) r = cli_parse_spec(argc, argv, &i, &spec, "run");
        if (r == 0) r = cli_parse_fit(argc, argv, &i, &fit);
        if (r == 0) r = cli_parse_common(argc, argv, &i, &c);
        if (r == 1) continue;
        if (r == 0) fprintf(stderr, "kiln run: unknown option '%s'\n", argv[i]);
        cli_usage("run", true);
        return CLI_EXIT_USAGE;
    }
    if (c.prompt && c.file) {
        fprintf(stderr, "kiln run: give either -p or -f, not both\n");
        return CLI_EXIT_USAGE;
    }
    if (!cli_spec_resolve(&spec, "run")) return CLI_EXIT_USAGE;
    cli_setup_log(c.verbose);
    kiln_grammar *grammar = NULL; /* compiled before the model loads: a bad one fails fast */
    if (cli_constraint_compile(&con, "run", &grammar)) return CLI_EXIT_FAIL;
    char *file_text = NULL;
    size_t flen = 0;
    if (c.file && !(file_text = cli_read_file(c.file, &flen))) {
        kiln_grammar_free(grammar);
        return CLI_EXIT_FAIL;
    }
    if (file_text && strlen(file_text) != flen) {
        fprintf(stderr, "kiln run: '%s' contains a NUL byte\n", c.file);
        free(file_text);
        kiln_grammar_free(grammar);
        return CLI_EXIT_FAIL;
    }
    const char *prompt = file_text ? file_text : (c.prompt ? c.prompt : "");
    /* the model's file, checked against the memory available before anything is loaded */
    char *path = c.model ? cli_fit_resolve_check("run", &c, 0, spec.draft, fit) : NULL;
    if (c.model && !path) {
        free(file_text);
        kiln_grammar_free(grammar);
        return CLI_EXIT_FAIL;
    }
    if (path) c.model = path;
    kiln_model *m = cli_load_model(&c, false);
    if (m && !cli_use_chat_template(template_file, m)) {
        kiln_model_free(m);
        m = NULL;
    }
    bool draft_ok = true;
    kiln_model *draft = m ? cli_load_draft(&spec, &c, "run", &draft_ok) : NULL;
    if (!draft_ok) {
        kiln_model_free(m);
        m = NULL;
    }
    if (!m) {
        free(path);
        free(file_text);
        kiln_grammar_free(grammar);
        return CLI_EXIT_FAIL;
    }
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = c.ctx;
    sp.n_batch = c.batch;
    sp.n_threads = c.threads;
    sp.kv_type = c.kv_type;
    sp.spec = spec.method;
    sp.draft_model = draft;
    sp.spec_max = spec.max;
    sp.kv_type_v = c.kv_type_v;
    sp.kv_rotate = c.kv_rotate;
    kiln_session *s = NULL;
    kiln_status st = kiln_session_new(m, &sp, &s);
    if (st) {
        fprintf(stderr, "kiln run: cannot create a session: %s\n", kiln_last_error());
        kiln_model_free(draft);
        kiln_model_free(m);
        free(path);
        free(file_text);
        kiln_grammar_free(grammar);
        return CLI_EXIT_FAIL;
    }
    kiln_generate_params gp = kiln_generate_default_params();
    gp.max_tokens = c.n_predict;
    gp.ignore_eos = c.ignore_eos;
    gp.sampling = cli_sampler_params(&c, m);
    gp.on_token = on_token;
    gp.grammar = grammar;
    kiln_generate_result res;
    char *rendered = NULL;
    const bool chat = !raw && cli_chat_template(m);
    if (chat) st = render_chat(m, system_prompt, prompt, &rendered);
    if (!chat) {
        fputs(prompt, stdout);
        fflush(stdout);
    }
    const char *text = chat ? rendered : prompt;
    if (st) {
        /* the template failed: reported below */
    } else if (!*text) {
        st = kiln_generate(s, "", &gp, &res); /* start from BOS alone */
    } else {
        /* Special-token text (e.g. <|im_start|>) is parsed; BOS is added unless already there. */
        size_t n = 0;
        kiln_token *ids = NULL;
        st = cli_tokenize_chat(m, text, &ids, &n);
        if (!st) st = kiln_generate_tokens(s, ids, n, &gp, &res);
        free(ids);
    }
    kiln_free(rendered);
    fputc('\n', stdout);
    fflush(stdout); /* before the summary on stderr: a log of both keeps the order */
    int rc = 0;
    if (st) {
        fprintf(stderr, "kiln run: %s\n", *kiln_last_error() ? kiln_last_error() : kiln_session_last_error(s));
        rc = CLI_EXIT_FAIL;
    } else {
        fprintf(stderr, "kiln: prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s\n", res.n_prompt,
                res.prompt_ms > 0 ? res.n_prompt * 1000.0 / res.prompt_ms : 0.0, res.n_generated,
                res.gen_ms > 0 ? res.n_generated * 1000.0 / res.gen_ms : 0.0);
        if (spec.method != KILN_SPEC_NONE)
            fprintf(stderr, "kiln: speculative (%s): proposed %d tokens, accepted %d (%.0f%%)\n",
                    kiln_spec_method_name(spec.method), res.n_spec_proposed, res.n_spec_accepted,
                    res.n_spec_proposed ? 100.0 * res.n_spec_accepted / res.n_spec_proposed : 0.0);
    }
    kiln_session_free(s);
    kiln_model_free(draft);
    kiln_model_free(m);
    kiln_grammar_free(grammar);
    free(file_text);
    free(path);
    return rc;
}

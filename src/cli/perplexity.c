/*
 * perplexity.c - `kiln perplexity`: the method of llama.cpp's llama-perplexity, so that the two
 * tools' numbers compare directly. The text is tokenized once (with BOS when the model adds one);
 * the tokens are cut into chunks of n_ctx; each chunk starts with BOS in place of its first token
 * and is evaluated from an empty context; the negative log-likelihood of tokens in the second half
 * of each chunk (positions first = n_ctx/2 .. n_ctx-2 predicting the next token) is accumulated.
 * Prints "[chunk]running-ppl" per chunk and "Final estimate: PPL = x +/- err".
 */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* log softmax(logits)[target], in double. */
static double log_prob(const float *logits, int32_t n_vocab, kiln_token target) {
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - max);
    return (double)logits[target] - max - log(sum);
}

int cli_perplexity(int argc, char **argv) {
    cli_common c;
    cli_common_init(&c);
    c.ctx = 512;
    c.batch = 512;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            cli_usage("perplexity", false);
            return 0;
        }
        int r = cli_parse_common(argc, argv, &i, &c);
        if (r == 1) continue;
        if (r == 0) fprintf(stderr, "kiln perplexity: unknown option '%s'\n", argv[i]);
        cli_usage("perplexity", true);
        return CLI_EXIT_USAGE;
    }
    if (!c.file) {
        fprintf(stderr, "kiln perplexity: -f FILE is required\n");
        cli_usage("perplexity", true);
        return CLI_EXIT_USAGE;
    }
    if (c.ctx < 4) {
        fprintf(stderr, "kiln perplexity: -c must be at least 4\n");
        return CLI_EXIT_USAGE;
    }
    cli_setup_log(c.verbose);
    size_t len;
    char *text = cli_read_file(c.file, &len);
    if (!text) return CLI_EXIT_FAIL;
    kiln_model *m = cli_load_model(&c, false);
    if (!m) {
        free(text);
        return CLI_EXIT_FAIL;
    }
    int rc = CLI_EXIT_FAIL;
    kiln_session *s = NULL;
    size_t cap = len + 16, n = 0;
    kiln_token *toks = malloc(cap * sizeof *toks);
    kiln_status st = toks ? kiln_tokenize(m, text, len, true, false, toks, cap, &n) : KILN_ERR_NOMEM;
    if (st) {
        fprintf(stderr, "kiln perplexity: cannot tokenize: %s\n", kiln_last_error());
        goto done;
    }
    const int n_ctx = c.ctx;
    if (n < 2 * (size_t)n_ctx) {
        fprintf(stderr, "kiln perplexity: the text has %zu tokens; at least 2 x %d (the context) are needed\n", n,
                n_ctx);
        goto done;
    }
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = c.batch < n_ctx ? c.batch : n_ctx;
    sp.n_threads = c.threads;
    sp.kv_type = c.kv_type;
    sp.logits_all = true;
    if ((st = kiln_session_new(m, &sp, &s))) {
        fprintf(stderr, "kiln perplexity: cannot create a session: %s\n", kiln_last_error());
        goto done;
    }
    const int32_t n_vocab = kiln_model_n_vocab(m);
    const kiln_token bos = kiln_token_bos(m);
    const bool add_bos = kiln_model_add_bos(m) && bos >= 0;
    const size_t n_chunk = n / (size_t)n_ctx;
    const int first = n_ctx / 2;
    double nll = 0.0, nll2 = 0.0;
    size_t count = 0;
    kiln_token *chunk = malloc((size_t)n_ctx * sizeof *chunk);
    if (!chunk) goto done;
    fprintf(stderr, "kiln: perplexity over %zu chunks of %d tokens (%zu tokens in the text)\n", n_chunk, n_ctx, n);
    for (size_t ci = 0; ci < n_chunk; ci++) {
        memcpy(chunk, toks + ci * (size_t)n_ctx, (size_t)n_ctx * sizeof *chunk);
        if (add_bos) chunk[0] = bos;
        kiln_session_reset(s);
        for (int off = 0; off < n_ctx; off += sp.n_batch) {
            int nb = n_ctx - off < sp.n_batch ? n_ctx - off : sp.n_batch;
            if ((st = kiln_session_eval(s, chunk + off, (size_t)nb, true))) {
                fprintf(stderr, "kiln perplexity: %s\n", kiln_session_last_error(s));
                free(chunk);
                goto done;
            }
            /* position j predicts token j+1 of the chunk (the original token, not BOS) */
            for (int j = off > first ? off : first; j < off + nb && j < n_ctx - 1; j++) {
                const float *lg = kiln_session_logits(s, j - off);
                double lp = log_prob(lg, n_vocab, toks[ci * (size_t)n_ctx + (size_t)j + 1]);
                nll -= lp;
                nll2 += lp * lp;
                count++;
            }
        }
        printf("[%zu]%.4f,", ci + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    printf("\n");
    free(chunk);
    double mean = nll / (double)count;
    double ppl = exp(mean);
    double var = nll2 / (double)count - mean * mean;
    double err = count > 1 && var > 0 ? sqrt(var / (double)(count - 1)) * ppl : 0.0;
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    rc = 0;
done:
    kiln_session_free(s);
    free(toks);
    free(text);
    kiln_model_free(m);
    return rc;
}

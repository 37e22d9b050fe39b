/*
 * perplexity.c - `kiln perplexity`: the method of llama.cpp's llama-perplexity, so that the two
 * tools' numbers compare directly. The text is tokenized once (with BOS when the model adds one);
 * the tokens are cut into chunks of n_ctx; each chunk starts with BOS in place of its first token
 * and is evaluated from an empty context; the negative log-likelihood of tokens in the second half
 * of each chunk (positions first = n_ctx/2 .. n_ctx-2 predicting the next token) is accumulated.
 * Prints "[chunk]running-ppl" per chunk and "Final estimate: PPL = x +/- err".
 *
 * --kl-save FILE writes the log-probabilities of every scored position (the full next-token
 * distribution) to FILE; --kl-base FILE reads such a file (of the same text, context and vocabulary)
 * and reports the mean KL divergence KL(base || this run) of the next-token distributions, and how
 * often the top token agrees: e.g. an f16 run saved once, then each KV type compared with it.
 * File: "KILNKLB1", then u32 n_vocab, n_ctx, u64 n_tokens and a 64-bit hash of the tokens, then per
 * scored position n_vocab float log-probabilities.
 */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KL_MAGIC "KILNKLB1"

/* A 64-bit FNV-1a hash of the text's tokens (identifies the text in a --kl-base file). */
static uint64_t tokens_hash(const kiln_token *t, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* lp[n_vocab] = log softmax(logits), each in double then stored as float. */
static void log_softmax(const float *logits, int32_t n_vocab, float *lp) {
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - max);
    const double ls = log(sum);
    for (int32_t i = 0; i < n_vocab; i++) lp[i] = (float)((double)logits[i] - max - ls);
}

/* The KL part of a run: the base file written (save) or read (compare), and the sums. */
typedef struct kl_state {
    FILE *f;
    bool save;
    float *lp, *base; /* [n_vocab] */
    double kl, kl2;
    size_t n, same_top;
} kl_state;

/* Opens the --kl-save / --kl-base file and writes or checks its header; false (with a message) on
 * failure. */
static bool kl_open(kl_state *k, const char *path, bool save, int32_t n_vocab, int n_ctx, const kiln_token *toks,
                    size_t n) {
    memset(k, 0, sizeof *k);
    k->save = save;
    k->f = fopen(path, save ? "wb" : "rb");
    if (!k->f) {
        fprintf(stderr, "kiln perplexity: cannot open %s\n", path);
        return false;
    }
    k->lp = malloc((size_t)n_vocab * sizeof *k->lp);
    k->base = malloc((size_t)n_vocab * sizeof *k->base);
    if (!k->lp || !k->base) return false;
    uint8_t h[32];
    memcpy(h, KL_MAGIC, 8);
    const uint32_t nv = (uint32_t)n_vocab, nc = (uint32_t)n_ctx;
    const uint64_t nt = n, hash = tokens_hash(toks, n);
    memcpy(h + 8, &nv, 4);
    memcpy(h + 12, &nc, 4);
    memcpy(h + 16, &nt, 8);
    memcpy(h + 24, &hash, 8);
    if (save) return fwrite(h, 1, 32, k->f) == 32;
    uint8_t got[32];
    if (fread(got, 1, 32, k->f) != 32 || memcmp(got, h, 32) != 0) {
        fprintf(stderr, "kiln perplexity: %s is not a --kl-save file of this text, context (-c %d) and vocabulary\n",
                path, n_ctx);
        return false;
    }
    return true;
}

/* Adds one scored position (logits lg) to the KL file or sums; false on an I/O failure. */
static bool kl_add(kl_state *k, const float *lg, int32_t n_vocab) {
    log_softmax(lg, n_vocab, k->lp);
    if (k->save) return fwrite(k->lp, sizeof *k->lp, (size_t)n_vocab, k->f) == (size_t)n_vocab;
    if (fread(k->base, sizeof *k->base, (size_t)n_vocab, k->f) != (size_t)n_vocab) return false;
    double kl = 0;
    int32_t ta = 0, tb = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        kl += exp((double)k->base[i]) * ((double)k->base[i] - (double)k->lp[i]);
        if (k->lp[i] > k->lp[ta]) ta = i;
        if (k->base[i] > k->base[tb]) tb = i;
    }
    k->kl += kl;
    k->kl2 += kl * kl;
    k->n++;
    k->same_top += ta == tb;
    return true;
}

static void kl_close(kl_state *k) {
    if (k->f) fclose(k->f);
    free(k->lp);
    free(k->base);
    memset(k, 0, sizeof *k);
}

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
    const char *kl_path = NULL;
    bool kl_save = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            cli_usage("perplexity", false);
            return 0;
        }
        if ((strcmp(argv[i], "--kl-base") == 0 || strcmp(argv[i], "--kl-save") == 0) && i + 1 < argc) {
            kl_save = strcmp(argv[i], "--kl-save") == 0;
            kl_path = argv[++i];
            continue;
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
    kl_state kl = {0};
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
    sp.kv_type_v = c.kv_type_v;
    sp.kv_rotate = c.kv_rotate;
    sp.logits_all = true;
    if ((st = kiln_session_new(m, &sp, &s))) {
        fprintf(stderr, "kiln perplexity: cannot create a session: %s\n", kiln_last_error());
        goto done;
    }
    const int32_t n_vocab = kiln_model_n_vocab(m);
    const kiln_token bos = kiln_token_bos(m);
    const bool add_bos = kiln_model_add_bos(m) && bos >= 0;
    const size_t n_chunk = n / (size_t)n_ctx;
    if (kl_path && !kl_open(&kl, kl_path, kl_save, n_vocab, n_ctx, toks, n)) goto done;
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
                if (kl.f && !kl_add(&kl, lg, n_vocab)) {
                    fprintf(stderr, "kiln perplexity: cannot %s %s\n", kl_save ? "write" : "read", kl_path);
                    free(chunk);
                    goto done;
                }
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
    if (kl.f && !kl.save && kl.n) {
        const double km = kl.kl / (double)kl.n, kv = kl.kl2 / (double)kl.n - km * km;
        printf("Mean KL divergence from %s: %.6f +/- %.6f; same top token: %.2f%% of %zu positions\n", kl_path, km,
               kl.n > 1 && kv > 0 ? sqrt(kv / (double)(kl.n - 1)) : 0.0, 100.0 * (double)kl.same_top / (double)kl.n,
               kl.n);
    }
    rc = 0;
done:
    kl_close(&kl);
    kiln_session_free(s);
    free(toks);
    free(text);
    kiln_model_free(m);
    return rc;
}

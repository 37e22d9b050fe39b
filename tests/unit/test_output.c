/*
 * test_output.c - the output stage of a generation: stop strings (matching with hold-back over
 * arbitrarily split text) and logprobs, unit-level and through kiln_generate on stories260K.
 */
#include "harness.h"

#include "engine/stop.h"
#include "kiln.h"
#include "sample/logprobs.h"

/* Feeds text to a stopper in pieces cut at the given points; returns the released text. */
static size_t feed(kn_stopper *s, const char *text, const size_t *cuts, size_t n_cuts, char *out, bool *flushed) {
    size_t n = 0, prev = 0, len = strlen(text);
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        size_t r;
        const char *p = kn_stopper_push(s, text + prev, end - prev, &r);
        memcpy(out + n, p, r);
        n += r;
        prev = end;
    }
    size_t r;
    const char *p = kn_stopper_flush(s, &r);
    memcpy(out + n, p, r);
    n += r;
    *flushed = r > 0;
    out[n] = 0;
    return n;
}

static void test_stop_basic(void) {
    const char *stops[] = {"\nUser:", "###"};
    kn_stopper s;
    CHECK(kn_stopper_init(&s, stops, 2, 64) == KILN_OK);
    char out[256];
    bool fl;
    size_t cuts[] = {3, 7, 8, 13};
    feed(&s, "Hello\nUser: hi", cuts, 4, out, &fl);
    CHECK(strcmp(out, "Hello") == 0);
    CHECK(s.matched == 0);
    kn_stopper_free(&s);
    /* A partial match that does not complete is released at the end. */
    CHECK(kn_stopper_init(&s, stops, 2, 64) == KILN_OK);
    size_t c2[] = {2, 4};
    feed(&s, "ab##", c2, 2, out, &fl);
    CHECK(strcmp(out, "ab##") == 0 && fl && s.matched < 0);
    kn_stopper_free(&s);
    /* Earliest match wins regardless of list order. */
    CHECK(kn_stopper_init(&s, stops, 2, 64) == KILN_OK);
    feed(&s, "x###\nUser:", NULL, 0, out, &fl);
    CHECK(strcmp(out, "x") == 0 && s.matched == 1);
    kn_stopper_free(&s);
}

static void test_stop_errors(void) {
    kn_stopper s;
    const char *empty[] = {""};
    CHECK(kn_stopper_init(&s, empty, 1, 8) == KILN_ERR_INVALID_ARG);
    const char *many[KILN_MAX_STOP + 1];
    for (int i = 0; i <= KILN_MAX_STOP; i++) many[i] = "x";
    CHECK(kn_stopper_init(&s, many, KILN_MAX_STOP + 1, 8) == KILN_ERR_INVALID_ARG);
    char *big = malloc(KILN_MAX_STOP_LEN + 2);
    memset(big, 'a', KILN_MAX_STOP_LEN + 1);
    big[KILN_MAX_STOP_LEN + 1] = 0;
    const char *bl[] = {big};
    CHECK(kn_stopper_init(&s, bl, 1, 8) == KILN_ERR_INVALID_ARG);
    free(big);
    CHECK(kn_stopper_init(&s, NULL, 0, 8) == KILN_OK); /* no stop strings: text passes through */
    size_t r;
    const char *p = kn_stopper_push(&s, "abc", 3, &r);
    CHECK(r == 3 && memcmp(p, "abc", 3) == 0);
    kn_stopper_free(&s);
}

/* Finds the earliest occurrence of any stop string inside text[0..end); end if none. */
static size_t first_stop(const char *text, size_t end, const char *const *stops, int ns) {
    size_t best = end;
    for (int k = 0; k < ns; k++) {
        size_t sl = strlen(stops[k]);
        for (size_t p = 0; p + sl <= end && p < best; p++)
            if (memcmp(text + p, stops[k], sl) == 0) best = p;
    }
    return best;
}

/* Property: for random texts over a small alphabet and random splits, generation stops at the
 * first piece after which some stop string has appeared, and the released text is everything
 * before that stop string's earliest occurrence (the whole text if none appears). */
static void test_stop_random(void) {
    srand(7);
    for (int iter = 0; iter < 3000; iter++) {
        char text[64], st[3][6];
        const char *stops[3];
        int len = 1 + rand() % 60, ns = 1 + rand() % 3;
        for (int i = 0; i < len; i++) text[i] = "abc"[rand() % 3];
        text[len] = 0;
        for (int k = 0; k < ns; k++) {
            int sl = 1 + rand() % 5;
            for (int i = 0; i < sl; i++) st[k][i] = "abc"[rand() % 3];
            st[k][sl] = 0;
            stops[k] = st[k];
        }
        size_t cuts[64], nc = 0;
        for (int i = 1; i < len; i++)
            if (rand() % 3 == 0) cuts[nc++] = (size_t)i;
        size_t expect = (size_t)len;
        for (size_t i = 0; i <= nc; i++) {
            size_t end = i < nc ? cuts[i] : (size_t)len;
            size_t f = first_stop(text, end, stops, ns);
            if (f < end) {
                expect = f;
                break;
            }
        }
        kn_stopper s;
        CHECK(kn_stopper_init(&s, stops, (size_t)ns, 64) == KILN_OK);
        char out[128];
        bool fl;
        size_t n = feed(&s, text, cuts, nc, out, &fl);
        kn_stopper_free(&s);
        CHECKF(n == expect && memcmp(out, text, n) == 0, "text %s: released %zu, expected %zu", text, n, expect);
    }
}

static void test_logprobs_unit(void) {
    float logits[6] = {1.0f, 3.0f, 3.0f, -2.0f, NAN, 0.5f};
    logits[4] = -INFINITY;
    kiln_top_logprob top[KILN_MAX_TOP_LOGPROBS];
    const kn_kernels *k = kn_kernels_get(KN_KERNELS_AUTO);
    float lp = kn_logprobs(k, logits, 6, 2, 3, top);
    CHECK(top[0].token == 1 && top[1].token == 2 && top[2].token == 0); /* ties: lower id first */
    CHECK_NEAR(top[0].logprob, lp, 1e-6);
    double sum = 0;
    for (int i = 0; i < 6; i++) sum += exp((double)logits[i] - 3.0);
    CHECK_NEAR(lp, -log(sum), 1e-5);
    CHECK(kn_logprobs(k, logits, 6, 4, 0, top) == -INFINITY);
}

/* The top-N list of kn_logprobs against sorting the whole row (logit descending, id ascending, NaN
 * left out), for every kernel set this CPU runs, over rows with ties, NaN and -inf and N = 0 .. 20
 * (the list shorter than N when fewer values are not NaN). */
static void test_logprobs_top_matches_sort(void) {
    enum { V = 3000 };
    static float x[V];
    static int32_t order[V];
    uint64_t r = 0x243F6A8885A308D3ULL;
    int bad = 0, runs = 0;
    const char *sets[] = {"ref", "avx2", "avx2vnni", "avx512", "neon"};
    for (int si = 0; si < 5; si++) {
        const kn_kernels *k = kn_kernels_named(sets[si]);
        if (!k) continue;
        for (int shape = 0; shape < 4; shape++) {
            const int32_t n = shape == 3 ? 40 : V;
            for (int32_t i = 0; i < n; i++) {
                r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                const uint32_t u = (uint32_t)(r >> 33);
                x[i] = shape == 0   ? (float)(u % 100000) / 977.0f /* distinct mostly */
                       : shape == 1 ? (float)(u % 7)               /* many ties */
                       : u % 3 == 0 ? NAN                          /* NaN and -inf */
                       : u % 3 == 1 ? -INFINITY
                                    : (float)(u % 11) - 5.0f;
                if (shape == 3) x[i] = u % 5 ? NAN : (float)(u % 4); /* fewer values than N */
            }
            int32_t m = 0;
            for (int32_t i = 0; i < n; i++)
                if (x[i] == x[i]) order[m++] = i;
            for (int32_t a = 1; a < m; a++) /* insertion sort: logit descending, id ascending */
                for (int32_t b = a; b > 0 && x[order[b]] > x[order[b - 1]]; b--) {
                    const int32_t t = order[b];
                    order[b] = order[b - 1];
                    order[b - 1] = t;
                }
            for (size_t nt = 0; nt <= 20; nt++) {
                kiln_top_logprob top[KILN_MAX_TOP_LOGPROBS];
                memset(top, 0, sizeof top);
                const float lp = kn_logprobs(k, x, n, 0, nt, top);
                const float lse = x[0] == x[0] ? x[0] - lp : NAN;
                runs++;
                for (size_t j = 0; j < nt && j < (size_t)m; j++)
                    if (top[j].token != order[j] || (lse == lse && fabsf(top[j].logprob - (x[order[j]] - lse)) > 1e-4f))
                        bad++;
                if (nt > (size_t)m && top[m].token != 0) bad++; /* nothing past the values there are */
            }
        }
    }
    printf("  %d lists, %d entries wrong\n", runs, bad);
    CHECK(runs > 0 && bad == 0);
}

typedef struct collect {
    char text[8192];
    size_t n;
    int events;
    int bad;
    kiln_token first_top;
} collect;

static int on_tok(const kiln_token_event *ev, void *user) {
    collect *c = user;
    if (c->n + ev->text_len < sizeof c->text) {
        memcpy(c->text + c->n, ev->text, ev->text_len);
        c->n += ev->text_len;
    }
    if (ev->token >= 0) {
        if (ev->logprob > 0 || (ev->n_top && ev->top[0].logprob < ev->logprob)) c->bad++;
        for (size_t i = 1; i < ev->n_top; i++)
            if (ev->top[i].logprob > ev->top[i - 1].logprob) c->bad++;
        if (ev->n_top && ev->top[0].token != ev->token) c->bad++; /* greedy: the top token */
        c->events++;
    }
    c->text[c->n] = 0;
    return 0;
}

static void test_generate_stop_and_logprobs(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no model");
    kiln_model *m;
    kiln_session *s;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    CHECK(kiln_session_new(m, NULL, &s) == KILN_OK);
    kiln_generate_params gp = kiln_generate_default_params();
    gp.sampling.temperature = 0;
    gp.max_tokens = 60;
    gp.logprobs = 5;
    collect full = {0};
    gp.on_token = on_tok;
    gp.user = &full;
    kiln_generate_result r;
    CHECK(kiln_generate(s, "Once upon a time", &gp, &r) == KILN_OK);
    CHECK(full.bad == 0 && full.events == 60 && r.stop == KILN_STOP_LENGTH && r.stop_index == -1);
    CHECK(full.n > 20);
    /* Stop at a word from the middle of the greedy output. */
    char stop[16];
    const char *mid = full.text + full.n / 2;
    const char *sp = strchr(mid, ' ');
    CHECK(sp && sp[1]);
    snprintf(stop, sizeof stop, "%.4s", sp + 1);
    const char *first = strstr(full.text, stop);
    const char *stops[] = {"\x01never", stop};
    gp.stop = stops;
    gp.n_stop = 2;
    gp.logprobs = -1;
    collect cut = {0};
    gp.user = &cut;
    CHECK(kiln_generate(s, "Once upon a time", &gp, &r) == KILN_OK);
    CHECK(r.stop == KILN_STOP_STRING && r.stop_index == 1);
    CHECKF(cut.n == (size_t)(first - full.text) && memcmp(cut.text, full.text, cut.n) == 0, "'%s' vs '%s'", cut.text,
           full.text);
    /* Invalid: empty stop string; logprobs out of range. */
    const char *bad[] = {""};
    gp.stop = bad;
    gp.n_stop = 1;
    CHECK(kiln_generate(s, "Once", &gp, &r) == KILN_ERR_INVALID_ARG);
    gp.n_stop = 0;
    gp.logprobs = 21;
    CHECK(kiln_generate(s, "Once", &gp, &r) == KILN_ERR_INVALID_ARG);
    kiln_session_free(s);
    kiln_model_free(m);
}

int main(void) {
    RUN(test_stop_basic);
    RUN(test_stop_errors);
    RUN(test_stop_random);
    RUN(test_logprobs_unit);
    RUN(test_logprobs_top_matches_sort);
    RUN(test_generate_stop_and_logprobs);
    return kt_summary();
}

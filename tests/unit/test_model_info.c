/*
 * test_model_info.c - kiln_model_info_read (a GGUF file described from its header alone), the load
 * progress callback (0 first, non-decreasing, 1 last; false cancels with KILN_ERR_CANCELLED and
 * leaves nothing behind) and the machine queries.
 */
#include "harness.h"
#include "kiln.h"

static void test_info_stories(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no %s", path);
    kiln_model_info in;
    CHECK(kiln_model_info_read(path, &in) == KILN_OK);
    CHECK(strcmp(in.arch, "llama") == 0);
    CHECK(in.runnable);
    CHECK(strcmp(in.weight_type, "F32") == 0);
    CHECK(in.n_layer == 5 && in.n_embd == 64 && in.n_head == 8 && in.n_head_kv == 4 && in.head_dim == 8);
    CHECK(in.n_ctx_train > 0);
    CHECK(in.n_tensors == 48);
    CHECK(in.file_bytes == 1185376);
    CHECK(in.tensor_bytes == in.n_params * 4); /* all F32 */
    CHECK(in.tensor_bytes < in.file_bytes);
    CHECK(in.split_count == 1 && in.split_no == 0);
    /* the full load agrees on the parameter count of the weights it uses */
    kiln_model *m = NULL;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    CHECKF(kiln_model_n_params(m) <= in.n_params, "%llu vs %llu", (unsigned long long)kiln_model_n_params(m),
           (unsigned long long)in.n_params);
    CHECK(kiln_model_n_ctx_train(m) == in.n_ctx_train);
    kiln_model_free(m);
}

static void test_info_errors(void) {
    kiln_model_info in;
    char path[512];
    snprintf(path, sizeof path, "%s/not_a_model.gguf", kt_tmpdir());
    FILE *f = fopen(path, "wb");
    CHECK(f);
    fputs("this is not a model", f);
    fclose(f);
    CHECK(kiln_model_info_read(path, &in) == KILN_ERR_FORMAT);
    CHECK(strstr(kiln_last_error(), "not_a_model.gguf") != NULL);
    snprintf(path, sizeof path, "%s/missing.gguf", kt_tmpdir());
    CHECK(kiln_model_info_read(path, &in) == KILN_ERR_IO);
    CHECK(kiln_model_info_read(kt_tmpdir(), &in) == KILN_ERR_IO); /* a directory */
    CHECK(kiln_model_info_read(NULL, &in) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_model_info_read(path, NULL) == KILN_ERR_INVALID_ARG);
}

typedef struct prog {
    int calls;
    float first, last;
    bool monotonic;
    int cancel_after; /* return false on this call (0: never) */
} prog;

static bool on_progress(float f, void *user) {
    prog *p = user;
    if (p->calls == 0) p->first = f;
    else if (f < p->last) p->monotonic = false;
    if (f < 0 || f > 1) p->monotonic = false;
    p->last = f;
    p->calls++;
    return !(p->cancel_after && p->calls >= p->cancel_after);
}

static void test_progress(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no %s", path);
    for (int mmap = 0; mmap < 2; mmap++) {
        prog p = {.monotonic = true};
        kiln_model_params mp = kiln_model_default_params();
        CHECK(mp.progress == NULL);
        mp.use_mmap = mmap;
        mp.progress = on_progress;
        mp.progress_user = &p;
        kiln_model *m = NULL;
        CHECK(kiln_model_load(path, &mp, &m) == KILN_OK);
        kiln_model_free(m);
        CHECKF(p.calls >= 2, "%d calls", p.calls);
        CHECK(p.first == 0.0f && p.last == 1.0f && p.monotonic);
    }
    /* vocab-only loads read no weights and report nothing */
    prog v = {.monotonic = true};
    kiln_model_params mp = kiln_model_default_params();
    mp.vocab_only = true;
    mp.progress = on_progress;
    mp.progress_user = &v;
    kiln_model *m = NULL;
    CHECK(kiln_model_load(path, &mp, &m) == KILN_OK);
    kiln_model_free(m);
    CHECK(v.calls == 0);
}

static void test_progress_cancel(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no %s", path);
    for (int at = 1; at <= 3; at++) { /* at the first report (0), and during the copy */
        prog p = {.monotonic = true, .cancel_after = at};
        kiln_model_params mp = kiln_model_default_params();
        mp.progress = on_progress;
        mp.progress_user = &p;
        kiln_model *m = (kiln_model *)&p;
        CHECK(kiln_model_load(path, &mp, &m) == KILN_ERR_CANCELLED);
        CHECK(m == NULL);
        CHECK(strstr(kiln_last_error(), "cancelled") != NULL);
        CHECK(p.calls == at);
    }
}

static void test_machine(void) {
    CHECK(kiln_physical_cores() >= 1);
    CHECK(kiln_physical_memory() > 0);
}

int main(void) {
    RUN(test_info_stories);
    RUN(test_info_errors);
    RUN(test_progress);
    RUN(test_progress_cancel);
    RUN(test_machine);
    return kt_summary();
}

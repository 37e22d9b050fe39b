/*
 * fuzz_gguf.c - libFuzzer harness of the GGUF reader and the model loader.
 *
 * Feeds: the input as the bytes of a whole GGUF file. The reader (kn_gguf_parse) runs over a copy
 * in an anonymous mapping the size of the input, so any read past its end faults or trips ASan;
 * after a successful parse every key, value, array and tensor view is walked (string arrays to
 * their end), as the loaders do. A file the reader accepts is then put in a file in memory and
 * given to kiln_model_info_read and kiln_model_load (vocab-only, then with the weights, copied and
 * mapped), whose family checks, tokenizer loading and tensor conversion must fail cleanly on
 * anything inconsistent. Seeds: the tiny test models and vocab-only files cut down to their
 * headers (tests/fuzz/corpus/gguf/).
 */
#include "fuzz.h"

#include "model/gguf.h"

#include <fcntl.h>

/* Reads every byte a view points at, so that a view past the mapping is seen. */
static volatile uint8_t sink;
static void touch(const void *p, uint64_t n) {
    const uint8_t *b = p;
    for (uint64_t i = 0; i < n; i++) sink ^= b[i];
}

static void walk(const kn_gguf *g) {
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kn_gguf_kv *kv = &g->kv[i];
        touch(kv->key.ptr, kv->key.len);
        if (kv->type == KN_GGUF_STRING) touch(kv->str.ptr, kv->str.len);
        if (kv->type != KN_GGUF_ARRAY) continue;
        if (kv->arr_type == KN_GGUF_STRING) {
            const uint8_t *cur = kv->arr_data;
            for (uint64_t j = 0; j < kv->arr_n; j++) {
                kn_str s = kn_gguf_next_str(&cur);
                touch(s.ptr, s.len);
            }
        } else {
            touch(kv->arr_data, kv->arr_n * kn_gguf_type_size(kv->arr_type));
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kn_gguf_tensor *t = &g->tensors[i];
        touch(t->name.ptr, t->name.len);
        if (t->nbytes) {
            touch(t->data, 1);
            touch(t->data + t->nbytes - 1, 1);
        }
    }
    uint64_t u;
    int64_t si;
    double f;
    bool b;
    kn_str s;
    (void)kn_gguf_get_u64(g, "general.alignment", &u);
    (void)kn_gguf_get_i64(g, "llama.context_length", &si);
    (void)kn_gguf_get_f64(g, "llama.rope.freq_base", &f);
    (void)kn_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b);
    (void)kn_gguf_get_str(g, "general.architecture", &s);
    (void)kn_gguf_find_tensor(g, "token_embd.weight");
}

static void load(const uint8_t *data, size_t size) {
    int fd = fz_memfd(data, size);
    if (fd < 0) return;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    kiln_model_info info;
    (void)kiln_model_info_read(path, &info);
    for (int mode = 0; mode < 3; mode++) {
        kiln_model_params p = kiln_model_default_params();
        p.vocab_only = mode == 0;
        p.use_mmap = mode == 2;
        kiln_model *m = NULL;
        if (kiln_model_load(path, &p, &m) != KILN_OK) {
            if (getenv("KILN_FUZZ_VERBOSE")) fprintf(stderr, "load (mode %d): %s\n", mode, kiln_last_error());
            break;
        }
        char piece[64];
        size_t n;
        for (int32_t t = 0; t < kiln_model_n_vocab(m) && t < 64; t++)
            (void)kiln_token_piece(m, t, true, piece, sizeof piece, &n);
        kiln_token toks[64];
        (void)kiln_tokenize(m, "Hello world", 11, true, true, toks, 64, &n);
        kiln_model_free(m);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > (64u << 20)) return 0;
    uint8_t *copy = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) return 0;
    memcpy(copy, data, size);
    kn_mapping map = {copy, size};
    kn_gguf g; /* takes the mapping: unmapped by kn_gguf_close, or by the parse when it fails */
    if (kn_gguf_parse(map, &g) != KILN_OK) {
        if (getenv("KILN_FUZZ_VERBOSE")) fprintf(stderr, "parse: %s\n", kiln_last_error());
        return 0;
    }
    walk(&g);
    kn_gguf_close(&g);
    load(data, size);
    return 0;
}

/*
 * fuzz_safetensors.c - libFuzzer harness of the safetensors reader (src/model/safetensors.c).
 *
 * Feeds: the input as the bytes of one safetensors file (8-byte header length, JSON header, data),
 * parsed by kn_st_parse over a copy in an anonymous mapping of exactly the input's size, so a read
 * past its end faults or trips ASan. A file the reader accepts has every tensor looked up by name
 * and its first and last data bytes read, and the small float tensors converted to f32
 * (kn_st_to_f32) as the Hugging Face loader does. Seeds: small files with tensors of several dtypes
 * and shapes, a scalar, an empty file and a truncated header (tests/fuzz/corpus/safetensors/).
 *
 * In a tree without the reader this harness builds as a stub that reports itself skipped.
 */
#include "fuzz.h"

#if __has_include("model/safetensors.h")
#include "model/safetensors.h"
#if __has_include("model/hf.h")
#include "model/hf.h"
#define HAVE_ST_TO_F32 1
#endif

static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > (64u << 20)) return 0;
    uint8_t *copy = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) return 0;
    memcpy(copy, data, size);
    kn_safetensors st;
    memset(&st, 0, sizeof st);
    /* the mapping is st's from here on: kn_st_close (or the failed parse) unmaps it */
    if (kn_st_parse("fuzz.safetensors", (kn_mapping){copy, size}, &st) != KILN_OK) return 0;
    for (size_t i = 0; i < st.n_tensors; i++) {
        const kn_st_tensor *t = &st.tensors[i];
        if (kn_st_find(&st, t->name) != t) abort(); /* names are unique and sorted */
        (void)kn_st_dtype_name(t->dtype);
        if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1];
#ifdef HAVE_ST_TO_F32
        if (t->n_elem <= 4096) {
            float *f = malloc((t->n_elem ? t->n_elem : 1) * sizeof *f);
            if (f) (void)kn_st_to_f32(t, f);
            free(f);
        }
#endif
    }
    kn_st_close(&st);
    return 0;
}
#else
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)data;
    (void)size;
    fz_skip("the safetensors reader (src/model/safetensors.h) is not in this tree");
    return 0;
}
#endif

/*
 * fuzz.h - what the libFuzzer harnesses of tests/fuzz share: the test-data path, models loaded once
 * per process, a cursor over the fuzzer's bytes, and files in memory (memfd) for readers that want
 * a path or a descriptor.
 *
 * Each harness is one file, tests/fuzz/fuzz_<name>.c, built by `make fuzz` into build-fuzz/ with
 * ASan + UBSan and -fsanitize=fuzzer; its corpus is tests/fuzz/corpus/<name>/ (docs/fuzzing.md).
 * A harness whose data (../shared/data, or $KILN_TEST_DATA) is absent prints why and exits 0 from
 * LLVMFuzzerInitialize's first input, so the smoke run can count it as skipped.
 */
#ifndef KILN_FUZZ_H
#define KILN_FUZZ_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ../shared/data/rel (or $KILN_TEST_DATA/rel) in one of four rotating static buffers. */
static inline const char *fz_data(const char *rel) {
    static char buf[4][1024];
    static int slot;
    const char *root = getenv("KILN_TEST_DATA");
    if (!root || !*root) root = "../shared/data";
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", root, rel);
    return b;
}

/* The harness cannot run here (its data is missing): says so in the line the smoke script counts
 * as a skip, and exits 0. */
static inline void fz_skip(const char *why) {
    printf("FUZZ-SKIP %s\n", why);
    fflush(stdout);
    _exit(0);
}

/* The model at data path rel, loaded once (vocab_only: metadata and tokenizer only); skips the
 * harness when it cannot be loaded. Never freed: it lives as long as the fuzzing process. */
static inline kiln_model *fz_model(const char *rel, bool vocab_only) {
    kiln_model_params p = kiln_model_default_params();
    p.vocab_only = vocab_only;
    kiln_model *m = NULL;
    const char *path = fz_data(rel);
    if (access(path, R_OK) != 0 || kiln_model_load(path, &p, &m) != KILN_OK) {
        char why[1200];
        snprintf(why, sizeof why, "cannot load %s", path);
        fz_skip(why);
    }
    return m;
}

/* A cursor over the fuzzer's input. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

/* The next byte (0 once the input is used up). */
static inline uint8_t fz_byte(fz_in *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

/* The next little-endian 32-bit value (missing bytes read as 0). */
static inline uint32_t fz_u32(fz_in *in) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)fz_byte(in) << (8 * i);
    return v;
}

/* Splits off the bytes up to the first NUL (or the end) into *part; the NUL is skipped. */
static inline void fz_until_nul(fz_in *in, const uint8_t **part, size_t *len) {
    const uint8_t *z = memchr(in->p, 0, in->n);
    size_t k = z ? (size_t)(z - in->p) : in->n;
    *part = in->p;
    *len = k;
    in->p += k + (z ? 1 : 0);
    in->n -= k + (z ? 1 : 0);
}

/* A file in memory holding data[n] (memfd); its descriptor, or -1. Its path is /proc/self/fd/<fd>. */
static inline int fz_memfd(const uint8_t *data, size_t n) {
    int fd = memfd_create("kiln-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, data + off, n - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

#endif

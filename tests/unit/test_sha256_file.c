/*
 * test_sha256_file.c - kiln_sha256_file (the digest kiln pull checks downloads with): known answers
 * for an empty file and "abc", a file longer than the function's read block equals the digest of
 * the same bytes hashed in memory, and a missing file is a clean KILN_ERR_IO with an empty digest.
 */
#include "base/sha256.h"
#include "harness.h"
#include "kiln.h"

#include <stdint.h>

static char dir[] = "/tmp/kiln-sha256-XXXXXX";

/* Writes n bytes of data to dir/name; returns the path (static buffer). */
static const char *write_file(const char *name, const void *data, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    const bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? path : NULL;
}

static void test_sha256_file_known_answers(void) {
    char hex[65];
    const char *p = write_file("empty", "", 0);
    CHECK(p && kiln_sha256_file(p, hex) == KILN_OK);
    CHECKF(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0, "%s", hex);
    p = write_file("abc", "abc", 3);
    CHECK(p && kiln_sha256_file(p, hex) == KILN_OK);
    CHECKF(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0, "%s", hex);
}

static void test_sha256_file_long_file_matches_memory(void) {
    const size_t n = (3u << 20) + 12345; /* several read blocks and a partial one */
    uint8_t *buf = malloc(n);
    CHECK(buf);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 24);
    const char *p = write_file("long", buf, n);
    kn_sha256 s;
    kn_sha256_init(&s);
    kn_sha256_update(&s, buf, n);
    char want[65], got[65];
    kn_sha256_hex(&s, want);
    free(buf);
    CHECK(p && kiln_sha256_file(p, got) == KILN_OK);
    CHECKF(strcmp(got, want) == 0, "%s vs %s", got, want);
}

static void test_sha256_file_missing(void) {
    char hex[65] = "x";
    char path[300];
    snprintf(path, sizeof path, "%s/nothing-here", dir);
    CHECK(kiln_sha256_file(path, hex) == KILN_ERR_IO);
    CHECK(hex[0] == '\0');
    CHECK(strstr(kiln_last_error(), "nothing-here") != NULL);
    CHECK(kiln_sha256_file(dir, hex) == KILN_ERR_IO); /* a directory cannot be read as a file */
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(test_sha256_file_known_answers);
    RUN(test_sha256_file_long_file_matches_memory);
    RUN(test_sha256_file_missing);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    return kt_summary();
}

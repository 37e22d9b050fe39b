/*
 * checksum.c - the SSD cache's checksum against the speeds it must stay far above, and what
 * checking it costs a restore. Three tables, each figure the best and the median of ROUNDS rounds
 * in which the variants run interleaved:
 *
 *   1. GB/s of kn_hash64 (file format 2) over SIZE MiB in memory, beside the format-1 checksum
 *      (kiln's earlier function, kept here as the reference) and memcpy of the same bytes (scale);
 *   2. GB/s reading a SIZE MiB file in DIR: with O_DIRECT (the device itself, no page cache) and
 *      buffered from the page cache;
 *   3. ms of kn_ssdf_read_rows restoring every row of a cache file (TOKENS tokens of a
 *      Llama-3.2-1B-shaped KV: 16 layers x 512 KV dims, F16; about 62.5 MiB at 2000 tokens) with
 *      verification off and on, from the page cache and from the disk (the file's pages dropped
 *      with posix_fadvise before each read).
 *
 * Usage: build/bench/checksum [-s SIZE_MIB] [-r ROUNDS] [-t TOKENS] [-d DIR]
 *        (defaults 64, 7, 2000, build/). DIR must be on the disk the cache would use; files are
 *        removed at exit.
 */
#include "base/checksum.h"
#include "base/base.h"
#include "cache/ssd_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_ROUNDS 64

/* ---- the format-1 checksum (kiln before file format 2), for comparison ---------------------- */

#define V1_M1 0x9E3779B97F4A7C15ull
#define V1_M2 0xBF58476D1CE4E5B9ull
#define V1_M3 0x94D049BB133111EBull

static inline uint64_t v1_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t v1_load(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint64_t v1_round(uint64_t lane, uint64_t w) { return v1_rotl(lane + w * V1_M1, 31) * V1_M2; }
static inline uint64_t v1_avalanche(uint64_t x) {
    x ^= x >> 30;
    x *= V1_M2;
    x ^= x >> 27;
    x *= V1_M3;
    return x ^ (x >> 31);
}

/* Four lanes, two multiplies per 8 bytes (the tail bytes folded one by one). */
static uint64_t v1_hash(const uint8_t *p, size_t len, uint64_t seed) {
    uint64_t a = seed + V1_M1, b = seed ^ V1_M2, c = seed - V1_M3, d = ~seed;
    const size_t n = len / 32;
    for (size_t i = 0; i < n; i++, p += 32) {
        a = v1_round(a, v1_load(p));
        b = v1_round(b, v1_load(p + 8));
        c = v1_round(c, v1_load(p + 16));
        d = v1_round(d, v1_load(p + 24));
    }
    uint64_t x = v1_rotl(a, 1) + v1_rotl(b, 7) + v1_rotl(c, 12) + v1_rotl(d, 18);
    x = (x ^ v1_avalanche(a)) * V1_M1 + V1_M3;
    x = (x ^ v1_avalanche(b)) * V1_M1 + V1_M3;
    x = (x ^ v1_avalanche(c)) * V1_M1 + V1_M3;
    x = (x ^ v1_avalanche(d)) * V1_M1 + V1_M3;
    x ^= (uint64_t)len * V1_M2;
    for (size_t i = 0; i < len % 32; i++) x = v1_rotl(x ^ ((uint64_t)p[i] * V1_M3), 11) * V1_M1;
    return v1_avalanche(x);
}

/* ---- measuring ---------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct series {
    const char *name;
    double v[MAX_ROUNDS];
    int n;
} series;

/* Prints "name  best  median" of the samples (best = largest for rates, smallest for times). */
static void report(const series *s, const char *unit, bool higher_is_better) {
    double v[MAX_ROUNDS];
    memcpy(v, s->v, (size_t)s->n * sizeof *v);
    qsort(v, (size_t)s->n, sizeof *v, cmp_double);
    const double best = higher_is_better ? v[s->n - 1] : v[0];
    printf("  %-44s %9.2f %9.2f  %s\n", s->name, best, v[s->n / 2], unit);
}

static void die(const char *what) {
    fprintf(stderr, "bench/checksum: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Reads all of fd into buf (len bytes) with pread; false on a short read or an error. */
static bool read_all(int fd, uint8_t *buf, size_t len) {
    for (size_t done = 0; done < len;) {
        const ssize_t r = pread(fd, buf + done, len - done, (off_t)done);
        if (r <= 0) return false;
        done += (size_t)r;
    }
    return true;
}

/* Drops path's pages from the page cache (they are clean: the file was fsynced). */
static void drop_cache(const char *path) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0) die(path);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

int main(int argc, char **argv) {
    size_t mib = 64;
    int rounds = 7, tokens = 2000;
    const char *dir = "build";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-s") == 0) mib = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "-r") == 0) rounds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-t") == 0) tokens = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-d") == 0) dir = argv[i + 1];
        else break;
    }
    if (mib < 1 || mib > 4096 || rounds < 1 || rounds > MAX_ROUNDS || tokens < 1 || tokens > 100000) {
        fprintf(stderr, "usage: checksum [-s SIZE_MIB (1..4096)] [-r ROUNDS (1..%d)] [-t TOKENS] [-d DIR]\n",
                MAX_ROUNDS);
        return 2;
    }
    const size_t size = mib << 20;
    uint8_t *buf = NULL, *copy = NULL;
    if (posix_memalign((void **)&buf, 4096, size) || posix_memalign((void **)&copy, 4096, size)) die("out of memory");
    uint64_t x = 88172645463325252ull; /* xorshift64: data a checksum cannot shortcut */
    for (size_t i = 0; i < size; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
    memcpy(copy, buf, size); /* touch every page before timing */
    volatile uint64_t sink = 0;

    /* 1. The checksum in memory. */
    series h2 = {.name = "kn_hash64 (file format 2, 8 lanes)"};
    series h1 = {.name = "format-1 checksum (4 lanes, 2 mul/word)"};
    series mc = {.name = "memcpy (for scale)"};
    for (int r = 0; r < rounds; r++) {
        double t = kn_now_ms();
        sink ^= kn_hash64_of(buf, size, (uint64_t)r);
        h2.v[h2.n++] = (double)size / ((kn_now_ms() - t) * 1e6);
        t = kn_now_ms();
        sink ^= v1_hash(buf, size, (uint64_t)r);
        h1.v[h1.n++] = (double)size / ((kn_now_ms() - t) * 1e6);
        t = kn_now_ms();
        memcpy(copy, buf, size);
        sink ^= copy[(size_t)r * 4099 % size];
        mc.v[mc.n++] = (double)size / ((kn_now_ms() - t) * 1e6);
    }
    printf("checksum of %zu MiB in memory, %d rounds            best    median\n", mib, rounds);
    report(&h2, "GB/s", true);
    report(&h1, "GB/s", true);
    report(&mc, "GB/s", true);

    /* 2. Reading a file of the same size. */
    char path[4096];
    snprintf(path, sizeof path, "%s/.checksum-bench.%ld", dir, (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, buf, size) != (ssize_t)size || fsync(fd) != 0) die(path);
    close(fd);
    series direct = {.name = "O_DIRECT (the device, no page cache)"};
    series cached = {.name = "buffered, from the page cache"};
    bool have_direct = true;
    for (int r = 0; r < rounds; r++) {
        fd = open(path, O_RDONLY | O_DIRECT);
        if (fd < 0) {
            have_direct = false; /* e.g. tmpfs: no O_DIRECT */
        } else {
            const double t = kn_now_ms();
            if (!read_all(fd, copy, size)) die("O_DIRECT read");
            direct.v[direct.n++] = (double)size / ((kn_now_ms() - t) * 1e6);
            close(fd);
        }
        fd = open(path, O_RDONLY);
        if (fd < 0 || !read_all(fd, copy, size)) die(path); /* into the page cache first */
        const double t = kn_now_ms();
        if (!read_all(fd, copy, size)) die("read");
        cached.v[cached.n++] = (double)size / ((kn_now_ms() - t) * 1e6);
        close(fd);
    }
    unlink(path);
    printf("reading a %zu MiB file in %s\n", mib, dir);
    if (have_direct) report(&direct, "GB/s", true);
    else printf("  %-44s (not supported on this file system)\n", direct.name);
    report(&cached, "GB/s", true);

    /* 3. Restoring a cache entry with and without verification. */
    const kn_ssdf_key key = {.model = {1}, .tokenizer = {2}, .kv_type = KN_SSDF_F16, .n_layer = 16, .kv_dim = 512};
    const size_t layer = (size_t)tokens * key.kv_dim * 2, all = layer * key.n_layer;
    uint8_t *k = malloc(all), *v = malloc(all), *dk = malloc(all), *dv = malloc(all);
    int32_t *ids = malloc((size_t)tokens * sizeof *ids);
    if (!k || !v || !dk || !dv || !ids) die("out of memory");
    for (size_t i = 0; i < all; i++) k[i] = buf[i % size], v[i] = buf[(i + 7) % size];
    for (int i = 0; i < tokens; i++) ids[i] = 100 + i;
    memset(dk, 0, all), memset(dv, 0, all); /* fault the destination in before timing (as a row's KV is) */
    snprintf(path, sizeof path, "%s/.checksum-bench-entry.%ld", dir, (long)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || kn_ssdf_write(fd, &key, ids, (uint32_t)tokens, k, v, NULL) != KILN_OK || fsync(fd) != 0) die(path);
    close(fd);
    series s[4] = {{.name = "page cache, verification off"},
                   {.name = "page cache, verification on"},
                   {.name = "disk (pages dropped), verification off"},
                   {.name = "disk (pages dropped), verification on"}};
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < 4; c++) {
            const bool verify = c & 1, cold = c >= 2;
            if (cold) drop_cache(path);
            const double t = kn_now_ms();
            fd = open(path, O_RDONLY);
            kn_ssdf_header h;
            if (fd < 0 || kn_ssdf_read_header(fd, &key, &h) != KN_SSDF_OK) die("reading the entry's header");
            const kn_ssdf_result res = kn_ssdf_read_rows(fd, &h, h.n_tokens, dk, layer, dv, layer, verify);
            kn_ssdf_header_free(&h);
            close(fd);
            if (res != KN_SSDF_OK) die("restoring the entry");
            s[c].v[s[c].n++] = kn_now_ms() - t;
        }
    unlink(path);
    if (memcmp(dk, k, all) != 0 || memcmp(dv, v, all) != 0) die("the restored rows differ");
    printf("restoring %d tokens x %u layers x %u KV dims F16 (%.1f MiB) with kn_ssdf_read_rows\n", tokens, key.n_layer,
           key.kv_dim, (double)(2 * all) / (1 << 20));
    for (int c = 0; c < 4; c++) report(&s[c], "ms", false);
    printf("(sink %llx)\n", (unsigned long long)sink);
    free(k), free(v), free(dk), free(dv), free(ids), free(buf), free(copy);
    return 0;
}

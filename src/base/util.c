/*
 * util.c - allocation wrappers, clock and machine facts used across the library.
 */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

void *kn_calloc(size_t n, size_t size) {
    uint64_t total;
    if (!kn_mul_ok(n, size, &total) || total > SIZE_MAX) {
        kn_error(KILN_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) kn_error(KILN_ERR_NOMEM, "out of memory allocating %llu bytes", (unsigned long long)total);
    return p;
}

/* Buffers of at least HUGE_MIN bytes (weights, KV caches) start on a 2 MiB boundary and are offered
 * to the kernel for transparent huge pages: decode streams the whole weight buffer every token, and
 * with 4 KiB pages that is a TLB miss every 4 KiB. Where THP is off (or not Linux) nothing changes. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN  (16 * HUGE_PAGE)

void *kn_alloc_aligned(size_t size) {
    void *p = NULL;
    size_t rounded = (size + 63) & ~(size_t)63;
    const size_t align = rounded >= HUGE_MIN ? HUGE_PAGE : 64;
    if (rounded < size || posix_memalign(&p, align, rounded ? rounded : 64) != 0) {
        kn_error(KILN_ERR_NOMEM, "out of memory allocating %zu bytes", size);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (align == HUGE_PAGE) (void)madvise(p, rounded & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice only */
#endif
    return p;
}

void kn_free_aligned(void *p) { free(p); }

char *kn_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = kn_calloc(n, 1);
    if (d) memcpy(d, s, n);
    return d;
}

double kn_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Counts distinct (physical id, core id) pairs in /proc/cpuinfo; falls back to the online CPU
 * count when that file is unavailable or lacks the fields. */
int kn_physical_cores(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1) online = 1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return (int)online;
    int pairs[1024][2];
    int n = 0, phys = -1, core = -1;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "physical id : %d", &phys) == 1) continue;
        if (sscanf(line, "core id : %d", &core) == 1) {
            int seen = 0;
            for (int i = 0; i < n; i++)
                if (pairs[i][0] == phys && pairs[i][1] == core) seen = 1;
            if (!seen && n < 1024) {
                pairs[n][0] = phys;
                pairs[n][1] = core;
                n++;
            }
        }
    }
    fclose(f);
    if (n < 1 || n > online) return (int)online;
    return n;
}

uint64_t kn_physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

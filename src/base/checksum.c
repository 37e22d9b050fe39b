/*
 * checksum.c - kn_hash64 (see checksum.h). The constants are the 64-bit golden ratio and the
 * splitmix64 multipliers; the structure (4 lanes over 32-byte stripes, then a fold and an
 * avalanche) keeps the four multiply chains independent so they overlap in the CPU.
 */
#include "base/checksum.h"

#include <string.h>

#define M1 0x9E3779B97F4A7C15ull   /* 2^64 / golden ratio, odd */
#define M2 0xBF58476D1CE4E5B9ull   /* splitmix64 */
#define M3 0x94D049BB133111EBull   /* splitmix64 */

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint64_t round64(uint64_t lane, uint64_t w) { return rotl(lane + w * M1, 31) * M2; }

static inline uint64_t avalanche(uint64_t x) {
    x ^= x >> 30;
    x *= M2;
    x ^= x >> 27;
    x *= M3;
    x ^= x >> 31;
    return x;
}

static void stripes(kn_hash64 *h, const uint8_t *p, size_t n_stripes) {
    uint64_t a = h->lane[0], b = h->lane[1], c = h->lane[2], d = h->lane[3];
    for (size_t i = 0; i < n_stripes; i++, p += 32) {
        a = round64(a, load_le64(p));
        b = round64(b, load_le64(p + 8));
        c = round64(c, load_le64(p + 16));
        d = round64(d, load_le64(p + 24));
    }
    h->lane[0] = a, h->lane[1] = b, h->lane[2] = c, h->lane[3] = d;
}

void kn_hash64_init(kn_hash64 *h, uint64_t seed) {
    memset(h, 0, sizeof *h);
    h->lane[0] = seed + M1;
    h->lane[1] = seed ^ M2;
    h->lane[2] = seed - M3;
    h->lane[3] = ~seed;
}

void kn_hash64_update(kn_hash64 *h, const void *data, size_t len) {
    const uint8_t *p = data;
    h->total += len;
    if (h->nbuf) {
        const size_t take = len < 32 - h->nbuf ? len : 32 - h->nbuf;
        memcpy(h->buf + h->nbuf, p, take);
        h->nbuf += take;
        p += take;
        len -= take;
        if (h->nbuf < 32) return;
        stripes(h, h->buf, 1);
        h->nbuf = 0;
    }
    const size_t n = len / 32;
    stripes(h, p, n);
    p += n * 32;
    len -= n * 32;
    if (len) memcpy(h->buf, p, len);
    h->nbuf = len;
}

uint64_t kn_hash64_final(const kn_hash64 *h) {
    uint64_t x = rotl(h->lane[0], 1) + rotl(h->lane[1], 7) + rotl(h->lane[2], 12) + rotl(h->lane[3], 18);
    for (int i = 0; i < 4; i++) x = (x ^ avalanche(h->lane[i])) * M1 + M3;
    x ^= h->total * M2;
    size_t i = 0;
    for (; i + 8 <= h->nbuf; i += 8) x = rotl(x ^ avalanche(load_le64(h->buf + i)), 27) * M1 + M3;
    for (; i < h->nbuf; i++) x = rotl(x ^ ((uint64_t)h->buf[i] * M3), 11) * M1;
    return avalanche(x);
}

uint64_t kn_hash64_of(const void *data, size_t len, uint64_t seed) {
    kn_hash64 h;
    kn_hash64_init(&h, seed);
    kn_hash64_update(&h, data, len);
    return kn_hash64_final(&h);
}

/*
 * checksum.c - kn_hash64 (the function is specified in checksum.h). The eight lanes live in local
 * variables inside the stripe loop, so the compiler keeps them in registers and the eight multiply
 * chains overlap: the loop runs at the multiplier's throughput, one multiply per 8 bytes.
 */
#include "base/checksum.h"

#include <string.h>

#define M1 0x9E3779B97F4A7C15ull /* 2^64 / golden ratio, odd */
#define M2 0xBF58476D1CE4E5B9ull /* splitmix64 */
#define M3 0x94D049BB133111EBull /* splitmix64 */

_Static_assert(KN_HASH64_LANES == 8, "stripes() is written out for eight lanes");

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* One word into one lane: a bijection of the lane for a fixed word, and of the word for a fixed lane. */
static inline uint64_t round64(uint64_t lane, uint64_t w) { return rotl(lane ^ w, 29) * M1; }

/* The splitmix64 finalizer (a bijection). */
static inline uint64_t avalanche(uint64_t x) {
    x ^= x >> 30;
    x *= M2;
    x ^= x >> 27;
    x *= M3;
    x ^= x >> 31;
    return x;
}

/* Absorbs n_stripes whole stripes at p into lane[8]. */
static void stripes(uint64_t lane[KN_HASH64_LANES], const uint8_t *p, size_t n_stripes) {
    uint64_t a = lane[0], b = lane[1], c = lane[2], d = lane[3];
    uint64_t e = lane[4], f = lane[5], g = lane[6], h = lane[7];
    for (size_t i = 0; i < n_stripes; i++, p += KN_HASH64_STRIPE) {
        a = round64(a, load_le64(p));
        b = round64(b, load_le64(p + 8));
        c = round64(c, load_le64(p + 16));
        d = round64(d, load_le64(p + 24));
        e = round64(e, load_le64(p + 32));
        f = round64(f, load_le64(p + 40));
        g = round64(g, load_le64(p + 48));
        h = round64(h, load_le64(p + 56));
    }
    lane[0] = a, lane[1] = b, lane[2] = c, lane[3] = d;
    lane[4] = e, lane[5] = f, lane[6] = g, lane[7] = h;
}

void kn_hash64_init(kn_hash64 *h, uint64_t seed) {
    memset(h, 0, sizeof *h);
    for (int i = 0; i < KN_HASH64_LANES; i++) h->lane[i] = avalanche(seed + (uint64_t)(i + 1) * M1);
}

void kn_hash64_update(kn_hash64 *h, const void *data, size_t len) {
    const uint8_t *p = data;
    h->total += len;
    if (h->nbuf) {
        const size_t take = len < KN_HASH64_STRIPE - h->nbuf ? len : KN_HASH64_STRIPE - h->nbuf;
        memcpy(h->buf + h->nbuf, p, take);
        h->nbuf += take;
        p += take;
        len -= take;
        if (h->nbuf < KN_HASH64_STRIPE) return;
        stripes(h->lane, h->buf, 1);
        h->nbuf = 0;
    }
    const size_t n = len / KN_HASH64_STRIPE;
    stripes(h->lane, p, n);
    p += n * KN_HASH64_STRIPE;
    len -= n * KN_HASH64_STRIPE;
    if (len) memcpy(h->buf, p, len);
    h->nbuf = len;
}

uint64_t kn_hash64_final(const kn_hash64 *h) {
    uint64_t lane[KN_HASH64_LANES];
    memcpy(lane, h->lane, sizeof lane);
    if (h->nbuf) { /* the last, partial stripe, padded with zero bytes */
        uint8_t last[KN_HASH64_STRIPE] = {0};
        memcpy(last, h->buf, h->nbuf);
        stripes(lane, last, 1);
    }
    uint64_t x = h->total;
    for (int i = 0; i < KN_HASH64_LANES; i++) x = avalanche(x ^ lane[i]);
    return x;
}

uint64_t kn_hash64_of(const void *data, size_t len, uint64_t seed) {
    kn_hash64 h;
    kn_hash64_init(&h, seed);
    kn_hash64_update(&h, data, len);
    return kn_hash64_final(&h);
}

/*
 * checksum.h - kn_hash64, a fast 64-bit checksum for detecting damaged data (the SSD cache's file
 * checksums, verified on every restore). Not cryptographic: it catches bit rot, truncation and
 * stray writes, not an attacker who can write the file (such a one could rewrite the checksum too).
 *
 * The function (pinned by known-answer tests; the SSD cache file format depends on it):
 *   - eight 64-bit lanes, lane i starting at avalanche(seed + (i + 1) * M1);
 *   - the data is cut into 64-byte stripes, the last one padded with zero bytes; lane i absorbs
 *     the i-th little-endian 8-byte word w of every stripe as lane = rotl(lane ^ w, 29) * M1;
 *   - the result is x = total length in bytes, then x = avalanche(x ^ lane[i]) for i = 0..7.
 * M1 is the odd 64-bit golden-ratio constant and avalanche the splitmix64 finalizer, so every step
 * is a bijection of the lane (or of x) for fixed data: a change confined to one 8-byte word always
 * changes the result; any other change (more words, another length) goes unseen with a chance of
 * about 2^-64. One 64-bit multiply per 8 bytes in
 * eight independent chains keeps the multiplier busy every cycle (about 4x the speed of a fast
 * SSD; bench/checksum.c measures it). Plain C with fixed byte order: identical results on every
 * CPU and compiler. Streaming: update may be called with any split of the data and gives the same
 * result as one call.
 */
#ifndef KN_CHECKSUM_H
#define KN_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#define KN_HASH64_LANES  8
#define KN_HASH64_STRIPE (8 * KN_HASH64_LANES) /* bytes absorbed per round of the lanes */

typedef struct kn_hash64 {
    uint64_t lane[KN_HASH64_LANES];
    uint64_t total;                /* bytes absorbed */
    uint8_t buf[KN_HASH64_STRIPE]; /* a partial stripe */
    size_t nbuf;
} kn_hash64;

void kn_hash64_init(kn_hash64 *h, uint64_t seed);
void kn_hash64_update(kn_hash64 *h, const void *data, size_t len);
/* The checksum of everything absorbed so far (h is not changed: more may be absorbed after). */
uint64_t kn_hash64_final(const kn_hash64 *h);
/* One-shot: init, update, final. */
uint64_t kn_hash64_of(const void *data, size_t len, uint64_t seed);

#endif

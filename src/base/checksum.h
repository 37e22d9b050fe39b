/*
 * checksum.h - kn_hash64, a fast 64-bit checksum for detecting damaged data (the SSD cache's file
 * checksums). Not cryptographic: it catches bit rot, truncation and stray writes, not an attacker
 * who can write the file (such a one could rewrite the checksum too).
 *
 * Four independent 64-bit lanes each absorb one 8-byte word of every 32-byte stripe with
 * lane = rotl(lane + word * M1, 31) * M2 (a bijection of the lane for a fixed word, so a changed
 * word always changes its lane), then the lanes, the tail bytes and the length are folded and
 * avalanched with the splitmix64 finalizer. Words are read little-endian on every host, so a file
 * written on one machine checks on another. Streaming: update may be called with any split of the
 * data and gives the same result as one call.
 */
#ifndef KN_CHECKSUM_H
#define KN_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

typedef struct kn_hash64 {
    uint64_t lane[4];
    uint64_t total;          /* bytes absorbed */
    uint8_t buf[32];         /* a partial stripe */
    size_t nbuf;
} kn_hash64;

void kn_hash64_init(kn_hash64 *h, uint64_t seed);
void kn_hash64_update(kn_hash64 *h, const void *data, size_t len);
uint64_t kn_hash64_final(const kn_hash64 *h);
/* One-shot: init, update, final. */
uint64_t kn_hash64_of(const void *data, size_t len, uint64_t seed);

#endif

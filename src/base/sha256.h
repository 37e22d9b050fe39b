/*
 * sha256.h - incremental SHA-256 (FIPS 180-4), used for model fingerprints and cache keys.
 */
#ifndef KN_SHA256_H
#define KN_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct kn_sha256 {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
} kn_sha256;

void kn_sha256_init(kn_sha256 *s);
void kn_sha256_update(kn_sha256 *s, const void *data, size_t len);
/* Writes the 32-byte digest. */
void kn_sha256_final(kn_sha256 *s, uint8_t out[32]);
/* Writes the digest as 64 lowercase hex characters plus a terminator. */
void kn_sha256_hex(kn_sha256 *s, char out[65]);

#endif

/*
 * ssd_file.c - the SSD cache file format: writer and validating parser (see ssd_file.h).
 *
 * A file holds the K/V rows of one token sequence. All integers are little-endian; offsets are
 * from the start of the file.
 *
 *   offset  size              field
 *        0  8                 magic "KILNKVC\0"
 *        8  4   u32           version (2; version 1 used an earlier checksum function)
 *       12  4   u32           header_size: bytes from offset 0 through the header checksum
 *                             = 112 + 4 * n_tokens + 16 * n_layer + 8
 *       16  32                model fingerprint (SHA-256 of the architecture metadata and tensors)
 *       48  32                tokenizer hash (SHA-256 of the tokenizer.* metadata)
 *       80  4   u32           KV format code (kn_kv_format_code, cache/kv.h): 1 = F16, 2 = F32 (both
 *                             unrotated), else the K and V formats, their rotation and head_dim
 *       84  4   u32           n_layer (1 .. 4096)
 *       88  4   u32           kv_dim: K (or V) elements per position and layer (1 .. 2^20)
 *       92  4   u32           n_tokens (1 .. 2^24)
 *       96  8   u64           tensor_bytes = n_tokens * K row bytes (a V tensor: n_tokens * V row
 *                             bytes; the row bytes follow from the format code and kv_dim)
 *      104  8   u64           data_offset = header_size rounded up to a multiple of 64
 *      112  4 * n_tokens      token ids (i32), position 0 first
 *        .  8 * 2 * n_layer   tensor checksums (u64): K of layer 0, V of layer 0, K of layer 1, ...
 *        .  8   u64           header checksum: kn_hash64 of bytes [0, header_size - 8), seed
 *                             KN_SSDF_SEED
 *        .                    zero bytes up to data_offset
 *   data_offset               the 2 * n_layer tensors in checksum-table order, each n_tokens rows
 *                             (keys after RoPE, exactly as the active KV holds them). Tensor i's checksum is kn_hash64
 * of its bytes with seed KN_SSDF_SEED + 1 + i, so swapped tensors do not check. file size                 = data_offset
 * + n_layer * (K + V tensor bytes), exactly.
 *
 * The format code is part of the key: a file of another KV format is a miss (another name, and
 * KN_SSDF_MISMATCH when read under the wrong key), never read as this format; an unknown code is
 * a corrupt file.
 *
 * The header checksum covers the token ids and the tensor checksum table, so a damaged header
 * (including a changed token id, which would otherwise serve K/V under the wrong key) is always
 * caught by reading only the header; damaged tensor data is caught by the tensor checksums, which
 * the reader checks unless told not to (verify, on by default in the engine). A file of another
 * version is refused before anything else is read (KN_SSDF_OTHER_VERSION). Files are hostile input:
 * every count is range-checked before it sizes anything, every product is overflow-checked, and
 * the file size must match.
 */
#include "cache/ssd_file.h"

#include "base/checksum.h"
#include "cache/kv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KN_SSDF_VERSION 2
#define KN_SSDF_SEED    0x6b696c6e6b766331ull /* "kilnkvc1" */
#define FIXED           112                   /* bytes before the token ids */
#define READ_CHUNK      ((size_t)256 << 10)   /* bytes read, then checksummed while still in cache */
static const char magic[8] = {'K', 'I', 'L', 'N', 'K', 'V', 'C', 0};

const char *kn_ssdf_result_str(kn_ssdf_result r) {
    switch (r) {
        case KN_SSDF_OK: return "ok";
        case KN_SSDF_IO: return "read error";
        case KN_SSDF_NOMEM: return "out of memory";
        case KN_SSDF_TRUNCATED: return "truncated";
        case KN_SSDF_CORRUPT: return "corrupt";
        case KN_SSDF_MISMATCH: return "for another model, tokenizer or KV format";
        case KN_SSDF_OTHER_VERSION: return "of another file format version";
    }
    return "?";
}

bool kn_ssdf_rows(const kn_ssdf_key *key, uint64_t *k_row, uint64_t *v_row) {
    kn_kv_format f;
    return key->kv_dim >= 1 && key->kv_dim <= KN_SSDF_MAX_KV_DIM &&
           kn_kv_format_decode(key->kv_type, key->kv_dim, &f, k_row, v_row);
}

/* ---- little-endian fields ---------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ---- sizes ---------------------------------------------------------------------------------------- */

/* Header size, tensor bytes and data offset of a file for n tokens under key; false when a count
 * is out of range or a size overflows. */
static bool layout(const kn_ssdf_key *key, uint32_t n, uint64_t *header_size, uint64_t *tensor_bytes,
                   uint64_t *v_tensor_bytes, uint64_t *data_offset, uint64_t *file_size) {
    uint64_t kr, vr;
    if (!kn_ssdf_rows(key, &kr, &vr) || n < 1 || n > KN_SSDF_MAX_TOKENS || key->n_layer < 1 ||
        key->n_layer > KN_SSDF_MAX_LAYERS || kr > 4 * (uint64_t)KN_SSDF_MAX_KV_DIM ||
        vr > 4 * (uint64_t)KN_SSDF_MAX_KV_DIM)
        return false;
    /* Within these ranges the header is < 2^27 bytes and a tensor < 2^47: no overflow so far. */
    *header_size = FIXED + 4 * (uint64_t)n + 16 * (uint64_t)key->n_layer + 8;
    *tensor_bytes = (uint64_t)n * kr;
    *v_tensor_bytes = (uint64_t)n * vr;
    *data_offset = (*header_size + 63) / 64 * 64;
    uint64_t data;
    return kn_mul_ok((uint64_t)key->n_layer, *tensor_bytes + *v_tensor_bytes, &data) &&
           kn_add_ok(*data_offset, data, file_size) && *file_size <= (uint64_t)INT64_MAX;
}

uint64_t kn_ssdf_file_size(const kn_ssdf_key *key, uint32_t n) {
    uint64_t hs, tb, vb, off, fs;
    return layout(key, n, &hs, &tb, &vb, &off, &fs) ? fs : 0;
}

/* ---- writing ------------------------------------------------------------------------------------ */

/* Writes all of buf; KILN_ERR_IO with errno's text on failure. */
static kiln_status write_all(int fd, const uint8_t *buf, size_t len) {
    while (len) {
        const ssize_t w = write(fd, buf, len > ((size_t)1 << 30) ? (size_t)1 << 30 : len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return kn_error(KILN_ERR_IO, "%s", strerror(errno));
        }
        if (w == 0) return kn_error(KILN_ERR_IO, "write returned 0");
        buf += w;
        len -= (size_t)w;
    }
    return KILN_OK;
}

kiln_status kn_ssdf_write(int fd, const kn_ssdf_key *key, const int32_t *tokens, uint32_t n, const uint8_t *k,
                          const uint8_t *v, const atomic_bool *stop) {
    uint64_t hs, tb, vb, off, fs;
    if (!layout(key, n, &hs, &tb, &vb, &off, &fs))
        return kn_error(KILN_ERR_INVALID_ARG, "an SSD cache entry is out of range");
    uint8_t *h = calloc(1, (size_t)off);
    if (!h) return kn_error(KILN_ERR_NOMEM, "out of memory for an SSD cache header");
    memcpy(h, magic, 8);
    put32(h + 8, KN_SSDF_VERSION);
    put32(h + 12, (uint32_t)hs);
    memcpy(h + 16, key->model, 32);
    memcpy(h + 48, key->tokenizer, 32);
    put32(h + 80, key->kv_type);
    put32(h + 84, key->n_layer);
    put32(h + 88, key->kv_dim);
    put32(h + 92, n);
    put64(h + 96, tb);
    put64(h + 104, off);
    uint8_t *p = h + FIXED;
    for (uint32_t i = 0; i < n; i++, p += 4) put32(p, (uint32_t)tokens[i]);
    /* Tensor i of the file: layer i / 2, K when i is even. Layer l's K starts at k + l * tb, its V at
     * v + l * vb. */
    const uint32_t n_tensors = 2 * key->n_layer;
    for (uint32_t i = 0; i < n_tensors; i++, p += 8) {
        const uint64_t len = i & 1 ? vb : tb;
        put64(p, kn_hash64_of((i & 1 ? v : k) + (size_t)(i / 2) * len, (size_t)len, KN_SSDF_SEED + 1 + i));
    }
    put64(p, kn_hash64_of(h, (size_t)hs - 8, KN_SSDF_SEED));
    kiln_status st = write_all(fd, h, (size_t)off);
    free(h);
    for (uint32_t i = 0; !st && i < n_tensors; i++) {
        if (stop && atomic_load(stop)) return KILN_ERR_CANCELLED;
        const uint64_t len = i & 1 ? vb : tb;
        st = write_all(fd, (i & 1 ? v : k) + (size_t)(i / 2) * len, (size_t)len);
    }
    return st;
}

/* ---- reading ------------------------------------------------------------------------------------ */

/* Reads exactly len bytes at off: KN_SSDF_TRUNCATED at end of file, KN_SSDF_IO on an error. */
static kn_ssdf_result read_at(int fd, uint8_t *buf, size_t len, uint64_t off) {
    while (len) {
        const ssize_t r = pread(fd, buf, len > ((size_t)1 << 30) ? (size_t)1 << 30 : len, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return KN_SSDF_IO;
        }
        if (r == 0) return KN_SSDF_TRUNCATED;
        buf += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return KN_SSDF_OK;
}

void kn_ssdf_header_free(kn_ssdf_header *h) {
    free(h->tokens);
    free(h->sums);
    memset(h, 0, sizeof *h);
}

kn_ssdf_result kn_ssdf_read_header(int fd, const kn_ssdf_key *expect, kn_ssdf_header *out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (fstat(fd, &sb) != 0) return KN_SSDF_IO;
    if (!S_ISREG(sb.st_mode)) return KN_SSDF_CORRUPT;
    const uint64_t size = (uint64_t)sb.st_size;
    uint8_t fixed[FIXED];
    if (size < FIXED)
        return size >= 8 && read_at(fd, fixed, 8, 0) == KN_SSDF_OK && memcmp(fixed, magic, 8) == 0 ? KN_SSDF_TRUNCATED
                                                                                                   : KN_SSDF_CORRUPT;
    kn_ssdf_result r = read_at(fd, fixed, FIXED, 0);
    if (r) return r;
    if (memcmp(fixed, magic, 8) != 0) return KN_SSDF_CORRUPT;
    /* Another version may be a sound file this build cannot use (its checksums are computed
     * differently): checked before the layout, which a future version may change. */
    if (get32(fixed + 8) != KN_SSDF_VERSION) return KN_SSDF_OTHER_VERSION;
    kn_ssdf_key key;
    memcpy(key.model, fixed + 16, 32);
    memcpy(key.tokenizer, fixed + 48, 32);
    key.kv_type = get32(fixed + 80);
    key.n_layer = get32(fixed + 84);
    key.kv_dim = get32(fixed + 88);
    const uint32_t n = get32(fixed + 92);
    uint64_t hs, tb, vb, off, fs;
    if (!layout(&key, n, &hs, &tb, &vb, &off, &fs) || get32(fixed + 12) != hs || get64(fixed + 96) != tb ||
        get64(fixed + 104) != off)
        return KN_SSDF_CORRUPT;
    if (size < hs) return KN_SSDF_TRUNCATED;
    uint8_t *h = malloc((size_t)hs);
    if (!h) return KN_SSDF_NOMEM;
    memcpy(h, fixed, FIXED);
    r = read_at(fd, h + FIXED, (size_t)hs - FIXED, FIXED);
    if (!r && get64(h + hs - 8) != kn_hash64_of(h, (size_t)hs - 8, KN_SSDF_SEED)) r = KN_SSDF_CORRUPT;
    /* The header is sound: now the size (shorter: truncated; longer: something was appended) and
     * whether it is ours. */
    if (!r && size != fs) r = size < fs ? KN_SSDF_TRUNCATED : KN_SSDF_CORRUPT;
    if (!r && expect && memcmp(&key, expect, sizeof key) != 0) r = KN_SSDF_MISMATCH;
    if (!r) {
        out->key = key;
        out->n_tokens = n;
        out->tensor_bytes = tb;
        out->v_tensor_bytes = vb;
        out->data_offset = off;
        out->file_size = fs;
        out->tokens = malloc((size_t)n * sizeof *out->tokens);
        out->sums = malloc(2 * (size_t)key.n_layer * sizeof *out->sums);
        if (!out->tokens || !out->sums) {
            kn_ssdf_header_free(out);
            r = KN_SSDF_NOMEM;
        } else {
            for (uint32_t i = 0; i < n; i++) out->tokens[i] = (int32_t)get32(h + FIXED + 4 * (size_t)i);
            for (uint32_t i = 0; i < 2 * key.n_layer; i++)
                out->sums[i] = get64(h + FIXED + 4 * (size_t)n + 8 * (size_t)i);
        }
    }
    free(h);
    return r;
}

/* Reads len bytes at off into dst in READ_CHUNK pieces, each absorbed into hh (when not NULL) right
 * after it is read, while it is still in the CPU's cache. */
static kn_ssdf_result read_hashed(int fd, uint8_t *dst, size_t len, uint64_t off, kn_hash64 *hh) {
    if (!hh) return read_at(fd, dst, len, off);
    for (size_t done = 0; done < len;) {
        const size_t n = KN_MIN(READ_CHUNK, len - done);
        const kn_ssdf_result r = read_at(fd, dst + done, n, off + done);
        if (r) return r;
        kn_hash64_update(hh, dst + done, n);
        done += n;
    }
    return KN_SSDF_OK;
}

kn_ssdf_result kn_ssdf_read_rows(int fd, const kn_ssdf_header *h, uint32_t m, uint8_t *k, size_t k_stride, uint8_t *v,
                                 size_t v_stride, bool verify) {
    if (m > h->n_tokens) return KN_SSDF_CORRUPT;
    uint8_t *bounce = NULL; /* the rest of a tensor, to check it */
    if (verify && m < h->n_tokens && !(bounce = malloc(READ_CHUNK))) return KN_SSDF_NOMEM;
    kn_ssdf_result r = KN_SSDF_OK;
    for (uint32_t i = 0; !r && i < 2 * h->key.n_layer; i++) {
        const uint64_t tb = i & 1 ? h->v_tensor_bytes : h->tensor_bytes;
        const size_t rows = (size_t)(tb / h->n_tokens) * m; /* the bytes of m positions */
        uint8_t *dst = i & 1 ? v + (size_t)(i / 2) * v_stride : k + (size_t)(i / 2) * k_stride;
        const uint64_t at =
            h->data_offset + (uint64_t)(i / 2) * (h->tensor_bytes + h->v_tensor_bytes) + (i & 1 ? h->tensor_bytes : 0);
        kn_hash64 hh;
        if (verify) kn_hash64_init(&hh, KN_SSDF_SEED + 1 + i);
        r = read_hashed(fd, dst, rows, at, verify ? &hh : NULL);
        for (uint64_t done = rows; !r && verify && done < tb;) { /* the rest, to check it */
            const size_t len = (size_t)KN_MIN((uint64_t)READ_CHUNK, tb - done);
            r = read_hashed(fd, bounce, len, at + done, &hh);
            done += len;
        }
        if (!r && verify && kn_hash64_final(&hh) != h->sums[i]) r = KN_SSDF_CORRUPT;
    }
    free(bounce);
    /* The header said the file is complete; a short read now means it shrank underneath us. */
    return r;
}

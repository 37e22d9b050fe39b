/*
 * sha256_file.c - kiln_sha256_file: the SHA-256 of a whole file, read in blocks, for front ends
 * that check a downloaded file against its published digest (kiln pull) without a hash library
 * of their own.
 */
#include "base/base.h"
#include "base/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (1u << 20) /* bytes read at a time */

kiln_status kiln_sha256_file(const char *path, char hex[65]) {
    if (!path || !hex) return kn_error(KILN_ERR_INVALID_ARG, "kiln_sha256_file: NULL argument");
    hex[0] = '\0';
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kn_error(KILN_ERR_IO, "%s: %s", path, strerror(errno));
    uint8_t *buf = malloc(BLOCK);
    if (!buf) {
        close(fd);
        return kn_error(KILN_ERR_NOMEM, "%s: out of memory", path);
    }
    kn_sha256 s;
    kn_sha256_init(&s);
    kiln_status st = KILN_OK;
    for (;;) {
        const ssize_t got = read(fd, buf, BLOCK);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            st = kn_error(KILN_ERR_IO, "%s: %s", path, strerror(errno));
            break;
        }
        if (got == 0) break;
        kn_sha256_update(&s, buf, (size_t)got);
    }
    free(buf);
    close(fd);
    if (st == KILN_OK) kn_sha256_hex(&s, hex);
    return st;
}

/*
 * file.h - read-only file mappings with the checks every loader needs (regular file, size).
 */
#ifndef KN_FILE_H
#define KN_FILE_H

#include "base/base.h"

typedef struct kn_mapping {
    const uint8_t *data; /* [size] bytes, read-only; NULL for an empty file */
    size_t size;
} kn_mapping;

/* Maps path read-only. KILN_ERR_IO with a message for a missing file, a directory, a special
 * file or an unreadable one. An empty file maps to {NULL, 0}. */
kiln_status kn_map_file(const char *path, kn_mapping *out);
/* Unmaps; safe on a zeroed mapping. */
void kn_unmap_file(kn_mapping *m);
/* Tells the kernel the range [off, off+len) is no longer needed (drops page-cache residency of a
 * private read-only mapping after its contents were copied elsewhere). */
void kn_mapping_release(const kn_mapping *m, size_t off, size_t len);

#endif

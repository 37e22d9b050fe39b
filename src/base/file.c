/*
 * file.c - read-only mmap of model files with clear errors for every way opening can fail.
 */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

kiln_status kn_map_file(const char *path, kn_mapping *out) {
    memset(out, 0, sizeof *out);
    if (!path || !*path) return kn_error(KILN_ERR_INVALID_ARG, "no file path given");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kn_error(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kn_error(KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return kn_error(KILN_ERR_IO, "'%s' is a directory, not a model file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kn_error(KILN_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return KILN_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return kn_error(KILN_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    out->data = p;
    out->size = (size_t)st.st_size;
    return KILN_OK;
}

void kn_unmap_file(kn_mapping *m) {
    if (m->data) munmap((void *)m->data, m->size);
    memset(m, 0, sizeof *m);
}

void kn_mapping_release(const kn_mapping *m, size_t off, size_t len) {
    if (!m->data || off >= m->size) return;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)m->data + off + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t end = ((uintptr_t)m->data + KN_MIN(off + len, m->size)) & ~((uintptr_t)page - 1);
    if (end > start) madvise((void *)start, end - start, MADV_DONTNEED);
}

/*
 * fuzz_ssd.c - libFuzzer harness of the SSD cache file reader (src/cache/ssd_file.c).
 *
 * Feeds: the input as the bytes of a cache file, read from a file in memory (memfd), as the SSD
 * tier reads its files: the header (kn_ssdf_read_header, without an expected key and then with the
 * key the file claims, which must give the same answer), and, for a file whose header is sound and
 * whose tensors are small, the K and V rows of a prefix and of all positions, with and without
 * checksum verification, into buffers exactly as large as the header says. Seeds: files written by
 * kn_ssdf_write for small keys (F16 and F32, one and several layers; other KV formats reach the reader through mutation
 * of the format code), and their truncations (tests/fuzz/corpus/ssd/).
 */
#include "fuzz.h"

#include "cache/ssd_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = fz_memfd(data, size);
    if (fd < 0) return 0;
    kn_ssdf_header h;
    kn_ssdf_result r = kn_ssdf_read_header(fd, NULL, &h);
    (void)kn_ssdf_result_str(r);
    if (r != KN_SSDF_OK) {
        close(fd);
        return 0;
    }
    kn_ssdf_header h2;
    const kn_ssdf_key key = h.key;
    if (kn_ssdf_read_header(fd, &key, &h2) != KN_SSDF_OK) abort(); /* its own key must match */
    kn_ssdf_header_free(&h2);
    uint64_t k_row = 0, v_row = 0;
    const bool known = kn_ssdf_rows(&h.key, &k_row, &v_row);
    const uint64_t kt = k_row * h.n_tokens, vt = v_row * h.n_tokens; /* one layer's K (V) tensor */
    const uint64_t nl = h.key.n_layer ? h.key.n_layer : 1;
    if (known && kt <= (1u << 20) && vt <= (1u << 20) && nl * (kt + vt) <= (8u << 20)) {
        const size_t ks = kt ? (size_t)kt : 1, vs = vt ? (size_t)vt : 1;
        uint8_t *k = malloc(ks * nl), *v = malloc(vs * nl);
        if (k && v) {
            (void)kn_ssdf_read_rows(fd, &h, h.n_tokens / 2, k, ks, v, vs, false);
            (void)kn_ssdf_read_rows(fd, &h, h.n_tokens, k, ks, v, vs, true);
        }
        free(k);
        free(v);
    }
    kn_ssdf_header_free(&h);
    close(fd);
    return 0;
}

/*
 * hub.h - the Hugging Face Hub for `kiln pull`, `kiln rm` and model names: the HTTP client
 * (hub_http.c, libcurl; only the kiln binary links it, never libkiln), the local cache in the Hub's
 * own layout (hub_cache.c), and choosing files from a repository (hub_select.c).
 *
 * The cache layout, shared with Python tools (huggingface_hub):
 *   HUB/models--ORG--NAME/blobs/ID              one file's content; ID is the LFS sha256 or, for a
 *                                               small file kept in git, its git blob id
 *   HUB/models--ORG--NAME/blobs/ID.incomplete   a download in progress (resumed from its size)
 *   HUB/models--ORG--NAME/snapshots/COMMIT/PATH a relative symlink to ../../blobs/ID
 *   HUB/models--ORG--NAME/refs/REV              the commit a branch or tag (e.g. main) points at
 * HUB is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * ~/.cache/huggingface/hub. A file enters a snapshot only complete and verified.
 */
#ifndef KILN_HUB_H
#define KILN_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HUB_MAX_FILES   100000      /* files of a repository listing kept */
#define HUB_MAX_INFO    (64u << 20) /* bytes of a model-info reply accepted */
#define HUB_MAX_SMALL   (16u << 20) /* bytes of a small file read into memory (config.json) */
#define HUB_DEFAULT_REV "main"

/* One file of a repository. */
typedef struct hub_file {
    char *path;       /* path in the repository ("model-Q4_0.gguf", "sub/x.json") */
    uint64_t size;    /* bytes (0 when the listing does not say) */
    char sha256[65];  /* LFS sha256 in lowercase hex; "" for a file kept in git */
    char blob_id[65]; /* the cache's blob name: the sha256, else the git blob id */
} hub_file;

/* A repository at one commit. */
typedef struct hub_repo {
    char *id;     /* "ORG/NAME" */
    char *commit; /* 40 hex digits */
    hub_file *files;
    size_t n;
} hub_repo;

void hub_repo_free(hub_repo *r);

/* ---- names ---------------------------------------------------------------------------------- */

/* Splits "ORG/NAME[:TAG]" into repo (ORG/NAME, malloc'd) and tag (malloc'd, NULL without one).
 * False (nothing allocated) unless the repo part is ORG/NAME with both parts made of letters,
 * digits, '-', '_' and '.' (not starting with '.' or '-', no "--" or ".."), at most 96 bytes each. */
bool hub_parse_name(const char *arg, char **repo, char **tag);

/* ---- the cache (hub_cache.c) ---------------------------------------------------------------- */

/* The hub cache directory (malloc'd), NULL when no variable names one. */
char *hub_cache_dir(void);
/* HUB/models--ORG--NAME (malloc'd), NULL when there is no cache directory or memory ran out. */
char *hub_repo_dir(const char *repo);
/* Reads refs/REV of the repository directory: the commit (malloc'd), or NULL when absent. A REV
 * that is itself a 40-hex commit is returned as it is. */
char *hub_read_ref(const char *repo_dir, const char *rev);
/* Writes refs/REV = commit (through a temporary file and a rename). False with errno set. */
bool hub_write_ref(const char *repo_dir, const char *rev, const char *commit);
/* Links snapshots/COMMIT/PATH to ../../blobs/ID (with one more ../ per directory of PATH),
 * replacing what was there. False with errno set. */
bool hub_link_snapshot(const char *repo_dir, const char *commit, const char *path, const char *blob_id);
/* Lists the files of snapshots/COMMIT (paths relative to it, recursively, symlinks or files) into
 * *out as hub_files with path and size (of the target; 0 when it is missing). False when the
 * snapshot does not exist. */
bool hub_list_snapshot(const char *repo_dir, const char *commit, hub_repo *out);
/* Deletes every blob of repo_dir no snapshot links to, and *.incomplete partials when
 * partials; counts what went in *n_blobs and *bytes. */
void hub_gc_blobs(const char *repo_dir, bool partials, size_t *n_blobs, uint64_t *bytes);
/* Removes a directory tree (files, links, directories; links are not followed). False with
 * errno set on the first failure. */
bool hub_rmtree(const char *path);

/* ---- choosing files (hub_select.c) --------------------------------------------------------- */

/* True for the files a whole-repository pull fetches: top-level safetensors, configs (*.json),
 * tokenizer files (tokenizer.model, *.tiktoken, vocab/merges *.txt), chat templates (*.jinja),
 * README.md and LICENSE*; not other frameworks' weights (*.bin, *.pth, *.pt, *.h5, *.msgpack,
 * *.onnx, *.ckpt...), GGUF files or anything in a subdirectory. */
bool hub_wanted_file(const char *path);
/* True for a *.gguf file that is a model (not an mmproj-* projector). */
bool hub_is_gguf_model(const char *path);
/* True when the file name of path carries quant tag (case-insensitive, bounded on the left by
 * start, '-', '.', '_' or '/' and on the right by '.', '-' or '/'), or when tag is the file's
 * name without ".gguf" (the names kiln ls shows) or its whole path. */
bool hub_gguf_matches(const char *path, const char *tag);
/* "NAME-00001-of-00003.gguf": the part number (1-based), with *count; 0 for another name. */
int hub_split_part(const char *path, int *count);
/* Marks in pick[] (n entries of files) the GGUF files of quant tag: the first matching model file
 * (in the listing's order) and, when it is one part of a split model, all its parts. Returns how
 * many were marked (0: no such quant). */
size_t hub_pick_quant(const hub_file *files, size_t n, const char *tag, bool *pick);
/* The quant tags the GGUF model files carry (e.g. "Q4_0, Q4_K_M, Q8_0"), in a buffer. */
void hub_list_quants(const hub_file *files, size_t n, char *buf, size_t cap);
/* The tag pulled when a GGUF-only repository is named without one. */
#define HUB_DEFAULT_QUANT "Q4_K_M"

/* ---- HTTP (hub_http.c) --------------------------------------------------------------------- */

/* Why a request failed. */
typedef enum hub_fail {
    HUB_OK = 0,
    HUB_AUTH,      /* 401 / 403: a token is missing or the licence not accepted */
    HUB_NOTFOUND,  /* 404 */
    HUB_HTTP,      /* another HTTP status */
    HUB_NET,       /* connection, DNS, timeout after the retries */
    HUB_WRITE,     /* writing the file failed (disk full, file size limit) */
    HUB_CHECKSUM,  /* the content does not match its sha256 or size */
    HUB_INTERRUPT, /* Ctrl-C */
    HUB_BADREPLY,  /* an unusable reply */
    HUB_BUSY,      /* another process is downloading the same file */
    HUB_NOMEM
} hub_fail;

/* A request's failure: its kind, the HTTP status (0 when none) and a message. */
typedef struct hub_error {
    hub_fail kind;
    long http;
    int err; /* errno of a write failure */
    char msg[512];
} hub_error;

/* Sets up libcurl once and installs the SIGINT / SIGTERM handler that makes transfers stop with
 * HUB_INTERRUPT. */
bool hub_http_init(void);
void hub_http_cleanup(void);
/* True once Ctrl-C was pressed. */
bool hub_interrupted(void);
/* The Hub's address: $HF_ENDPOINT without a trailing '/', else https://huggingface.co. */
const char *hub_endpoint(void);

/* GET ENDPOINT/api/models/REPO/revision/REV?blobs=true: the file list with sizes and LFS sha256,
 * and the commit REV points at. */
hub_fail hub_model_info(const char *repo, const char *rev, hub_repo *out, hub_error *e);

/* Progress of a download, shown by the caller. */
typedef void (*hub_progress_fn)(void *user, uint64_t done, uint64_t total);

/* Downloads ENDPOINT/REPO/resolve/COMMIT/PATH into dest, resuming from dest's current size with
 * an HTTP Range request (a server that ignores it restarts the file). Redirects are followed;
 * a dropped connection or a 5xx reply is retried with backoff, resuming. The file is left as it is
 * on failure (a later call resumes it). dest is locked (flock) while the download runs: HUB_BUSY
 * when another process holds it. progress is called as bytes arrive (may be NULL). */
hub_fail hub_download(const char *repo, const char *commit, const hub_file *f, const char *dest,
                      hub_progress_fn progress, void *user, hub_error *e);

/* Reads ENDPOINT/REPO/resolve/COMMIT/PATH into memory (at most HUB_MAX_SMALL bytes; NUL-terminated,
 * *len bytes; malloc'd) or, with max_bytes > 0, only its first max_bytes (a Range request). */
hub_fail hub_fetch_small(const char *repo, const char *commit, const char *path, size_t max_bytes, char **out,
                         size_t *len, hub_error *e);

#endif

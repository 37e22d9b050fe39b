/*
 * hub_select.c - which files of a Hub repository kiln fetches: model names ORG/NAME[:TAG], the
 * files of a whole-repository pull, and the GGUF files of one quant (a tag such as Q4_K_M, matched
 * in file names the way Ollama and llama.cpp's -hf pick them: case-insensitive, the first matching
 * file, with every part of a split model).
 */
#include "hub.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_PART 96 /* bytes of ORG or NAME */

static bool name_part_ok(const char *s, size_t n) {
    if (n == 0 || n > MAX_PART || s[0] == '.' || s[0] == '-') return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!(isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.')) return false;
        if (i && (c == '-' || c == '.') && s[i - 1] == c) return false; /* "--" or ".." */
    }
    return true;
}

bool hub_parse_name(const char *arg, char **repo, char **tag) {
    *repo = *tag = NULL;
    const char *slash = strchr(arg, '/');
    if (!slash) return false;
    const char *colon = strchr(slash, ':');
    const size_t name_len = colon ? (size_t)(colon - slash - 1) : strlen(slash + 1);
    if (!name_part_ok(arg, (size_t)(slash - arg)) || !name_part_ok(slash + 1, name_len)) return false;
    if (colon) {
        const char *t = colon + 1;
        if (!*t || strlen(t) > 200) return false;
        for (const char *p = t; *p; p++)
            if (!(isalnum((unsigned char)*p) || strchr("-_.", *p))) return false;
    }
    *repo = strndup(arg, (size_t)(slash - arg) + 1 + name_len);
    *tag = colon ? strdup(colon + 1) : NULL;
    if (!*repo || (colon && !*tag)) {
        free(*repo);
        free(*tag);
        *repo = *tag = NULL;
        return false;
    }
    return true;
}

static bool ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

bool hub_wanted_file(const char *path) {
    if (strchr(path, '/')) return false;
    if (ends_with(path, ".safetensors") || ends_with(path, ".json") || ends_with(path, ".jinja") ||
        ends_with(path, ".tiktoken") || ends_with(path, ".model"))
        return true;
    if (strcasecmp(path, "vocab.txt") == 0 || strcasecmp(path, "merges.txt") == 0 || strcasecmp(path, "README.md") == 0)
        return true;
    return strncasecmp(path, "LICENSE", 7) == 0 || strncasecmp(path, "LICENCE", 7) == 0;
}

static const char *base_name(const char *path) {
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

bool hub_is_gguf_model(const char *path) {
    const char *b = base_name(path);
    return ends_with(b, ".gguf") && strncasecmp(b, "mmproj", 6) != 0;
}

int hub_split_part(const char *path, int *count) {
    static const char tail[] = "-00000-of-00000.gguf";
    const char *name = base_name(path);
    const size_t n = strlen(name), k = sizeof tail - 1;
    if (n <= k) return 0;
    const char *p = name + n - k;
    for (int i = 0; i < (int)k; i++) {
        const bool digit = tail[i] == '0';
        if (digit ? !isdigit((unsigned char)p[i]) : tolower((unsigned char)p[i]) != tail[i]) return 0;
    }
    *count = atoi(p + 10);
    const int part = atoi(p + 1);
    return part >= 1 && part <= *count ? part : 0;
}

bool hub_gguf_matches(const char *path, const char *tag) {
    const char *b = base_name(path);
    const size_t tl = strlen(tag), bl = strlen(b);
    if (!tl || !ends_with(b, ".gguf")) return false;
    if (bl == tl + 5 && strncasecmp(b, tag, tl) == 0) return true; /* the file's own name */
    if (strcasecmp(path, tag) == 0) return true;                   /* its path */
    /* the tag may also be a directory of path ("Q4_K_M/model-00001-of-00002.gguf") */
    for (const char *s = path; *s; s++) {
        if (strncasecmp(s, tag, tl) != 0) continue;
        const char l = s == path ? '/' : s[-1], r = s[tl];
        if ((l == '/' || l == '-' || l == '.' || l == '_') && (r == '.' || r == '-' || r == '/')) return true;
    }
    return false;
}

size_t hub_pick_quant(const hub_file *files, size_t n, const char *tag, bool *pick) {
    size_t first = n;
    for (size_t i = 0; i < n && first == n; i++)
        if (hub_is_gguf_model(files[i].path) && hub_gguf_matches(files[i].path, tag)) first = i;
    if (first == n) return 0;
    int count = 0;
    if (!hub_split_part(files[first].path, &count)) {
        pick[first] = true;
        return 1;
    }
    /* every part: the same path up to the "-0000k-of-0000n.gguf" tail */
    const size_t stem = strlen(files[first].path) - 20;
    size_t picked = 0;
    for (size_t i = 0; i < n; i++) {
        int c = 0;
        if (strlen(files[i].path) == stem + 20 && strncmp(files[i].path, files[first].path, stem) == 0 &&
            hub_split_part(files[i].path, &c) && c == count) {
            pick[i] = true;
            picked++;
        }
    }
    return picked;
}

/* The quant tag of a GGUF file name: after the last '-' or '.' of the name without ".gguf" and a
 * split tail, e.g. "Model-7B-Q4_K_M.gguf" -> "Q4_K_M". Written upper-case into buf. */
static void tag_of(const char *path, char *buf, size_t cap) {
    const char *b = base_name(path);
    size_t n = strlen(b) - 5;
    int c;
    if (hub_split_part(path, &c)) n -= 15;
    size_t s = n;
    while (s > 0 && b[s - 1] != '-' && b[s - 1] != '.') s--;
    size_t k = n - s < cap - 1 ? n - s : cap - 1;
    for (size_t i = 0; i < k; i++) buf[i] = (char)toupper((unsigned char)b[s + i]);
    buf[k] = '\0';
}

void hub_list_quants(const hub_file *files, size_t n, char *buf, size_t cap) {
    buf[0] = '\0';
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (!hub_is_gguf_model(files[i].path)) continue;
        char t[64];
        tag_of(files[i].path, t, sizeof t);
        if (!t[0]) continue;
        /* once each */
        bool seen = false;
        for (const char *p = buf; *p && !seen;) {
            const char *e = strstr(p, ", ");
            const size_t k = e ? (size_t)(e - p) : strlen(p);
            seen = k == strlen(t) && strncmp(p, t, k) == 0;
            p = e ? e + 2 : p + k;
        }
        if (seen) continue;
        int w = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", t);
        if (w < 0 || (size_t)w >= cap - len) {
            buf[len] = '\0';
            break;
        }
        len += (size_t)w;
    }
}

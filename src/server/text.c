/*
 * text.c - the sanitizer of text that `kiln serve` puts into responses and its log.
 *
 * Error messages quote what the client sent (a URL, a JSON key, a content type), and that may be
 * anything: bytes that are not UTF-8 (a URL's %ff), or text long enough to be cut. JSON strings must
 * be valid UTF-8, so a message is made safe here, in one place (srv_send_error and the request log
 * use it): every well-formed UTF-8 character is kept, every other byte is shown as the four
 * characters \xHH, and a message that is too long is cut between two characters and ends with "...".
 */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the well-formed UTF-8 sequence at s[0..n) (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0 when s[0] does not start one. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0; /* overlong */
        if (c == 0xED) hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90; /* overlong */
        if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* The next unit of output for in[i..n): a character copied, or one byte escaped. Writes it to
 * unit[0..*out_len) and returns how many input bytes it stands for. */
static size_t next_unit(const unsigned char *in, size_t n, size_t i, bool keep_newlines, char unit[4],
                        size_t *out_len) {
    const unsigned c = in[i];
    const bool control = c < 0x20 || c == 0x7F;
    const size_t len = control ? 0 : utf8_len(in + i, n - i);
    if (len) {
        memcpy(unit, in + i, len);
        *out_len = len;
        return len;
    }
    if (control && (c == '\t' || (c == '\n' && keep_newlines))) {
        unit[0] = (char)c;
        *out_len = 1;
        return 1;
    }
    static const char hex[] = "0123456789abcdef";
    unit[0] = '\\';
    unit[1] = 'x';
    unit[2] = hex[c >> 4];
    unit[3] = hex[c & 15];
    *out_len = 4;
    return 1;
}

size_t srv_text_sanitize(char *out, size_t cap, const char *in, size_t n, bool keep_newlines) {
    static const char more[] = "...";
    const unsigned char *u = (const unsigned char *)in;
    char unit[4];
    size_t ulen, total = 0;
    if (cap == 0) return 0;
    /* Does all of it fit? Then no room is kept for the "..." mark. */
    for (size_t i = 0; i < n && total < cap;) {
        i += next_unit(u, n, i, keep_newlines, unit, &ulen);
        total += ulen;
    }
    const bool cut = total > cap - 1;
    const size_t room = cut ? (cap - 1 >= sizeof more - 1 ? cap - 1 - (sizeof more - 1) : 0) : cap - 1;
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        const size_t used = next_unit(u, n, i, keep_newlines, unit, &ulen);
        if (len + ulen > room) break;
        memcpy(out + len, unit, ulen);
        len += ulen;
        i += used;
    }
    if (cut && len + sizeof more - 1 <= cap - 1) {
        memcpy(out + len, more, sizeof more - 1);
        len += sizeof more - 1;
    }
    out[len] = 0;
    return len;
}

bool srv_text_append(char **text, size_t *n, size_t *cap, const char *s, size_t len) {
    if (*n + len + 1 > *cap) {
        size_t c = *cap ? *cap * 2 : 4096;
        while (c < *n + len + 1) c *= 2;
        char *t = realloc(*text, c);
        if (!t) return false;
        *text = t;
        *cap = c;
    }
    memcpy(*text + *n, s, len);
    *n += len;
    (*text)[*n] = 0;
    return true;
}

bool srv_text_append_utf8(char **text, size_t *n, size_t *cap, const char *s, size_t len) {
    static const char repl[] = "\xEF\xBF\xBD"; /* U+FFFD */
    const size_t n0 = *n;
    for (size_t i = 0; i < len;) {
        const size_t k = utf8_len((const unsigned char *)s + i, len - i);
        if (!(k ? srv_text_append(text, n, cap, s + i, k) : srv_text_append(text, n, cap, repl, sizeof repl - 1))) {
            *n = n0;
            if (*text) (*text)[n0] = 0;
            return false;
        }
        i += k ? k : 1;
    }
    return true;
}

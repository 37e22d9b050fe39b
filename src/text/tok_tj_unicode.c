/*
 * tok_tj_unicode.c - the Unicode normalization forms the tokenizer.json normalizers ask for (NFC,
 * NFD, NFKC, NFKD), over UTF-8, as UAX #15 defines them: full decomposition (canonical: unicode.h's
 * NFD table; compatibility: unicode_norm_data.c's NFKD table; Hangul syllables algorithmically),
 * canonical ordering of combining marks by their combining class, and for NFC / NFKC canonical
 * composition (primary composites from unicode_norm_data.c, Hangul L+V+T algorithmically). The
 * tables come from tools/gen_unicode_norm.py. Ill-formed bytes pass through and cut the text into
 * independently normalized runs.
 */
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

extern const uint32_t kn_ucd_ccc[][2];
extern const size_t kn_ucd_n_ccc;
extern const uint32_t kn_ucd_comp[][3];
extern const size_t kn_ucd_n_comp;
extern const uint32_t kn_ucd_nfkd[][3];
extern const size_t kn_ucd_n_nfkd;
extern const uint32_t kn_ucd_nfkd_pool[];

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21, TCOUNT = 28 };
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

static uint8_t ccc(uint32_t cp) {
    if (cp < 0x300) return 0;
    size_t lo = 0, hi = kn_ucd_n_ccc;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (kn_ucd_ccc[mid][0] == cp) return (uint8_t)kn_ucd_ccc[mid][1];
        if (kn_ucd_ccc[mid][0] < cp) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

/* The primary composite of a + b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    size_t lo = 0, hi = kn_ucd_n_comp;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *e = kn_ucd_comp[mid];
        if (e[0] == a && e[1] == b) return e[2];
        if (e[0] < a || (e[0] == a && e[1] < b)) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

typedef struct cpvec {
    uint32_t *v;
    size_t n, cap;
} cpvec;

static bool cp_push(cpvec *a, uint32_t cp) {
    if (a->n == a->cap && !kn_reserve((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) return false;
    a->v[a->n++] = cp;
    return true;
}

/* Appends the full decomposition of cp. */
static bool decompose(uint32_t cp, bool compat, cpvec *out) {
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        uint32_t s = cp - SBASE, t = s % TCOUNT;
        if (!cp_push(out, LBASE + s / NCOUNT) || !cp_push(out, VBASE + (s % NCOUNT) / TCOUNT)) return false;
        return t == 0 || cp_push(out, TBASE + t);
    }
    if (compat && cp >= 0xA0) {
        size_t lo = 0, hi = kn_ucd_n_nfkd;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (kn_ucd_nfkd[mid][0] == cp) {
                for (uint32_t k = 0; k < kn_ucd_nfkd[mid][2]; k++)
                    if (!cp_push(out, kn_ucd_nfkd_pool[kn_ucd_nfkd[mid][1] + k])) return false;
                return true;
            }
            if (kn_ucd_nfkd[mid][0] < cp) lo = mid + 1;
            else hi = mid;
        }
    }
    uint32_t d[4];
    size_t k = kn_ucd_nfd(cp, d);
    for (size_t x = 0; x < k; x++)
        if (!cp_push(out, d[x])) return false;
    return true;
}

/* Sorts the m non-starters c[0..m) by combining class, stably (canonical ordering): by insertion
 * when there are a few, else by counting, so that a run of thousands of marks (zalgo text, or a
 * hostile request's) costs linear time, not quadratic. False when memory runs out. */
static bool order_marks(uint32_t *c, size_t m) {
    if (m <= 16) {
        for (size_t i = 1; i < m; i++) {
            const uint32_t x = c[i];
            const uint8_t cx = ccc(x);
            size_t j = i;
            for (; j > 0 && ccc(c[j - 1]) > cx; j--) c[j] = c[j - 1];
            c[j] = x;
        }
        return true;
    }
    uint8_t *cls = malloc(m);
    uint32_t *tmp = malloc(m * sizeof *tmp);
    if (!cls || !tmp) {
        free(cls);
        free(tmp);
        return false;
    }
    size_t at[257] = {0}; /* at[k + 1]: how many have class k; then where class k goes */
    for (size_t i = 0; i < m; i++) at[(cls[i] = ccc(c[i])) + 1]++;
    for (int k = 0; k < 256; k++) at[k + 1] += at[k];
    for (size_t i = 0; i < m; i++) tmp[at[cls[i]]++] = c[i];
    memcpy(c, tmp, m * sizeof *c);
    free(cls);
    free(tmp);
    return true;
}

/* Normalizes one run of code points (in place in *v) and appends its UTF-8 to out. False when
 * memory runs out. */
static bool finish_run(cpvec *v, bool do_compose, kn_bvec *out) {
    uint32_t *c = v->v;
    size_t n = v->n;
    for (size_t i = 0; i < n;) { /* each run of non-starters in canonical order */
        if (ccc(c[i]) == 0) {
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < n && ccc(c[j]) != 0) j++;
        if (!order_marks(c + i, j - i)) return false;
        i = j;
    }
    if (do_compose && n > 1) {
        size_t starter = 0, w = 1;
        uint32_t sch = c[0];
        int last = ccc(sch) ? 256 : 0;
        for (size_t i = 1; i < n; i++) {
            uint32_t ch = c[i];
            int cl = ccc(ch);
            uint32_t comp = compose(sch, ch);
            if (comp && (last < cl || last == 0)) {
                c[starter] = sch = comp;
            } else {
                if (cl == 0) {
                    starter = w;
                    sch = ch;
                }
                last = cl;
                c[w++] = ch;
            }
        }
        n = w;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t enc[4];
        size_t k = kn_utf8_encode(c[i], enc);
        if (!kn_bvec_append(out, enc, k)) return false;
    }
    v->n = 0;
    return true;
}

/* ---- the quick check ---------------------------------------------------------------------------- */

#define QUIET_END 0x20000 /* planes 0 and 1 have a quick-check bit; beyond, every character is loud */

/* A bit per code point below QUIET_END, set when the character is loud: a normalization form may
 * change it or let it interact with its neighbours (a nonzero combining class, a decomposition, the
 * second of a composition, a Hangul syllable or vowel / trailing jamo). Every other character, a
 * quiet one, stays as it is and cuts the text: nothing before it reorders or composes with anything
 * after it (it may still be the first of a composition, so the last quiet character before a loud
 * one joins the loud one's run). [0]: the canonical forms, [1]: the compatibility forms too. */
static uint64_t loud_bits[2][QUIET_END / 64];
static pthread_once_t loud_once = PTHREAD_ONCE_INIT;

static void mark_loud(uint32_t cp, bool compat_only) {
    if (cp >= QUIET_END) return;
    for (int k = compat_only; k < 2; k++) loud_bits[k][cp >> 6] |= 1ull << (cp & 63);
}

static void loud_init(void) {
    for (size_t i = 0; i < kn_ucd_n_ccc; i++)
        if (kn_ucd_ccc[i][1]) mark_loud(kn_ucd_ccc[i][0], false);
    for (size_t i = 0; i < kn_ucd_n_nfd_table; i++) mark_loud(kn_ucd_nfd_table[i][0], false);
    for (size_t i = 0; i < kn_ucd_n_comp; i++) mark_loud(kn_ucd_comp[i][1], false);
    for (uint32_t cp = SBASE; cp < SBASE + SCOUNT; cp++) mark_loud(cp, false);
    for (uint32_t cp = VBASE; cp < VBASE + VCOUNT; cp++) mark_loud(cp, false);
    for (uint32_t cp = TBASE + 1; cp < TBASE + TCOUNT; cp++) mark_loud(cp, false);
    for (size_t i = 0; i < kn_ucd_n_nfkd; i++) mark_loud(kn_ucd_nfkd[i][0], true);
}

static inline bool quiet(const uint64_t *loud, uint32_t cp) {
    return cp < QUIET_END && !(loud[cp >> 6] >> (cp & 63) & 1);
}

/* The form of in[0..n) into out (cleared first; in may be NULL when n is 0). quick: quiet characters
 * are copied as they are and cut the text into short runs; without it every character takes the full
 * way (the reference the tests compare the quick check with). */
static kiln_status unicode_form(const char *in, size_t n, bool do_compose, bool compat, bool quick, kn_bvec *out) {
    out->n = 0;
    if (n == 0) return KILN_OK; /* an earlier step's empty output has no buffer */
    pthread_once(&loud_once, loud_init);
    const uint64_t *loud = loud_bits[compat];
    cpvec run = {0};
    bool ok = true;
    size_t plain = 0, last = 0; /* in[plain..i): quiet characters not written yet (run empty), the last at last */
    for (size_t i = 0; i < n && ok;) {
        if (quick && (uint8_t)in[i] < 0x80) { /* a stretch of ASCII, all quiet */
            if (run.n) {
                ok = finish_run(&run, do_compose, out);
                plain = i;
            }
            while (++i < n && (uint8_t)in[i] < 0x80) {}
            last = i - 1;
            continue;
        }
        size_t adv;
        const uint32_t cp = kn_utf8_decode((const uint8_t *)in + i, n - i, &adv);
        if (quick && cp != KN_UTF8_INVALID && quiet(loud, cp)) {
            if (run.n) {
                ok = finish_run(&run, do_compose, out);
                plain = i;
            }
            last = i;
            i += adv;
            continue;
        }
        if (run.n == 0 && plain < i) { /* the last quiet character may compose with this one */
            size_t la;
            ok = kn_bvec_append(out, in + plain, last - plain) &&
                 decompose(kn_utf8_decode((const uint8_t *)in + last, n - last, &la), compat, &run);
        }
        if (cp == KN_UTF8_INVALID) ok = ok && finish_run(&run, do_compose, out) && kn_bvec_append(out, in + i, adv);
        else ok = ok && decompose(cp, compat, &run);
        i += adv;
        plain = i;
    }
    if (ok) ok = run.n ? finish_run(&run, do_compose, out) : kn_bvec_append(out, in + plain, n - plain);
    free(run.v);
    return ok ? KILN_OK : KILN_ERR_NOMEM;
}

kiln_status kn_tj_unicode_form(const char *in, size_t n, bool do_compose, bool compat, kn_bvec *out) {
    return unicode_form(in, n, do_compose, compat, true, out);
}

kiln_status kn_tj_unicode_form_full(const char *in, size_t n, bool do_compose, bool compat, kn_bvec *out) {
    return unicode_form(in, n, do_compose, compat, false, out);
}

/*
 * test_unicode.c - the Unicode lookups of src/text/unicode.c against the generated tables they
 * shortcut: the class of every ASCII character (answered without the table search) equals the
 * class the range table gives; a few classes past ASCII and past U+10FFFF.
 */
#include "harness.h"

#include "text/unicode.h"

/* The class of cp as the sorted range table says: the last range starting at or before cp. */
static uint8_t table_flags(uint32_t cp) {
    uint8_t f = KN_UCD_OTHER;
    for (size_t i = 0; i < kn_ucd_n_ranges && kn_ucd_ranges[i].start <= cp; i++) f = kn_ucd_ranges[i].flags;
    return f;
}

static void test_ascii_matches_table(void) {
    for (uint32_t cp = 0; cp < 0x80; cp++)
        CHECKF(kn_ucd_flags(cp) == table_flags(cp), "U+%04X: %u, the table says %u", cp, kn_ucd_flags(cp),
               table_flags(cp));
}

static void test_beyond_ascii(void) {
    const uint32_t cps[] = {0x80, 0xA0, 0xAD, 0xE9, 0x300, 0x4E00, 0x3000, 0xFFFD, 0x1F600, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++)
        CHECKF(kn_ucd_flags(cps[i]) == table_flags(cps[i]), "U+%04X", cps[i]);
    CHECK(kn_ucd_flags('a') == KN_UCD_LETTER && kn_ucd_flags('7') == KN_UCD_NUMBER);
    CHECK(kn_ucd_flags('+') == KN_UCD_SYMBOL && kn_ucd_flags('!') == KN_UCD_PUNCT);
    CHECK(kn_ucd_flags(' ') == KN_UCD_SEPARATOR && kn_ucd_flags('\n') == KN_UCD_OTHER);
    CHECK(kn_ucd_flags(0x110000) == KN_UCD_OTHER && kn_ucd_flags(UINT32_MAX) == KN_UCD_OTHER);
}

int main(void) {
    RUN(test_ascii_matches_table);
    RUN(test_beyond_ascii);
    return kt_summary();
}

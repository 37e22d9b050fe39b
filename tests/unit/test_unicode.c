/*
 * test_unicode.c - the Unicode lookups of src/text/unicode.c against the generated tables they
 * shortcut: the class of every ASCII character (answered without the table search) equals the
 * class the range table gives; a few classes past ASCII and past U+10FFFF; a code point of each
 * general category.
 */
#include "harness.h"

#include "text/unicode.h"

/* The class of cp as the sorted range table says: the general category of the last range starting
 * at or before cp, by its major category. */
static uint8_t table_flags(uint32_t cp) {
    uint8_t gc = KN_GC_CN;
    for (size_t i = 0; i < kn_ucd_n_ranges && kn_ucd_ranges[i].start <= cp; i++) gc = kn_ucd_ranges[i].gc;
    return gc <= KN_GC_LO   ? KN_UCD_LETTER
           : gc == KN_GC_MN ? KN_UCD_MARK_NONSPACING
           : gc <= KN_GC_ME ? KN_UCD_MARK_OTHER
           : gc <= KN_GC_NO ? KN_UCD_NUMBER
           : gc <= KN_GC_PO ? KN_UCD_PUNCT
           : gc <= KN_GC_SO ? KN_UCD_SYMBOL
           : gc <= KN_GC_ZP ? KN_UCD_SEPARATOR
                            : KN_UCD_OTHER;
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

/* One code point of each general category, and the table's order (Python's unicodedata writes the
 * ranges; the regex compiler's \p{..} reads them by enum kn_gc). */
static void test_categories(void) {
    static const struct {
        uint32_t cp;
        uint8_t gc;
    } cases[] = {
        {'A', KN_GC_LU},      {'a', KN_GC_LL},     {0x1C5, KN_GC_LT},  {0x2B0, KN_GC_LM},    {0x5D0, KN_GC_LO},
        {0x301, KN_GC_MN},    {0x903, KN_GC_MC},   {0x20DD, KN_GC_ME}, {'0', KN_GC_ND},      {0x2160, KN_GC_NL},
        {0xB2, KN_GC_NO},     {'_', KN_GC_PC},     {'-', KN_GC_PD},    {'(', KN_GC_PS},      {')', KN_GC_PE},
        {0xAB, KN_GC_PI},     {0xBB, KN_GC_PF},    {'!', KN_GC_PO},    {'+', KN_GC_SM},      {'$', KN_GC_SC},
        {'^', KN_GC_SK},      {0xA9, KN_GC_SO},    {' ', KN_GC_ZS},    {0x2028, KN_GC_ZL},   {0x2029, KN_GC_ZP},
        {'\n', KN_GC_CC},     {0xAD, KN_GC_CF},    {0xD800, KN_GC_CS}, {0xE000, KN_GC_CO},   {0x378, KN_GC_CN},
        {0x10FFFF, KN_GC_CN}, {0x1F600, KN_GC_SO}, {0x4E00, KN_GC_LO}, {0x110000, KN_GC_CN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECKF(kn_ucd_category(cases[i].cp) == cases[i].gc, "U+%04X: %u, expected %u", cases[i].cp,
               kn_ucd_category(cases[i].cp), cases[i].gc);
}

int main(void) {
    RUN(test_ascii_matches_table);
    RUN(test_beyond_ascii);
    RUN(test_categories);
    return kt_summary();
}

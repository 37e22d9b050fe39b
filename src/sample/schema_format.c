/*
 * schema_format.c - the string formats kiln enforces, as regular expressions for schema_regex.c.
 *
 * Exact: date (with month lengths and leap years), time and date-time (RFC 3339; a leap second :60
 * is accepted at any minute), duration (RFC 3339 appendix A), uuid, ipv4, ipv6 (RFC 4291), email
 * (RFC 5321's Mailbox), uri and uri-reference (RFC 3986), iri and iri-reference (RFC 3987),
 * hostname (RFC 1123: labels of up to 63 characters, 253 in all: a length the caller adds as a
 * maxLength, counted beside the automaton). Approximate (the usual shape, documented in
 * docs/structured-output.md): url, which JSON Schema does not define but many schemas write.
 * Formats JSON Schema defines but kiln does not check (KN_FMT_IGNORED) are listed too; any other
 * name is not a JSON Schema format and is an annotation (KN_FMT_UNKNOWN).
 */
#include "sample/schema_internal.h"

#include <string.h>

/* clang-format off */
#define YEAR  "\\d{4}"
#define LEAP  "(\\d\\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)"
#define MD    "((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|1\\d|2[0-8]))"
#define DATE  "(" YEAR "-" MD "|" LEAP "-02-29)"
#define TIME  "([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d+)?([zZ]|[-+]([01]\\d|2[0-3]):[0-5]\\d)"
#define HEX   "[0-9a-fA-F]"
#define LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define OCTET "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
#define URICH "[^\\x00-\\x20\"<>\\\\^`{|}\\x7f]"
#define IPV4  OCTET "(\\." OCTET "){3}"
/* RFC 4291 2.2: eight groups, "::" for one or more groups of zeros (once), the last two groups
 * possibly an IPv4 address; one alternative per count of groups on each side of the "::" */
#define H16   HEX "{1,4}"
#define IPV6  "((" H16 ":){7}" H16 "|(" H16 ":){1,7}:|(" H16 ":){1,6}:" H16 "|(" H16 ":){1,5}(:" H16 "){1,2}|(" \
              H16 ":){1,4}(:" H16 "){1,3}|(" H16 ":){1,3}(:" H16 "){1,4}|(" H16 ":){1,2}(:" H16 "){1,5}|" H16     \
              ":(:" H16 "){1,6}|:((:" H16 "){1,7}|:)|(" H16 ":){6}" IPV4 "|::(" H16 ":){0,5}" IPV4 "|" H16          \
              "::(" H16 ":){0,4}" IPV4 "|(" H16 ":){2}:(" H16 ":){0,3}" IPV4 "|(" H16 ":){3}:(" H16 ":){0,2}" IPV4  \
              "|(" H16 ":){4}:(" H16 ":)?" IPV4 "|(" H16 ":){5}:" IPV4 ")"
/* RFC 5321 4.1.2 Mailbox: a dot-string or a quoted string, "@", a domain or an address literal
 * (IPv4, or IPv6 after a case-insensitive "IPv6:" tag; no other tag is registered) */
#define ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
#define QSTR  "\"([\\x20\\x21\\x23-\\x5b\\x5d-\\x7e]|\\\\[\\x20-\\x7e])*\""
#define SUBD  "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
#define EMAIL "(" ATEXT "+(\\." ATEXT "+)*|" QSTR ")@(" SUBD "(\\." SUBD ")*|\\[(" IPV4 "|[Ii][Pp][Vv]6:" IPV6 ")\\])"
/* RFC 3986: a URI (scheme ":" hierarchical part, query, fragment) and a URI reference (a URI or a
 * relative reference, whose first segment holds no ":"). A host is an IP literal or a reg-name
 * (which covers IPv4 addresses); characters outside the grammar appear only percent-encoded.
 * RFC 3987's IRIs are the same with U (ucschar: non-ASCII characters outside the compatibility,
 * private-use and noncharacter ranges) among the unreserved characters and P (iprivate) in the
 * query; the IP literals stay ASCII. */
#define PCT         "%" HEX HEX
#define PCHAR(U)    "([A-Za-z0-9._~!$&'()*+,;=:@" U "-]|" PCT ")"
#define QCHAR(U, P) "([A-Za-z0-9._~!$&'()*+,;=:@/?" U P "-]|" PCT ")"
#define AUTH(U)     "(([A-Za-z0-9._~!$&'()*+,;=:" U "-]|" PCT ")*@)?(\\[(" IPV6 "|[vV]" HEX \
                    "+\\.[A-Za-z0-9._~!$&'()*+,;=:-]+)\\]|([A-Za-z0-9._~!$&'()*+,;=" U "-]|" PCT ")*)(:\\d*)?"
#define PABE(U)     "(/" PCHAR(U) "*)*"
#define TAIL(U, P)  "(\\?" QCHAR(U, P) "*)?(#" QCHAR(U, "") "*)?"
#define HIER(U)     "(//" AUTH(U) PABE(U) "|/(" PCHAR(U) "+" PABE(U) ")?|"
#define URI(U, P)   "[A-Za-z][A-Za-z0-9+.-]*:" HIER(U) PCHAR(U) "+" PABE(U) ")?" TAIL(U, P)
#define RREF(U, P)  HIER(U) "([A-Za-z0-9._~!$&'()*+,;=@" U "-]|" PCT ")+" PABE(U) ")?" TAIL(U, P)
#define UCS         "\\u00A0-\\uD7FF\\uF900-\\uFDCF\\uFDF0-\\uFFEF" UCS_ASTRAL
/* U+10000-1FFFD, ..., U+D0000-DFFFD, U+E1000-EFFFD as surrogate pairs (the pattern dialect's form) */
#define UCS_ASTRAL  "\\uD800\\uDC00-\\uD83F\\uDFFD\\uD840\\uDC00-\\uD87F\\uDFFD\\uD880\\uDC00-\\uD8BF\\uDFFD"           \
                    "\\uD8C0\\uDC00-\\uD8FF\\uDFFD\\uD900\\uDC00-\\uD93F\\uDFFD\\uD940\\uDC00-\\uD97F\\uDFFD"           \
                    "\\uD980\\uDC00-\\uD9BF\\uDFFD\\uD9C0\\uDC00-\\uD9FF\\uDFFD\\uDA00\\uDC00-\\uDA3F\\uDFFD"           \
                    "\\uDA40\\uDC00-\\uDA7F\\uDFFD\\uDA80\\uDC00-\\uDABF\\uDFFD\\uDAC0\\uDC00-\\uDAFF\\uDFFD"           \
                    "\\uDB00\\uDC00-\\uDB3F\\uDFFD\\uDB44\\uDC00-\\uDB7F\\uDFFD"
/* U+E000-F8FF, U+F0000-FFFFD, U+100000-10FFFD */
#define PRIV        "\\uE000-\\uF8FF\\uDB80\\uDC00-\\uDBBF\\uDFFD\\uDBC0\\uDC00-\\uDBFF\\uDFFD"
/* RFC 3339 appendix A: a week, or a date part and a time part, each unit at most once and in order
 * without gaps after the first (P1Y2M3D, PT4H5M; not P1Y3D nor PT4H6S) */
#define DUR   "P((\\d+D|\\d+M(\\d+D)?|\\d+Y(\\d+M(\\d+D)?)?)(T(\\d+H(\\d+M(\\d+S)?)?|\\d+M(\\d+S)?|\\d+S))?|" \
              "T(\\d+H(\\d+M(\\d+S)?)?|\\d+M(\\d+S)?|\\d+S)|\\d+W)"

static const struct {
    const char *name;
    kn_fmt_kind kind;
    const char *regex;
    long maxlen; /* the format's own maximum length (0: none) */
} formats[] = {
    {"date", KN_FMT_EXACT, "^" DATE "$", 0},
    {"time", KN_FMT_EXACT, "^" TIME "$", 0},
    {"date-time", KN_FMT_EXACT, "^" DATE "[Tt]" TIME "$", 0},
    {"uuid", KN_FMT_EXACT, "^" HEX "{8}-" HEX "{4}-" HEX "{4}-" HEX "{4}-" HEX "{12}$", 0},
    {"ipv4", KN_FMT_EXACT, "^" IPV4 "$", 0},
    {"ipv6", KN_FMT_EXACT, "^" IPV6 "$", 0},
    {"email", KN_FMT_EXACT, "^" EMAIL "$", 0},
    {"duration", KN_FMT_EXACT, "^" DUR "$", 0},
    {"hostname", KN_FMT_EXACT, "^" LABEL "(\\." LABEL ")*$", 253},
    {"uri", KN_FMT_EXACT, "^" URI("", "") "$", 0},
    {"url", KN_FMT_APPROX, "^[A-Za-z][A-Za-z0-9+.-]*:" URICH "*$", 0},
    {"iri", KN_FMT_EXACT, "^" URI(UCS, PRIV) "$", 0},
    {"uri-reference", KN_FMT_EXACT, "^(" URI("", "") "|" RREF("", "") ")$", 0},
    {"iri-reference", KN_FMT_EXACT, "^(" URI(UCS, PRIV) "|" RREF(UCS, PRIV) ")$", 0},
    {"idn-email", KN_FMT_IGNORED, NULL, 0},
    {"idn-hostname", KN_FMT_IGNORED, NULL, 0},
    {"uri-template", KN_FMT_IGNORED, NULL, 0},
    {"json-pointer", KN_FMT_IGNORED, NULL, 0},
    {"relative-json-pointer", KN_FMT_IGNORED, NULL, 0},
    {"regex", KN_FMT_IGNORED, NULL, 0},
};
/* clang-format on */

kn_fmt_kind kn_format_regex(const char *name, const char **regex, long *maxlen) {
    *regex = NULL;
    *maxlen = -1;
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        if (strcmp(formats[i].name, name)) continue;
        *regex = formats[i].regex;
        if (formats[i].maxlen) *maxlen = formats[i].maxlen;
        return formats[i].kind;
    }
    return KN_FMT_UNKNOWN;
}

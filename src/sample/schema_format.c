/*
 * schema_format.c - the string formats kiln enforces, as regular expressions for schema_regex.c.
 *
 * Exact: date (with month lengths and leap years), time and date-time (RFC 3339; a leap second :60
 * is accepted at any minute), duration (RFC 3339 appendix A), uuid, ipv4, ipv6 (RFC 4291), email
 * (RFC 5321's Mailbox), uri and uri-reference (RFC 3986). Approximate (the usual shape, documented in
 * docs/structured-output.md): hostname, iri, iri-reference, url. Formats JSON Schema defines but kiln does
 * not check (KN_FMT_IGNORED) are listed too; any other name is not a JSON Schema format and is an
 * annotation (KN_FMT_UNKNOWN).
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
 * (which covers IPv4 addresses); characters outside the grammar appear only percent-encoded. */
#define PCT   "%" HEX HEX
#define PCHAR "([A-Za-z0-9._~!$&'()*+,;=:@-]|" PCT ")"
#define QCHAR "([A-Za-z0-9._~!$&'()*+,;=:@/?-]|" PCT ")"
#define AUTH  "(([A-Za-z0-9._~!$&'()*+,;=:-]|" PCT ")*@)?(\\[(" IPV6 "|[vV]" HEX "+\\.[A-Za-z0-9._~!$&'()*+,;=:-]+)\\]|" \
              "([A-Za-z0-9._~!$&'()*+,;=-]|" PCT ")*)(:\\d*)?"
#define PABE  "(/" PCHAR "*)*"
#define TAIL  "(\\?" QCHAR "*)?(#" QCHAR "*)?"
#define URI   "[A-Za-z][A-Za-z0-9+.-]*:(//" AUTH PABE "|/(" PCHAR "+" PABE ")?|" PCHAR "+" PABE ")?" TAIL
#define RREF  "(//" AUTH PABE "|/(" PCHAR "+" PABE ")?|([A-Za-z0-9._~!$&'()*+,;=@-]|" PCT ")+" PABE ")?" TAIL
/* RFC 3339 appendix A: a week, or a date part and a time part, each unit at most once and in order
 * without gaps after the first (P1Y2M3D, PT4H5M; not P1Y3D nor PT4H6S) */
#define DUR   "P((\\d+D|\\d+M(\\d+D)?|\\d+Y(\\d+M(\\d+D)?)?)(T(\\d+H(\\d+M(\\d+S)?)?|\\d+M(\\d+S)?|\\d+S))?|" \
              "T(\\d+H(\\d+M(\\d+S)?)?|\\d+M(\\d+S)?|\\d+S)|\\d+W)"

static const struct {
    const char *name;
    kn_fmt_kind kind;
    const char *regex;
} formats[] = {
    {"date", KN_FMT_EXACT, "^" DATE "$"},
    {"time", KN_FMT_EXACT, "^" TIME "$"},
    {"date-time", KN_FMT_EXACT, "^" DATE "[Tt]" TIME "$"},
    {"uuid", KN_FMT_EXACT, "^" HEX "{8}-" HEX "{4}-" HEX "{4}-" HEX "{4}-" HEX "{12}$"},
    {"ipv4", KN_FMT_EXACT, "^" IPV4 "$"},
    {"ipv6", KN_FMT_EXACT, "^" IPV6 "$"},
    {"email", KN_FMT_EXACT, "^" EMAIL "$"},
    {"duration", KN_FMT_EXACT, "^" DUR "$"},
    {"hostname", KN_FMT_APPROX, "^" LABEL "(\\." LABEL ")*$"},
    {"uri", KN_FMT_EXACT, "^" URI "$"},
    {"url", KN_FMT_APPROX, "^[A-Za-z][A-Za-z0-9+.-]*:" URICH "*$"},
    {"iri", KN_FMT_APPROX, "^[A-Za-z][A-Za-z0-9+.-]*:" URICH "*$"},
    {"uri-reference", KN_FMT_EXACT, "^(" URI "|" RREF ")$"},
    {"iri-reference", KN_FMT_APPROX, "^" URICH "*$"},
    {"idn-email", KN_FMT_IGNORED, NULL},
    {"idn-hostname", KN_FMT_IGNORED, NULL},
    {"uri-template", KN_FMT_IGNORED, NULL},
    {"json-pointer", KN_FMT_IGNORED, NULL},
    {"relative-json-pointer", KN_FMT_IGNORED, NULL},
    {"regex", KN_FMT_IGNORED, NULL},
};
/* clang-format on */

kn_fmt_kind kn_format_regex(const char *name, const char **regex) {
    *regex = NULL;
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        if (strcmp(formats[i].name, name)) continue;
        *regex = formats[i].regex;
        return formats[i].kind;
    }
    return KN_FMT_UNKNOWN;
}

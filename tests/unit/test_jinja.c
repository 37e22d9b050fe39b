/*
 * test_jinja.c - kiln's Jinja2 interpreter (src/text/jinja_*.c) and the chat-template API.
 *
 * The language tables below (CASES_*) hold templates rendered over one shared context with the
 * output Python's jinja2 gives under Hugging Face's settings (ImmutableSandboxedEnvironment,
 * trim_blocks, lstrip_blocks, loopcontrols, HF's tojson), frozen here so that this test needs no
 * Python; NULL means the template raises there, and kiln must fail with KILN_ERR_FORMAT.
 * The conformance of the 17 real chat templates against live Python runs in
 * tests/cli/test_templates.sh. Then: error paths with their "line L, column C" positions,
 * Undefined semantics, the sandbox, every limit (nesting, recursion, range, output size, steps),
 * malformed contexts, strftime_now, kiln_chat_apply with real GGUF vocabularies (template and
 * plain fallback), rendering from two threads, and fuzzing: truncated and byte-mutated real
 * templates and random contexts must never crash (the suite also runs under ASan/UBSan).
 */
#include "harness.h"

#include "kiln.h"
#include "text/jinja/impl.h"
#include "text/jinja/jinja.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>

typedef struct jcase {
    const char *tmpl;
    const char *want; /* NULL: the template raises */
} jcase;

/* Generated from Python's jinja2 (HF settings): the expected output of each template, or NULL when
 * it raises. ctx is the shared context CTX_JSON. */
static const char *const CTX_JSON =
    "{\"d\": {\"a\": 1, \"items\": 5, \"b\": [1, 2]}, \"l\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": "
    "true, \"f\": 2.5, \"i\": 7, \"u\": \"héllo wörld ÆØÅ\", \"e\": \"\", \"msgs\": [{\"role\": \"user\", \"content\": "
    "\"x\"}, {\"role\": \"assistant\", \"content\": \"y\"}], \"nested\": {\"x\": {\"y\": {\"z\": [10, 20]}}}}";
static const jcase CASES_LITERALS[] = {
    {"{{ 1 }}|{{ 1.0 }}|{{ -0.0 }}|{{ 1e100 }}|{{ 1.5e-7 }}|{{ 123456789.123 }}|{{ 0.1 }}|{{ 1/3 }}|{{ 2**62 }}|{{ "
     "1e16 }}|{{ 1e15 }}|{{ 0.0001 }}|{{ 0.00001 }}",
     "1|1.0|-0.0|1e+100|1.5e-07|123456789.123|0.1|0.3333333333333333|4611686018427387904|1e+16|1000000000000000.0|0."
     "0001|1e-05"},
    {"{{ true }}{{ false }}{{ none }}{{ None }}{{ True }}{{ n }}{{ t }}{{ [] }}{{ {} }}{{ () }}{{ (1,) }}{{ (1,2) }}",
     "TrueFalseNoneNoneTrueNoneTrue[]{}()(1,)(1, 2)"},
    {"{{ d }}|{{ l }}|{{ msgs }}|{{ nested }}|{{ [1, 'a', \"b'c\", 'd\"e', 'f\\'g\"h', none, true, 1.5] }}",
     "{'a': 1, 'items': 5, 'b': [1, 2]}|[3, 1, 2]|[{'role': 'user', 'content': 'x'}, {'role': 'assistant', 'content': "
     "'y'}]|{'x': {'y': {'z': [10, 20]}}}|[1, 'a', \"b'c\", 'd\"e', 'f\\'g\"h', None, True, 1.5]"},
    {"{{ ['\\n\\t\\\\', '\\x01', '\\u200b', 'é', '🙂', '\\x7f', '\\u00a0'] }}",
     "['\\n\\t\\\\', '\\x01', '\\u200b', 'é', '🙂', '\\x7f', '\\xa0']"},
    {"{{ 'a' 'b' \"c\" }}{{ 'It\\'s' }}{{ \"q\\\"q\" }}{{ '\\x41\\u00e9\\U0001F600\\t|\\n|\\\\|\\z' }}",
     "abcIt'sq\"qAé😀\t|\n|\\|\\z"},
    {"{{ 0x10 }} {{ 0o17 }} {{ 0b101 }} {{ 1_000_000 }} {{ 1.5e3 }} {{ 1E-2 }}", "16 15 5 1000000 1500.0 0.01"},
    {"{{ 007 }}", NULL},
    {"{{ {(1,2): 'tuple', 1: 'one', 1.0: 'float', true: 'bool'} }}", "{(1, 2): 'tuple', 1: 'bool'}"},
    {"{{ 1, 2 }}|{{ (1, 'a') }}|{{ [(1, 2), (3,)] }}", "(1, 2)|(1, 'a')|[(1, 2), (3,)]"},
};
static const jcase CASES_EXPRESSIONS[] = {
    {"{{ 10 // 3 }}|{{ -10 // 3 }}|{{ 10 % -3 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}|{{ 10 / 4 }}|{{ 2 ** 10 }}|{{ 2 ** -1 "
     "}}|{{ 2**3**2 }}|{{ -2**2 }}|{{ (-8) ** 2 }}|{{ 4 ** 0.5 }}",
     "3|-4|-2|3.0|0.5|2.5|1024|0.5|64|4|64|2.0"},
    {"{{ 'a' ~ 1 ~ none ~ true ~ 1.5 }} {{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ [1] * 3 }} {{ 3 * 'x' }} {{ [1] + [2] }} {{ "
     "(1,) + (2,) }} {{ 'abc' * -1 }}|{{ true * 3 }}{{ true + true }}{{ 3 - true }}{{ -true }}{{ +2.5 }}",
     "a1NoneTrue1.5 ab ababab [1, 1, 1] xxx [1, 2] (1, 2) |322-12.5"},
    {"{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'a' < 'b' }}{{ [1,2] < [1,3] }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' in 'cat' "
     "}}{{ 1 in l }}{{ 'a' in d }}{{ 'x' not in d }}{{ not 1 in l }}",
     "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueFalse"},
    {"{{ 'yes' if t else 'no' }}{{ 'yes' if n else 'no' }}{{ 'x' if false }}|{{ t and 'a' }}{{ n or 'b' }}{{ 0 or '' "
     "or 'c' }}{{ not t }}{{ not n }}{{ [] or {} or 0 }}",
     "yesno|abcFalseTrue0"},
    {"{{ {'a':1} == {'a':1.0} }}{{ [1,2] == (1,2) }}{{ msgs[0] == msgs[-2] }}{{ msgs[0] == msgs[1] }}{{ none == none "
     "}}{{ nothere == nothere2 }}",
     "TrueFalseTrueFalseTrueTrue"},
    {"{{ d.a }}{{ d['a'] }}{{ d['items'] }}{{ d.missing }}|{{ d.missing is defined }}{{ d.a is defined }}{{ d.items is "
     "defined }}{{ d.get is callable }}",
     "115|FalseTrueTrueTrue"},
    {"{{ nested.x.y.z.1 }}{{ nested['x']['y'].z[0] }}{{ nested.x.q }}|{{ msgs[0].role }}{{ msgs[-1]['content'] }}{{ "
     "msgs[5] is defined }}",
     "2010|useryFalse"},
    {"{{ s[0] }}{{ s[-1] }}{{ s[1:4] }}{{ s[::-1] }}{{ s[::2] }}{{ u[1:3] }}{{ u[::-1] }}{{ l[1:] }}{{ l[:-1] }}{{ "
     "l[::-1] }}{{ l[5:] }}{{ l[10] }}|{{ s[100] }}|{{ s[-100:2] }}{{ s[2:-100] }}|{{ l[::-2] }}",
     "HdelldlroW olleHHloWrdélÅØÆ dlröw olléh[1, 2][3, 1][2, 1, 3][]||He|[2, 3]"},
    {"{{ 'é'|length }}{{ '🙂'|length }}{{ 'e\\u0301'|length }}{{ 'ab🙂cd'[2] }}{{ 'ab🙂cd'[-3:] }}{{ "
     "'ab🙂cd'|reverse }}{{ 'ÉCOLE'|lower }}{{ 'straße'|upper }}{{ 'Ä'.lower() }}{{ 'ä'.upper() }}",
     "112🙂🙂cddc🙂baécoleSTRASSEäÄ"},
    {"{{ [1,2,3][true] }}{{ 'abc'[false] }}{{ [1,2][1.0] }}|{{ none.x }}|{{ none['x'] }}|{{ 5[0] }}|", "2a||||"},
    {"{{ 1 / 0 }}", NULL},
    {"{{ 3 // 0 }}", NULL},
    {"{{ 1 + 'a' }}", NULL},
    {"{{ 'a' + 1 }}", NULL},
    {"{{ [1] + (2,) }}", NULL},
    {"{{ -'a' }}", NULL},
    {"{{ l[::0] }}", NULL},
    {"{{ l['a':] }}", NULL},
    {"{{ d[1:2] }}", NULL},
    {"{{ {[1]: 2} }}", NULL},
    {"{{ 1 < 'a' }}", NULL},
    {"{{ 1 in 5 }}", NULL},
    {"{{ 1 in 'abc' }}", NULL},
};
static const jcase CASES_STATEMENTS[] = {
    {"{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ "
     "loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a','b') }};{% endfor %}",
     "1032TrueFalse31a;2121FalseFalse332b;3210FalseTrue31a;"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'abc' "
     "%}{{ c }}{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in nothere %}x{% else %}none{% "
     "endfor %}",
     "a=1,items=5,b=[1, 2],|aitemsb|abc|empty|none"},
    {"{% for x in l if x > 1 %}{{ x }}{{ loop.last }}{{ loop.length }}{% endfor %}|{% for x in l %}{% if x == 1 %}{% "
     "continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "3False22True2|3"},
    {"{% for a, b in [[1, 2], 'xy', (3, 4)] %}{{ a }}{{ b }}{% endfor %}|{% for (a, b) in d|items %}{{ a }}{% endfor "
     "%}",
     "12xy34|aitemsb"},
    {"{% for a in [[1,[2,[3]]]] recursive %}[{% if a is iterable %}{{ loop(a) }}{% else %}{{ a }}:{{ loop.depth }}{{ "
     "loop.depth0 }}{% endif %}]{% endfor %}",
     "[[1:21][[2:32][[3:43]]]]"},
    {"{% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{{ loop.length }}{% endfor %}{{ loop.index }};{% "
     "endfor %}|{% for i in range(4) %}{{ loop.changed(i // 2) }}{% endfor %}",
     "12221;12222;12223;|TrueFalseTrueFalse"},
    {"{% set x = 1 %}{% for i in l %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}|{% set y = 1 %}{% if true %}{% set "
     "y = 2 %}{% endif %}{{ y }}",
     "4231|2"},
    {"{% set ns = namespace(a=1, b=[]) %}{% for x in l %}{% set ns.a = ns.a + x %}{% set ns.b = ns.b + [x] %}{% endfor "
     "%}{{ ns.a }}{{ ns.b }}{{ ns }}{{ ns['a'] }}{{ ns.zz }}|{% set ns2 = namespace({'k': 1}, j=2) %}{{ ns2.k }}{{ "
     "ns2.j }}",
     "7[3, 1, 2]<Namespace {'a': 7, 'b': [3, 1, 2]}>7|12"},
    {"{% set x %}block {{ s }}{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}{% filter upper %}filtered "
     "{{ s }}{% endfilter %}{% filter trim|upper %}  z  {% endfilter %}",
     "[block Hello World]UPFILTERED HELLO WORLDZ"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}{% with x = 5, y = 6 %}{{ x }}{{ y }}{% endwith %}{{ "
     "x }}",
     "12(1, 2)56"},
    {"{% macro m(a, b='B', c=none) %}<{{ a }}|{{ b }}|{{ c }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ "
     "m(a=5) }}{{ m() }}",
     "<1|B|None><1|2|None><1|B|3><5|B|None><|B|None>"},
    {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('p') %}inside {{ s }}{% "
     "endcall %}",
     "<p>inside Hello World</p>"},
    {"{% macro two() %}{{ caller(1, 2) }}{% endmacro %}{% call(a, b) two() %}{{ a + b }}{% endcall %}", "3"},
    {"{% macro m() %}{{ y }}{% endmacro %}{% set y = 'late' %}{{ m() }}|{% macro outer() %}{% macro inner() %}I{{ z "
     "}}{% endmacro %}{% set z = 1 %}{{ inner() }}{% endmacro %}{{ outer() }}",
     "late|I1"},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}|{% macro v() %}{{ varargs "
     "}}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}|{% macro dflt(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ dflt('x') "
     "}}",
     "54321|(1, 2){'k': 3}|x!"},
    {"{% raw %}{{ not }} {% evaluated %}{% endraw %}{# comment #}after", "{{ not }} {% evaluated %}after"},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", NULL},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}", NULL},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}", NULL},
    {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", NULL},
    {"{% for a, b in [[1]] %}{% endfor %}", NULL},
    {"{% set ns = 5 %}{% set ns.a = 1 %}", NULL},
    {"{% for x in 5 %}{% endfor %}", NULL},
    {"{% for x in none %}{% endfor %}", NULL},
    {"{% for i in l %}{{ loop(l) }}{% endfor %}", NULL},
};
static const jcase CASES_FILTERS[] = {
    {"{{ l|length }}{{ s|length }}{{ u|length }}{{ d|length }}{{ l|count }}{{ l|first }}{{ l|last }}{{ l|sort }}{{ "
     "l|sort(reverse=true) }}{{ l|max }}{{ l|min }}{{ l|sum }}{{ l|list }}{{ l|reverse|list }}{{ l|join(',') }}{{ "
     "l|join }}",
     "311153332[1, 2, 3][3, 2, 1]316[3, 1, 2][2, 1, 3]3,1,2312"},
    {"{{ msgs|map(attribute='role')|list }}{{ msgs|selectattr('role', 'equalto', 'user')|list }}{{ "
     "msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|join }}{{ l|select('odd')|list }}{{ "
     "l|reject('odd')|list }}{{ [1,2,3,4,5]|batch(2)|list }}{{ [1,2,3]|batch(2, 0)|list }}{{ ['a','A','b']|unique|list "
     "}}{{ l|map('string')|join('-') }}",
     "['user', 'assistant'][{'role': 'user', 'content': 'x'}]y[3, 1][2][[1, 2], [3, 4], [5]][[1, 2], [3, 0]]['a', "
     "'b']3-1-2"},
    {"{{ 'x'|default('y') }}{{ nothere|default('y') }}{{ e|default('y') }}{{ e|default('y', true) }}{{ nothere|d('z') "
     "}}{{ none|default('q', boolean=true) }}{{ none|default('q') }}",
     "xyyzqNone"},
    {"{{ 3.7|int }}{{ '42'|int }}{{ '4.2'|int }}{{ 'x'|int(5) }}{{ '0x1A'|int(base=16) }}{{ ' 12 '|int }}{{ "
     "'1_000'|int }}{{ '3'|float }}{{ 'x'|float }}{{ '1e3'|float }}{{ -3|abs }}{{ -2.5|abs }}",
     "34245261210003.00.01000.032.5"},
    {"{{ 2.5|round }}{{ 3.5|round }}{{ 2.675|round(2) }}{{ 2.7|round(0, 'floor') }}{{ 2.1|round(1, 'ceil') }}{{ "
     "1234|round(-2) }}{{ 1250|round(-2) }}{{ 12|round }}",
     "2.04.02.672.02.11200120012"},
    {"{{ 12|string }}{{ 12|string|length }}{{ none|string }}{{ [1]|string }}{{ 'hello world foo'|wordcount }}{{ "
     "'abc'|center(9) }}|{{ 'Hello'|center(2) }}",
     "122None[1]3   abc   |Hello"},
    {"{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ "
     "'x'|indent('>> ', true) }}|{{ 'x\\n'|indent(first=true) }}|{{ ''|indent(2, true) }}|",
     "a\n  b\n\n  c|  a\n  b|a\n  \n  b|>> x|    x\n|  |"},
    {"{{ {'b': 2, 'a': 1}|dictsort }}{{ {'b': 2, 'a': 1}|dictsort(by='value', reverse=true) }}{{ d|items|list }}{{ "
     "[{'n': 'b'}, {'n': 'a'}]|sort(attribute='n')|map(attribute='n')|list }}",
     "[('a', 1), ('b', 2)][('b', 2), ('a', 1)][('a', 1), ('items', 5), ('b', [1, 2])]['a', 'b']"},
    {"{{ ['b', 'A', 'C', 'a']|sort }}{{ ['b', 'A', 'C', 'a']|sort(case_sensitive=true) }}{{ ['b', 'A', "
     "'a']|unique|list }}{{ ['b','A','a']|max }}{{ ['b','A','a']|min(case_sensitive=true) }}{{ [{'a': 2, 'b': 1}, "
     "{'a': 1, 'b': 2}, {'a': 2, 'b': 0}]|sort(attribute='a') }}",
     "['A', 'a', 'b', 'C']['A', 'C', 'a', 'b']['b', 'A']bA[{'a': 1, 'b': 2}, {'a': 2, 'b': 1}, {'a': 2, 'b': 0}]"},
    {"{{ [0, 1, '', 'a', none, [], [0]]|select|list }}{{ [0, 1, '', 'a', none]|reject|list }}{{ [1, 2, 3]|select('gt', "
     "1)|list }}{{ [1, 2, 3]|select('in', [1, 3])|list }}{{ ['a', 'b']|select('equalto', 'a')|list }}",
     "[1, 'a', [0]][0, '', None][2, 3][1, 3]['a']"},
    {"{{ msgs|selectattr('role', 'defined')|list|length }}{{ msgs|selectattr('nope', 'defined')|list|length }}{{ "
     "msgs|map(attribute='nope')|list }}{{ msgs|map(attribute='nope', default='D')|list }}{{ "
     "[nested.x]|map(attribute='y.z.0')|list }}",
     "20[Undefined, Undefined]['D', 'D'][10]"},
    {"{{ nothere|length }}{{ nothere|list }}{{ nothere|join }}{{ nothere|trim }}{{ nothere|upper }}{{ nothere|string "
     "}}{{ nothere|items|list }}{{ nothere|first }}{{ none|selectattr('a')|list }}{{ none|map('upper')|list }}",
     "0[][][][]"},
    {"{{ s|upper }}{{ s|lower }}{{ u|upper }}{{ \"they're bill's\"|title }}{{ 'hello-world foo(bar'|title }}{{ "
     "'hELLO'|capitalize }}{{ s|replace('l', 'L') }}{{ s|replace('l', 'L', 1) }}{{ '  x  '|trim }}|{{ "
     "'--a--'|trim('-') }}|{{ ' \\u3000a\\u3000 '|trim }}|",
     "HELLO WORLDhello worldHÉLLO WÖRLD ÆØÅThey're Bill'sHello-World Foo(BarHelloHeLLo WorLdHeLlo Worldx|a|a|"},
    {"{{ 'a'|safe + '<b>' }}{{ '<b>' + 'a'|safe }}{{ '<&>'|e }}{{ '<&>'|escape|safe }}{{ ('<'|safe) ~ '<' }}{{ "
     "'<x>'|forceescape }}{{ '<'|safe is escaped }}{{ '<' is escaped }}",
     "a&lt;b&gt;&lt;b&gt;a&lt;&amp;&gt;&lt;&amp;&gt;<<&lt;x&gt;TrueFalse"},
    {"{{ {'a': 1}|attr('a') }}|{{ d|attr('items') is defined }}|{{ s|attr('upper')() }}|{{ '%s-%s'|format(1, 'a') "
     "}}|{{ 'hello world'|truncate(8) }}|{{ 'hello world'|truncate(8, true) }}|{{ 'hello'|truncate(20) }}|{{ "
     "[1,2,3,4,5]|slice(2)|list }}",
     "|True|HELLO WORLD|1-a|hello world|hello world|hello|[[1, 2, 3], [4, 5]]"},
    {"{{ range(5)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ range(0)|list }}{{ range(3)|length }}",
     "[0, 1, 2, 3, 4][1, 4, 7][5, 3, 1][]3"},
    {"{{ l|tojson }}", "[3, 1, 2]"},
    {"{{ l|map('upper')|list }}", "['3', '1', '2']"},
    {"{{ l|map('nope')|list }}", NULL},
    {"{{ l|select('nope')|list }}", NULL},
    {"{{ 5|length }}", NULL},
    {"{{ [3, 'a']|sort }}", NULL},
    {"{{ nested|map(attribute='y.z.0')|list }}", NULL},
    {"{{ (l|map('string'))|last }}", NULL},
    {"{{ range(100001)|length }}", NULL},
    {"{{ range(1, 2, 0) }}", NULL},
};
static const jcase CASES_TESTS[] = {
    {"{{ none is none }}{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is integer }}{{ true is number "
     "}}{{ 's' is string }}{{ d is mapping }}{{ l is iterable }}{{ l is sequence }}{{ s is sequence }}{{ d is sequence "
     "}}{{ 5 is iterable }}{{ nothere is iterable }}",
     "TrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueFalseTrue"},
    {"{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby(3) }}{{ 9 is divisibleby 4 }}{{ true is boolean }}{{ true is "
     "true }}{{ false is false }}{{ 1 is true }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 2 is ge 2 }}{{ 1 is lt 1 }}{{ 1 is le "
     "1 }}{{ 1 is ne 2 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 'Ab' is lower }}{{ '1' is lower }}",
     "TrueTrueTrueFalseTrueTrueTrueFalseTrueTrueTrueFalseTrueTrueTrueTrueFalseFalse"},
    {"{{ x is defined }}{{ x is undefined }}{{ x is not defined }}{{ x is not none }}{{ n is not none }}{{ n is none "
     "}}{{ 'upper' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}{{ 1 is in [1] }}{{ m is callable }}{{ range "
     "is callable }}{{ s.upper is callable }}",
     "FalseTrueTrueTrueFalseTrueTrueFalseTrueTrueTrueTrueTrue"},
    {"{{ 'abc' is sameas 'abc' }}{{ none is sameas none }}{% set l2 = l %}{{ l2 is sameas l }}{{ [] is sameas [] }}{{ "
     "1 is sameas 1 }}{{ true is sameas 1 }}",
     "FalseTrueTrueFalseTrueFalse"},
    {"{{ 'a' is odd }}", NULL},
    {"{{ 1 is divisibleby 0 }}", NULL},
};
static const jcase CASES_METHODS[] = {
    {"{{ s.upper() }} {{ s.lower() }} {{ u.title() }} {{ 'hello world'.title() }} {{ \"they're bill's\".title() }} {{ "
     "'hello'.capitalize() }}{{ 'HELLO WORLD'.capitalize() }}{{ 'aBc'.swapcase() }}",
     "HELLO WORLD hello world Héllo Wörld Æøå Hello World They'Re Bill'S HelloHello worldAbC"},
    {"{{ s.split() }} {{ s.split('o') }} {{ s.split('o', 1) }} {{ s.rsplit('o', 1) }} {{ '  a  b  '.split(None, 1) }} "
     "{{ '  a  b  '.rsplit(None, 1) }} {{ 'a,b,,c'.split(',') }} {{ 'a b'.split(maxsplit=0) }} {{ ''.split() }} {{ "
     "''.split(',') }}",
     "['Hello', 'World'] ['Hell', ' W', 'rld'] ['Hell', ' World'] ['Hello W', 'rld'] ['a', 'b  '] ['  a', 'b'] ['a', "
     "'b', '', 'c'] ['a b'] [] ['']"},
    {"{{ s.startswith('Hell') }} {{ s.endswith(('x', 'ld')) }} {{ s.find('o') }} {{ s.rfind('o') }} {{ u.find('w') }} "
     "{{ s.count('l') }} {{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 2) }} {{ 'ab'.replace('', '-') }} {{ "
     "''.count('') }}",
     "True True 4 7 6 3 HeLLo WorLd HeLLo World -a-b- 1"},
    {"{{ '  x  '.strip() }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'x'.center(5, "
     "'*') }}{{ 'x'.ljust(3, '.') }}{{ 'x'.rjust(3) }}{{ '-5'.zfill(4) }}{{ '42'.zfill(5) }}",
     "x|x  |  x|a|**x**x..  x-00500042"},
    {"{{ 'a\\nb\\r\\nc'.splitlines() }}{{ 'a\\nb\\n'.splitlines(true) }}{{ 'a-b-c'.partition('-') }}{{ "
     "'a-b-c'.rpartition('-') }}{{ 'abc'.partition('x') }}{{ 'abc'.rpartition('x') }}",
     "['a', 'b', 'c']['a\\n', 'b\\n']('a', '-', 'b-c')('a-b', '-', 'c')('abc', '', '')('', '', 'abc')"},
    {"{{ 'abc'.isalpha() }}{{ 'ab1'.isalnum() }}{{ '123'.isdigit() }}{{ ' '.isspace() }}{{ ''.isspace() }}{{ "
     "'abc'.islower() }}{{ 'ABC'.isupper() }}{{ 'a1'.islower() }}{{ ','.join(['a', 'b']) }}{{ ', "
     "'.join(l|map('string')) }}",
     "TrueTrueTrueTrueFalseTrueTrueTruea,b3, 1, 2"},
    {"{{ 'x'.removeprefix('x') }}{{ 'abc'.removesuffix('c') }}{{ 'abcabc'.index('c') }}{{ 'abcabc'.rindex('c') }}{{ "
     "'abc'.find('c', 1) }}{{ 'abc'.find('a', 1) }}{{ 'abc'.startswith('b', 1) }}{{ 'héllo'.find('l') }}",
     "ab252-1True2"},
    {"{{ l.index(1) }}{{ l.count(3) }}{{ (1,2,1).count(1) }}{{ d.copy() }}{{ l.copy() }}{{ d.get('a') }}{{ d.get('zz', "
     "'def') }}{{ d.get('zz') }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}{{ d['get']('a') }}",
     "112{'a': 1, 'items': 5, 'b': [1, 2]}[3, 1, 2]1defNone['a', 'items', 'b'][1, 5, [1, 2]][('a', 1), ('items', 5), "
     "('b', [1, 2])]1"},
    {"{{ '%s and %d and %.2f and %5s|%-5s|%03d' % ('a', 3, 2.5, 'r', 'l', 7) }} {{ '{} {} {name}'.format(1, 'two', "
     "name='N') }} {{ '%(a)s-%(b)s' % {'a': 1, 'b': 2} }} {{ \"%s\" % none }} {{ \"%r\" % \"x\" }} {{ \"%x\" % 255 }} "
     "{{ \"%5.1f|\" % 3.14159 }} {{ \"%c\" % 65 }} {{ \"100%%\" % () }}",
     "a and 3 and 2.50 and     r|l    |007 1 two N 1-2 None 'x' ff   3.1| A 100%"},
    {"{{ '%-10s|' % 'é' }}{{ '%.1s' % 'éa' }}{{ '{:>5}'.format('é') }}{{ '{:08.3f}'.format(3.14159) }}{{ "
     "'{:,}'.format(1234567) }}{{ '{0}{0}'.format('r') }}{{ '{!r}'.format('x') }}{{ '{:x}'.format(255) }}{{ "
     "'{:^7}|'.format('ab') }}{{ '{:*<4}'.format(1) }}{{ \"{0.a}\".format(d) }}{{ \"{0[b][1]}\".format(d) }}",
     "é         |é    é0003.1421,234,567rr'x'ff  ab   |1***12"},
    {"{{ 'abc'.index('z') }}", NULL},
    {"{{ ','.join([1, 2]) }}", NULL},
    {"{{ '%s %s' % ('a',) }}", NULL},
    {"{{ '%s' % ('a', 'b') }}", NULL},
    {"{{ '%d' % 'x' }}", NULL},
    {"{{ l.append(4) }}", NULL},
    {"{{ d.update({}) }}", NULL},
    {"{{ d.pop('a') }}", NULL},
    {"{{ s.nope() }}", NULL},
};
static const jcase CASES_WHITESPACE[] = {
    {"{%- for x in l -%}\n  {{ x }}\n{%- endfor %}\n  {% if true %}\n    yes\n  {% endif %}\n  {%+ if true %}plus{% "
     "endif %}\n{{- '  trimmed' }}\nx  {#- comment -#}  y",
     "312    yes\n  plus  trimmed\nxy"},
    {"a\n{% if true %}\n  b\n{% endif %}\nc\n{%- if true +%}\nd\n{% endif -%}\n  e", "a\n  b\nc\nd\ne"},
    {"  {# comment #}\ntext\n\t{% set x = 1 %}\tafter\n{{ 'v' }}   {% if true %}\nin\n{%- endif %}\n",
     "text\n\tafter\nv   in"},
    {"{% raw -%}   raw   {%- endraw %}|{% raw %}\n  {{ x }}\n{% endraw %}\n|end", "raw|\n  {{ x }}\n|end"},
    {"line1\nline2", "line1\nline2"},
    {"{{ 'no trailing newline kept' }}\n", "no trailing newline kept"},
    {"\t {%- if true -%} \t x \t {%- endif -%} \t", "x"},
    {"x {{- ' ' -}} y {{ 'z' -}}\n   \nw\n", "x y zw"},
};

/* ---- helpers --------------------------------------------------------------------------------- */

/* Renders tmpl with ctx (NUL-terminated strings); returns the status, *out malloc'd on success. */
static kiln_status render(const char *tmpl, const char *ctx, char **out) {
    size_t len = 0;
    *out = NULL;
    return kiln_template_render(tmpl, strlen(tmpl), ctx, ctx ? strlen(ctx) : 0, out, &len);
}

/* Runs a table: each case must render to want, or fail with KILN_ERR_FORMAT when want is NULL.
 * Prints every mismatch; returns the number of failures. */
static int run_table(const jcase *cases, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char *out = NULL;
        kiln_status st = render(cases[i].tmpl, CTX_JSON, &out);
        if (cases[i].want == NULL) {
            if (st != KILN_ERR_FORMAT) {
                printf("  case %zu: %s\n    expected an error, got status %d: %s\n", i, cases[i].tmpl, st,
                       out ? out : "");
                bad++;
            } else if (strncmp(kiln_last_error(), "line ", 5) != 0) {
                printf("  case %zu: error without a position: %s\n", i, kiln_last_error());
                bad++;
            }
        } else if (st != KILN_OK) {
            printf("  case %zu: %s\n    failed: %s\n", i, cases[i].tmpl, kiln_last_error());
            bad++;
        } else if (strcmp(out, cases[i].want) != 0) {
            printf("  case %zu: %s\n    want: %s\n    got:  %s\n", i, cases[i].tmpl, cases[i].want, out);
            bad++;
        }
        kiln_free(out);
    }
    return bad;
}

#define TABLE(t) CHECKF(run_table(t, KN_ARRAY_LEN(t)) == 0, "see above")

/* Renders and checks the output. */
#define EXPECT(tmpl, ctx, want)                                                                                        \
    do {                                                                                                               \
        char *o_;                                                                                                      \
        kiln_status s_ = render(tmpl, ctx, &o_);                                                                       \
        CHECKF(s_ == KILN_OK, "%s: %s", tmpl, kiln_last_error());                                                      \
        int eq_ = strcmp(o_, want) == 0;                                                                               \
        if (!eq_) printf("  want: %s\n  got:  %s\n", (const char *)(want), o_);                                        \
        kiln_free(o_);                                                                                                 \
        CHECK(eq_);                                                                                                    \
    } while (0)

/* Renders and checks the status and that the error message contains what. */
#define EXPECT_ERR(tmpl, ctx, status, what)                                                                            \
    do {                                                                                                               \
        char *o_;                                                                                                      \
        kiln_status s_ = render(tmpl, ctx, &o_);                                                                       \
        kiln_free(o_);                                                                                                 \
        CHECKF(s_ == (status), "%s: status %d (%s)", tmpl, s_, kiln_last_error());                                     \
        CHECKF(strstr(kiln_last_error(), what) != NULL, "%s: message '%s' lacks '%s'", tmpl, kiln_last_error(), what); \
    } while (0)

/* ---- the language ---------------------------------------------------------------------------- */

static void test_literals(void) { TABLE(CASES_LITERALS); }
static void test_expressions(void) { TABLE(CASES_EXPRESSIONS); }
static void test_statements(void) { TABLE(CASES_STATEMENTS); }
static void test_filters(void) { TABLE(CASES_FILTERS); }
static void test_tests(void) { TABLE(CASES_TESTS); }
static void test_methods(void) { TABLE(CASES_METHODS); }
static void test_whitespace(void) { TABLE(CASES_WHITESPACE); }

static void test_tojson(void) {
    EXPECT("{{ x|tojson }}", "{\"x\": {\"b\": [1, 2.0, -0.5, 1e-07, null, true, \"é\\n\\\"\"], \"a\": {}}}",
           "{\"b\": [1, 2.0, -0.5, 1e-07, null, true, \"é\\n\\\"\"], \"a\": {}}");
    EXPECT("{{ x|tojson(indent=2) }}", "{\"x\": {\"b\": [1, []], \"a\": {}}}",
           "{\n  \"b\": [\n    1,\n    []\n  ],\n  \"a\": {}\n}");
    EXPECT("{{ x|tojson(sort_keys=true, separators=(',', ':')) }}", "{\"x\": {\"b\": 1, \"a\": [1, 2]}}",
           "{\"a\":[1,2],\"b\":1}");
    EXPECT("{{ x|tojson(ensure_ascii=true) }}", "{\"x\": \"é🙂\\u007f\"}", "\"\\u00e9\\ud83d\\ude42\\u007f\"");
    EXPECT("{{ x|tojson }}", "{\"x\": \"\\u0001\\u001f\\u007f\\t\"}", "\"\\u0001\\u001f\x7f\\t\"");
    EXPECT("{{ {1: 'a', none: 'b', true: 'c', 2.5: 'd'}|tojson }}", NULL,
           "{\"1\": \"c\", \"null\": \"b\", \"2.5\": \"d\"}");
    EXPECT("{{ (1, 'a')|tojson }}{{ x|tojson(indent='\\t') }}", "{\"x\": [1]}", "[1, \"a\"][\n\t1\n]");
    EXPECT_ERR("{{ undefined_thing|tojson }}", NULL, KILN_ERR_FORMAT, "not JSON serializable");
    EXPECT_ERR("{{ [1]|map('string')|tojson }}", NULL, KILN_ERR_FORMAT, "generator is not JSON serializable");
    EXPECT_ERR("{{ namespace()|tojson }}", NULL, KILN_ERR_FORMAT, "not JSON serializable");
}

static void test_undefined(void) {
    /* printing, iterating, testing and defaulting an undefined value are fine */
    EXPECT("[{{ x }}][{% for a in x %}{{ a }}{% endfor %}][{{ x is defined }}][{{ x|default('d') }}][{{ x ~ 'y' }}][{{ "
           "x|length }}]",
           "{}", "[][][False][d][y][0]");
    EXPECT("{{ d.missing }}|{{ d['missing'] }}|{{ l[9] }}|{{ d.missing is defined }}", "{\"d\": {}, \"l\": []}",
           "|||False");
    EXPECT("{% if x %}t{% else %}f{% endif %}{{ not x }}{{ x == x }}{{ x is none }}", "{}", "fTrueTrueFalse");
    /* attribute or item of an undefined value, arithmetic, calls and comparisons raise */
    EXPECT_ERR("{{ x.attr }}", "{}", KILN_ERR_FORMAT, "'x' is undefined");
    EXPECT_ERR("{{ x['k'] }}", "{}", KILN_ERR_FORMAT, "'x' is undefined");
    EXPECT_ERR("{{ d.missing.deeper }}", "{\"d\": {}}", KILN_ERR_FORMAT, "has no attribute 'missing'");
    EXPECT_ERR("{{ x + 1 }}", "{}", KILN_ERR_FORMAT, "'x' is undefined");
    EXPECT_ERR("{{ x() }}", "{}", KILN_ERR_FORMAT, "'x' is undefined");
    EXPECT_ERR("{{ x < 1 }}", "{}", KILN_ERR_FORMAT, "'x' is undefined");
    EXPECT_ERR("{{ messages[0]['role'] }}", "{\"messages\": []}", KILN_ERR_FORMAT, "no element 0");
}

static void test_sandbox(void) {
    EXPECT("{{ l.append is defined }}|{{ d.update is defined }}|{{ d.__class__ }}|", "{\"l\": [], \"d\": {}}",
           "False|False||");
    EXPECT_ERR("{{ l.append(1) }}", "{\"l\": []}", KILN_ERR_FORMAT, "unsafe");
    EXPECT_ERR("{{ d.pop('a') }}", "{\"d\": {\"a\": 1}}", KILN_ERR_FORMAT, "unsafe");
    /* a dict's keys shadow nothing: d.items is the method, d['items'] the key */
    EXPECT("{{ d['items'] }}{{ d.items()|list }}", "{\"d\": {\"items\": 1}}", "1[('items', 1)]");
}

static void test_strftime_now(void) {
    setenv("SOURCE_DATE_EPOCH", "1721952000", 1);
    EXPECT("{{ strftime_now('%d %b %Y %H:%M:%S %A') }}{{ strftime_now is defined }}", NULL,
           "26 Jul 2024 00:00:00 FridayTrue");
    unsetenv("SOURCE_DATE_EPOCH");
    char *out;
    CHECK(render("{{ strftime_now('%Y') }}", NULL, &out) == KILN_OK);
    CHECK(strlen(out) == 4 && out[0] >= '2');
    kiln_free(out);
}

/* ---- errors and their positions -------------------------------------------------------------- */

static void test_syntax_errors(void) {
    EXPECT_ERR("line1\n{{ 1 + }}", NULL, KILN_ERR_FORMAT, "line 2, column 8:");
    EXPECT_ERR("{% if x %}\nabc", NULL, KILN_ERR_FORMAT,
               "line 2, column 4: unexpected end of template, expected 'elif' or 'else' or 'endif'");
    EXPECT_ERR("{% for x in y %}{% endif %}", NULL, KILN_ERR_FORMAT, "line 1, column 20:");
    EXPECT_ERR("ab\n  {% frobnicate %}", NULL, KILN_ERR_FORMAT,
               "line 2, column 6: Encountered unknown tag 'frobnicate'.");
    EXPECT_ERR("{{ 'unterminated }}", NULL, KILN_ERR_FORMAT, "line 1, column 4: unterminated string");
    EXPECT_ERR("{{ x", NULL, KILN_ERR_FORMAT, "line 1, column 1: unexpected end of template");
    EXPECT_ERR("é{# never closed", NULL, KILN_ERR_FORMAT, "line 1, column 2: missing end of comment tag");
    EXPECT_ERR("{% raw %}x", NULL, KILN_ERR_FORMAT, "missing end of raw directive");
    EXPECT_ERR("{{ (1, 2] }}", NULL, KILN_ERR_FORMAT, "line 1, column 9: unexpected ']', expected ')'");
    EXPECT_ERR("{{ 1 }} }}\n{{ @ }}", NULL, KILN_ERR_FORMAT, "line 2, column 4: unexpected char '@'");
    EXPECT_ERR("{% break %}", NULL, KILN_ERR_FORMAT, "'break' outside loop");
    EXPECT_ERR("{% for x in l %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}", NULL, KILN_ERR_FORMAT,
               "'continue' outside loop");
    EXPECT_ERR("{{ x is defined is defined }}", NULL, KILN_ERR_FORMAT, "cannot chain");
    EXPECT_ERR("{% set 1 = 2 %}", NULL, KILN_ERR_FORMAT, "can't assign");
    EXPECT_ERR("{% macro m(a=1, b) %}{% endmacro %}", NULL, KILN_ERR_FORMAT, "non-default argument");
    EXPECT_ERR("{{ f(a=1, 2) }}", NULL, KILN_ERR_FORMAT, "positional argument follows keyword argument");
    EXPECT_ERR("{{ 99999999999999999999 }}", NULL, KILN_ERR_FORMAT, "integer literal too large");
    EXPECT_ERR("{{ '\\x4' }}", NULL, KILN_ERR_FORMAT, "truncated \\x escape");
    EXPECT_ERR("{% call x %}{% endcall %}", NULL, KILN_ERR_FORMAT, "expected call");
    EXPECT_ERR("", NULL, KILN_OK, "");
    EXPECT_ERR("{% extends 'base.html' %}", NULL, KILN_ERR_FORMAT, "unknown tag 'extends'");
    /* Hugging Face's assistant-mask block renders its body */
    EXPECT("{% for m in ['a', 'b'] %}{% generation %}<{{ m }}>{% set x = 1 %}{% endgeneration %}{{ x }}{% endfor %}",
           NULL, "<a><b>");
}

static void test_unknown_filter_and_test(void) {
    EXPECT_ERR("\n  {{ x|nosuchfilter }}", NULL, KILN_ERR_FORMAT, "line 2, column 8: No filter named 'nosuchfilter'.");
    EXPECT_ERR("{{ x is nosuchtest }}", NULL, KILN_ERR_FORMAT, "No test named 'nosuchtest'.");
    /* inside an if, Jinja2 3.x only fails when the filter is evaluated */
    EXPECT("{% if false %}{{ x|nosuchfilter }}{% endif %}ok", NULL, "ok");
    EXPECT_ERR("{% if true %}{{ x|nosuchfilter }}{% endif %}", NULL, KILN_ERR_FORMAT,
               "No filter named 'nosuchfilter' found.");
    EXPECT_ERR("{% if true %}{% for i in x %}{{ i|nosuchfilter }}{% endfor %}{% endif %}", NULL, KILN_ERR_FORMAT,
               "No filter named");
    EXPECT_ERR("{{ [1]|map('nosuch')|list }}", NULL, KILN_ERR_FORMAT, "No filter named 'nosuch'");
    EXPECT_ERR("{{ [1]|select('nosuch')|list }}", NULL, KILN_ERR_FORMAT, "No test named 'nosuch'");
}

static void test_runtime_errors(void) {
    EXPECT_ERR("ok\n{{ raise_exception('Conversation roles must alternate') }}", NULL, KILN_ERR_FORMAT,
               "line 2, column 4: Conversation roles must alternate");
    EXPECT_ERR("{{ s() }}", "{\"s\": \"str\"}", KILN_ERR_FORMAT, "'str' object is not callable");
    EXPECT_ERR("{{ 5(1) }}", NULL, KILN_ERR_FORMAT, "'int' object is not callable");
    EXPECT_ERR("{{ d() }}", "{\"d\": {}}", KILN_ERR_FORMAT, "'dict' object is not callable");
    EXPECT_ERR("x\n\n   {{ 1 / 0 }}", NULL, KILN_ERR_FORMAT, "line 3, column 9: division by zero");
    EXPECT_ERR("{{ 'a' + 1 }}", NULL, KILN_ERR_FORMAT, "can only concatenate str");
    EXPECT_ERR("{% set ns = 5 %}{% set ns.a = 1 %}", NULL, KILN_ERR_FORMAT, "non-namespace");
    EXPECT_ERR("{{ range(3, foo=1) }}", NULL, KILN_ERR_FORMAT, "keyword");
    EXPECT_ERR("{{ 'x'|indent(2, 3, 4, 5) }}", NULL, KILN_ERR_FORMAT, "at most");
    EXPECT_ERR("{{ 'x'|replace('a') }}", NULL, KILN_ERR_FORMAT, "missing required argument 'new'");
    EXPECT_ERR("{{ 'x'|trim(nope=1) }}", NULL, KILN_ERR_FORMAT, "unexpected keyword argument 'nope'");
    EXPECT_ERR("{{ 2 ** 64 }}", NULL, KILN_ERR_FORMAT, "integer overflow");
    EXPECT_ERR("{{ x }}", "{\"x\": 123456789012345678901234567890}", KILN_ERR_INVALID_ARG, "");
}

/* ---- limits ---------------------------------------------------------------------------------- */

/* A string of n copies of s. */
static char *repeat_str(const char *s, size_t n) {
    size_t k = strlen(s);
    char *r = malloc(k * n + 1);
    for (size_t i = 0; i < n; i++) memcpy(r + i * k, s, k);
    r[k * n] = 0;
    return r;
}

static void test_nesting_limits(void) {
    /* deeply nested expressions and blocks fail cleanly, shallow ones work */
    char *open = repeat_str("(", 100000), *close = repeat_str(")", 100000);
    size_t n = strlen(open) + strlen(close) + 16;
    char *t = malloc(n);
    snprintf(t, n, "{{ %s1%s }}", open, close);
    EXPECT_ERR(t, NULL, KILN_ERR_FORMAT, "nested too deeply");
    free(t);
    free(open);
    free(close);
    char *ifs = repeat_str("{% if true %}", 5000), *ends = repeat_str("{% endif %}", 5000);
    n = strlen(ifs) + strlen(ends) + 8;
    t = malloc(n);
    snprintf(t, n, "%sx%s", ifs, ends);
    EXPECT_ERR(t, NULL, KILN_ERR_FORMAT, "nested too deeply");
    free(t);
    free(ifs);
    free(ends);
    char *elifs = repeat_str("{% elif false %}", 50000);
    n = strlen(elifs) + 64;
    t = malloc(n);
    snprintf(t, n, "{%% if false %%}%s{%% endif %%}", elifs);
    EXPECT_ERR(t, NULL, KILN_ERR_FORMAT, "nested too deeply");
    free(t);
    free(elifs);
    char *ors = repeat_str(" or 0", 50000);
    n = strlen(ors) + 16;
    t = malloc(n);
    snprintf(t, n, "{{ 1%s }}", ors);
    EXPECT_ERR(t, NULL, KILN_ERR_FORMAT, "nesting too deep");
    free(t);
    free(ors);
    char *nots = repeat_str("not ", 100000);
    n = strlen(nots) + 16;
    t = malloc(n);
    snprintf(t, n, "{{ %s1 }}", nots);
    EXPECT_ERR(t, NULL, KILN_ERR_FORMAT, "nested too deeply");
    free(t);
    free(nots);
    char *lists = repeat_str("[", 300), *lends = repeat_str("]", 300);
    n = strlen(lists) + strlen(lends) + 8;
    t = malloc(n);
    snprintf(t, n, "{{ %s%s }}", lists, lends);
    EXPECT_ERR(t, NULL, KILN_ERR_FORMAT, "nested too deeply");
    free(t);
    free(lists);
    free(lends);
    ifs = repeat_str("{% if true %}", 50);
    ends = repeat_str("{% endif %}", 50);
    n = strlen(ifs) + strlen(ends) + 8;
    t = malloc(n);
    snprintf(t, n, "%sdeep%s", ifs, ends);
    EXPECT(t, NULL, "deep");
    free(t);
    free(ifs);
    free(ends);
}

static void test_recursion_limits(void) {
    EXPECT_ERR("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, KILN_ERR_FORMAT, "recursion");
    EXPECT_ERR("{% macro f() %}{{ caller() }}{% endmacro %}{% macro g() %}{% call f() %}{{ g() }}{% endcall %}{% "
               "endmacro %}{{ g() }}",
               NULL, KILN_ERR_FORMAT, "");
    EXPECT_ERR("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", NULL, KILN_ERR_FORMAT, "recursion");
    /* a namespace holding itself: printing it is bounded */
    EXPECT_ERR("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}", NULL, KILN_ERR_FORMAT, "nested too deeply");
    /* a list nested ever deeper through a namespace */
    EXPECT_ERR("{% set ns = namespace(l=[]) %}{% for i in range(2000) %}{% set ns.l = [ns.l] %}{% endfor %}", NULL,
               KILN_ERR_FORMAT, "nested too deeply");
    EXPECT("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% else %}bottom{% endif %}{% endmacro %}{{ f(50) }}", NULL,
           "bottom");
}

static void test_size_limits(void) {
    double t0 = kn_now_ms();
    EXPECT_ERR("{{ range(100000000)|length }}", NULL, KILN_ERR_FORMAT, "Range too big");
    EXPECT_ERR("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
               KILN_ERR_FORMAT, "steps");
    EXPECT_ERR("{{ 'x' * 100000000 }}", NULL, KILN_ERR_FORMAT, "limit");
    EXPECT_ERR("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", NULL, KILN_ERR_FORMAT,
               "output exceeds");
    EXPECT_ERR("{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", NULL,
               KILN_ERR_FORMAT, "limit");
    EXPECT_ERR("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", NULL,
               KILN_ERR_FORMAT, "limit");
    EXPECT_ERR("{{ [1] * 1000000000 }}", NULL, KILN_ERR_FORMAT, "");
    double dt = kn_now_ms() - t0;
    CHECKF(dt < 20000, "the limits took %.0f ms to trigger", dt);
}

/* A string's characters as values: a one-byte character is a shared string that costs its list slot
 * alone, so 16 M of them fit the work budget (a heap string each would not: 16 M x 34 bytes), and the
 * budget counts what each multi-byte character allocates (it counted the 2 bytes of an 'é', so 16 M
 * of them held about 770 MB on a count of 288 MB). */
static void test_char_values(void) {
    char *out = NULL;
    CHECK(render("{{ ('x' * 16000000)|list|length }}{{ ('\xff' * 3)|list|length }}", NULL, &out) == KILN_OK);
    CHECK(out && strcmp(out, "160000003") == 0);
    kiln_free(out);
    EXPECT_ERR("{{ ('\xc3\xa9' * 16000000)|list|length }}", NULL, KILN_ERR_FORMAT, "work limit");
}

/* A string constructor that fails (here: past the work budget) leaves Undefined in its output, which
 * the caller may drop: the attribute path of join / map / sort dropped a stale key when making the key
 * failed (a use after free, found by the jinja fuzz harness with a budget spent by joins). */
static void test_failed_string(void) {
    kn_jr r = {0};
    r.work = KN_JINJA_MAX_WORK;
    kn_jv v;
    memset(&v, 0xA5, sizeof v);
    CHECK(!kn_jmk_str(&r, "abc", 3, false, &v));
    CHECK(r.failed && strstr(r.err, "work limit"));
    CHECK(v.t == KN_J_UNDEF && !kn_jv_is_heap(v));
    kn_jv_drop(v);
    memset(&v, 0xA5, sizeof v);
    CHECK(!kn_jmk_char(&r, "\xc3\xa9", 2, false, &v)); /* a two-byte character is a new string */
    CHECK(v.t == KN_J_UNDEF && !kn_jv_is_heap(v));
    CHECK(kn_jmk_char(&r, "x", 1, true, &v)); /* a one-byte one is shared: no work, no failure */
    CHECK(v.t == KN_J_STR && v.u.s->len == 1 && v.u.s->s[0] == 'x' && v.u.s->safe);
    kn_jv_drop(v);
}

/* Long inputs render in linear time. */
static void test_long_inputs(void) {
    double t0 = kn_now_ms();
    /* 1 MB of template text, 100k tags */
    char *t = repeat_str("text {{ x }} {% if x %}y{% endif %}\n", 30000);
    char *out;
    CHECK(render(t, "{\"x\": 1}", &out) == KILN_OK);
    CHECK(strlen(out) == 30000 * 8);
    kiln_free(out);
    free(t);
    /* a context with 20k messages and a 2 MB string */
    size_t cap = 4 << 20, n = 0;
    char *ctx = malloc(cap);
    n += (size_t)sprintf(ctx + n, "{\"big\": \"");
    for (int i = 0; i < (2 << 20); i++) ctx[n++] = (char)('a' + i % 26);
    n += (size_t)sprintf(ctx + n, "\", \"messages\": [");
    for (int i = 0; i < 20000; i++)
        n += (size_t)sprintf(ctx + n, "%s{\"role\": \"user\", \"content\": \"m%d\"}", i ? ", " : "", i);
    n += (size_t)sprintf(ctx + n, "]}");
    ctx[n] = 0;
    CHECK(render("{{ big|length }}{% for m in messages %}{{ m.role[0] }}{{ m['content'] }}{% endfor %}{{ big[-3:] }}{{ "
                 "big.split('z')|length }}"
                 "{{ messages|map(attribute='content')|join(',')|length }}{{ messages|selectattr('role', 'eq', "
                 "'user')|list|length }}",
                 ctx, &out) == KILN_OK);
    CHECK(strncmp(out, "2097152u", 8) == 0);
    kiln_free(out);
    free(ctx);
    double dt = kn_now_ms() - t0;
    CHECKF(dt < 20000, "long inputs took %.0f ms", dt);
}

/* ---- contexts and the API -------------------------------------------------------------------- */

static void test_bad_context(void) {
    char *out = (char *)1;
    size_t len = 7;
    CHECK(kiln_template_render("x", 1, "[1, 2]", 6, &out, &len) == KILN_ERR_INVALID_ARG && out == NULL && len == 0);
    CHECK(kiln_template_render("x", 1, "{\"a\": ", 6, &out, &len) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "not valid JSON") != NULL);
    CHECK(kiln_template_render("x", 1, "not json", 8, &out, &len) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_template_render("x", 1, "\"str\"", 5, &out, &len) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_template_render("x", 1, "{\"a\": \"\xff\"}", 10, &out, &len) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_template_render("x", 1, NULL, 0, &out, &len) == KILN_OK && len == 1);
    kiln_free(out);
    CHECK(kiln_template_render(NULL, 3, "{}", 2, &out, &len) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_template_render("x", 1, "{}", 2, NULL, &len) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_template_render("x", 1, NULL, 5, &out, &len) == KILN_ERR_INVALID_ARG);
    /* deep JSON: refused, never a crash */
    char *deep = malloc(4200);
    size_t n = 0;
    n += (size_t)sprintf(deep, "{\"x\": ");
    for (int i = 0; i < 1000; i++) deep[n++] = '[';
    for (int i = 0; i < 1000; i++) deep[n++] = ']';
    deep[n++] = '}';
    CHECK(kiln_template_render("{{ x }}", 7, deep, n, &out, &len) == KILN_ERR_INVALID_ARG);
    free(deep);
    /* NUL bytes in template and context strings pass through */
    CHECK(kiln_template_render("a\0{{ s }}", 9, "{\"s\": \"b\\u0000c\"}", 17, &out, &len) == KILN_OK);
    CHECK(len == 5 && memcmp(out, "a\0b\0c", 5) == 0);
    kiln_free(out);
    /* keys the template never names are ignored; later duplicates win */
    EXPECT("{{ a }}", "{\"a\": 1, \"zzz\": [[[]]], \"a\": 2}", "2");
    kiln_free(NULL);
}

static void test_chat_apply(void) {
    const char *p3 = kt_data("tokenizer-tests/llama.cpp-vocab/ggml-vocab-phi-3.gguf");
    const char *st = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(p3) || !kt_exists(st)) SKIP("no test vocabularies");
    kiln_model_params mp = kiln_model_default_params();
    mp.vocab_only = true;
    kiln_model *m = NULL;
    CHECK(kiln_model_load(p3, &mp, &m) == KILN_OK);
    const char *tmpl = kiln_model_chat_template(m);
    CHECK(tmpl != NULL && strstr(tmpl, "<|user|>") != NULL);
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}";
    char *a = NULL, *b = NULL;
    size_t la, lb;
    CHECK(kiln_chat_apply(m, chat, strlen(chat), &a, &la) == KILN_OK);
    /* the same as rendering the template with the model's tokens and a generation prompt */
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"bos_token\": \"<s>\", "
                      "\"eos_token\": \"<|endoftext|>\", \"add_generation_prompt\": true}";
    CHECK(kiln_template_render(tmpl, strlen(tmpl), ctx, strlen(ctx), &b, &lb) == KILN_OK);
    CHECKF(la == lb && memcmp(a, b, la) == 0, "%s vs %s", a, b);
    CHECK(strcmp(a, "<s><|user|>\nHi<|end|>\n<|assistant|>\n") == 0);
    kiln_free(a);
    kiln_free(b);
    /* explicit values win */
    const char *chat2 = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"add_generation_prompt\": false, "
                        "\"bos_token\": \"B\"}";
    CHECK(kiln_chat_apply(m, chat2, strlen(chat2), &a, &la) == KILN_OK);
    CHECKF(strncmp(a, "B<|user|>\nHi<|end|>\n", 20) == 0, "%s", a);
    kiln_free(a);
    CHECK(kiln_chat_apply(m, "{}", 2, &a, &la) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_chat_apply(m, "{\"messages\": 5}", 15, &a, &la) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_chat_apply(m, "[]", 2, &a, &la) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_chat_apply(NULL, chat, strlen(chat), &a, &la) == KILN_ERR_INVALID_ARG);
    kiln_model_free(m);

    /* a model without a template: the plain fallback */
    CHECK(kiln_model_load(st, &mp, &m) == KILN_OK);
    CHECK(kiln_model_chat_template(m) == NULL);
    const char *c3 =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Once\"}, {\"role\": \"assistant\", \"content\": null},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"upon \"}, {\"type\": \"image\"},"
        " {\"type\": \"text\", \"text\": \"a time\"}]}, {\"role\": \"user\"}, {\"role\": \"user\", \"content\": "
        "\"\"}]}";
    CHECK(kiln_chat_apply(m, c3, strlen(c3), &a, &la) == KILN_OK);
    CHECKF(strcmp(a, "Once\n\nupon a time\n\n") == 0, "[%s]", a);
    kiln_free(a);
    CHECK(kiln_chat_apply(m, "{\"messages\": []}", 16, &a, &la) == KILN_OK && la == 0);
    kiln_free(a);
    CHECK(kiln_chat_apply(m, "{\"messages\": [{\"content\": 5}]}", 30, &a, &la) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_chat_apply(m, "{\"messages\": [7]}", 17, &a, &la) == KILN_ERR_INVALID_ARG);
    kiln_model_free(m);
}

/* ---- threads --------------------------------------------------------------------------------- */

typedef struct thread_arg {
    const kn_jtmpl *t;
    json_t *ctx;
    char *first;
    int bad;
} thread_arg;

static void *render_many(void *p) {
    thread_arg *a = p;
    for (int i = 0; i < 200; i++) {
        char *out;
        size_t len;
        if (kn_jinja_render(a->t, a->ctx, &out, &len) != KILN_OK) {
            a->bad++;
            continue;
        }
        if (!a->first) a->first = out;
        else {
            if (strcmp(out, a->first) != 0) a->bad++;
            free(out);
        }
    }
    return NULL;
}

static void test_threads(void) {
    const char *src =
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ 'lit' ~ m.content|upper }}"
        "{% endfor %}{{ ns.n }}{{ ['a', 'b']|join('-') }}";
    kn_jtmpl *t;
    CHECK(kn_jinja_parse(src, strlen(src), &t) == KILN_OK);
    json_error_t err;
    json_t *ctx = json_loads("{\"messages\": [{\"content\": \"x\"}, {\"content\": \"y\"}]}", 0, &err);
    thread_arg args[2] = {{t, ctx, NULL, 0}, {t, ctx, NULL, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, render_many, &args[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    int ok = args[0].bad == 0 && args[1].bad == 0 && args[0].first && strcmp(args[0].first, "litXlitY2a-b") == 0 &&
             args[1].first && strcmp(args[1].first, args[0].first) == 0;
    free(args[0].first);
    free(args[1].first);
    json_decref(ctx);
    kn_jinja_free(t);
    CHECK(ok);
}

/* ---- fuzzing --------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* The real templates (malloc'd contents); returns the count. */
static int load_templates(char **texts, size_t *lens, int cap) {
    const char *dir = kt_data("chat-templates/llama.cpp");
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) && n < cap) {
        size_t k = strlen(e->d_name);
        if (k < 7 || strcmp(e->d_name + k - 6, ".jinja") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if ((texts[n] = kt_read_file(path, &lens[n]))) n++;
    }
    closedir(d);
    return n;
}

/* A status a render may end with; anything else (or a crash) is a bug. */
static int acceptable(kiln_status st) {
    if (st == KILN_OK) return 1;
    if (st != KILN_ERR_FORMAT && st != KILN_ERR_INVALID_ARG) return 0;
    return kiln_last_error()[0] != 0;
}

static const char *FUZZ_CTX =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"abcdefghi\", \"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, {\"role\": \"tool\", \"tool_call_id\": "
    "\"abcdefghi\","
    " \"content\": \"r\"}, {\"role\": \"user\", \"content\": \"again\"}], \"tools\": [{\"type\": \"function\", "
    "\"function\":"
    " {\"name\": \"f\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": "
    "{\"type\":"
    " \"integer\", \"description\": \"x\"}}, \"required\": [\"a\"]}}}], \"bos_token\": \"<s>\", \"eos_token\": "
    "\"</s>\","
    " \"add_generation_prompt\": true}";

static void test_fuzz_truncated(void) {
    char *texts[32];
    size_t lens[32];
    int n = load_templates(texts, lens, 32);
    if (!n) SKIP("no templates under %s", kt_data("chat-templates/llama.cpp"));
    int bad = 0, renders = 0;
    for (int k = 0; k < n; k++) {
        size_t stride = lens[k] / 400 + 1;
        for (size_t cut = 0; cut <= lens[k]; cut += stride) {
            char *out = NULL;
            size_t len;
            kiln_status st = kiln_template_render(texts[k], cut, FUZZ_CTX, strlen(FUZZ_CTX), &out, &len);
            renders++;
            if (!acceptable(st)) {
                bad++;
                printf("  truncated at %zu: status %d\n", cut, st);
            }
            kiln_free(out);
        }
        free(texts[k]);
    }
    printf("  %d renders of truncated templates\n", renders);
    CHECK(bad == 0);
}

static void test_fuzz_mutated(void) {
    char *texts[32];
    size_t lens[32];
    int n = load_templates(texts, lens, 32);
    if (!n) SKIP("no templates");
    static const char pieces[][8] = {"{{",   "}}", "{%", "%}", "{#", "#}", "-",   "+",  "(",  ")",
                                     "[",    "]",  "'",  "\"", "\\", "|",  ".",   "\n", " ",  "\xff",
                                     "\xc3", "0",  "~",  "*",  "**", "is", "not", "if", "for"};
    int bad = 0, renders = 0;
    for (int k = 0; k < n; k++) {
        char *buf = malloc(lens[k] + 64);
        for (int iter = 0; iter < 150; iter++) {
            memcpy(buf, texts[k], lens[k]);
            size_t len = lens[k];
            int edits = 1 + (int)(rnd() % 4);
            for (int e = 0; e < edits && len > 0; e++) {
                size_t at = rnd() % len;
                switch (rnd() % 3) {
                    case 0: buf[at] = (char)(rnd() & 0xff); break;
                    case 1:
                        memmove(buf + at, buf + at + 1, len - at - 1);
                        len--;
                        break;
                    default: {
                        const char *p = pieces[rnd() % KN_ARRAY_LEN(pieces)];
                        size_t pl = strlen(p);
                        if (len + pl > lens[k] + 60) break;
                        memmove(buf + at + pl, buf + at, len - at);
                        memcpy(buf + at, p, pl);
                        len += pl;
                    }
                }
            }
            char *out = NULL;
            size_t olen;
            kiln_status st = kiln_template_render(buf, len, FUZZ_CTX, strlen(FUZZ_CTX), &out, &olen);
            renders++;
            if (!acceptable(st)) {
                bad++;
                printf("  mutation %d of template %d: status %d\n", iter, k, st);
            }
            kiln_free(out);
        }
        free(buf);
        free(texts[k]);
    }
    printf("  %d renders of mutated templates\n", renders);
    CHECK(bad == 0);
}

/* Appends a random JSON value of bounded depth. */
static void rand_json(char *b, size_t *n, size_t cap, int depth) {
    static const char *const strs[] = {"\"user\"",
                                       "\"assistant\"",
                                       "\"system\"",
                                       "\"tool\"",
                                       "\"\"",
                                       "\"x y\"",
                                       "\"\\u00e9\\ud83d\\ude42\"",
                                       "\"<think>a</think>b\"",
                                       "\"function\"",
                                       "\"  \\n \"",
                                       "\"abcdefghi\"",
                                       "\"text\""};
    static const char *const keys[] = {"role",      "content",     "tool_calls", "function",   "name",
                                       "arguments", "type",        "id",         "parameters", "properties",
                                       "required",  "description", "text",       "items",      "tool_call_id"};
    if (*n + 256 > cap) {
        *n += (size_t)snprintf(b + *n, cap - *n, "0");
        return;
    }
    int k = (int)(rnd() % (depth > 4 ? 6 : 9));
    switch (k) {
        case 0: *n += (size_t)snprintf(b + *n, cap - *n, "null"); break;
        case 1: *n += (size_t)snprintf(b + *n, cap - *n, rnd() & 1 ? "true" : "false"); break;
        case 2: *n += (size_t)snprintf(b + *n, cap - *n, "%d", (int)(rnd() % 2001) - 1000); break;
        case 3: *n += (size_t)snprintf(b + *n, cap - *n, "%g", (double)(rnd() % 100000) / 7.0); break;
        case 4:
        case 5: *n += (size_t)snprintf(b + *n, cap - *n, "%s", strs[rnd() % KN_ARRAY_LEN(strs)]); break;
        case 6: {
            int m = (int)(rnd() % 4);
            b[(*n)++] = '[';
            for (int i = 0; i < m; i++) {
                if (i) b[(*n)++] = ',';
                rand_json(b, n, cap, depth + 1);
            }
            b[(*n)++] = ']';
            break;
        }
        default: {
            int m = (int)(rnd() % 5);
            b[(*n)++] = '{';
            for (int i = 0; i < m; i++) {
                if (i) b[(*n)++] = ',';
                *n += (size_t)snprintf(b + *n, cap - *n, "\"%s%s\":", keys[rnd() % KN_ARRAY_LEN(keys)], i ? "" : "");
                rand_json(b, n, cap, depth + 1);
            }
            b[(*n)++] = '}';
        }
    }
}

static void test_fuzz_contexts(void) {
    char *texts[32];
    size_t lens[32];
    int n = load_templates(texts, lens, 32);
    if (!n) SKIP("no templates");
    size_t cap = 1 << 16;
    char *ctx = malloc(cap);
    int bad = 0, renders = 0, ok = 0;
    for (int iter = 0; iter < 120; iter++) {
        size_t m = 0;
        m += (size_t)snprintf(ctx, cap, "{\"messages\": [");
        int nm = (int)(rnd() % 5);
        for (int i = 0; i < nm; i++) {
            if (i) ctx[m++] = ',';
            if (rnd() % 4) {
                static const char *const roles[] = {"user", "assistant", "system", "tool"};
                m += (size_t)snprintf(ctx + m, cap - m, "{\"role\": \"%s\", \"content\": ", roles[rnd() % 4]);
                rand_json(ctx, &m, cap - 64, 2);
                if (rnd() % 3 == 0) {
                    m += (size_t)snprintf(ctx + m, cap - m, ", \"tool_calls\": ");
                    rand_json(ctx, &m, cap - 64, 1);
                }
                ctx[m++] = '}';
            } else {
                rand_json(ctx, &m, cap - 64, 1);
            }
        }
        m += (size_t)snprintf(ctx + m, cap - m, "], \"tools\": ");
        rand_json(ctx, &m, cap - 64, 1);
        m += (size_t)snprintf(ctx + m, cap - m, ", \"add_generation_prompt\": %s, \"bos_token\": \"<s>\"}",
                              rnd() & 1 ? "true" : "false");
        for (int k = 0; k < n; k++) {
            char *out = NULL;
            size_t olen;
            kiln_status st = kiln_template_render(texts[k], lens[k], ctx, m, &out, &olen);
            renders++;
            ok += st == KILN_OK;
            if (!acceptable(st)) {
                bad++;
                printf("  context %d template %d: status %d: %.200s\n", iter, k, st, ctx);
            }
            kiln_free(out);
        }
    }
    for (int k = 0; k < n; k++) free(texts[k]);
    free(ctx);
    printf("  %d renders with random contexts, %d rendered\n", renders, ok);
    CHECK(bad == 0);
}

int main(void) {
    RUN(test_literals);
    RUN(test_expressions);
    RUN(test_statements);
    RUN(test_filters);
    RUN(test_tests);
    RUN(test_methods);
    RUN(test_whitespace);
    RUN(test_tojson);
    RUN(test_undefined);
    RUN(test_sandbox);
    RUN(test_strftime_now);
    RUN(test_syntax_errors);
    RUN(test_unknown_filter_and_test);
    RUN(test_runtime_errors);
    RUN(test_nesting_limits);
    RUN(test_recursion_limits);
    RUN(test_size_limits);
    RUN(test_char_values);
    RUN(test_failed_string);
    RUN(test_long_inputs);
    RUN(test_bad_context);
    RUN(test_chat_apply);
    RUN(test_threads);
    RUN(test_fuzz_truncated);
    RUN(test_fuzz_mutated);
    RUN(test_fuzz_contexts);
    return kt_summary();
}

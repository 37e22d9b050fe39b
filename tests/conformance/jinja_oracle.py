#!/usr/bin/env python3
"""jinja_oracle.py - the reference renderer for kiln's chat-template conformance tests.

Renders Jinja2 chat templates exactly the way Hugging Face's apply_chat_template does:
jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[jinja2.ext.loopcontrols]), with the globals raise_exception(msg) and strftime_now(fmt)
and the filter tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) =
json.dumps with those arguments. "Now" comes from SOURCE_DATE_EPOCH (UTC) when it is set, local
time otherwise, so that both renderers see the same date.

Usage:
  jinja_oracle.py TEMPLATE CONTEXT              render one pair to stdout (exit 1 and a message on
                                                stderr when the template raises)
  jinja_oracle.py --batch OUTDIR TEMPLATE... -- CONTEXT...
                                                render every pair; writes OUTDIR/T__C.out with the
                                                output, or OUTDIR/T__C.raised with the exception
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt):
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        now = datetime.datetime.fromtimestamp(int(epoch), tz=datetime.timezone.utc)
    else:
        now = datetime.datetime.now()
    return now.strftime(fmt)


def make_env():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def read(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def render(env, template_text, context):
    return env.from_string(template_text).render(**context)


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def main(argv):
    env = make_env()
    if len(argv) >= 2 and argv[0] == "--batch":
        outdir = argv[1]
        rest = argv[2:]
        if "--" not in rest:
            print("jinja_oracle.py: --batch needs -- between templates and contexts", file=sys.stderr)
            return 2
        cut = rest.index("--")
        templates, contexts = rest[:cut], rest[cut + 1:]
        ctx_data = [(stem(c), json.loads(read(c))) for c in contexts]
        for t in templates:
            # compiled once for every context (compiling is most of the oracle's time); a template
            # that does not compile raises for each context, as a render of it would
            try:
                tmpl, err = env.from_string(read(t)), None
            except Exception as e:
                tmpl, err = None, e
            for cname, ctx in ctx_data:
                base = os.path.join(outdir, stem(t) + "__" + cname)
                try:
                    if err is not None:
                        raise err
                    out = tmpl.render(**ctx)
                except Exception as e:  # any exception is a "raised" result
                    with open(base + ".raised", "w", encoding="utf-8") as f:
                        f.write("%s: %s\n" % (type(e).__name__, e))
                    continue
                with open(base + ".out", "w", encoding="utf-8", newline="") as f:
                    f.write(out)
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        out = render(env, read(argv[0]), json.loads(read(argv[1])))
    except Exception as e:
        print("%s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

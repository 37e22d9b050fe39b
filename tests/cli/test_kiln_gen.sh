# test_kiln_gen.sh - kiln-gen --tokenizer-json: a GGUF tokenizer from a Hugging Face tokenizer.json
# (byte-level BPE), vocabulary-only or under a synthetic model, read back by kiln's tokenizer.
. tests/cli/lib.sh
GEN="$BUILD/kiln-gen"
if ! command -v node >/dev/null 2>&1; then skip kiln_gen_tokenizer_json "no node to write the test files"; exit 0; fi

# A small byte-level BPE tokenizer: the 256 byte characters of GPT-2's map (id = byte value), five
# merges (he, ll, hell, hello, Ġw), an added control token and a non-special added token.
# $1: merges as "a b" strings or as pairs; $2: the pre-tokenizer regex; $3: model type.
write_tokenizer() {
  node -e '
    const [form, re, type, out] = process.argv.slice(1);
    const keep = b => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const vocab = {};
    let n = 0;
    for (let b = 0; b < 256; b++) vocab[String.fromCodePoint(keep(b) ? b : 256 + n++)] = b;
    const merges = [["h", "e"], ["l", "l"], ["he", "ll"], ["hell", "o"], ["\u0120", "w"]];
    merges.forEach((m, i) => (vocab[m[0] + m[1]] = 256 + i));
    const tj = {
      version: "1.0",
      added_tokens: [
        { id: 261, content: "<|end|>", special: true },
        { id: 262, content: "<think>", special: false },
      ],
      normalizer: null,
      pre_tokenizer: { type: "Sequence", pretokenizers: [
        { type: "Split", pattern: { Regex: re }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false } ] },
      decoder: { type: "ByteLevel" },
      model: { type, vocab, merges: form === "pairs" ? merges : merges.map(m => m.join(" ")) },
    };
    require("fs").writeFileSync(out, JSON.stringify(tj));
  ' "$1" "$2" "$3" "$4"
}
QWEN2_RE="(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
mkdir -p "$TMP/pairs" "$TMP/strings" "$TMP/other" "$TMP/wp"
write_tokenizer pairs "$QWEN2_RE" BPE "$TMP/pairs/tokenizer.json"
write_tokenizer strings "$QWEN2_RE" BPE "$TMP/strings/tokenizer.json"
write_tokenizer pairs "\\w+|\\s" BPE "$TMP/other/tokenizer.json"
write_tokenizer pairs "$QWEN2_RE" WordPiece "$TMP/wp/tokenizer.json"
printf '{"eos_token": "<|end|>", "bos_token": null, "add_bos_token": false, "model_max_length": 1e30}' \
  >"$TMP/pairs/tokenizer_config.json"

ids() { "$KILN" tokenize -m "$1" -p "$2" --ids --no-bos 2>&1; }
expect_exit kiln_gen_tokjson_pairs 0 "$GEN" --tokenizer-json "$TMP/pairs/tokenizer.json" -o "$TMP/pairs.gguf"
expect_exit kiln_gen_tokjson_strings 0 "$GEN" --tokenizer-json "$TMP/strings/tokenizer.json" -o "$TMP/strings.gguf"
for f in pairs strings; do
  out=$(ids "$TMP/$f.gguf" "hello wx hi")
  [ "$out" = "259 260 120 32 104 105" ] && pass "kiln_gen_tokjson_merges_$f" || fail "kiln_gen_tokjson_merges_$f" "$out"
done
out=$(ids "$TMP/pairs.gguf" "a<think>b")
[ "$out" = "97 262 98" ] && pass kiln_gen_tokjson_added_token || fail kiln_gen_tokjson_added_token "$out"
# the EOS from tokenizer_config.json is a control token: no text, and not parsed from plain text
out=$("$KILN" tokenize -m "$TMP/pairs.gguf" -p "<|end|>" --ids --no-bos --parse-special 2>&1)
[ "$out" = "261" ] && pass kiln_gen_tokjson_control_token || fail kiln_gen_tokjson_control_token "$out"
# an unknown pre-tokenizer needs --pre
expect_exit kiln_gen_tokjson_unknown_pre 1 "$GEN" --tokenizer-json "$TMP/other/tokenizer.json" -o "$TMP/x.gguf"
grep -q -- "--pre" "$TMP/err" && pass kiln_gen_tokjson_unknown_pre_message || fail kiln_gen_tokjson_unknown_pre_message "$(cat "$TMP/err")"
expect_exit kiln_gen_tokjson_given_pre 0 "$GEN" --tokenizer-json "$TMP/other/tokenizer.json" --pre llama-bpe -o "$TMP/o.gguf"
expect_exit kiln_gen_tokjson_not_bpe 1 "$GEN" --tokenizer-json "$TMP/wp/tokenizer.json" -o "$TMP/x.gguf"
printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "decoder": {"type": "ByteLevel"}}' >"$TMP/nobytes.json"
expect_exit kiln_gen_tokjson_missing_bytes 1 "$GEN" --tokenizer-json "$TMP/nobytes.json" -o "$TMP/x.gguf"
expect_exit kiln_gen_tokjson_missing_file 1 "$GEN" --tokenizer-json "$TMP/none.json" -o "$TMP/x.gguf"
# padded to --vocab, and under a synthetic model (whose vocab must hold the tokenizer)
expect_exit kiln_gen_tokjson_padded 0 "$GEN" --tokenizer-json "$TMP/pairs/tokenizer.json" --vocab 300 -o "$TMP/pad.gguf"
out=$(ids "$TMP/pad.gguf" "hello")
[ "$out" = "259" ] && pass kiln_gen_tokjson_padded_tokenizes || fail kiln_gen_tokjson_padded_tokenizes "$out"
expect_exit kiln_gen_tokjson_vocab_too_small 1 "$GEN" --tokenizer-json "$TMP/pairs/tokenizer.json" --vocab 100 -o "$TMP/x.gguf"
expect_exit kiln_gen_tokjson_model 0 "$GEN" --preset tiny-llama --tokenizer-json "$TMP/pairs/tokenizer.json" -o "$TMP/m.gguf"
expect_exit kiln_gen_tokjson_model_runs 0 "$KILN" run -m "$TMP/m.gguf" -p "hello" -n 4 --seed 1
expect_exit kiln_gen_tokjson_model_vocab_small 1 "$GEN" --preset tiny-llama --vocab 200 --tokenizer-json "$TMP/pairs/tokenizer.json" -o "$TMP/x.gguf"

# mixture of experts: the arch flags, the expert tensors as 3-D tensors, and the errors
expect_exit kiln_gen_moe_needs_experts 1 "$GEN" --arch qwen3moe --vocab 512 --dim 64 --layers 1 --heads 2 --ffn 64 -o "$TMP/x.gguf"
expect_exit kiln_gen_moe_used_over_experts 1 "$GEN" --preset tiny-mixtral --experts 4 --experts-used 5 -o "$TMP/x.gguf"
expect_exit kiln_gen_moe_qwen2 1 "$GEN" --preset tiny-qwen2 --experts 4 --experts-used 2 -o "$TMP/x.gguf"
expect_exit kiln_gen_moe_mixtral_flags 0 "$GEN" --arch llama --vocab 512 --dim 64 --layers 1 --heads 2 --ffn 64 \
  --experts 4 --experts-used 2 --type F32 -o "$TMP/mx.gguf"
expect_exit kiln_gen_moe_mixtral_runs 0 "$KILN" run -m "$TMP/mx.gguf" -p "hello" -n 4 --seed 1
expect_exit kiln_gen_moe_gptoss_fast 0 "$GEN" --preset tiny-gptoss --fast --type Q8_0 -o "$TMP/go.gguf"
expect_exit kiln_gen_moe_gptoss_runs 0 "$KILN" run -m "$TMP/go.gguf" -p "hello" -n 4 --seed 1
# the gpt-oss presets write the experts in MXFP4 (4.25 bits a weight) unless --expert-type says otherwise
expect_exit kiln_gen_moe_expert_type_unknown 1 "$GEN" --preset tiny-gptoss --expert-type Q9 -o "$TMP/x.gguf"
"$GEN" --preset tiny-gptoss --seed 3 -o "$TMP/g4.gguf" >/dev/null 2>&1
"$GEN" --preset tiny-gptoss --seed 3 --expert-type Q8_0 -o "$TMP/g8.gguf" >/dev/null 2>&1
s4=$(wc -c <"$TMP/g4.gguf" 2>/dev/null || echo 0); s8=$(wc -c <"$TMP/g8.gguf" 2>/dev/null || echo 0)
# 2 layers x 3 matrices x 8 experts x 256 x 256 weights: MXFP4 saves 4.25 bits of Q8_0's 8.5 on each
if [ "$s4" -gt 0 ] && [ $((s8 - s4)) -ge 1600000 ]; then pass kiln_gen_gptoss_mxfp4_experts
else fail kiln_gen_gptoss_mxfp4_experts "sizes $s4 (default) and $s8 (Q8_0 experts)"; fi

# --type Q4_K_M: Q4_K with Q6_K where llama.cpp's quantizer puts it: the output matrix (the token
# embedding when tied) and attn_v / ffn_down of layers 0-1, 14-15 and every third between (4, 7, 10, 13
# of 16 layers)
q4km() { "$GEN" --arch llama --vocab 512 --dim 256 --layers 16 --heads 4 --ffn 512 --type Q4_K_M "$@" >/dev/null 2>&1; }
q4km --tied -o "$TMP/km.gguf"
info=$("$KILN" inspect "$TMP/km.gguf" 2>&1)
six=$(printf '%s\n' "$info" | awk '$2 == "Q6_K" {print $1}' | sed -E 's/^blk\.([0-9]+)\.(attn_v|ffn_down)\.weight$/\1\2/' | tr '\n' ' ')
want="token_embd.weight 0attn_v 0ffn_down 1attn_v 1ffn_down 4attn_v 4ffn_down 7attn_v 7ffn_down 10attn_v 10ffn_down 13attn_v 13ffn_down 14attn_v 14ffn_down 15attn_v 15ffn_down "
[ "$six" = "$want" ] && pass kiln_gen_q4_k_m_layers || fail kiln_gen_q4_k_m_layers "$six"
printf '%s\n' "$info" | grep -q "general.file_type = 15" && pass kiln_gen_q4_k_m_file_type || fail kiln_gen_q4_k_m_file_type "$(printf '%s\n' "$info" | grep file_type)"
q4km --untied -o "$TMP/kmu.gguf"
out=$("$KILN" inspect "$TMP/kmu.gguf" 2>&1 | awk '$1 == "output.weight" || $1 == "token_embd.weight" {print $1, $2}' | tr '\n' ' ')
[ "$out" = "token_embd.weight Q4_K output.weight Q6_K " ] && pass kiln_gen_q4_k_m_untied || fail kiln_gen_q4_k_m_untied "$out"
expect_exit kiln_gen_q4_k_m_runs 0 "$KILN" run -m "$TMP/kmu.gguf" -p "hello" -n 4 --seed 1
# --type Q5_K_M: the same Q6_K matrices, Q5_K for the rest, file type 17
"$GEN" --arch llama --vocab 512 --dim 256 --layers 16 --heads 4 --ffn 512 --type Q5_K_M --tied \
  -o "$TMP/k5.gguf" >/dev/null 2>&1
info=$("$KILN" inspect "$TMP/k5.gguf" 2>&1)
six=$(printf '%s\n' "$info" | awk '$2 == "Q6_K" {print $1}' | sed -E 's/^blk\.([0-9]+)\.(attn_v|ffn_down)\.weight$/\1\2/' | tr '\n' ' ')
five=$(printf '%s\n' "$info" | awk '$2 == "Q5_K"' | wc -l)
[ "$six" = "$want" ] && [ "$five" -eq $((16 * 7 - 16)) ] && pass kiln_gen_q5_k_m_layers ||
  fail kiln_gen_q5_k_m_layers "Q6_K: $six; $five Q5_K matrices"
printf '%s\n' "$info" | grep -q "general.file_type = 17" && pass kiln_gen_q5_k_m_file_type || fail kiln_gen_q5_k_m_file_type "$(printf '%s\n' "$info" | grep file_type)"
expect_exit kiln_gen_q5_k_m_runs 0 "$KILN" run -m "$TMP/k5.gguf" -p "hello" -n 4 --seed 1
# a fused attn_qkv (phi3) one step up: Q5_K in Q4_K_M, Q6_K in Q5_K_M
"$GEN" --arch phi3 --vocab 512 --dim 256 --layers 2 --heads 4 --ffn 512 --type Q4_K_M -o "$TMP/p4.gguf" >/dev/null 2>&1
"$GEN" --arch phi3 --vocab 512 --dim 256 --layers 2 --heads 4 --ffn 512 --type Q5_K_M -o "$TMP/p5.gguf" >/dev/null 2>&1
out=$( ("$KILN" inspect "$TMP/p4.gguf"; "$KILN" inspect "$TMP/p5.gguf") 2>&1 | awk '$1 ~ /attn_qkv/ {print $2}' | tr '\n' ' ')
[ "$out" = "Q5_K Q5_K Q6_K Q6_K " ] && pass kiln_gen_k_m_fused_qkv || fail kiln_gen_k_m_fused_qkv "$out"
# the experts follow the same rule (ffn_down_exps of layers 0, 3, 6 and 7 of 8)
"$GEN" --arch qwen3moe --vocab 512 --dim 256 --layers 8 --heads 4 --ffn 256 --experts 4 --experts-used 2 \
  --type Q4_K_M -o "$TMP/kme.gguf" >/dev/null 2>&1
out=$("$KILN" inspect "$TMP/kme.gguf" 2>&1 | awk '$2 == "Q6_K" && $1 ~ /exps/ {print $1}' | tr '\n' ' ')
want="blk.0.ffn_down_exps.weight blk.3.ffn_down_exps.weight blk.6.ffn_down_exps.weight blk.7.ffn_down_exps.weight "
[ "$out" = "$want" ] && pass kiln_gen_q4_k_m_experts || fail kiln_gen_q4_k_m_experts "$out"

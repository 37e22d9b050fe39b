# test_hf.sh - Hugging Face / MLX model directories end to end: stories260K converted by kiln-hf to an
# F32 directory gives exactly the GGUF's greedy text; its MLX 8-bit, 6-bit and 4-bit copies give perplexity
# within 1%, 2% and 5% of the F32 copy's; `kiln inspect` on GGUF, safetensors and MLX (format, config,
# tensor table, --dequant bytes equal to the GGUF's for the same tensor); bad directories exit 1 with
# a message naming the file.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
HF="$BUILD/kiln-hf"
if [ ! -f "$M" ]; then skip hf_dirs "no $M"; exit 0; fi
if [ ! -x "$HF" ]; then skip hf_dirs "no $HF"; exit 0; fi

"$HF" "$M" "$TMP/f32" 2>"$TMP/conv.err" && pass hf_convert_f32 || fail hf_convert_f32 "$(cat "$TMP/conv.err")"
"$HF" "$M" "$TMP/mlx8" --mlx-bits 8 --mlx-group 32 2>/dev/null && pass hf_convert_mlx8 || fail hf_convert_mlx8
"$HF" "$M" "$TMP/mlx4" --mlx-bits 4 --mlx-group 32 --mlx-layer model.layers.0.mlp.up_proj=8 2>/dev/null &&
  pass hf_convert_mlx4 || fail hf_convert_mlx4
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
  [ -s "$TMP/f32/$f" ] || fail hf_convert_files "no $f"
done

# inspect: formats, config, tensor table
"$KILN" inspect "$M" >"$TMP/i.gguf" 2>&1 && grep -q "^format: gguf" "$TMP/i.gguf" &&
  grep -q "llama.embedding_length = 64" "$TMP/i.gguf" && grep -q "blk.0.attn_q.weight" "$TMP/i.gguf" &&
  pass inspect_gguf || fail inspect_gguf "$(head -c 300 "$TMP/i.gguf")"
"$KILN" inspect "$TMP/f32" >"$TMP/i.st" 2>&1 && grep -q "^format: safetensors" "$TMP/i.st" &&
  grep -q "hidden_size = 64" "$TMP/i.st" && grep -q "model.layers.0.self_attn.q_proj.weight *F32 *\[64, 64\]" "$TMP/i.st" &&
  pass inspect_safetensors || fail inspect_safetensors "$(head -c 600 "$TMP/i.st")"
"$KILN" inspect "$TMP/mlx4" >"$TMP/i.mlx" 2>&1 && grep -q "^format: mlx" "$TMP/i.mlx" &&
  grep -q "model.layers.1.mlp.up_proj.weight *U32.*MLX 4-bit, group 32" "$TMP/i.mlx" &&
  grep -q "model.layers.0.mlp.up_proj.weight *U32.*MLX 8-bit, group 32" "$TMP/i.mlx" &&
  pass inspect_mlx || fail inspect_mlx "$(grep mlp "$TMP/i.mlx" | head -5)"
# --dequant: the same values byte for byte (the norm needs no permutation)
"$KILN" inspect "$M" --tensor output_norm.weight --dequant >"$TMP/a.bin" 2>"$TMP/a.err"
"$KILN" inspect "$TMP/f32" --tensor model.norm.weight --dequant >"$TMP/b.bin" 2>"$TMP/b.err"
if [ -s "$TMP/a.bin" ] && [ "$(wc -c <"$TMP/a.bin")" -eq 256 ] && cmp -s "$TMP/a.bin" "$TMP/b.bin"; then
  pass inspect_dequant_same_bytes; else fail inspect_dequant_same_bytes "$(cat "$TMP/a.err" "$TMP/b.err")"; fi
"$KILN" inspect "$M" --tensor token_embd.weight --dequant >"$TMP/e1.bin" 2>/dev/null
"$KILN" inspect "$TMP/f32" --tensor model.embed_tokens.weight --dequant >"$TMP/e2.bin" 2>/dev/null
cmp -s "$TMP/e1.bin" "$TMP/e2.bin" && [ "$(wc -c <"$TMP/e1.bin")" -eq $((512 * 64 * 4)) ] &&
  pass inspect_dequant_embeddings || fail inspect_dequant_embeddings
# an MLX weight: scale * q + bias, checked against a reference computed here from the raw file
"$KILN" inspect "$TMP/mlx4" --tensor model.layers.1.mlp.up_proj.weight --dequant >"$TMP/q.bin" 2>"$TMP/q.err"
if command -v python3 >/dev/null 2>&1; then
  python3 - "$TMP/mlx4/model.safetensors" "$TMP/q.bin" <<'PY' && pass inspect_dequant_mlx_reference || fail inspect_dequant_mlx_reference
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); base = 8 + n
def get(name):
    e = h[name]; b, e2 = e["data_offsets"]; return e, raw[base + b:base + e2]
w, wb = get("model.layers.1.mlp.up_proj.weight")
s, sb = get("model.layers.1.mlp.up_proj.scales")
bi, bb = get("model.layers.1.mlp.up_proj.biases")
rows, words = w["shape"]; cols = words * 8; g = 32
sc = struct.unpack("<%de" % (len(sb) // 2), sb); bs = struct.unpack("<%de" % (len(bb) // 2), bb)
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
out = []
for r in range(rows):
    for j in range(cols):
        word = struct.unpack_from("<I", wb, (r * words + j // 8) * 4)[0]
        q = (word >> (4 * (j % 8))) & 15
        k = r * (cols // g) + j // g
        out.append(f32(f32(f32(sc[k]) * q) + f32(bs[k])))
got = open(sys.argv[2], "rb").read()
sys.exit(0 if got == struct.pack("<%df" % len(out), *out) else 1)
PY
else skip inspect_dequant_mlx_reference "no python3"; fi
expect_exit inspect_no_tensor 1 "$KILN" inspect "$TMP/f32" --tensor nope
expect_exit inspect_no_model 2 "$KILN" inspect
expect_exit inspect_dequant_needs_tensor 2 "$KILN" inspect "$M" --dequant

# loading: the tokenizer comes from tokenizer.json
"$KILN" run -m "$TMP/f32" -p "Once upon a time" -n 64 --temp 0 >"$TMP/hf.txt" 2>"$TMP/hf.err"
if true; then
  "$KILN" run -m "$M" -p "Once upon a time" -n 64 --temp 0 >"$TMP/gguf.txt" 2>/dev/null
  if [ -s "$TMP/gguf.txt" ] && cmp -s "$TMP/gguf.txt" "$TMP/hf.txt"; then pass hf_greedy_equals_gguf; else
    fail hf_greedy_equals_gguf "$(head -c 300 "$TMP/hf.err")"; echo "  gguf: $(head -c 200 "$TMP/gguf.txt")"
    echo "  hf:   $(head -c 200 "$TMP/hf.txt")"; fi
  # perplexity of the MLX copies against the F32 copy
  # a short story in the style of the model's training text (written for this test)
  cat >"$TMP/text.txt" <<'STORY'
Once upon a time, there was a little dog named Max. Max liked to run in the big green park near his house. Every day he played with a red ball and a small stick. One sunny morning, Max saw a cat sitting under a tall tree. The cat was sad because she lost her toy. Max wanted to help her. He looked behind the bench and under the slide. At last he found a little blue mouse made of cloth. He gave it to the cat and she was very happy. "Thank you, Max!" said the cat. From that day on, Max and the cat were best friends. They played together in the park and shared their toys.
One day, a girl named Sue went to the store with her mom. She wanted to buy a big cake for her brother. The cake had pink flowers on top. Sue was careful not to drop it. When they got home, her brother smiled and gave her a hug. They ate the cake together and laughed all day.
Tim had a toy boat. He liked to play with it in the bath. One day, the boat fell on the floor and broke. Tim was sad and started to cry. His dad came and said, "Don't worry, we can fix it." They used glue to fix the boat. Soon the boat was as good as new. Tim learned that it is good to ask for help when something goes wrong.
STORY
  ppl() { "$KILN" perplexity -m "$1" -f "$TMP/text.txt" -c 64 2>/dev/null | sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p'; }
  P32=$(ppl "$TMP/f32"); P8=$(ppl "$TMP/mlx8"); P4=$(ppl "$TMP/mlx4")
  within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= t) }'; }
  within "$P8" "$P32" 0.01 && pass hf_mlx8_perplexity || fail hf_mlx8_perplexity "f32 $P32, mlx8 $P8"
  within "$P4" "$P32" 0.05 && pass hf_mlx4_perplexity || fail hf_mlx4_perplexity "f32 $P32, mlx4 $P4"
  # a 6-bit copy runs as MLX8 blocks (exact, a byte per value) within 2% of F32
  "$HF" "$M" "$TMP/mlx6" --mlx-bits 6 --mlx-group 64 2>/dev/null
  "$KILN" run -m "$TMP/mlx6" -p "Once" -n 1 --temp 0 -v >/dev/null 2>"$TMP/mlx6.err"
  grep -q "MLX8" "$TMP/mlx6.err" && pass hf_mlx6_type || fail hf_mlx6_type "$(grep -i "llama" "$TMP/mlx6.err" | head -3)"
  P6=$(ppl "$TMP/mlx6")
  within "$P6" "$P32" 0.02 && pass hf_mlx6_perplexity || fail hf_mlx6_perplexity "f32 $P32, mlx6 $P6"
  # a synthetic model of each family: the converted directory generates the GGUF's greedy text
  if [ -x "$BUILD/kiln-gen" ]; then
    for p in tiny-llama-plain tiny-qwen2 tiny-qwen3 tiny-gemma3 tiny-phi3 tiny-qwen3moe tiny-gptoss; do
      "$BUILD/kiln-gen" --preset $p --type f32 -o "$TMP/$p.gguf" >/dev/null 2>&1 &&
        "$HF" "$TMP/$p.gguf" "$TMP/$p" 2>/dev/null || { fail hf_family_$p "conversion failed"; continue; }
      "$KILN" run -m "$TMP/$p.gguf" -p "hello world" -n 24 --temp 0 --ignore-eos >"$TMP/g.txt" 2>/dev/null
      "$KILN" run -m "$TMP/$p" -p "hello world" -n 24 --temp 0 --ignore-eos >"$TMP/h.txt" 2>"$TMP/h.err"
      if [ -s "$TMP/g.txt" ] && cmp -s "$TMP/g.txt" "$TMP/h.txt"; then pass hf_family_$p; else
        fail hf_family_$p "$(head -c 300 "$TMP/h.err")"; fi
    done
    # gemma3's query_pre_attn_scalar: head_dim (what the GGUF implies) changes nothing, another value does
    G3="$TMP/tiny-gemma3"
    HD=$(sed -n 's/^ *"head_dim": \([0-9]*\).*/\1/p' "$G3/config.json")
    if [ -n "$HD" ] && [ -s "$TMP/tiny-gemma3.gguf" ]; then
      "$KILN" run -m "$TMP/tiny-gemma3.gguf" -p "hello world" -n 24 --temp 0 --ignore-eos >"$TMP/g.txt" 2>/dev/null
      for v in "$HD" 7; do
        cp -r "$G3" "$TMP/qpas$v"
        sed "s/\"model_type\": \"gemma3_text\",/\"model_type\": \"gemma3_text\", \"query_pre_attn_scalar\": $v,/" \
          "$G3/config.json" >"$TMP/qpas$v/config.json"
        "$KILN" run -m "$TMP/qpas$v" -p "hello world" -n 24 --temp 0 --ignore-eos >"$TMP/q$v.txt" 2>/dev/null
      done
      grep -q query_pre_attn_scalar "$TMP/qpas7/config.json" && cmp -s "$TMP/g.txt" "$TMP/q$HD.txt" &&
        [ -s "$TMP/q7.txt" ] && ! cmp -s "$TMP/g.txt" "$TMP/q7.txt" && pass hf_gemma3_query_pre_attn_scalar ||
        fail hf_gemma3_query_pre_attn_scalar "head_dim $HD"
    else fail hf_gemma3_query_pre_attn_scalar "no head_dim in $G3/config.json"; fi
  else skip hf_families "no kiln-gen"; fi
fi

# generation_config.json's eos_token_id (a list) ends generation: here the id of the story's first name
cp -r "$TMP/f32" "$TMP/geneos"
NAME_ID=$("$KILN" tokenize -m "$TMP/f32" -p "Once upon a time, there was a little girl named Lily" --ids --no-bos 2>/dev/null |
  awk '{ print $NF }')
printf '{"eos_token_id": [2, %s], "do_sample": false}\n' "$NAME_ID" >"$TMP/geneos/generation_config.json"
"$KILN" run -m "$TMP/geneos" -p "Once upon a time" -n 64 --temp 0 >"$TMP/geneos.txt" 2>"$TMP/geneos.err"
if [ -n "$NAME_ID" ] && grep -q "girl named" "$TMP/geneos.txt" && ! grep -q "Lily" "$TMP/geneos.txt" &&
  grep -q "Lily" "$TMP/hf.txt"; then pass hf_generation_eos_ids; else
  fail hf_generation_eos_ids "id '$NAME_ID': $(head -c 300 "$TMP/geneos.txt" "$TMP/geneos.err")"; fi
printf '{"eos_token_id": "two"}\n' >"$TMP/geneos/generation_config.json"
expect_exit hf_generation_eos_bad 1 "$KILN" run -m "$TMP/geneos" -p x -n 1
grep -q "generation_config.json: 'eos_token_id'" "$TMP/err" && pass hf_generation_eos_bad_named ||
  fail hf_generation_eos_bad_named "$(cat "$TMP/err")"
# the 8-bit MLX copy is held as MLX8 blocks (exact), listed as such
"$KILN" run -m "$TMP/mlx8" -p "Once" -n 1 --temp 0 -v >/dev/null 2>"$TMP/mlx8.err"
grep -q "MLX8" "$TMP/mlx8.err" && pass hf_mlx8_type || fail hf_mlx8_type "$(grep -i "llama" "$TMP/mlx8.err" | head -3)"
# ... whose values are MLX's scale * q + bias exactly: the MLX8 blocks written back as F32 by kiln-hf
# dequantize to the bytes `inspect --dequant` computes from the MLX tensors
"$HF" "$TMP/mlx8" "$TMP/mlx8f32" 2>/dev/null
"$KILN" inspect "$TMP/mlx8" --tensor model.layers.0.mlp.up_proj.weight --dequant >"$TMP/m8a.bin" 2>/dev/null
"$KILN" inspect "$TMP/mlx8f32" --tensor model.layers.0.mlp.up_proj.weight --dequant >"$TMP/m8b.bin" 2>/dev/null
[ -s "$TMP/m8a.bin" ] && cmp -s "$TMP/m8a.bin" "$TMP/m8b.bin" && pass hf_mlx8_exact || fail hf_mlx8_exact

# bad directories: exit 1 and name the file
cp -r "$TMP/f32" "$TMP/bad"
rm "$TMP/bad/tokenizer.json"
expect_exit hf_missing_tokenizer 1 "$KILN" run -m "$TMP/bad" -p x -n 1
grep -q "tokenizer.json" "$TMP/err" && pass hf_missing_tokenizer_named || fail hf_missing_tokenizer_named "$(cat "$TMP/err")"
cp "$TMP/f32/tokenizer.json" "$TMP/bad/"
head -c 3000 "$TMP/f32/model.safetensors" >"$TMP/bad/model.safetensors"
expect_exit hf_truncated_weights 1 "$KILN" inspect "$TMP/bad"
grep -q "model.safetensors" "$TMP/err" && pass hf_truncated_named || fail hf_truncated_named "$(cat "$TMP/err")"
sed 's/"model_type": "llama"/"model_type": "nonesuch"/' "$TMP/f32/config.json" >"$TMP/bad/config.json"
cp "$TMP/f32/model.safetensors" "$TMP/bad/"
expect_exit hf_unknown_arch 1 "$KILN" run -m "$TMP/bad" -p x -n 1
grep -q "nonesuch" "$TMP/err" && pass hf_unknown_arch_named || fail hf_unknown_arch_named "$(cat "$TMP/err")"

# A directory in the Hugging Face cache is listed by `kiln ls` with its architecture, parameters and
# type (read from config.json and the safetensors headers, nothing converted), and runs by its name.
C="$TMP/hub/models--local--st260k"
mkdir -p "$C/snapshots/0123abc" "$C/refs" && printf 0123abc >"$C/refs/main" && cp "$TMP/f32"/* "$C/snapshots/0123abc/"
HF_HUB_CACHE="$TMP/hub" "$KILN" ls >"$TMP/ls.txt" 2>&1
grep -E "^local/st260k +llama +[0-9.]+K +F32" "$TMP/ls.txt" >/dev/null && pass hf_dir_listed ||
  fail hf_dir_listed "$(cat "$TMP/ls.txt")"
HF_HUB_CACHE="$TMP/hub" "$KILN" run local/st260k -p "Once" -n 8 --temp 0 >"$TMP/byname.txt" 2>/dev/null
grep -q "Once upon a time" "$TMP/byname.txt" && pass hf_dir_runs_by_name || fail hf_dir_runs_by_name "$(cat "$TMP/byname.txt")"

# Text the tokenizer cannot encode (no byte fallback, an unk_token its vocabulary lacks) is refused as
# Hugging Face's tokenizers refuses it, never dropped from the prompt: `kiln run` exits 1 naming the
# character; the server answers 400 (the text is the client's) on each API and goes on serving.
if ! command -v python3 >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  skip hf_unencodable "python3 and curl are needed"; exit 0; fi
cp -r "$TMP/f32" "$TMP/nounk"
python3 - "$TMP/nounk/tokenizer.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["model"]["byte_fallback"] = False
j["model"]["unk_token"] = "<nope>"
json.dump(j, open(sys.argv[1], "w"))
PY
expect_exit hf_unencodable_run 1 "$KILN" run -m "$TMP/nounk" -p "Once 日" -n 1
grep -q "cannot encode the text at U+65E5" "$TMP/err" && pass hf_unencodable_run_named ||
  fail hf_unencodable_run_named "$(cat "$TMP/err")"
: >"$TMP/s.err"
"$KILN" serve -m "$TMP/nounk" --port 0 --no-open >/dev/null 2>"$TMP/s.err" &
pid=$!
i=0
while [ $i -lt 200 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/s.err"; do sleep 0.1; i=$((i + 1)); done
base="http://127.0.0.1:$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/s.err" | head -n 1)"
# post NAME PATH BODY WANT_STATUS WANT_TEXT: one request, its status and a text of its body checked.
post() {
  c=$(curl -s --max-time 60 -o "$TMP/r.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "$3" "$base$2")
  if [ "$c" = "$4" ] && grep -q "$5" "$TMP/r.json"; then pass "$1"; else fail "$1" "status $c: $(head -c 300 "$TMP/r.json")"; fi
}
post hf_unencodable_tokenize /tokenize '{"content":"Once 日"}' 400 '"param": *"content".*U+65E5\|U+65E5.*"param": *"content"'
post hf_unencodable_chat /v1/chat/completions '{"messages":[{"role":"user","content":"日"}],"max_tokens":2}' 400 \
  'invalid_request_error'
post hf_unencodable_completion /v1/completions '{"prompt":"Once 日","max_tokens":2}' 400 'U+65E5'
post hf_unencodable_anthropic_count /v1/messages/count_tokens '{"model":"nounk","messages":[{"role":"user","content":"日"}]}' \
  400 'invalid_request_error'
post hf_unencodable_then_serves /v1/completions '{"prompt":"Once","max_tokens":2}' 200 '"text"'
kill -TERM $pid; wait $pid

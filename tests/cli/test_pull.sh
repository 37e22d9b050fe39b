# test_pull.sh - kiln pull, kiln rm, kiln ls and -m ORG/NAME:QUANT against a local fake Hugging Face
# Hub (tests/fakehub/server.py on 127.0.0.1, a random port; HF_ENDPOINT points there), with the
# cache in a temporary HF_HUB_CACHE. The hub's repositories are built here: a safetensors model
# (whose weights' first download is cut halfway), a GGUF repository with stories260K as two quants
# (one blob), a split quant and a projector, a gated, a forbidden and a wrong-checksum one, a file
# listed but missing, one listed larger than any disk, an MLX 6-bit one (whose fit counts its weights as
# held in memory), and a slow file for Ctrl-C and for two pulls at once. A file-size limit (ulimit -f) stands for a disk filling up during a download. Nothing leaves
# the loopback interface.
. tests/cli/lib.sh
S="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$S" ]; then skip pull_tests "no $S"; exit 0; fi
if ! command -v python3 >/dev/null 2>&1; then skip pull_tests "python3 is needed"; exit 0; fi

R="$TMP/repos"
C="$TMP/cache"
LOG="$TMP/hub.log"
mkdir -p "$R/acme/tiny/onnx" "$R/acme/tiny/original" "$R/acme/stories-GGUF" "$R/acme/gated-GGUF" "$R/acme/forbidden" \
  "$R/acme/badsum" "$R/acme/holes" "$R/acme/huge" "$R/acme/slow-GGUF" "$TMP/home" "$TMP/empty"
# a safetensors repository (the weights are random bytes: kiln only stores them)
T="$R/acme/tiny"
cat >"$T/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 5,
 "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}
EOF
echo '{"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}' >"$T/tokenizer.json"
echo '{"bos_token": "<s>", "chat_template": "{{ messages }}"}' >"$T/tokenizer_config.json"
echo '{"eos_token_id": 2}' >"$T/generation_config.json"
echo '# tiny' >"$T/README.md"
echo '*.safetensors filter=lfs' >"$T/.gitattributes"
head -c 300000 /dev/urandom >"$T/model.safetensors"
head -c 1000 /dev/urandom >"$T/pytorch_model.bin"
head -c 1000 /dev/urandom >"$T/onnx/model.onnx"
head -c 1000 /dev/urandom >"$T/original/consolidated.00.pth"
echo '{"drop": ["model.safetensors"], "e503": ["tokenizer.json"], "revs": {"v1": "0000000000000000000000000000000000000001"}}' >"$T/_hub.json"
# a GGUF repository: two quants with the same bytes (one blob), a split quant, a projector
G="$R/acme/stories-GGUF"
cp "$S" "$G/stories260K-Q4_0.gguf"
cp "$S" "$G/stories260K-Q8_0.gguf"
if [ -x "$BUILD/kiln-gguf-split" ]; then # a real split model (runs after the pull)
  "$BUILD/kiln-gguf-split" "$S" "$G/stories260K-Q2_K" 2
else
  head -c 5000 /dev/urandom >"$G/stories260K-Q2_K-00001-of-00002.gguf"
  head -c 3000 /dev/urandom >"$G/stories260K-Q2_K-00002-of-00002.gguf"
fi
head -c 2000 /dev/urandom >"$G/mmproj-stories-F16.gguf"
echo '# stories' >"$G/README.md"
cp "$S" "$R/acme/gated-GGUF/g-Q4_0.gguf"
echo '{"token": "sekrit"}' >"$R/acme/gated-GGUF/_hub.json"
cp "$S" "$R/acme/forbidden/f-Q4_0.gguf"
echo '{"gated": true}' >"$R/acme/forbidden/_hub.json"
cp "$S" "$R/acme/badsum/b-Q4_0.gguf"
echo '{"bad_sha": ["b-Q4_0.gguf"]}' >"$R/acme/badsum/_hub.json"
cp "$T/config.json" "$R/acme/holes/config.json"
head -c 1000 /dev/urandom >"$R/acme/holes/model.safetensors"
echo '{"missing": ["model.safetensors"]}' >"$R/acme/holes/_hub.json"
cp "$T/config.json" "$R/acme/huge/config.json"
head -c 1000 /dev/urandom >"$R/acme/huge/model.safetensors"
echo '{"huge": ["model.safetensors"]}' >"$R/acme/huge/_hub.json"
# an MLX 6-bit repository: its weights take 9 / (6 + 32 / 64) of the files' bytes in memory (MLX8 blocks)
mkdir -p "$R/acme/mlx6"
sed 's/"torch_dtype"/"quantization": {"group_size": 64, "bits": 6}, "torch_dtype"/' "$T/config.json" >"$R/acme/mlx6/config.json"
head -c 650000 /dev/urandom >"$R/acme/mlx6/model.safetensors"
head -c 6000000 /dev/urandom >"$R/acme/slow-GGUF/slow-Q4_0.gguf"
echo '{"slow": ["slow-Q4_0.gguf"]}' >"$R/acme/slow-GGUF/_hub.json"

python3 tests/fakehub/server.py "$R" "$TMP/port" "$LOG" 2>"$TMP/hub.err" &
HUBPID=$!
trap 'kill $HUBPID 2>/dev/null; rm -rf "$TMP"' EXIT
i=0
while [ ! -s "$TMP/port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if [ ! -s "$TMP/port" ]; then fail pull_fakehub_starts "$(cat "$TMP/hub.err")"; exit 0; fi
EP="http://127.0.0.1:$(cat "$TMP/port")"

# k ARGS: kiln with the fake hub and the test cache, no token, plenty of "RAM"
k() {
  env HOME="$TMP/home" HF_ENDPOINT="$EP" HF_HUB_CACHE="$C" HF_HOME= HF_TOKEN="${TOKEN:-}" HUGGING_FACE_HUB_TOKEN= \
      HF_HUB_OFFLINE="${OFFLINE:-}" KILN_MODELS= KILN_MODEL= KILN_TEST_MEMORY="${MEM:-1G}" "$KILN" "$@"
}
# kx ARGS: the same in a background job, where the job's process is kiln itself (for kill -INT)
kx() {
  exec env HOME="$TMP/home" HF_ENDPOINT="$EP" HF_HUB_CACHE="$C" HF_HOME= HF_TOKEN= HUGGING_FACE_HUB_TOKEN= HF_HUB_OFFLINE= \
      KILN_MODELS= KILN_MODEL= KILN_TEST_MEMORY=1G "$KILN" "$@"
}
downloads() { grep -c -E 'GET /(cdn/|[^ ]*/resolve/)' "$LOG"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
TD="$C/models--acme--tiny"
GD="$C/models--acme--stories-GGUF"

# ---- a whole safetensors repository, its weights cut halfway on the first try ----
k pull acme/tiny >"$TMP/out" 2>"$TMP/err"; st=$?
COMMIT=$(cat "$TD/refs/main" 2>/dev/null)
SNAP="$TD/snapshots/$COMMIT"
if [ $st -eq 0 ] && [ -n "$COMMIT" ] && [ "$(cat "$TMP/out")" = "$SNAP" ]; then pass pull_whole_repo; else
  fail pull_whole_repo "exit $st: $(cat "$TMP/out" "$TMP/err")"; fi
ok=1
for f in config.json model.safetensors tokenizer.json tokenizer_config.json generation_config.json README.md; do
  [ -L "$SNAP/$f" ] && cmp -s "$SNAP/$f" "$T/$f" || { ok=0; echo "  missing or different: $f"; }
done
for f in pytorch_model.bin onnx original .gitattributes _hub.json; do [ -e "$SNAP/$f" ] && { ok=0; echo "  fetched: $f"; }; done
[ $ok -eq 1 ] && grep -q "Skipping 4 file(s) kiln does not use" "$TMP/err" && pass pull_fetches_model_files_only ||
  fail pull_fetches_model_files_only "$(ls -la "$SNAP" 2>&1; cat "$TMP/err")"
# blobs/SHA256 for LFS files, blobs/GIT-BLOB-ID for the others; relative links; nothing partial left
ST_SHA=$(sha "$T/model.safetensors")
CFG_ID=$(python3 -c 'import hashlib,sys; d=open(sys.argv[1],"rb").read(); print(hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest())' "$T/config.json")
if [ "$(readlink "$SNAP/model.safetensors")" = "../../blobs/$ST_SHA" ] && [ -f "$TD/blobs/$ST_SHA" ] &&
   [ "$(readlink "$SNAP/config.json")" = "../../blobs/$CFG_ID" ] && [ -z "$(ls "$TD/blobs" | grep incomplete)" ] &&
   [ "$(ls "$TD/blobs" | wc -l)" -eq 6 ]; then pass pull_cache_layout; else
  fail pull_cache_layout "$(ls -la "$SNAP" "$TD/blobs" 2>&1)"; fi
if grep -q "^GET /cdn/$ST_SHA bytes=[1-9][0-9]*-" "$LOG" && [ "$(sha "$SNAP/model.safetensors")" = "$ST_SHA" ] &&
   grep -q "model.safetensors: .*sha256 ok" "$TMP/err"; then pass pull_resumes_dropped_connection; else
  fail pull_resumes_dropped_connection "$(cat "$LOG")"; fi
[ "$(grep -c "^GET /acme/tiny/resolve/$COMMIT/tokenizer.json" "$LOG")" -eq 2 ] && cmp -s "$SNAP/tokenizer.json" "$T/tokenizer.json" &&
  pass pull_retries_503 || fail pull_retries_503 "$(cat "$LOG")"
grep -q "Fits this machine: .* of weights + 1.[23] MiB of KV cache for 2048 tokens" "$TMP/err" && pass pull_says_it_fits ||
  fail pull_says_it_fits "$(cat "$TMP/err")"

# the second pull downloads nothing, and says the model will not fit a 1 MiB machine
n0=$(downloads)
MEM=1M k pull acme/tiny >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 0 ] && [ "$(downloads)" -eq "$n0" ] && grep -q "nothing new" "$TMP/err" && pass pull_again_downloads_nothing ||
  fail pull_again_downloads_nothing "exit $st, $n0 -> $(downloads) downloads: $(cat "$TMP/err")"
grep -q "Will not fit this machine" "$TMP/err" && pass pull_says_it_does_not_fit || fail pull_says_it_does_not_fit "$(cat "$TMP/err")"

# --revision: another ref; an unknown one names itself
k pull acme/tiny --revision v1 >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 0 ] && [ "$(cat "$TD/refs/v1" 2>/dev/null)" = "$COMMIT" ] && pass pull_revision_ref ||
  fail pull_revision_ref "exit $st: $(cat "$TMP/err")"
k pull acme/tiny --revision nope >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 1 ] && grep -q "revision nope.*no such revision" "$TMP/err" && pass pull_unknown_revision ||
  fail pull_unknown_revision "exit $st: $(cat "$TMP/err")"

# ---- one GGUF quant (case-insensitive), a split one, a missing one ----
k pull acme/stories-GGUF:q4_0 >/dev/null 2>"$TMP/err"; st=$?
GS="$GD/snapshots/$(cat "$GD/refs/main" 2>/dev/null)"
if [ $st -eq 0 ] && cmp -s "$GS/stories260K-Q4_0.gguf" "$S" && [ "$(ls "$GS")" = "stories260K-Q4_0.gguf" ]; then
  pass pull_quant; else fail pull_quant "exit $st: $(ls "$GS" 2>&1; cat "$TMP/err")"; fi
grep -q "Fits this machine: .* of KV cache for 2048 tokens" "$TMP/err" && pass pull_quant_fit_from_gguf_header ||
  fail pull_quant_fit_from_gguf_header "$(cat "$TMP/err")"
k pull acme/stories-GGUF:Q2_K >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 0 ] && cmp -s "$GS/stories260K-Q2_K-00001-of-00002.gguf" "$G/stories260K-Q2_K-00001-of-00002.gguf" &&
  cmp -s "$GS/stories260K-Q2_K-00002-of-00002.gguf" "$G/stories260K-Q2_K-00002-of-00002.gguf" && pass pull_split_quant_whole ||
  fail pull_split_quant_whole "exit $st: $(ls "$GS"; cat "$TMP/err")"
k pull acme/stories-GGUF:Q5_K_M >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 1 ] && grep -q "no GGUF file of quant Q5_K_M; available: Q2_K, Q4_0, Q8_0 " "$TMP/err" && pass pull_missing_quant_lists ||
  fail pull_missing_quant_lists "exit $st: $(cat "$TMP/err")"
[ ! -e "$GS/mmproj-stories-F16.gguf" ] && pass pull_quant_skips_projector || fail pull_quant_skips_projector

# ---- a pulled model by name: kiln run, kiln ls ----
k run -m acme/stories-GGUF:Q4_0 -p "Once upon a time" -n 8 --temp 0 >"$TMP/run" 2>"$TMP/err"; st=$?
"$KILN" run -m "$S" -p "Once upon a time" -n 8 --temp 0 >"$TMP/run.ref" 2>/dev/null
[ $st -eq 0 ] && grep -q "^Once upon a time" "$TMP/run" && cmp -s "$TMP/run" "$TMP/run.ref" && pass run_pulled_quant_by_name ||
  fail run_pulled_quant_by_name "exit $st: $(cat "$TMP/run" "$TMP/err")"
k run acme/stories-GGUF:Q4_0 -p "Once upon a time" -n 8 --temp 0 >"$TMP/run2" 2>"$TMP/err"; st=$?
[ $st -eq 0 ] && cmp -s "$TMP/run2" "$TMP/run.ref" && pass run_model_named_first || fail run_model_named_first "exit $st: $(cat "$TMP/err")"
if [ -x "$BUILD/kiln-gguf-split" ]; then
  k run -m acme/stories-GGUF:Q2_K -p "Once upon a time" -n 8 --temp 0 >"$TMP/run3" 2>"$TMP/err"; st=$?
  [ $st -eq 0 ] && cmp -s "$TMP/run3" "$TMP/run.ref" && pass run_pulled_split_quant ||
    fail run_pulled_split_quant "exit $st: $(cat "$TMP/err")"
else skip run_pulled_split_quant "no kiln-gguf-split"; fi
k ls >"$TMP/ls" 2>"$TMP/ls.err"
if grep -q "^acme/stories-GGUF:stories260K-Q4_0 .*llama" "$TMP/ls" && grep -q "^acme/tiny .*llama .*BF16 .*2048 .*$SNAP" "$TMP/ls"; then
  pass ls_lists_pulled_models; else fail ls_lists_pulled_models "$(cat "$TMP/ls" "$TMP/ls.err")"; fi

# ---- HF_HUB_OFFLINE: the cache only ----
lines=$(wc -l <"$LOG")
OFFLINE=1 k pull acme/stories-GGUF:Q4_0 >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 0 ] && [ "$(wc -l <"$LOG")" -eq "$lines" ] && grep -q "is in the cache (HF_HUB_OFFLINE" "$TMP/err" && pass offline_uses_cache ||
  fail offline_uses_cache "exit $st: $(cat "$TMP/err")"
lines=$(wc -l <"$LOG")
OFFLINE=1 k pull acme/stories-GGUF:Q8_0 >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 1 ] && [ "$(wc -l <"$LOG")" -eq "$lines" ] && grep -q "HF_HUB_OFFLINE" "$TMP/err" && pass offline_missing_fails ||
  fail offline_missing_fails "exit $st: $(cat "$TMP/err")"

# ---- failures: checksum, 401, 403, 404 (repository and file) ----
k pull acme/badsum:Q4_0 >/dev/null 2>"$TMP/err"; st=$?
BD="$C/models--acme--badsum"
if [ $st -eq 1 ] && grep -q "b-Q4_0.gguf: checksum mismatch .*deleted" "$TMP/err" && [ -z "$(ls "$BD/blobs")" ] &&
   [ ! -e "$BD/snapshots" ]; then pass pull_checksum_mismatch_deletes; else
  fail pull_checksum_mismatch_deletes "exit $st: $(cat "$TMP/err"; find "$BD")"; fi
k pull acme/gated-GGUF:Q4_0 >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 1 ] && grep -q "HTTP 401.*set HF_TOKEN.*licence" "$TMP/err" && pass pull_401_says_set_token ||
  fail pull_401_says_set_token "exit $st: $(cat "$TMP/err")"
TOKEN=sekrit k pull acme/gated-GGUF:Q4_0 >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 0 ] && pass pull_with_token || fail pull_with_token "exit $st: $(cat "$TMP/err")"
k pull acme/forbidden:Q4_0 >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 1 ] && grep -q "HTTP 403.*HF_TOKEN.*accepted the model's licence" "$TMP/err" && pass pull_403_says_accept_licence ||
  fail pull_403_says_accept_licence "exit $st: $(cat "$TMP/err")"
k pull acme/nothere >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 1 ] && grep -q "repository acme/nothere .*not found" "$TMP/err" && pass pull_404_names_repo ||
  fail pull_404_names_repo "exit $st: $(cat "$TMP/err")"
k pull acme/holes >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 1 ] && grep -q "file model.safetensors of acme/holes was not found" "$TMP/err" && pass pull_404_names_file ||
  fail pull_404_names_file "exit $st: $(cat "$TMP/err")"
expect_exit pull_bad_name 2 k pull not-a-repo
expect_exit pull_no_name 2 k pull

# ---- a full disk (a file-size limit): a clean stop naming the path, then a resume ----
(ulimit -f 64 && k pull acme/slow-GGUF:Q4_0 >/dev/null 2>"$TMP/err"); st=$?
SD="$C/models--acme--slow-GGUF"
SLOW_SHA=$(sha "$R/acme/slow-GGUF/slow-Q4_0.gguf")
if [ $st -eq 1 ] && grep -q "cannot write $SD/blobs/$SLOW_SHA.incomplete: File too large (free some space" "$TMP/err" &&
   [ -f "$SD/blobs/$SLOW_SHA.incomplete" ] && [ ! -e "$SD/snapshots" ]; then pass pull_full_disk_stops_cleanly; else
  fail pull_full_disk_stops_cleanly "exit $st: $(cat "$TMP/err")"; fi

# a download larger than the free space stops before it starts
n0=$(downloads)
k pull acme/huge >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 1 ] && grep -q "not enough space in $C/models--acme--huge/blobs: .* free, 1024 TiB to download" "$TMP/err" &&
  [ "$(downloads)" -eq "$((n0 + 1))" ] && pass pull_no_room_stops_first || fail pull_no_room_stops_first "exit $st: $(cat "$TMP/err")"

# ---- Ctrl-C leaves a resumable partial, never a file in the snapshot; the next pull resumes ----
rm -f "$SD/blobs/$SLOW_SHA.incomplete"
kx pull acme/slow-GGUF:Q4_0 >/dev/null 2>"$TMP/err" &
KP=$!
i=0
while [ ! -s "$SD/blobs/$SLOW_SHA.incomplete" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
k pull acme/slow-GGUF:Q4_0 >/dev/null 2>"$TMP/err2"; st2=$?
[ $st2 -eq 1 ] && grep -q "another kiln pull is downloading it" "$TMP/err2" && pass pull_same_file_twice_at_once_stops ||
  fail pull_same_file_twice_at_once_stops "exit $st2: $(cat "$TMP/err2")"
kill -INT $KP
wait $KP; st=$?
part=$(stat -c %s "$SD/blobs/$SLOW_SHA.incomplete" 2>/dev/null || echo 0)
if [ $st -eq 130 ] && [ "$part" -gt 0 ] && [ "$part" -lt 6000000 ] && grep -q "interrupted; .* resumes it" "$TMP/err" &&
   [ ! -e "$SD/snapshots" ]; then pass pull_ctrl_c_leaves_partial; else
  fail pull_ctrl_c_leaves_partial "exit $st, partial $part: $(cat "$TMP/err")"; fi
k pull acme/slow-GGUF:Q4_0 >/dev/null 2>"$TMP/err"; st=$?
SS="$SD/snapshots/$(cat "$SD/refs/main" 2>/dev/null)"
[ $st -eq 0 ] && grep -q "^GET /cdn/$SLOW_SHA bytes=$part-" "$LOG" && cmp -s "$SS/slow-Q4_0.gguf" "$R/acme/slow-GGUF/slow-Q4_0.gguf" &&
  pass pull_resumes_after_ctrl_c || fail pull_resumes_after_ctrl_c "exit $st: $(cat "$TMP/err")"

# ---- kiln rm: a quant keeps a blob another quant uses; the last user removes it ----
k pull acme/stories-GGUF:Q8_0 >/dev/null 2>&1
BLOB="$GD/blobs/$(sha "$S")"
k rm acme/stories-GGUF:Q4_0 -y >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 0 ] && [ ! -e "$GS/stories260K-Q4_0.gguf" ] && [ -f "$BLOB" ] && [ -e "$GS/stories260K-Q8_0.gguf" ] &&
  pass rm_quant_keeps_shared_blob || fail rm_quant_keeps_shared_blob "exit $st: $(cat "$TMP/err")"
k rm acme/stories-GGUF:q8_0 -y >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 0 ] && [ ! -e "$BLOB" ] && [ -e "$GS/stories260K-Q2_K-00001-of-00002.gguf" ] && pass rm_quant_frees_unused_blob ||
  fail rm_quant_frees_unused_blob "exit $st: $(cat "$TMP/err")"
k rm acme/tiny </dev/null >/dev/null 2>"$TMP/err"; st=$?
[ $st -eq 0 ] && [ ! -e "$TD" ] && pass rm_whole_repo || fail rm_whole_repo "exit $st: $(cat "$TMP/err")"
expect_exit rm_not_pulled 1 k rm acme/tiny
k rm acme/stories-GGUF:Q2_K -y >/dev/null 2>&1
[ ! -e "$GD" ] && pass rm_last_quant_removes_repo || fail rm_last_quant_removes_repo "$(find "$GD")"

# ---- a progress bar on a terminal ----
if command -v script >/dev/null 2>&1; then
  script -qec "env HOME=$TMP/home HF_ENDPOINT=$EP HF_HUB_CACHE=$C HF_TOKEN= KILN_TEST_MEMORY=1G $KILN pull acme/stories-GGUF:Q4_0" \
    /dev/null </dev/null >"$TMP/tty" 2>&1; st=$?
  [ $st -eq 0 ] && grep -q "stories260K-Q4_0.gguf \[####################\] 100% 1.1 MiB / 1.1 MiB .*/s  ETA 0:00" "$TMP/tty" &&
    pass pull_terminal_progress_bar || fail pull_terminal_progress_bar "exit $st: $(head -c 600 "$TMP/tty")"
else
  skip pull_terminal_progress_bar "no script(1)"
fi

# ---- an MLX-quantized repository: the fit counts the weights as kiln holds them (650000 B -> 900000 B) ----
k pull acme/mlx6 >/dev/null 2>"$TMP/err"
grep -q "Fits this machine: 879 KiB of weights" "$TMP/err" && pass pull_fit_counts_mlx_in_memory ||
  fail pull_fit_counts_mlx_in_memory "$(cat "$TMP/err")"

# ---- nothing anywhere: automatic mode offers a pull command ----
env HOME="$TMP/empty" HF_HUB_CACHE= HF_HOME= XDG_CACHE_HOME= KILN_MODELS= KILN_MODEL= DISPLAY= WAYLAND_DISPLAY= \
  timeout 20 "$KILN" >/dev/null 2>"$TMP/err"; st=$?
[ $st -ne 0 ] && grep -q "kiln pull Qwen/Qwen3-0.6B-GGUF:Q8_0" "$TMP/err" && pass auto_mode_offers_pull ||
  fail auto_mode_offers_pull "exit $st: $(cat "$TMP/err")"

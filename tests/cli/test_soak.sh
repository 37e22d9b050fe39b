# test_soak.sh - the short soak of `make test` (tests/soak/soak.py): 12 clients for 20 s against one
# isolated `kiln serve` with the prefix cache and SSD tier on, mixing streamed and plain requests,
# disconnects mid-stream and before the answer, slow readers, bodies over the limit, malformed JSON
# and stalled partial headers. Checks: no crash or engine restart, no unexpected answer, every
# request completed or cancelled, RSS at most 10% above the warm-up's (the long run asks 5%; 20 s
# after a 2 s warm-up leave the allocator's arenas less settled; the warm-up takes the KV pool to
# within a few blocks of its cap, 1-3% in runs since), no descriptor leak, /health always
# answered. Its latency is printed, not asserted (a loaded machine is slow for reasons of its own);
# docs/reliability.md has the 10-minute run with 64 clients.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip soak "no $M"; exit 0; fi
if ! command -v python3 >/dev/null 2>&1; then skip soak "python3 is needed"; exit 0; fi
python3 tests/soak/soak.py --kiln "$KILN" --model "$M" --clients 12 --seconds 20 --warm-seconds 2 --seed 3 --rss-tol 0.10
exit 0

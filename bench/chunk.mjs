// bench/chunk.mjs - how --prefill-chunk trades a joining request's time to first token against the
// stall it causes in streams already running. R streams decode; once all are decoding, a request
// with a P-token prompt joins. Prints the joiner's TTFT and the running streams' longest gap
// between two tokens while it joined (median gap before, for reference).
// Usage: node bench/chunk.mjs URL [--running 3] [--prompt 512]
const args = process.argv.slice(2);
const url = (args[0] || 'http://127.0.0.1:8080').replace(/\/$/, '');
const opt = (n, d) => (args.indexOf(n) >= 0 ? Number(args[args.indexOf(n) + 1]) : d);
const R = opt('--running', 3), P = opt('--prompt', 512);
const ids = (n, k) => Array.from({ length: n }, (_, i) => 1 + ((i * 131 + k * 977 + 17) % 400));

async function stream(prompt, maxTokens, onToken) {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, ignore_eos: true, temperature: 0, stream: true }) });
  const dec = new TextDecoder();
  let buf = '', ttft = null;
  for await (const c of res.body) {
    buf += dec.decode(c, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: {')) continue;
      const o = JSON.parse(ev.slice(6));
      if (o.choices?.length && o.choices[0].finish_reason === null) {
        const t = performance.now();
        if (ttft === null) ttft = t - t0;
        if (onToken) onToken(t);
      }
    }
  }
  return ttft;
}

const times = Array.from({ length: R }, () => []);
let decoding = 0, go;
const ready = new Promise((r) => (go = r));
const runners = Array.from({ length: R }, (_, k) => stream(ids(16, k), 400, (t) => {
  times[k].push(t);
  if (times[k].length === 3 && ++decoding === R) go();
}));
await ready;
await new Promise((r) => setTimeout(r, 1500));
const tJoin = performance.now();
const ttft = await stream(ids(P, 99), 2);
const tEnd = performance.now();
await Promise.all(runners);
const gaps = (ts, a, b) => ts.slice(1).map((t, i) => [ts[i], t - ts[i]]).filter(([t0]) => t0 >= a && t0 <= b).map(([, g]) => g);
const during = times.flatMap((ts) => gaps(ts, tJoin - 200, tEnd));
const before = times.flatMap((ts) => gaps(ts, 0, tJoin - 200)).sort((x, y) => x - y);
console.log(JSON.stringify({ running: R, prompt: P, join_ttft_ms: Math.round(ttft),
  max_gap_during_join_ms: Math.round(Math.max(...during)), median_gap_before_ms: Math.round(before[before.length >> 1]) }));

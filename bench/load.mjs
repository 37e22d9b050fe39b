// bench/load.mjs - a load generator for `kiln serve` (any OpenAI-compatible server).
//
// For each concurrency level C it starts C streaming /v1/completions requests at once, each with a
// prompt of exactly P token ids and N new tokens (ignore_eos), and reports the aggregate generated
// tokens/s (all tokens / wall time of the level, prefill included), the median decode rate of a
// stream (after its first token), and p50 / p95 time-to-first-token. It then
// measures a request joining S running streams: S long streams start, and once all of them are
// decoding one more request arrives; its TTFT is printed beside the cold TTFT (nothing running)
// and the decode step time at S streams.
//
// Usage: node bench/load.mjs URL [--prompt 128] [--gen 128] [--levels 1,2,4,8,16] [--join 7] [--json]
// Needs only Node 18+ (fetch); prints a markdown table (or one JSON object per line with --json).

const args = process.argv.slice(2);
const url = (args[0] || 'http://127.0.0.1:8080').replace(/\/$/, '');
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
};
const P = Number(opt('--prompt', 128));
const N = Number(opt('--gen', 128));
const LEVELS = opt('--levels', '1,2,4,8,16').split(',').map(Number);
const JOIN = Number(opt('--join', 7));
const JSON_OUT = args.includes('--json');

// A prompt of P token ids, different per request so no two rows are identical.
const prompt = (k) => Array.from({ length: P }, (_, i) => 1 + ((i * 131 + k * 977 + 17) % 400));

// One streaming completion; resolves {ttft, tokens, ms}. onFirst fires at the first token.
async function stream(k, maxTokens, onFirst) {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: prompt(k), max_tokens: maxTokens, ignore_eos: true, temperature: 0,
                           stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const dec = new TextDecoder();
  let buf = '', ttft = null, tokens = 0;
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const o = JSON.parse(ev.slice(6));
      if (o.choices?.length && ttft === null) {   // the first token's chunk (text may be empty)
        ttft = performance.now() - t0;
        if (onFirst) onFirst();
      }
      if (o.usage) tokens = o.usage.completion_tokens;
    }
  }
  return { ttft, tokens, ms: performance.now() - t0 };
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

const rows = [];
await stream(0, 8);   // warm-up
for (const c of LEVELS) {
  const t0 = performance.now();
  const rs = await Promise.all(Array.from({ length: c }, (_, k) => stream(k + 1, N)));
  const wall = (performance.now() - t0) / 1000;
  const total = rs.reduce((a, r) => a + r.tokens, 0);
  const ttfts = rs.map((r) => r.ttft);
  // Decode rate of a stream: tokens after the first over the time after the first.
  const decode = rs.map((r) => (r.tokens - 1) / ((r.ms - r.ttft) / 1000));
  rows.push({ test: 'concurrency', streams: c, prompt: P, gen: N, agg_tps: total / wall,
              per_stream_tps: total / wall / c, decode_tps_p50: pct(decode, 50),
              ttft_p50_ms: pct(ttfts, 50), ttft_p95_ms: pct(ttfts, 95) });
}

// Joining: cold TTFT first, then one request joining JOIN decoding streams (--join 0 skips it).
if (JOIN > 0) {
  const cold = (await stream(100, 1)).ttft;
  let started = 0, release;
  const allDecoding = new Promise((r) => (release = r));
  const runners = Array.from({ length: JOIN }, (_, k) =>
    stream(200 + k, N * 4, () => { if (++started === JOIN) release(); }));
  await allDecoding;
  const tStep0 = performance.now();
  const joined = await stream(300, 8);
  const stepWindow = performance.now() - tStep0;
  const bg = await Promise.all(runners);
  const bgTps = bg.reduce((a, r) => a + r.tokens / (r.ms / 1000), 0);
  const stepMs = 1000 / (bgTps / JOIN);   // one decode step of the running batch
  rows.push({ test: 'join', running: JOIN, cold_ttft_ms: cold, join_ttft_ms: joined.ttft, decode_step_ms: stepMs,
              target_ms: cold + 3 * stepMs, window_ms: stepWindow });
}

if (JSON_OUT) {
  for (const r of rows) console.log(JSON.stringify(r));
} else {
  console.log(`| streams | aggregate tok/s | per stream tok/s | stream decode tok/s (p50) | TTFT p50 ms | TTFT p95 ms |`);
  console.log(`| ---: | ---: | ---: | ---: | ---: | ---: |`);
  for (const r of rows.filter((x) => x.test === 'concurrency'))
    console.log(`| ${r.streams} | ${r.agg_tps.toFixed(1)} | ${r.per_stream_tps.toFixed(1)} | ${r.decode_tps_p50.toFixed(1)} | ` +
                `${r.ttft_p50_ms.toFixed(0)} | ${r.ttft_p95_ms.toFixed(0)} |`);
  const j = rows.find((x) => x.test === 'join');
  if (j) console.log(`\njoin: TTFT of a request joining ${j.running} decoding streams ${j.join_ttft_ms.toFixed(0)} ms; ` +
              `cold TTFT ${j.cold_ttft_ms.toFixed(0)} ms + 3 decode steps of ${j.decode_step_ms.toFixed(1)} ms = ` +
              `${j.target_ms.toFixed(0)} ms target`);
}

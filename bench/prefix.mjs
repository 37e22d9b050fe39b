// bench/prefix.mjs - time to first token with a long shared prefix: cold, on a RAM hit of the
// prefix cache, and on an SSD hit after a restart of the server (kiln serve --ssd-cache).
//
// Each round r uses its own prefix of P token ids (so a round's cold request is really cold) and
// sends prefix + a few new tokens, streaming, with max_tokens 1:
//   server 1 (fresh cache directory): cold (prefix + suffix a), flush, RAM hit (prefix + suffix b)
//   server 2 (restart on the same directory): SSD hit (prefix + suffix c), file in the page cache
//   server 3 (restart, the cache files dropped from the page cache): SSD hit (prefix + suffix d)
// and prints every sample, the medians and their ratios to cold, and the time the server spent
// reading each SSD file (its debug log). Rounds of one kind run on one
// server in a row: the phases are interleaved per round only where a restart is not needed.
//
// Usage: node bench/prefix.mjs KILN MODEL [--prefix 2000] [--suffix 8] [--rounds 3] [--threads N]
//        [--json]
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const args = process.argv.slice(2);
const [KILN, MODEL] = args;
const opt = (n, d) => (args.indexOf(n) >= 0 ? args[args.indexOf(n) + 1] : d);
const P = Number(opt('--prefix', 2000)), S = Number(opt('--suffix', 8)), R = Number(opt('--rounds', 3));
const THREADS = opt('--threads', null);
const JSON_OUT = args.includes('--json');
if (!KILN || !MODEL) {
  console.error('usage: node bench/prefix.mjs KILN MODEL [--prefix 2000] [--suffix 8] [--rounds 3] [--threads N]');
  process.exit(2);
}

// Token ids 100..30099 exist in every Llama-family vocabulary; a small LCG makes them per round.
function ids(n, seed) {
  let x = seed * 2654435761 + 12345;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return 100 + (x % 30000);
  });
}
const prefix = (r) => ids(P, 1000 + r);
const suffix = (r, k) => ids(S, 5000 + r * 10 + k);

const dir = mkdtempSync(join(tmpdir(), 'kiln-prefix-bench-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

function start(label) {
  return new Promise((resolve, reject) => {
    // The default --ssd-demote-idle (30 s): files are written by the explicit flush after each cold
    // request and at shutdown, so no background write runs during a measurement.
    const a = ['serve', '-m', MODEL, '--port', '0', '-c', String(P + S + 64), '--batch', '1', '--ssd-cache', dir, '-v'];
    if (THREADS) a.push('-t', THREADS);
    const proc = spawn(KILN, a, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const t = setTimeout(() => reject(new Error(`${label}: no listening line: ${err}`)), 120000);
    proc.stderr.setEncoding('utf8');
    proc.restores = [];   // ms of each SSD restore, from the server's debug log (-v)
    proc.stderr.on('data', (d) => {
      err += d;
      for (const m of String(d).matchAll(/SSD cache: restored (\d+) tokens from \S+ in ([\d.]+) ms/g)) proc.restores.push(Number(m[2]));
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err);
      if (m && !proc.url) {
        clearTimeout(t);
        proc.url = `http://127.0.0.1:${m[1]}`;
        resolve(proc);
      }
    });
    proc.on('exit', (code) => { if (!proc.url) reject(new Error(`${label} exited (${code}): ${err}`)); });
  });
}

async function stop(proc) {
  const done = new Promise((r) => proc.on('exit', r));
  proc.kill('SIGTERM');
  await done;
}

// One streaming completion; resolves {ttft ms, cached tokens}.
async function ttft(url, prompt) {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0, ignore_eos: true, stream: true,
                           stream_options: { include_usage: true } }) });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const dec = new TextDecoder();
  let buf = '', first = null, cached = null;
  for await (const c of res.body) {
    buf += dec.decode(c, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: {')) continue;
      const o = JSON.parse(ev.slice(6));
      if (o.choices?.length && first === null) first = performance.now() - t0;
      if (o.usage) cached = o.usage.prompt_tokens_details?.cached_tokens ?? null;
    }
  }
  return { ms: first, cached };
}

const flush = async (url) => {
  const r = await fetch(`${url}/admin/cache/flush`, { method: 'POST' });
  if (r.status !== 200) throw new Error(`flush: HTTP ${r.status}`);
};

const samples = { cold: [], ram: [], ssd: [], ssd_nocache: [] };
const cachedSeen = { cold: [], ram: [], ssd: [], ssd_nocache: [] };
const record = (kind, s) => {
  samples[kind].push(s.ms);
  cachedSeen[kind].push(s.cached);
  if (!JSON_OUT) console.error(`  ${kind.padEnd(11)} round ${samples[kind].length}: ${s.ms.toFixed(1)} ms (cached ${s.cached})`);
};

let srv = await start('server 1');
await ttft(srv.url, ids(16, 99));   // warm-up: first touch of the weights
for (let r = 0; r < R; r++) {
  record('cold', await ttft(srv.url, [...prefix(r), ...suffix(r, 0)]));
  await flush(srv.url);
  record('ram', await ttft(srv.url, [...prefix(r), ...suffix(r, 1)]));
}
await stop(srv);

const restoreMs = { ssd: [], ssd_nocache: [] };
srv = await start('server 2 (restart)');
await ttft(srv.url, ids(16, 98));
for (let r = 0; r < R; r++) record('ssd', await ttft(srv.url, [...prefix(r), ...suffix(r, 2)]));
await stop(srv);
restoreMs.ssd = srv.restores;

// The files out of the page cache: posix_fadvise(DONTNEED) through dd's nocache flag (the files
// are synced, so their pages are clean and can be dropped).
let dropped = true;
for (const f of readdirSync(dir).filter((n) => n.endsWith('.kv'))) {
  const d = spawnSync('dd', [`if=${join(dir, f)}`, 'iflag=nocache', 'count=0', 'status=none']);
  const e = spawnSync('dd', [`of=${join(dir, f)}`, 'oflag=nocache', 'conv=notrunc,fdatasync', 'count=0', 'status=none']);
  dropped &&= d.status === 0 && e.status === 0;
}
srv = await start('server 3 (restart, page cache dropped)');
await ttft(srv.url, ids(16, 97));
for (let r = 0; r < R; r++) record('ssd_nocache', await ttft(srv.url, [...prefix(r), ...suffix(r, 3)]));
await stop(srv);
restoreMs.ssd_nocache = srv.restores;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const cold = median(samples.cold);
const rows = Object.keys(samples).map((k) => ({ kind: k, median_ms: median(samples[k]), samples_ms: samples[k],
  cached: cachedSeen[k], restore_ms: restoreMs[k] || [], ratio_to_cold: median(samples[k]) / cold }));
if (JSON_OUT) {
  console.log(JSON.stringify({ prefix: P, suffix: S, rounds: R, page_cache_dropped: dropped, rows }));
} else {
  console.log(`| case | TTFT median ms | samples ms | cached tokens | file read ms | ratio to cold |`);
  console.log(`| --- | ---: | --- | --- | --- | ---: |`);
  const names = { cold: 'cold (no cache)', ram: 'RAM hit', ssd: 'SSD hit after restart', ssd_nocache: 'SSD hit after restart, page cache dropped' };
  for (const r of rows)
    console.log(`| ${names[r.kind]} | ${r.median_ms.toFixed(1)} | ${r.samples_ms.map((x) => x.toFixed(0)).join(', ')} | ${r.cached.join(', ')} | ${r.restore_ms.map((x) => x.toFixed(0)).join(', ') || '-'} | ${(100 * r.ratio_to_cold).toFixed(2)}% |`);
  if (!dropped) console.log('(dropping the files from the page cache failed: the last row is page-cache warm)');
}

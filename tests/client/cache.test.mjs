// cache.test.mjs - the SSD tier of the prefix cache through `kiln serve --ssd-cache`, with the
// official openai client: a conversation returning after a restart on the same directory is
// restored (cached_tokens > 0) with the same output; damaged files (a flipped header byte, a
// truncated file, a file of another model, and with the default flags a flipped data byte) are
// skipped, quarantined and reported in /stats while the answers stay those of a server without
// any cache (with --no-ssd-cache-verify a flipped data byte is loaded); kill -9 during a burst of writes never
// leads to a corrupt entry being served; POST /admin/cache/flush (behind the API key). One
// PASS/FAIL/SKIP line per case (see lib.mjs); run by tests/cli/test_server.sh after
// server.test.mjs, with KILN and KILN_MODEL set.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, openSync, readdirSync, readSync, rmSync, statSync, truncateSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { KILN, MODEL, MODEL_ID, Skip, failed, get, post, startServer, stats, stopCleanly, test } from './lib.mjs';

const t_start = Date.now();
if (!existsSync(MODEL)) {
  console.log(`SKIP cache_tests: no model ${MODEL}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL cache_tests: the suite did not finish within 80 s');
  process.exit(1);
}, 80000).unref();

const root = mkdtempSync(join(tmpdir(), 'kiln-cache-test-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));
const dir = (name) => join(root, name);
const kvFiles = (d) => (existsSync(d) ? readdirSync(d).filter((f) => f.endsWith('.kv')).sort() : []);

function flipByte(path, offset) {
  const fd = openSync(path, 'r+');
  const size = statSync(path).size;
  const at = offset < 0 ? size + offset : offset;
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, at);
  b[0] ^= 0x40;
  writeSync(fd, b, 0, 1, at);
  closeSync(fd);
}

const system = { role: 'system', content: 'Lily and Ben were friends who liked to play in the park every day.' };
const turn1 = [system, { role: 'user', content: 'One day they found a big red ball under a tree.' }];
const chat = (c, messages, max = 24) => c.chat.completions.create({ model: MODEL_ID, messages, temperature: 0, max_tokens: max });
const PROMPTS = Array.from({ length: 12 }, (_, k) =>
  `Once upon a time, in a town number ${k}, there lived a ${['cat', 'dog', 'bird', 'fox'][k % 4]} who loved ${['apples', 'the sun', 'rain'][k % 3]}.`);
const complete = (c, prompt, max = 24) => c.completions.create({ model: MODEL_ID, prompt, temperature: 0, max_tokens: max });

// The reference: a server with no cache at all.
const ref = await startServer(['--prompt-cache', '0'], 'reference server (no cache)');
const refClient = ref.client();
const ref1 = await chat(refClient, turn1);
const turn2 = [...turn1, { role: 'assistant', content: ref1.choices[0].message.content }, { role: 'user', content: 'Then the sun went down.' }];
const ref2 = await chat(refClient, turn2);
const turn3 = [...turn2, { role: 'assistant', content: ref2.choices[0].message.content }, { role: 'user', content: 'What did they do next?' }];
const ref3 = await chat(refClient, turn3);
const refAnswers = [];
for (const p of PROMPTS) refAnswers.push((await complete(refClient, p)).choices[0].text);

await test('cache_restart_restores', async () => {
  const d = dir('restart');
  const a = await startServer(['--ssd-cache', d, '--ssd-demote-idle', '0'], 'server A --ssd-cache');
  let r2;
  try {
    const c = a.client();
    const r1 = await chat(c, turn1);
    assert.equal(r1.choices[0].message.content, ref1.choices[0].message.content);
    r2 = await chat(c, turn2);
    assert.equal(r2.choices[0].message.content, ref2.choices[0].message.content);
    const f = await post(a, '/admin/cache/flush', {});
    assert.equal(f.status, 200, f.text);
    assert.equal(f.json.flushed, true);
    assert.equal(f.json.ssd_cache, true);
    assert.equal(f.json.pending, 0);
    assert.ok(f.json.entries >= 1, JSON.stringify(f.json));
    assert.ok(kvFiles(d).length >= 1, 'no cache file written');
  } finally {
    await stopCleanly(a);
  }
  const b = await startServer(['--ssd-cache', d], 'server B, same --ssd-cache');
  try {
    const c = b.client();
    // The returning conversation: turn 2 again, then its next turn.
    const again = await chat(c, turn2);
    assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, `cached ${again.usage.prompt_tokens_details.cached_tokens}`);
    assert.equal(again.choices[0].message.content, r2.choices[0].message.content, 'the restored prefix changed the output');
    const next = await chat(c, turn3);
    assert.ok(next.usage.prompt_tokens_details.cached_tokens >= again.usage.prompt_tokens,
      `turn 3 cached ${next.usage.prompt_tokens_details.cached_tokens} < turn 2 prompt ${again.usage.prompt_tokens}`);
    assert.equal(next.choices[0].message.content, ref3.choices[0].message.content);
    const st = await stats(b);
    assert.ok(st.ssd_cache && st.ssd_cache.enabled && st.ssd_cache.hits >= 1, JSON.stringify(st.ssd_cache));
    assert.equal(st.ssd_cache.quarantined, 0);
    const m = await get(b, '/metrics');
    assert.match(m.text, /^kiln_ssd_cache_hits_total [1-9]/m);
  } finally {
    await stopCleanly(b);
  }
}, 30000);

await test('cache_flush_route', async () => {
  // Without an SSD cache: nothing to do, still 200.
  const f = await post(ref, '/admin/cache/flush', {});
  assert.equal(f.status, 200, f.text);
  assert.deepEqual([f.json.flushed, f.json.ssd_cache], [true, false]);
  assert.equal((await stats(ref)).ssd_cache.enabled, false);
  // Behind the API key like every route but /health.
  const s = await startServer(['--ssd-cache', dir('keyed'), '--api-key', 'sekrit'], 'server --api-key --ssd-cache');
  try {
    assert.equal((await post(s, '/admin/cache/flush', {})).status, 401);
    assert.equal((await post(s, '/admin/cache/flush', {}, { authorization: 'Bearer wrong' })).status, 401);
    const ok = await post(s, '/admin/cache/flush', {}, { authorization: 'Bearer sekrit' });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.flushed, true);
    assert.equal((await get(s, '/admin/cache/flush', { authorization: 'Bearer sekrit' })).status, 405);
  } finally {
    await stopCleanly(s);
  }
});

// A cache file written by a server on another model (a generated tiny Llama).
async function foreignFile() {
  const gen = join(dirname(KILN), 'kiln-gen');
  if (!existsSync(gen)) throw new Skip(`no ${gen}`);
  const model = join(root, 'tiny-llama.gguf');
  const r = spawnSync(gen, ['--preset', 'tiny-llama', '--type', 'F32', '--seed', '3', '-o', model]);
  if (r.status !== 0) throw new Skip(`kiln-gen failed: ${String(r.stderr).slice(0, 200)}`);
  const d = dir('foreign');
  const { spawn } = await import('node:child_process');
  // startServer always serves MODEL; start this one by hand the same way.
  const proc = spawn(KILN, ['serve', '-m', model, '--port', '0', '--ssd-cache', d, '--ssd-demote-idle', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const port = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`foreign server did not start: ${err}`)), 15000);
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (x) => {
      err += x;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err);
      if (m) { clearTimeout(t); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => reject(new Error(`foreign server exited (${code}): ${err}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  const res = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], max_tokens: 4, temperature: 0 }) });
  assert.equal(res.status, 200, await res.text());
  assert.equal((await fetch(`${base}/admin/cache/flush`, { method: 'POST' })).status, 200);
  proc.kill('SIGTERM');
  await new Promise((r2) => proc.on('exit', r2));
  const files = kvFiles(d);
  assert.equal(files.length, 1, `foreign cache files: ${files}`);
  return join(d, files[0]);
}

await test('cache_corrupt_files_quarantined', async () => {
  const foreign = await foreignFile();
  const d = dir('corrupt');
  const w = await startServer(['--ssd-cache', d, '--ssd-demote-idle', '0'], 'writer server');
  try {
    for (const p of PROMPTS.slice(0, 4)) await complete(w.client(), p);
    assert.equal((await post(w, '/admin/cache/flush', {})).status, 200);
  } finally {
    await stopCleanly(w);
  }
  const files = kvFiles(d);
  assert.equal(files.length, 4, `cache files: ${files}`);
  flipByte(join(d, files[0]), 120);                              // a token id in the header
  truncateSync(join(d, files[1]), statSync(join(d, files[1])).size - 64);
  copyFileSync(foreign, join(d, files[2]));                      // another model's file
  flipByte(join(d, files[3]), -5);                               // tensor data: found at restore
  const s = await startServer(['--ssd-cache', d], 'server on damaged files');
  try {
    const st = (await stats(s)).ssd_cache;
    assert.equal(st.quarantined, 3, JSON.stringify(st));
    assert.equal(st.entries, 1, JSON.stringify(st));
    for (let k = 0; k < 4; k++) {
      const r = await complete(s.client(), PROMPTS[k]);
      assert.equal(r.choices[0].text, refAnswers[k], `prompt ${k} answered differently`);
    }
    assert.equal((await stats(s)).ssd_cache.hits, 0);
    assert.match((await get(s, '/metrics')).text, /^kiln_ssd_cache_quarantined_total 4$/m);
    assert.match(s.stderr(), /quarantine/);
  } finally {
    await stopCleanly(s);
  }
  const q = readdirSync(join(d, 'quarantine'));
  for (const f of files) assert.ok(q.includes(f), `${f} not in quarantine/ (${q})`);
  // The answers computed instead were cached anew (the same names: same tokens), soundly.
  const again = await startServer(['--ssd-cache', d], 'server after the quarantine');
  try {
    const st = (await stats(again)).ssd_cache;
    assert.equal(st.quarantined, 0, JSON.stringify(st));
    assert.equal(st.entries, 4, JSON.stringify(st));
    for (let k = 0; k < 4; k++) {
      const r = await complete(again.client(), PROMPTS[k]);
      assert.equal(r.choices[0].text, refAnswers[k]);
    }
    assert.ok((await stats(again)).ssd_cache.hits >= 1);
  } finally {
    await stopCleanly(again);
  }
}, 30000);

// Byte offset of a cache file's first tensor (see the format in src/cache/ssd_file.c).
function dataOffset(path) {
  const fd = openSync(path, 'r');
  const h = Buffer.alloc(112);
  readSync(fd, h, 0, 112, 0);
  closeSync(fd);
  return h.readBigUInt64LE(104);
}

await test('cache_verify_off_loads_damaged_data', async () => {
  // --no-ssd-cache-verify (benchmarks only) skips the tensor checksums: a file whose data (not its
  // header) is damaged is then loaded, as the README says; --ssd-cache-verify (the default) is
  // still accepted and catches it.
  const d = dir('noverify');
  const w = await startServer(['--ssd-cache', d, '--ssd-demote-idle', '0'], 'writer server');
  try {
    await complete(w.client(), PROMPTS[5]);
    assert.equal((await post(w, '/admin/cache/flush', {})).status, 200);
  } finally {
    await stopCleanly(w);
  }
  const files = kvFiles(d);
  assert.equal(files.length, 1, `cache files: ${files}`);
  const file = join(d, files[0]), saved = join(root, 'noverify-damaged.kv');
  flipByte(file, Number(dataOffset(file)) + 5);   // position 0, layer 0, K
  copyFileSync(file, saved);
  const on = await startServer(['--ssd-cache', d, '--ssd-cache-verify', '--prompt-cache', '0'], 'server with verification');
  try {
    const r = await complete(on.client(), PROMPTS[5]);
    assert.equal(r.choices[0].text, refAnswers[5]);
    const st = (await stats(on)).ssd_cache;
    assert.equal(st.hits, 0, JSON.stringify(st));
    assert.equal(st.quarantined, 1, JSON.stringify(st));
  } finally {
    await stopCleanly(on);
  }
  // The damaged file back in place (its header is sound, so start-up keeps it): loaded without
  // verification. (The request then writes its sequence, damaged K/V included, under valid
  // checksums: the damage spreads, which is why verification is on by default.)
  copyFileSync(saved, file);
  const off = await startServer(['--ssd-cache', d, '--no-ssd-cache-verify', '--prompt-cache', '0'], 'server without verification');
  try {
    await complete(off.client(), PROMPTS[5]);
    const st = (await stats(off)).ssd_cache;
    assert.equal(st.hits, 1, JSON.stringify(st));
    assert.equal(st.quarantined, 0, JSON.stringify(st));
  } finally {
    await stopCleanly(off);
  }
}, 20000);

await test('cache_kill9_during_writes', async () => {
  const d = dir('kill9');
  // A RAM cache of a few entries: most results leave RAM, so the burst is mostly SSD writes.
  const s = await startServer(['--ssd-cache', d, '--ssd-demote-idle', '0', '--prompt-cache', '0.0001', '--batch', '4'], 'server to kill');
  const c = s.client();
  const all = PROMPTS.map((p) => complete(c, p, 48).catch(() => null));
  // Kill as soon as some requests are answered and their writes are under way.
  await Promise.race([Promise.any(all), new Promise((r) => setTimeout(r, 5000))]);
  s.proc.kill('SIGKILL');
  const e = await s.exited();
  assert.equal(e.signal, 'SIGKILL');
  await Promise.all(all);
  const s2 = await startServer(['--ssd-cache', d], 'server after kill -9');
  try {
    const c2 = s2.client();
    for (let k = 0; k < PROMPTS.length; k++) {
      const r = await complete(c2, PROMPTS[k]);
      assert.equal(r.choices[0].text, refAnswers[k], `prompt ${k} answered differently after kill -9`);
    }
    const f = await post(s2, '/admin/cache/flush', {});
    assert.equal(f.status, 200, f.text);
    assert.equal(f.json.flushed, true);
    const st = (await stats(s2)).ssd_cache;
    assert.equal(st.pending, 0);
    assert.equal(st.errors, 0, JSON.stringify(st));
    assert.ok(!readdirSync(d).some((n) => n.includes('.tmp.')), `temporary files left: ${readdirSync(d)}`);
  } finally {
    await stopCleanly(s2);
  }
  // A third start finds every file sound (nothing to quarantine).
  const s3 = await startServer(['--ssd-cache', d], 'server after kill -9 (2)');
  try {
    const st = (await stats(s3)).ssd_cache;
    assert.equal(st.quarantined, 0, JSON.stringify(st));
    assert.ok(st.entries >= 1, JSON.stringify(st));
    for (let k = 0; k < PROMPTS.length; k++) {
      const r = await complete(s3.client(), PROMPTS[k]);
      assert.equal(r.choices[0].text, refAnswers[k]);
      assert.ok(r.usage.prompt_tokens_details.cached_tokens > 0, `prompt ${k} missed after a flush`);
    }
  } finally {
    await stopCleanly(s3);
  }
}, 40000);

await test('cache_bad_directory', async () => {
  const file = join(root, 'a-file');
  closeSync(openSync(file, 'w'));
  const r = spawnSync(KILN, ['serve', '-m', MODEL, '--port', '0', '--ssd-cache', join(file, 'sub')], { timeout: 15000 });
  assert.equal(r.status, 1, `exit ${r.status}: ${r.stderr}`);
  assert.match(String(r.stderr), /SSD cache directory/);
});

await stopCleanly(ref);
console.log(`# cache tests: ${((Date.now() - t_start) / 1000).toFixed(1)} s`);
process.exit(failed() ? 1 : 0);

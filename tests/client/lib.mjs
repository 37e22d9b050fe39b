// lib.mjs - helpers for the `kiln serve` tests (server.test.mjs, hostile.test.mjs, cache.test.mjs,
// web.test.mjs): a tiny harness that prints one "PASS name" / "FAIL name: why" / "SKIP name: why"
// line per case (the format tests/run.sh counts), starting and stopping servers, HTTP helpers (fetch,
// and raw sockets from a chosen loopback address for what fetch cannot send), server-sent-event
// helpers, and error-shape checks.
//
// Environment: KILN (the kiln binary) and KILN_MODEL (stories260K.gguf), both set by
// tests/cli/test_server.sh.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import OpenAI from 'openai';

export const KILN = process.env.KILN || 'build/kiln';
export const MODEL = process.env.KILN_MODEL || '../shared/data/models/stories260K/stories260K.gguf';
export const MODEL_ID = 'stories260K';

// ---- harness --------------------------------------------------------------------------------------

export class Skip extends Error {}

let failures = 0;
export const failed = () => failures;

function oneLine(e) {
  const s = e instanceof Error ? (e.stack && !(e instanceof assert.AssertionError) ? e.stack.split('\n').slice(0, 2).join(' | ') : e.message) : String(e);
  return s.replace(/\s+/g, ' ').slice(0, 600);
}

function withTimeout(p, ms, what) {
  let t;
  const timer = new Promise((_, reject) => {
    t = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([p, timer]).finally(() => clearTimeout(t));
}

// Runs one case: PASS when fn resolves, SKIP when it throws Skip, FAIL otherwise (or on timeout).
export async function test(name, fn, timeoutMs = 30000) {
  try {
    await withTimeout(Promise.resolve().then(fn), timeoutMs, name);
    console.log(`PASS ${name}`);
  } catch (e) {
    if (e instanceof Skip) {
      console.log(`SKIP ${name}: ${e.message}`);
    } else {
      failures++;
      console.log(`FAIL ${name}: ${oneLine(e)}`);
    }
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- servers --------------------------------------------------------------------------------------

const live = new Set();
process.on('exit', () => {
  for (const p of live) {
    try { p.kill('SIGKILL'); } catch { /* already gone */ }
  }
});

// Starts `kiln serve -m MODEL --port 0 ARGS...` and resolves once it printed its port on stderr.
export function startServer(args = [], label = 'server') {
  return new Promise((resolve, reject) => {
    const proc = spawn(KILN, ['serve', '-m', MODEL, '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    live.add(proc);
    let err = '';
    let exited = null;
    const exitWaiters = [];
    proc.on('exit', (code, signal) => {
      live.delete(proc);
      exited = { code, signal, at: Date.now() };
      for (const w of exitWaiters) w(exited);
      reject(new Error(`${label}: kiln serve exited early (code ${code}, signal ${signal}): ${err.slice(-400)}`));
    });
    proc.on('error', (e) => reject(new Error(`${label}: cannot start ${KILN}: ${e.message}`)));
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${label}: no 'listening' line within 15 s: ${err.slice(-400)}`));
    }, 15000);
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (d) => {
      err += d;
      const m = /kiln serve: listening on http:\/\/127\.0\.0\.1:(\d+) \(model id '([^']*)'\)/.exec(err);
      if (m && !proc.port) {
        clearTimeout(timer);
        proc.port = Number(m[1]);
        const base = `http://127.0.0.1:${proc.port}`;
        const srv = {
          label,
          proc,
          port: proc.port,
          base,
          modelId: m[2],
          stderr: () => err,
          // Resolves {code, signal, at} once the process exits.
          exited: () => new Promise((r) => (exited ? r(exited) : exitWaiters.push(r))),
          client: (opts = {}) => new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000, ...opts }),
          url: (path) => base + path,
          // SIGTERM, then resolves {code, signal, ms} (SIGKILL after limitMs).
          stop: async (limitMs = 15000) => {
            if (exited) return { ...exited, ms: 0, early: true };
            const t0 = Date.now();
            proc.kill('SIGTERM');
            const k = setTimeout(() => proc.kill('SIGKILL'), limitMs);
            const e = await srv.exited();
            clearTimeout(k);
            return { ...e, ms: e.at - t0 };
          },
        };
        resolve(srv);
      }
    });
  });
}

// The check every server ends with: SIGTERM makes it exit 0 in under 15 s.
export async function stopCleanly(srv) {
  const r = await srv.stop(15000);
  assert.ok(!r.early, `${srv.label} had already exited (status ${r.code}, signal ${r.signal}): ${srv.stderr().slice(-300)}`);
  assert.equal(r.signal, null, `${srv.label} was killed by ${r.signal} (did not exit within 15 s after SIGTERM)`);
  assert.equal(r.code, 0, `${srv.label} exited with status ${r.code}: ${srv.stderr().slice(-300)}`);
  assert.ok(r.ms < 15000, `${srv.label} took ${r.ms} ms to exit`);
  return r;
}

// ---- HTTP -----------------------------------------------------------------------------------------

// POST a JSON body (an object, or a string sent as is); resolves {status, headers, text, json}.
export async function post(srv, path, body, headers = {}) {
  const res = await fetch(srv.url(path), {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return finish(res);
}

export async function get(srv, path, headers = {}, method = 'GET') {
  return finish(await fetch(srv.url(path), { method, headers }));
}

async function finish(res) {
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, headers: res.headers, text, json };
}

// A raw TCP connection to srv from the loopback address `from` (127.0.0.0/8 all reach the server,
// and the server tells them apart), sending `data` once connected. Resolves once connected with
// {sock, received() (the bytes so far, as latin1 text), closed (a promise of the ms from connect
// to close), closedMs (null while open), error}. Server-side closes, resets and write errors all
// end as a close; nothing rejects after connect.
export function rawConnect(srv, { from = '127.0.0.1', data } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: '127.0.0.1', port: srv.port, localAddress: from });
    const chunks = [];
    let t0 = 0;
    const c = { sock, closedMs: null, error: null, received: () => Buffer.concat(chunks).toString('latin1') };
    c.closed = new Promise((res) => sock.on('close', () => { c.closedMs = Date.now() - t0; res(c.closedMs); }));
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', (e) => { c.error = e; if (!t0) reject(e); });
    sock.on('connect', () => {
      t0 = Date.now();
      if (data) sock.write(data);
      resolve(c);
    });
  });
}

// Sends raw request bytes (the whole request, ideally with "Connection: close") and resolves
// {status, headers (lower-case names), body, json, ms (to the end of the response), closedMs}
// once the server closed the connection or sent a whole response with a Content-Length. Rejects
// when nothing complete came back within limitMs.
export async function rawRequest(srv, bytes, { from = '127.0.0.1', limitMs = 5000 } = {}) {
  const c = await rawConnect(srv, { from, data: bytes });
  const t0 = Date.now();
  const whole = () => {
    const t = c.received();
    const end = t.indexOf('\r\n\r\n');
    if (end < 0) return false;
    const m = /\r\ncontent-length: *(\d+)/i.exec(t.slice(0, end + 2));
    return m && t.length >= end + 4 + Number(m[1]);
  };
  while (c.closedMs === null && !whole()) {
    if (Date.now() - t0 > limitMs) {
      c.sock.destroy();
      throw new Error(`no complete response within ${limitMs} ms (got ${JSON.stringify(c.received().slice(0, 200))})`);
    }
    await sleep(5);
  }
  const ms = Date.now() - t0;
  c.sock.destroy();
  const t = c.received();
  const end = t.indexOf('\r\n\r\n');
  const head = (end < 0 ? t : t.slice(0, end)).split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head[0])?.[1] ?? 0);
  const headers = {};
  for (const h of head.slice(1)) {
    const k = h.indexOf(':');
    if (k > 0) headers[h.slice(0, k).trim().toLowerCase()] = h.slice(k + 1).trim();
  }
  const body = end < 0 ? '' : Buffer.from(t.slice(end + 4), 'latin1').toString('utf8');
  let json;
  try { json = JSON.parse(body); } catch { json = undefined; }
  return { status, headers, body, json, ms, closedMs: c.closedMs };
}

// The data payloads of a server-sent-event body, in order ("[DONE]" kept as a string).
export function sseData(text) {
  const out = [];
  for (const ev of text.split('\n\n')) {
    const lines = ev.split('\n').filter((l) => l.startsWith('data:'));
    if (!lines.length) continue;
    const d = lines.map((l) => l.slice(5).replace(/^ /, '')).join('\n');
    out.push(d === '[DONE]' ? d : JSON.parse(d));
  }
  return out;
}

export async function stats(srv) {
  const r = await get(srv, '/stats');
  assert.equal(r.status, 200, `/stats: ${r.status}`);
  return r.json;
}

// Waits until /stats reports no running or queued generation; resolves the ms it took.
export async function waitIdle(srv, limitMs = 5000) {
  const t0 = Date.now();
  for (;;) {
    const s = await stats(srv);
    if (s.active === 0 && s.queued === 0) return Date.now() - t0;
    if (Date.now() - t0 > limitMs) throw new Error(`still busy after ${limitMs} ms: ${JSON.stringify(s)}`);
    await sleep(20);
  }
}

// ---- error shapes ---------------------------------------------------------------------------------

// An OpenAI error body: {"error": {"message": string, "type": string, "param": ..., "code": ...}}.
export function assertErrorBody(json, what) {
  assert.ok(json && typeof json === 'object', `${what}: body is not JSON`);
  const e = json.error;
  assert.ok(e && typeof e === 'object', `${what}: no 'error' object in ${JSON.stringify(json)}`);
  assert.equal(typeof e.message, 'string', `${what}: error.message`);
  assert.ok(e.message.length > 0, `${what}: empty error.message`);
  assert.equal(typeof e.type, 'string', `${what}: error.type`);
  assert.ok('param' in e, `${what}: no error.param`);
  assert.ok(e.param === null || typeof e.param === 'string', `${what}: error.param ${JSON.stringify(e.param)}`);
  assert.ok('code' in e, `${what}: no error.code`);
  assert.ok(e.code === null || typeof e.code === 'string', `${what}: error.code ${JSON.stringify(e.code)}`);
  return e;
}

// A raw request answered with `status` and an OpenAI error body; returns the error object.
export function assertHttpError(r, status, what) {
  assert.equal(r.status, status, `${what}: HTTP ${r.status}, expected ${status}: ${r.text.slice(0, 300)}`);
  assert.match(r.headers.get('content-type') || '', /application\/json/, `${what}: content-type`);
  return assertErrorBody(r.json, what);
}

// The openai client call rejects with an instance of Cls carrying `status` and the error shape.
export async function assertClientError(promise, Cls, status, what) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `${what}: the client call succeeded, expected HTTP ${status}`);
  assert.ok(err instanceof Cls, `${what}: threw ${err?.constructor?.name} (${err?.message}), expected ${Cls.name}`);
  assert.equal(err.status, status, `${what}: status ${err.status}`);
  assertErrorBody({ error: err.error }, what);
  return err;
}

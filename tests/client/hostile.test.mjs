// hostile.test.mjs - `kiln serve` against hostile or broken clients, on loopback only: connections
// that never finish their headers, huge declared lengths, endless chunked bodies and TLS bytes on the
// plain port are answered or closed without a hang; one client address cannot take every connection
// (and /health keeps answering other addresses while it tries); waits that are the server's own (a
// long generation, a stream queued behind it) are not cut by the read timeout; Host and Origin
// checks keep web pages (and DNS rebinding) out unless --cors / --allow-host let them in; JSON
// routes need a JSON body type; and error messages quoting bad bytes stay 4xx, never 500. One
// PASS/FAIL/SKIP line per case (see lib.mjs); run by tests/cli/test_server.sh with KILN and
// KILN_MODEL set. Connection counts are bounded (a few dozen) and so is time (well under 30 s).
import assert from 'node:assert/strict';
import http from 'node:http';
import { existsSync } from 'node:fs';
import {
  MODEL, MODEL_ID, Skip, assertErrorBody, assertHttpError, failed, get, post, rawConnect, rawRequest, sleep, sseData, startServer,
  stats, stopCleanly, test,
} from './lib.mjs';

const t_start = Date.now();
if (!existsSync(MODEL)) {
  console.log(`SKIP hostile_tests: no model ${MODEL}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL hostile_tests: the suite did not finish within 100 s');
  process.exit(1);
}, 100000).unref();

const CRLF = '\r\n';
// A request as bytes: `head` lines (request line first), then the body.
const req = (lines, body = '') => [...lines, '', body].join(CRLF);

// A raw error answer: the status, JSON, OpenAI's shape; returns the error object.
function assertRawError(r, status, what) {
  assert.equal(r.status, status, `${what}: HTTP ${r.status}, expected ${status}: ${r.body.slice(0, 300)}`);
  assert.match(r.headers['content-type'] || '', /application\/json/, `${what}: content-type`);
  return assertErrorBody(r.json, what);
}

// The bytes a TLS 1.2/1.3 client sends first (a ClientHello record), as a client that speaks https
// to the plain port would.
const CLIENT_HELLO = Buffer.concat([
  Buffer.from('160301009a0100009603037d', 'hex'), Buffer.alloc(31, 0x5a), Buffer.from('00', 'hex'),
  Buffer.from('000813021303130100ff0100005d000b000403000102000a000c000a001d0017001e00190018000d001e001c', 'hex'),
  Buffer.from('040305030603080708080809080a080b080408050806040105010601002b0003020304002d00020101', 'hex'),
  Buffer.from('003300260024001d0020', 'hex'), Buffer.alloc(32, 0x33),
]);

// ---- server A: the defaults ------------------------------------------------------------------------

const A = await startServer([], 'default server');

await test('hostile_declared_length_413_at_once', async () => {
  for (const len of ['9223372036854775808', '18446744073709551616', String(9 << 20)]) {
    // the headers and one byte of a body that never comes: the answer must not wait for it
    const r = await rawRequest(A, req(['POST /v1/chat/completions HTTP/1.1', 'Host: 127.0.0.1',
      'Content-Type: application/json', `Content-Length: ${len}`], '{'), { limitMs: 3000 });
    assert.equal(r.status, 413, `Content-Length ${len}: HTTP ${r.status}: ${r.body.slice(0, 200)}`);
    if (r.json) assertErrorBody(r.json, `Content-Length ${len}`);
  }
  // kiln's own 413 carries OpenAI's error shape
  const r = await rawRequest(A, req(['POST /v1/completions HTTP/1.1', 'Host: 127.0.0.1', 'Content-Type: application/json',
    'Content-Length: 9223372036854775808'], ''), { limitMs: 3000 });
  assert.equal(assertRawError(r, 413, 'Content-Length 2^63').code, 'request_too_large');
  assert.equal((await get(A, '/health')).status, 200);
});

await test('hostile_stalled_connections_closed', async () => {
  // Each of these leaves the server waiting for bytes that never come (or cannot be HTTP): the
  // read timeout (5 s by default) must close them, well before 10 s.
  const cases = {
    'partial header': 'GET /health HTTP/1.1\r\nHost: x\r\nX-A: ',
    'nothing sent': '',
    'endless chunk': req(['POST /v1/completions HTTP/1.1', 'Host: 127.0.0.1', 'Content-Type: application/json',
      'Transfer-Encoding: chunked'], 'ffffffffffffffff\r\n{'),
    'TLS ClientHello': CLIENT_HELLO,
  };
  const conns = await Promise.all(Object.values(cases).map((data) => rawConnect(A, { data })));
  const limit = 9000;
  const closed = await Promise.all(conns.map((c) => Promise.race([c.closed, sleep(limit).then(() => null)])));
  Object.keys(cases).forEach((name, i) => {
    assert.ok(closed[i] !== null, `${name}: still open after ${limit} ms`);
    assert.ok(!/^HTTP\/1\.[01] 2/.test(conns[i].received()), `${name}: answered ${conns[i].received().slice(0, 80)}`);
  });
  for (const c of conns) c.sock.destroy();
}, 15000);

await test('hostile_many_connections_one_address', async () => {
  // A batch client opening 70 parallel connections from one address works with the defaults: all
  // are held open at once, then each carries a request.
  const conns = await Promise.all(Array.from({ length: 70 }, () => rawConnect(A)));
  await sleep(200);
  assert.ok(conns.every((c) => c.closedMs === null), `${conns.filter((c) => c.closedMs !== null).length} of 70 were closed`);
  for (const c of conns) c.sock.write(req(['GET /health HTTP/1.1', 'Host: 127.0.0.1', 'Connection: close']));
  await Promise.all(conns.map((c) => Promise.race([c.closed, sleep(5000)])));
  const ok = conns.filter((c) => /^HTTP\/1\.1 200/.test(c.received())).length;
  assert.equal(ok, 70, `${ok} of 70 parallel connections got 200`);
  for (const c of conns) c.sock.destroy();
});

await test('hostile_host_header', async () => {
  const host = async (h, path = '/health') => rawRequest(A, req([`GET ${path} HTTP/1.1`, `Host: ${h}`, 'Connection: close']));
  for (const h of ['127.0.0.1', `127.0.0.1:${A.port}`, `localhost:${A.port}`, 'LOCALHOST.', `[::1]:${A.port}`,
    `app.localhost:${A.port}`, '10.1.2.3:80', '[fe80::1]']) {
    const r = await host(h);
    assert.equal(r.status, 200, `Host: ${h}: HTTP ${r.status} ${r.body.slice(0, 200)}`);
  }
  for (const h of ['evil.example', `evil.example:${A.port}`, '127.0.0.1.nip.io', `localhost.evil.example:${A.port}`]) {
    for (const path of ['/health', '/', '/v1/models']) {
      const e = assertRawError(await host(h, path), 403, `Host: ${h} ${path}`);
      assert.equal(e.code, 'host_not_allowed');
      assert.match(e.message, /--allow-host/);
    }
  }
  assertRawError(await host('[nonsense]'), 400, 'Host: [nonsense]');
  // HTTP/1.0 without a Host (not a browser) is served
  const r = await rawRequest(A, req(['GET /health HTTP/1.0']));
  assert.equal(r.status, 200, `HTTP/1.0 without Host: ${r.status}`);
  // a reverse proxy's name is accepted when allowed
  const B = await startServer(['--allow-host', 'kiln.example,Other.Example'], 'server --allow-host');
  try {
    for (const h of ['kiln.example', `other.example:${B.port}`, 'localhost'])
      assert.equal((await rawRequest(B, req(['GET /v1/models HTTP/1.1', `Host: ${h}`, 'Connection: close']))).status, 200, h);
    assertRawError(await rawRequest(B, req(['GET /v1/models HTTP/1.1', 'Host: evil.example', 'Connection: close'])), 403,
      'Host: evil.example with --allow-host');
    // a page served under that name through a proxy that rewrites Host is this server's own origin
    let r = await post(B, '/tokenize', { content: 'hi' }, { origin: 'https://kiln.example' });
    assert.equal(r.status, 200, `Origin https://kiln.example: ${r.status} ${r.text}`);
    assert.equal(r.headers.get('access-control-allow-origin'), null);
    r = await post(B, '/tokenize', { content: 'hi' }, { origin: 'https://kiln.example.evil.example' });
    assert.equal(r.status, 403, `Origin https://kiln.example.evil.example: ${r.status}`);
  } finally {
    await stopCleanly(B);
  }
});

await test('hostile_cors', async () => {
  const mine = `http://127.0.0.1:${A.port}`;
  // no CORS headers anywhere by default, and same-origin callers (the chat page) are served
  let r = await get(A, '/v1/models', { origin: mine });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('access-control-allow-origin'), null, 'same-origin response with CORS headers');
  r = await post(A, '/v1/completions', { model: MODEL_ID, prompt: 'Once', max_tokens: 2 }, { origin: mine });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers.get('access-control-allow-origin'), null);
  r = await get(A, '/health');
  assert.equal(r.headers.get('access-control-allow-origin'), null, 'default response with CORS headers');
  // another origin: refused, its preflight too
  for (const [method, path] of [['GET', '/stats'], ['POST', '/v1/chat/completions'], ['POST', '/admin/cache/flush']]) {
    r = method === 'GET' ? await get(A, path, { origin: 'http://evil.example' })
      : await post(A, path, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }, { origin: 'http://evil.example' });
    const e = assertHttpError(r, 403, `${method} ${path} from another origin`);
    assert.equal(e.code, 'origin_not_allowed');
    assert.equal(r.headers.get('access-control-allow-origin'), null);
  }
  r = await get(A, '/v1/chat/completions', { origin: 'http://evil.example', 'access-control-request-method': 'POST',
    'access-control-request-headers': 'content-type' }, 'OPTIONS');
  assert.equal(r.status, 403, `preflight from another origin: ${r.status}`);
  assert.equal(r.headers.get('access-control-allow-origin'), null);
  r = await get(A, '/health', { origin: 'null' });
  assert.equal(r.status, 403, `Origin: null: ${r.status}`);
  // --cors lets the listed origins in, with preflight answers and headers on every response
  const app = 'http://app.example:3000';
  const C = await startServer(['--cors', `${app}, http://other.example`], 'server --cors');
  try {
    r = await get(C, '/v1/chat/completions', { origin: app, 'access-control-request-method': 'POST',
      'access-control-request-headers': 'authorization,content-type,x-stainless-os' }, 'OPTIONS');
    assert.equal(r.status, 204, `allowed preflight: ${r.status} ${r.text}`);
    assert.equal(r.headers.get('access-control-allow-origin'), app);
    assert.match(r.headers.get('access-control-allow-methods') || '', /POST/);
    assert.match(r.headers.get('access-control-allow-headers') || '', /content-type/i);
    assert.match(r.headers.get('access-control-allow-headers') || '', /x-stainless-os/i);
    r = await post(C, '/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 },
      { origin: app });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('access-control-allow-origin'), app);
    assert.match(r.headers.get('vary') || '', /origin/i);
    r = await get(C, '/nope', { origin: 'http://other.example' });
    assert.equal(r.status, 404);
    assert.equal(r.headers.get('access-control-allow-origin'), 'http://other.example', 'errors carry CORS headers too');
    r = await get(C, '/stats', { origin: 'http://evil.example' });
    assert.equal(r.status, 403);
    r = await get(C, '/stats');
    assert.equal(r.headers.get('access-control-allow-origin'), null, 'no Origin, no CORS headers');
  } finally {
    await stopCleanly(C);
  }
});

await test('hostile_json_content_type', async () => {
  const body = JSON.stringify({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', null]) {
    const lines = ['POST /v1/chat/completions HTTP/1.1', 'Host: 127.0.0.1', 'Connection: close',
      `Content-Length: ${body.length}`];
    if (ct) lines.push(`Content-Type: ${ct}`);
    const e = assertRawError(await rawRequest(A, req(lines, body)), 415, `Content-Type ${ct}`);
    assert.equal(e.code, 'unsupported_media_type');
  }
  for (const path of ['/v1/completions', '/tokenize', '/detokenize', '/apply-template'])
    assertRawError(await rawRequest(A, req([`POST ${path} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close',
      'Content-Type: text/plain', 'Content-Length: 2'], '{}')), 415, `${path} text/plain`);
  for (const ct of ['application/json; charset=utf-8', 'Application/JSON', 'application/vnd.kiln+json']) {
    const r = await rawRequest(A, req(['POST /v1/chat/completions HTTP/1.1', 'Host: 127.0.0.1', 'Connection: close',
      `Content-Type: ${ct}`, `Content-Length: ${body.length}`], body));
    assert.equal(r.status, 200, `Content-Type ${ct}: ${r.status} ${r.body.slice(0, 200)}`);
  }
});

await test('hostile_error_text_stays_4xx', async () => {
  const before = await stats(A);
  const e600 = '%C3%A9'.repeat(600);
  const cases = [
    ['GET /v1/models/%ff%fe', 404, /\\xff\\xfe/],
    ['GET /%ff', 404, /\\xff/],
    ['POST /%ff%00', 404, /\\xff/],
    [`GET /${e600}`, 404, /é{50}.*\.\.\.$/],
    [`GET /v1/models/${e600}`, 404, /é{50}/],
    ['PURGE /health', 405, /PURGE/],
  ];
  for (const [line, status, msg] of cases) {
    const r = await rawRequest(A, req([`${line} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close', 'Content-Length: 0']));
    const e = assertRawError(r, status, line.slice(0, 40));
    assert.match(e.message, msg, `${line.slice(0, 40)}: message ${e.message.slice(0, 100)}`);
    assert.ok(Buffer.byteLength(e.message) <= 1024, `${line.slice(0, 40)}: message of ${Buffer.byteLength(e.message)} bytes`);
  }
  const e = 'é'.repeat(600);
  const m = [{ role: 'user', content: 'hi' }];
  let r = await post(A, '/v1/chat/completions', { model: MODEL_ID, messages: m, logit_bias: { [e]: 1 } });
  assert.equal(assertHttpError(r, 400, 'logit_bias key of 600 é').param, 'logit_bias');
  r = await post(A, '/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: [{ type: e, text: 'x' }] }] });
  assert.equal(r.status, 400, `content part type of 600 é: ${r.status} ${r.text.slice(0, 200)}`);
  assert.match(r.json.error.message, /é+\.\.\.$/);
  r = await post(A, '/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: [{ type: 'x\u0001\u001b[31m', text: 'x' }] }] });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /x\\x01\\x1b\[31m/, 'control characters are shown escaped');
  // none of it was a fault of the server, and the refusals are counted in their own classes
  const after = await stats(A);
  assert.equal(after.errors['5xx'], before.errors['5xx'], `5xx counted: ${JSON.stringify(after.errors)}`);
  assert.ok(after.errors['404'] >= before.errors['404'] + 5, JSON.stringify(after.errors));
  assert.ok(after.errors['405'] >= before.errors['405'] + 1, JSON.stringify(after.errors));
  for (const k of ['403', '415']) assert.ok(after.errors[k] > 0, `errors.${k} = ${after.errors[k]} after the cases above`);
  const mt = (await get(A, '/metrics')).text;
  for (const k of ['400', '401', '403', '404', '405', '413', '415', '429', '4xx', '5xx'])
    assert.match(mt, new RegExp(`^kiln_errors_total\\{code="${k}"\\} \\d+$`, 'm'), `/metrics has code="${k}"`);
  assert.match(mt, /^kiln_errors_total\{code="5xx"\} 0$/m, 'no 5xx on this server');
  assert.match(mt, /^kiln_http_connections \d+$/m);
});

await test('hostile_default_server_exits_clean', () => stopCleanly(A));

// ---- server B: small limits, to exhaust them with few connections -----------------------------------

await test('hostile_connection_exhaustion', async () => {
  const TIMEOUT = 3, PER_IP = 12, TOTAL = 40;
  const S = await startServer(['--timeout', String(TIMEOUT), '--max-connections-per-ip', String(PER_IP),
    '--max-connections', String(TOTAL)], 'server with small connection limits');
  const partial = 'GET /health HTTP/1.1\r\nHost: x\r\nX-A: ';
  const open = (from, n) => Promise.all(Array.from({ length: n }, () => rawConnect(S, { from, data: partial })));
  const health = async () => (await rawRequest(S, req(['GET /health HTTP/1.1', 'Host: 127.0.0.1', 'Connection: close']),
    { limitMs: 3000 })).status;
  // Refused connections are closed as soon as they are accepted: waits until `n` of `conns` are.
  const refusals = async (conns, n) => {
    for (let t0 = Date.now(); conns.filter((c) => c.closedMs !== null).length < n && Date.now() - t0 < 2000;) await sleep(20);
    return conns.filter((c) => c.closedMs !== null).length;
  };
  const all = [];
  try {
    // one address opens 30 connections that never finish their headers: 12 are held, the rest
    // are closed at once, and /health answers other addresses throughout
    const a = await open('127.0.0.2', 30);
    all.push(...a);
    const refusedA = await refusals(a, 30 - PER_IP);
    assert.equal(30 - refusedA, PER_IP, `127.0.0.2 holds ${30 - refusedA} connections, expected the per-address limit ${PER_IP}`);
    for (let i = 0; i < 3; i++) assert.equal(await health(), 200, '/health from 127.0.0.1 while 127.0.0.2 holds its limit');
    // more addresses fill the total: connections beyond it are closed at once too
    all.push(...await open('127.0.0.3', PER_IP), ...await open('127.0.0.4', PER_IP));
    const c = await open('127.0.0.5', PER_IP);
    all.push(...c);
    const refused = await refusals(c, PER_IP - (TOTAL - 3 * PER_IP));
    const open_ = all.filter((x) => x.closedMs === null).length;
    assert.ok(open_ <= TOTAL, `${open_} connections open, limit ${TOTAL}`);
    assert.ok(refused >= PER_IP - (TOTAL - 3 * PER_IP), `127.0.0.5: only ${refused} of ${PER_IP} refused with ${open_} open`);
    // the read timeout frees every held connection (none answered), and the server serves again
    const limit = (TIMEOUT + 5) * 1000;
    const closed = await Promise.all(all.map((x) => Promise.race([x.closed, sleep(limit).then(() => null)])));
    const stuck = closed.filter((ms) => ms === null).length;
    assert.equal(stuck, 0, `${stuck} connections still open ${limit} ms after they stalled`);
    assert.ok(all.every((x) => x.received() === ''), 'a stalled connection got an answer');
    assert.equal(await health(), 200, '/health after the attack');
    const st = await stats(S);
    assert.ok(st.connections <= 3, `/stats reports ${st.connections} open connections after all closed`);
  } finally {
    for (const x of all) x.sock.destroy();
    await stopCleanly(S);
  }
}, 25000);

// ---- server C: a 1 s read timeout and one row: the server's own waits are longer -----------------

// POSTs JSON over a connection of its own (no pooling: the server closes idle connections after
// 1 s); resolves {status, text, firstGapMs (the longest silence between chunks of the body)}.
function postAlone(srv, path, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const r = http.request({ host: '127.0.0.1', port: srv.port, path, method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } }, (res) => {
      let text = '';
      let last = Date.now();
      let gap = 0;
      res.setEncoding('utf8');
      res.on('data', (d) => { gap = Math.max(gap, Date.now() - last); last = Date.now(); text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text, gapMs: gap }));
      res.on('error', reject);
    });
    r.on('error', reject);
    r.end(data);
  });
}

await test('hostile_timeout_spares_server_waits', async () => {
  const S = await startServer(['--timeout', '1', '--batch', '1', '-c', '8192'], 'server --timeout 1 --batch 1');
  try {
    // A long non-streaming generation (the handler waits), and a stream queued behind it (silent
    // until the row frees): both outlast the 1 s timeout and must still complete. The length
    // doubles until the wait is long enough to mean something on this machine.
    for (let n = 1000; ; n *= 2) {
      const t0 = Date.now();
      const long = postAlone(S, '/v1/completions', { model: MODEL_ID, prompt: 'Once', max_tokens: n, ignore_eos: true, temperature: 0 });
      await sleep(100);
      const stream = postAlone(S, '/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: 'Once' }],
        max_tokens: 8, stream: true });
      const [l, s] = await Promise.all([long, stream]);
      const ms = Date.now() - t0;
      assert.equal(l.status, 200, l.text.slice(0, 200));
      assert.equal(JSON.parse(l.text).usage.completion_tokens, n);
      assert.equal(s.status, 200);
      const events = sseData(s.text);
      assert.equal(events[events.length - 1], '[DONE]', `the queued stream did not end with [DONE]: ${s.text.slice(-200)}`);
      assert.ok(events.some((e) => e.choices?.[0]?.finish_reason), 'the queued stream has no finish_reason');
      console.log(`# ${n} tokens: ${ms} ms, the queued stream waited ${s.gapMs} ms`);
      if (s.gapMs >= 1500) break;
      if (n >= 4000) throw new Skip(`a ${n}-token generation took ${ms} ms: the stream waited only ${s.gapMs} ms`);
    }
  } finally {
    await stopCleanly(S);
  }
}, 60000);

// ---- bodies past the limit ------------------------------------------------------------------------

await test('hostile_body_over_limit', async () => {
  const S = await startServer(['--max-body-mb', '1'], 'server --max-body-mb 1');
  try {
    // A client still sending a declared 2 MiB body when the 413 comes must get to read it (the
    // server reads and drops the rest before closing), every time.
    const big = JSON.stringify({ model: MODEL_ID, prompt: 'a'.repeat(2 << 20) });
    const seen = {};
    for (let i = 0; i < 20; i++) {
      let k;
      try { k = (await post(S, '/v1/completions', big)).status; } catch (e) { k = e.cause?.code || e.message; }
      seen[k] = (seen[k] || 0) + 1;
    }
    assert.deepEqual(seen, { 413: 20 }, `20 requests with a 2 MiB body: ${JSON.stringify(seen)}`);
    const head = req(['POST /v1/completions HTTP/1.1', 'Host: 127.0.0.1', 'Content-Type: application/json',
      'Transfer-Encoding: chunked'], '');
    // a little over the limit: read, dropped, answered with 413
    const mib = 1 << 20;
    const chunk = (n) => `${n.toString(16)}\r\n${'a'.repeat(n)}\r\n`;
    let r = await rawRequest(S, head + chunk(mib) + chunk(mib / 2) + '0\r\n\r\n', { limitMs: 5000 });
    assert.equal(assertRawError(r, 413, 'chunked 1.5 MiB').code, 'request_too_large');
    // a chunk of 2^64 - 1 bytes that keeps coming: cut off once it is far past the limit
    const c = await rawConnect(S, { data: head + 'ffffffffffffffff\r\n' });
    const block = Buffer.alloc(256 << 10, 0x61);
    let sent = 0;
    while (c.closedMs === null && sent < 64 * mib) {
      if (!c.sock.write(block)) await Promise.race([new Promise((res) => c.sock.once('drain', res)), c.closed]);
      sent += block.length;
    }
    const ms = await Promise.race([c.closed, sleep(5000).then(() => null)]);
    assert.ok(ms !== null && sent < 64 * mib, `the connection is still open after ${sent >> 20} MiB of one chunk`);
    assert.equal((await get(S, '/health')).status, 200);
  } finally {
    await stopCleanly(S);
  }
});

console.log(`# hostile tests: ${((Date.now() - t_start) / 1000).toFixed(1)} s`);
process.exit(failed() ? 1 : 0);

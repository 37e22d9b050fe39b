// hostile.test.mjs - `kiln serve` against hostile or broken clients, on loopback only: error
// messages quoting bad bytes (not UTF-8, or long enough to be cut) stay 4xx, never 500. One
// PASS/FAIL/SKIP line per case (see lib.mjs); run by tests/cli/test_server.sh with KILN and
// KILN_MODEL set.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import {
  MODEL, MODEL_ID, assertErrorBody, assertHttpError, failed, get, post, rawRequest, startServer, stats, stopCleanly, test,
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

// ---- server A: the defaults ------------------------------------------------------------------------

const A = await startServer([], 'default server');

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
  const mt = (await get(A, '/metrics')).text;
  for (const k of ['400', '401', '403', '404', '405', '413', '415', '429', '4xx', '5xx'])
    assert.match(mt, new RegExp(`^kiln_errors_total\\{code="${k}"\\} \\d+$`, 'm'), `/metrics has code="${k}"`);
  assert.match(mt, /^kiln_errors_total\{code="5xx"\} 0$/m, 'no 5xx on this server');
});

await test('hostile_default_server_exits_clean', () => stopCleanly(A));

console.log(`# hostile tests: ${((Date.now() - t_start) / 1000).toFixed(1)} s`);
process.exit(failed() ? 1 : 0);

// server.test.mjs - `kiln serve` end to end with the official openai npm client (and raw fetch where
// the client cannot show the wire format): response and chunk shapes, greedy equality with
// `kiln run`, stop strings, max_tokens, seeds, logprobs, every error path, API keys, concurrency,
// client disconnects, the llama-server helper routes and shutdown. One PASS/FAIL/SKIP line per
// case (see lib.mjs); run by tests/cli/test_server.sh with KILN and KILN_MODEL set.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import OpenAI from 'openai';
import {
  KILN, MODEL, MODEL_ID, Skip, assertClientError, assertErrorBody, assertHttpError, failed, get, post, sleep,
  sseData, startServer, stats, stopCleanly, test, waitIdle,
} from './lib.mjs';

const PROMPT = 'Once upon a time';
const LONG = 3000;          // tokens of a "long" generation (on a server with -c 8192): seconds, not ms
const t_start = Date.now();

if (!existsSync(MODEL)) {
  console.log(`SKIP server_tests: no model ${MODEL}`);
  process.exit(0);
}
// A hang anywhere must not hang the suite: give up after 150 s (test_server.sh also has a limit).
setTimeout(() => {
  console.log('FAIL server_tests: the suite did not finish within 150 s');
  process.exit(1);
}, 150000).unref();

// ---- helpers ----------------------------------------------------------------------------------------

const chatReq = (content, extra = {}) => ({
  model: MODEL_ID, messages: [{ role: 'user', content }], temperature: 0, ...extra,
});
const cmplReq = (prompt, extra = {}) => ({ model: MODEL_ID, prompt, temperature: 0, ...extra });

// Streams a chat completion through the client; returns the chunks, the text and the final state.
async function chatStream(client, params, opts) {
  const stream = await client.chat.completions.create({ ...params, stream: true }, opts);
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return summarizeChat(chunks);
}

function summarizeChat(chunks) {
  let text = '';
  let finish = null;
  let usage = null;
  let role = null;
  const logprobs = [];
  for (const c of chunks) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta?.role && role === null) role = ch.delta.role;
      if (typeof ch.delta?.content === 'string') text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
      if (ch.logprobs?.content) logprobs.push(...ch.logprobs.content);
    }
  }
  return { chunks, text, finish, usage, role, logprobs };
}

async function cmplStream(client, params, opts) {
  const stream = await client.completions.create({ ...params, stream: true }, opts);
  const chunks = [];
  let text = '';
  let finish = null;
  let usage = null;
  for await (const c of stream) {
    chunks.push(c);
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.text ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { chunks, text, finish, usage };
}

function assertUsage(u, what) {
  assert.ok(u, `${what}: no usage`);
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens'])
    assert.ok(Number.isInteger(u[k]) && u[k] >= 0, `${what}: usage.${k} = ${u[k]}`);
  assert.ok(u.prompt_tokens > 0, `${what}: usage.prompt_tokens = 0`);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: total_tokens`);
  assert.ok(Number.isInteger(u.prompt_tokens_details?.cached_tokens), `${what}: usage.prompt_tokens_details.cached_tokens`);
}

// `kiln run`'s greedy continuation of PROMPT (stdout is the prompt, then the text, then a newline).
function cliContinuation(n) {
  const r = spawnSync(KILN, ['run', '-m', MODEL, '-p', PROMPT, '-n', String(n), '--temp', '0'], { encoding: 'utf8' });
  assert.equal(r.status, 0, `kiln run exited ${r.status}: ${r.stderr}`);
  assert.ok(r.stdout.startsWith(PROMPT), `kiln run output does not start with the prompt: ${r.stdout.slice(0, 100)}`);
  return r.stdout.slice(PROMPT.length).replace(/\n$/, '');
}

// ---- server 1: defaults ------------------------------------------------------------------------------

let S;
let greedy40 = null;        // the completion of PROMPT, 40 tokens, temperature 0

await test('server_starts', async () => {
  S = await startServer([], 'default server');
  assert.equal(S.modelId, MODEL_ID);
});
if (!S) process.exit(1);
const client = S.client();

await test('server_chat_nonstream', async () => {
  const t0 = Math.floor(Date.now() / 1000);
  const r = await client.chat.completions.create(chatReq(PROMPT, { max_tokens: 40 }));
  assert.match(r.id, /^chatcmpl-[A-Za-z0-9]+$/);
  assert.equal(r.object, 'chat.completion');
  assert.ok(Number.isInteger(r.created) && Math.abs(r.created - t0) < 60, `created ${r.created}`);
  assert.equal(r.model, MODEL_ID);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0, 'empty content');
  assert.ok(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assertUsage(r.usage, 'chat');
  assert.equal(r.usage.completion_tokens, 40, 'completion_tokens (40 expected: stories260K does not stop that early)');
  assert.equal(c.finish_reason, 'length');
});

await test('server_chat_stream', async () => {
  const req = chatReq(PROMPT, { max_tokens: 40 });
  const whole = await client.chat.completions.create(req);
  const s = await chatStream(client, { ...req, stream_options: { include_usage: true } });
  assert.ok(s.chunks.length > 3, `only ${s.chunks.length} chunks`);
  const id = s.chunks[0].id;
  assert.match(id, /^chatcmpl-/);
  for (const c of s.chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, id, 'every chunk has the same id');
    assert.equal(c.model, MODEL_ID);
  }
  assert.equal(s.chunks[0].choices[0].delta.role, 'assistant', 'the first delta carries the role');
  assert.equal(s.text, whole.choices[0].message.content, 'streamed text differs from the non-streaming text');
  const last = s.chunks[s.chunks.length - 1];
  assert.deepEqual(last.choices, [], 'the usage chunk has empty choices');
  assertUsage(last.usage, 'stream usage');
  assert.deepEqual(last.usage, whole.usage);
  const fin = s.chunks[s.chunks.length - 2];
  assert.equal(fin.choices[0].finish_reason, 'length', 'finish_reason on the chunk before the usage chunk');
  for (const c of s.chunks.slice(0, -2)) assert.equal(c.choices[0].finish_reason, null);
  // the wire format: text/event-stream, "data: {...}\n\n" events, ending with "data: [DONE]"
  const raw = await post(S, '/v1/chat/completions', { ...req, stream: true, stream_options: { include_usage: true } });
  assert.equal(raw.status, 200);
  assert.match(raw.headers.get('content-type'), /^text\/event-stream/);
  assert.ok(raw.text.endsWith('data: [DONE]\n\n'), `the stream ends with ${JSON.stringify(raw.text.slice(-40))}`);
  const ev = sseData(raw.text);
  assert.equal(ev.filter((e) => e === '[DONE]').length, 1);
  assert.equal(summarizeChat(ev.slice(0, -1)).text, s.text);
});

await test('server_completions_nonstream', async () => {
  const r = await client.completions.create(cmplReq(PROMPT, { max_tokens: 40 }));
  assert.match(r.id, /^cmpl-[A-Za-z0-9]+$/);
  assert.equal(r.object, 'text_completion');
  assert.ok(Number.isInteger(r.created));
  assert.equal(r.model, MODEL_ID);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assertUsage(r.usage, 'completions');
  assert.equal(r.usage.completion_tokens, 40);
  greedy40 = r.choices[0].text;
});

await test('server_completions_stream', async () => {
  const req = cmplReq(PROMPT, { max_tokens: 40 });
  const whole = greedy40 ?? (await client.completions.create(req)).choices[0].text;
  const s = await cmplStream(client, { ...req, stream_options: { include_usage: true } });
  for (const c of s.chunks) {
    assert.equal(c.object, 'text_completion');
    assert.match(c.id, /^cmpl-/);
    assert.equal(c.id, s.chunks[0].id);
  }
  assert.equal(s.text, whole, 'streamed text differs from the non-streaming text');
  assert.equal(s.finish, 'length');
  const last = s.chunks[s.chunks.length - 1];
  assert.deepEqual(last.choices, [], 'the usage chunk has empty choices');
  assertUsage(last.usage, 'stream usage');
  assert.equal(last.usage.completion_tokens, 40);
  const raw = await post(S, '/v1/completions', { ...req, stream: true });
  assert.ok(raw.text.endsWith('data: [DONE]\n\n'), 'the raw stream ends with data: [DONE]');
});

await test('server_greedy_equals_cli', async () => {
  const cli = cliContinuation(40);
  assert.ok(cli.length > 20, `short CLI output ${JSON.stringify(cli)}`);
  const c = await client.completions.create(cmplReq(PROMPT, { max_tokens: 40 }));
  assert.equal(c.choices[0].text, cli, '/v1/completions differs from kiln run');
  const ch = await client.chat.completions.create(chatReq(PROMPT, { max_tokens: 40 }));
  assert.equal(ch.choices[0].message.content, cli, '/v1/chat/completions differs from kiln run');
});

await test('server_stop_strings', async () => {
  const base = (await client.completions.create(cmplReq(PROMPT, { max_tokens: 60 }))).choices[0].text;
  // a word from the middle whose first occurrence is there
  let word = null;
  let at = -1;
  for (const m of base.matchAll(/[A-Za-z]{4,}/g)) {
    if (m.index >= base.length * 0.3 && base.indexOf(m[0]) === m.index) { word = m[0]; at = m.index; break; }
  }
  assert.ok(word, `no usable stop word in ${JSON.stringify(base)}`);
  const want = base.slice(0, at);
  const check = (text, finish, what) => {
    assert.equal(text, want, `${what}: stop ${JSON.stringify(word)}`);
    assert.ok(!text.includes(word), `${what}: contains the stop text`);
    assert.equal(finish, 'stop', `${what}: finish_reason`);
  };
  let r = await client.completions.create(cmplReq(PROMPT, { max_tokens: 60, stop: word }));
  check(r.choices[0].text, r.choices[0].finish_reason, 'completions, stop string');
  r = await client.completions.create(cmplReq(PROMPT, { max_tokens: 60, stop: ['qqqzzz', word] }));
  check(r.choices[0].text, r.choices[0].finish_reason, 'completions, stop array');
  const s = await cmplStream(client, cmplReq(PROMPT, { max_tokens: 60, stop: [word] }));
  check(s.text, s.finish, 'completions, streaming');
  const ch = await client.chat.completions.create(chatReq(PROMPT, { max_tokens: 60, stop: word }));
  check(ch.choices[0].message.content, ch.choices[0].finish_reason, 'chat, stop string');
  const cs = await chatStream(client, chatReq(PROMPT, { max_tokens: 60, stop: [word, 'qqqzzz'] }));
  check(cs.text, cs.finish, 'chat, streaming');
});

await test('server_max_tokens_length', async () => {
  for (const n of [1, 7, 25]) {
    const r = await client.completions.create(cmplReq('Lily', { max_tokens: n, ignore_eos: true, temperature: 1, seed: n }));
    assert.equal(r.choices[0].finish_reason, 'length', `completions max_tokens ${n}`);
    assert.equal(r.usage.completion_tokens, n, `completions max_tokens ${n}`);
    const c = await client.chat.completions.create(chatReq('Lily', { max_tokens: n, ignore_eos: true }));
    assert.equal(c.choices[0].finish_reason, 'length', `chat max_tokens ${n}`);
    assert.equal(c.usage.completion_tokens, n, `chat max_tokens ${n}`);
  }
  const c = await client.chat.completions.create(chatReq('Lily', { max_completion_tokens: 9, ignore_eos: true }));
  assert.equal(c.usage.completion_tokens, 9, 'max_completion_tokens');
});

await test('server_seed_reproducible', async () => {
  const sample = async (seed) =>
    (await client.completions.create(cmplReq('Lily', { max_tokens: 40, temperature: 1.0, seed }))).choices[0].text;
  const a = await sample(42);
  const b = await sample(42);
  assert.equal(a, b, 'the same seed gave different texts');
  const others = [await sample(43), await sample(44), await sample(45)];
  assert.ok(others.some((t) => t !== a), 'seeds 42..45 all gave the same text');
  const ca = await client.chat.completions.create(chatReq('Lily', { max_tokens: 40, temperature: 1.0, seed: 7 }));
  const cb = await client.chat.completions.create(chatReq('Lily', { max_tokens: 40, temperature: 1.0, seed: 7 }));
  assert.equal(ca.choices[0].message.content, cb.choices[0].message.content, 'chat: the same seed gave different texts');
});

function checkChatLogprobEntries(entries, text, n, what) {
  assert.equal(entries.length, n, `${what}: ${entries.length} logprob entries for ${n} tokens`);
  for (const [i, e] of entries.entries()) {
    assert.equal(typeof e.token, 'string', `${what}[${i}].token`);
    assert.ok(typeof e.logprob === 'number' && e.logprob <= 0, `${what}[${i}].logprob ${e.logprob}`);
    assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256), `${what}[${i}].bytes`);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')], `${what}[${i}]: bytes are not the token's UTF-8`);
    assert.equal(e.top_logprobs.length, 3, `${what}[${i}]: ${e.top_logprobs.length} top_logprobs`);
    for (let k = 0; k < 3; k++) {
      const t = e.top_logprobs[k];
      assert.equal(typeof t.token, 'string');
      assert.ok(t.logprob <= 0 && Array.isArray(t.bytes), `${what}[${i}].top_logprobs[${k}]`);
      if (k) assert.ok(t.logprob <= e.top_logprobs[k - 1].logprob, `${what}[${i}]: top_logprobs not sorted descending`);
    }
    assert.equal(e.top_logprobs[0].token, e.token, `${what}[${i}]: the greedy token is not top_logprobs[0]`);
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4, `${what}[${i}]: logprob differs from top_logprobs[0]`);
  }
  assert.equal(entries.map((e) => e.token).join(''), text, `${what}: the tokens do not spell the text`);
}

await test('server_logprobs_chat', async () => {
  const r = await client.chat.completions.create(chatReq(PROMPT, { max_tokens: 20, logprobs: true, top_logprobs: 3 }));
  const lp = r.choices[0].logprobs;
  assert.ok(lp && Array.isArray(lp.content), `choices[0].logprobs = ${JSON.stringify(lp)}`);
  checkChatLogprobEntries(lp.content, r.choices[0].message.content, r.usage.completion_tokens, 'logprobs.content');
  const plain = await client.chat.completions.create(chatReq(PROMPT, { max_tokens: 20 }));
  assert.equal(plain.choices[0].logprobs, null, 'logprobs is null when not asked for');
});

await test('server_logprobs_chat_stream', async () => {
  const s = await chatStream(client, chatReq(PROMPT, { max_tokens: 20, logprobs: true, top_logprobs: 3, stream_options: { include_usage: true } }));
  checkChatLogprobEntries(s.logprobs, s.text, s.usage.completion_tokens, 'stream logprobs.content');
  for (const c of s.chunks)
    if (c.choices[0]?.delta?.content) assert.ok(c.choices[0].logprobs?.content?.length > 0, 'a content chunk without logprobs');
});

await test('server_logprobs_completions', async () => {
  const r = await client.completions.create(cmplReq(PROMPT, { max_tokens: 20, logprobs: 2 }));
  const lp = r.choices[0].logprobs;
  const text = r.choices[0].text;
  assert.ok(lp, 'no logprobs');
  const n = r.usage.completion_tokens;
  for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'])
    assert.ok(Array.isArray(lp[k]) && lp[k].length === n, `logprobs.${k}: length ${lp[k]?.length}, expected ${n}`);
  assert.equal(lp.tokens.join(''), text, 'the tokens do not spell the text');
  for (let i = 0; i < n; i++) {
    assert.ok(lp.token_logprobs[i] <= 0, `token_logprobs[${i}]`);
    const top = lp.top_logprobs[i];
    const keys = Object.keys(top);
    assert.ok(keys.length >= 1 && keys.length <= 2, `top_logprobs[${i}] has ${keys.length} entries`);
    const best = Math.max(...Object.values(top));
    assert.ok(Math.abs(top[lp.tokens[i]] - best) < 1e-4, `top_logprobs[${i}]: the greedy token is not the best`);
    if (i) assert.equal(lp.text_offset[i] - lp.text_offset[i - 1], Buffer.byteLength(lp.tokens[i - 1]), `text_offset[${i}]`);
  }
});

// The prefix cache: turn 2 of a chat reuses at least turn 1's prompt, with the same output as a
// server without a cache; concurrent requests sharing a prefix both hit.
await test('server_prompt_cache_multi_turn', async () => {
  const system = { role: 'system', content: 'Lily and Ben were friends who liked to play in the park every day.' };
  const turn1 = [system, { role: 'user', content: 'One day they found a big red ball under a tree.' }];
  const r1 = await client.chat.completions.create({ model: MODEL_ID, messages: turn1, temperature: 0, max_tokens: 24 });
  const turn2 = [...turn1, { role: 'assistant', content: r1.choices[0].message.content },
                 { role: 'user', content: 'Then the sun went down.' }];
  const r2 = await client.chat.completions.create({ model: MODEL_ID, messages: turn2, temperature: 0, max_tokens: 24 });
  const cached = r2.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= r1.usage.prompt_tokens, `turn 2 cached ${cached} < turn 1 prompt ${r1.usage.prompt_tokens}`);
  const off = await startServer(['--prompt-cache', '0'], 'server --prompt-cache 0');
  try {
    const c2 = await off.client().chat.completions.create({ model: MODEL_ID, messages: turn2, temperature: 0, max_tokens: 24 });
    assert.equal(c2.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(r2.choices[0].message.content, c2.choices[0].message.content, 'a cache hit changed the output');
  } finally {
    await stopCleanly(off);
  }
  const [a, b] = await Promise.all([0, 1].map((k) => client.chat.completions.create(
    { model: MODEL_ID, messages: [...turn2, { role: 'user', content: k ? 'And then?' : 'What next?' }], temperature: 0, max_tokens: 8 })));
  assert.ok(a.usage.prompt_tokens_details.cached_tokens >= r2.usage.prompt_tokens - 1, 'concurrent request a missed');
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= r2.usage.prompt_tokens - 1, 'concurrent request b missed');
  const st = await stats(S);
  assert.ok(st.prompt_cache && st.prompt_cache.hits >= 3 && st.prompt_cache.entries >= 1, JSON.stringify(st.prompt_cache));
});

await test('server_error_malformed_json', async () => {
  for (const path of ['/v1/chat/completions', '/v1/completions', '/tokenize']) {
    assertHttpError(await post(S, path, '{"model": "x", "messages": ['), 400, `${path} truncated JSON`);
    assertHttpError(await post(S, path, '[1, 2]'), 400, `${path} a JSON array`);
    assertHttpError(await post(S, path, ''), 400, `${path} an empty body`);
  }
});

// Bad requests, each sent raw (status + body shape + param) and through the client (error class).
async function badRequest(path, body, param, what) {
  const e = assertHttpError(await post(S, path, body), 400, what);
  if (param) assert.equal(e.param, param, `${what}: error.param`);
  const call = path.includes('chat') ? client.chat.completions.create(body) : client.completions.create(body);
  const ce = await assertClientError(call, OpenAI.BadRequestError, 400, `${what} (client)`);
  if (param) assert.equal(ce.param, param, `${what} (client): error.param`);
}

await test('server_error_wrong_types', async () => {
  const msgs = [{ role: 'user', content: 'hi' }];
  await badRequest('/v1/chat/completions', { model: MODEL_ID, messages: 'hi' }, 'messages', 'messages a string');
  await badRequest('/v1/chat/completions', { model: MODEL_ID }, 'messages', 'no messages');
  await badRequest('/v1/chat/completions', { model: MODEL_ID, messages: [] }, 'messages', 'messages empty');
  await badRequest('/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'wizard', content: 'hi' }] }, 'messages', 'unknown role');
  await badRequest('/v1/chat/completions', { model: MODEL_ID, messages: msgs, temperature: 'hot' }, 'temperature', 'temperature a string');
  await badRequest('/v1/chat/completions', { model: MODEL_ID, messages: msgs, max_tokens: -1 }, 'max_tokens', 'max_tokens negative');
  await badRequest('/v1/chat/completions', { model: MODEL_ID, messages: msgs, max_tokens: 1.5 }, 'max_tokens', 'max_tokens fractional');
  await badRequest('/v1/chat/completions', { model: MODEL_ID, messages: msgs, stream: 'yes' }, 'stream', 'stream a string');
  await badRequest('/v1/chat/completions', { model: MODEL_ID, messages: msgs, stop: 5 }, 'stop', 'stop a number');
  await badRequest('/v1/completions', { model: MODEL_ID, prompt: 5 }, 'prompt', 'prompt a number');
  await badRequest('/v1/completions', { model: MODEL_ID, prompt: 'hi', max_tokens: '5' }, 'max_tokens', 'max_tokens a string');
});

await test('server_error_out_of_range', async () => {
  const m = { model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }] };
  await badRequest('/v1/chat/completions', { ...m, temperature: 5 }, 'temperature', 'temperature 5');
  await badRequest('/v1/chat/completions', { ...m, temperature: -0.5 }, 'temperature', 'temperature -0.5');
  await badRequest('/v1/chat/completions', { ...m, top_p: 2 }, 'top_p', 'top_p 2');
  await badRequest('/v1/chat/completions', { ...m, logprobs: true, top_logprobs: 50 }, 'top_logprobs', 'top_logprobs 50');
  await badRequest('/v1/chat/completions', { ...m, presence_penalty: 3 }, 'presence_penalty', 'presence_penalty 3');
  await badRequest('/v1/chat/completions', { ...m, logit_bias: { 999999: 1 } }, 'logit_bias', 'logit_bias token out of vocab');
  await badRequest('/v1/completions', { model: MODEL_ID, prompt: 'hi', logprobs: 50 }, 'logprobs', 'completions logprobs 50');
});

await test('server_error_n_2', async () => {
  await badRequest('/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], n: 17 }, 'n', 'chat n above the cap');
  await badRequest('/v1/completions', { model: MODEL_ID, prompt: 'hi', n: 0 }, 'n', 'completions n=0');
});

await test('server_error_unknown_route', async () => {
  for (const [method, path] of [['GET', '/v1/nope'], ['POST', '/v1/nope'], ['GET', '/nope'], ['GET', '/v1/chat/completions/x']]) {
    const r = method === 'GET' ? await get(S, path) : await post(S, path, {});
    assertHttpError(r, 404, `${method} ${path}`);
  }
  await assertClientError(client.get('/nope'), OpenAI.NotFoundError, 404, 'client GET /v1/nope');
  await assertClientError(client.post('/nope', { body: {} }), OpenAI.NotFoundError, 404, 'client POST /v1/nope');
});

await test('server_error_wrong_method', async () => {
  for (const [method, path] of [['GET', '/v1/chat/completions'], ['GET', '/v1/completions'], ['DELETE', '/v1/models'],
    ['PUT', '/tokenize'], ['POST', '/health']]) {
    const r = method === 'POST' ? await post(S, path, {}) : await get(S, path, {}, method);
    assertHttpError(r, 405, `${method} ${path}`);
  }
  const e = await assertClientError(client.get('/chat/completions'), OpenAI.APIError, 405, 'client GET /v1/chat/completions');
  assert.equal(e.constructor, OpenAI.APIError);
});

await test('server_unharmed_after_errors', async () => {
  const r = await client.completions.create(cmplReq(PROMPT, { max_tokens: 40 }));
  assert.equal(r.choices[0].text, greedy40);
  assert.equal((await get(S, '/health')).status, 200);
});

await test('server_no_api_key_any_header', async () => {
  // without --api-key: no Authorization header, a random one, and the client's key all work
  const body = cmplReq(PROMPT, { max_tokens: 5 });
  assert.equal((await post(S, '/v1/completions', body)).status, 200);
  assert.equal((await post(S, '/v1/completions', body, { authorization: 'Bearer whatever' })).status, 200);
  assert.equal((await post(S, '/v1/completions', body, { authorization: 'Basic Zm9vOmJhcg==' })).status, 200);
  const c = S.client({ apiKey: 'some-random-key' });
  assert.equal((await c.completions.create(body)).choices[0].finish_reason, 'length');
});

await test('server_tokenize_detokenize', async () => {
  let r = await post(S, '/tokenize', { content: PROMPT });
  assert.equal(r.status, 200, r.text);
  const ids = r.json.tokens;
  assert.ok(Array.isArray(ids) && ids.length >= 4 && ids.every(Number.isInteger), `tokens ${JSON.stringify(ids)}`);
  r = await post(S, '/tokenize', { content: PROMPT, with_pieces: true });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.tokens.map((t) => t.id), ids, 'with_pieces ids');
  const pieces = r.json.tokens.map((t) => t.piece).join('');
  assert.ok(pieces === PROMPT || pieces === ' ' + PROMPT, `pieces spell ${JSON.stringify(pieces)}`);
  r = await post(S, '/detokenize', { tokens: ids });
  assert.equal(r.status, 200, r.text);
  // SentencePiece's dummy prefix shows as one leading space (llama-server does the same)
  assert.ok(r.json.content === PROMPT || r.json.content === ' ' + PROMPT, `detokenize gave ${JSON.stringify(r.json.content)}`);
  r = await post(S, '/tokenize', { content: r.json.content.replace(/^ /, '') });
  assert.deepEqual(r.json.tokens, ids, 'tokenize(detokenize(ids)) != ids');
  assertHttpError(await post(S, '/tokenize', { content: 5 }), 400, 'tokenize content a number');
  assertHttpError(await post(S, '/detokenize', { tokens: [1, 1e9] }), 400, 'detokenize id out of vocab');
  assertHttpError(await post(S, '/detokenize', { tokens: 'abc' }), 400, 'detokenize tokens a string');
});

await test('server_apply_template', async () => {
  const r = await post(S, '/apply-template', { messages: [{ role: 'user', content: PROMPT }] });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.prompt, PROMPT, 'stories260K has no chat template: the prompt is the message content');
  assertHttpError(await post(S, '/apply-template', { messages: 'x' }), 400, 'apply-template messages a string');
});

await test('server_models', async () => {
  const r = await get(S, '/v1/models');
  assert.equal(r.status, 200);
  assert.equal(r.json.object, 'list');
  assert.deepEqual(r.json.data.map((m) => m.id), [MODEL_ID]);
  const list = [];
  for await (const m of client.models.list()) list.push(m);
  assert.equal(list.length, 1);
  assert.equal(list[0].id, MODEL_ID);
  assert.equal(list[0].object, 'model');
  const m = await client.models.retrieve(MODEL_ID);
  assert.equal(m.id, MODEL_ID);
  assert.equal((await get(S, `/v1/models/${MODEL_ID}`)).status, 200);
  assertHttpError(await get(S, '/v1/models/nope'), 404, '/v1/models/nope');
  await assertClientError(client.models.retrieve('nope'), OpenAI.NotFoundError, 404, 'client models.retrieve(nope)');
});

await test('server_health_metrics_stats', async () => {
  let r = await get(S, '/health');
  assert.equal(r.status, 200);
  assert.deepEqual(r.json, { status: 'ok' });
  r = await get(S, '/metrics');
  assert.equal(r.status, 200);
  assert.match(r.text, /^kiln_requests_total \d+$/m);
  assert.match(r.text, /^kiln_errors_total\{code="400"\} [1-9]\d*$/m, 'the 400s sent above are counted');
  assert.match(r.text, /^kiln_errors_total\{code="404"\} [1-9]\d*$/m, 'the 404s sent above are counted');
  const s = await stats(S);
  assert.ok(Number.isInteger(s.requests) && s.requests > 50, `requests ${s.requests}`);
  assert.ok(Number.isInteger(s.completions) && s.completions > 10, `completions ${s.completions}`);
  assert.equal(s.active, 0);
  assert.equal(s.queued, 0);
});

await test('server_exit_clean_default', () => stopCleanly(S));

// ---- server 2: a 64-token context ------------------------------------------------------------------

await test('server_error_context_length', async () => {
  const s = await startServer(['-c', '64'], 'server -c 64');
  try {
    const long = 'Once upon a time there was a little girl named Lily. '.repeat(8);
    const c = s.client();
    let e = assertHttpError(await post(s, '/v1/chat/completions', chatReq(long)), 400, 'chat long prompt');
    assert.equal(e.code, 'context_length_exceeded');
    e = assertHttpError(await post(s, '/v1/completions', cmplReq(long)), 400, 'completions long prompt');
    assert.equal(e.code, 'context_length_exceeded');
    e = await assertClientError(c.chat.completions.create(chatReq(long)), OpenAI.BadRequestError, 400, 'client chat long prompt');
    assert.equal(e.code, 'context_length_exceeded');
    e = await assertClientError(c.completions.create(cmplReq(long)), OpenAI.BadRequestError, 400, 'client completions long prompt');
    assert.equal(e.code, 'context_length_exceeded');
    // a prompt that fits still works, and generation stops at the end of the context
    const r = await c.completions.create(cmplReq(PROMPT, { max_tokens: 200, ignore_eos: true }));
    assert.equal(r.choices[0].finish_reason, 'length');
    // 64 positions, plus the last token sampled from the last position's logits (never evaluated)
    assert.ok(r.usage.total_tokens <= 65 && r.usage.completion_tokens < 200, `usage ${JSON.stringify(r.usage)} with a context of 64`);
  } finally {
    await stopCleanly(s);
  }
});

// ---- server 3: a 1 MiB body limit ------------------------------------------------------------------

await test('server_error_body_too_large', async () => {
  const s = await startServer(['--max-body-mb', '1'], 'server --max-body-mb 1');
  try {
    const big = chatReq('a'.repeat(2 << 20), { max_tokens: 1 });
    assertHttpError(await post(s, '/v1/chat/completions', big), 413, '2 MiB body');
    await assertClientError(s.client().chat.completions.create(big), OpenAI.APIError, 413, 'client 2 MiB body');
    const r = await s.client().chat.completions.create(chatReq(PROMPT, { max_tokens: 40 }));
    assert.equal(r.choices[0].message.content, greedy40, 'a normal request after the 413s');
  } finally {
    await stopCleanly(s);
  }
});

// ---- server 4: a queue of one ------------------------------------------------------------------------

await test('server_error_queue_full', async () => {
  const s = await startServer(['--batch', '1', '--max-queue', '1'], 'server --batch 1 --max-queue 1');
  try {
    const c = s.client();
    const req = cmplReq(PROMPT, { max_tokens: 1500, ignore_eos: true });
    let raw429 = 0;
    let client429 = 0;
    let ok = 0;
    // one runs (a stream, running once its first chunk came), one waits, the rest must be refused; fired
    // together, half raw and half through the client. (Fired all at once, a second request could find the
    // first still queued, not yet running, and be refused too.)
    for (let round = 0; round < 3 && !(raw429 && client429); round++) {
      const running = (await c.completions.create({ ...req, stream: true }))[Symbol.asyncIterator]();
      assert.equal((await running.next()).done, false, 'the running stream has a first chunk');
      const drain = async (it) => { while (!(await it.next()).done); return { streamed: true }; };
      const calls = [drain(running)];
      for (let i = 0; i < 10; i++) {
        calls.push(i % 2 === 0
          ? post(s, '/v1/completions', req).then((r) => ({ raw: r }))
          : c.completions.create(req).then((r) => ({ ok: r }), (e) => ({ err: e })));
      }
      for (const r of await Promise.all(calls)) {
        if (r.streamed) ok++;
        else if (r.raw?.status === 429) {
          assertHttpError(r.raw, 429, 'raw 429');
          raw429++;
        } else if (r.raw) {
          assert.equal(r.raw.status, 200, `a request that was not refused failed: ${r.raw.text.slice(0, 300)}`);
          assert.equal(r.raw.json.usage.completion_tokens, 1500);
          ok++;
        } else if (r.err) {
          assert.ok(r.err instanceof OpenAI.RateLimitError, `client error ${r.err.constructor.name}: ${r.err.message}`);
          assert.equal(r.err.status, 429);
          assertErrorBody({ error: r.err.error }, 'client 429');
          client429++;
        } else {
          assert.equal(r.ok.usage.completion_tokens, 1500);
          assert.equal(r.ok.choices[0].finish_reason, 'length');
          ok++;
        }
      }
    }
    assert.ok(raw429 > 0 && client429 > 0, `429s: ${raw429} raw, ${client429} client (${ok} completed)`);
    assert.ok(ok >= 2, `only ${ok} requests completed`); // per round: the stream and the one queued
    await waitIdle(s);
    const r = await c.completions.create(cmplReq(PROMPT, { max_tokens: 40 }));
    assert.equal(r.choices[0].text, greedy40, 'a normal request after the 429s');
    const m = await get(s, '/metrics');
    assert.match(m.text, /^kiln_errors_total\{code="429"\} [1-9]\d*$/m, '429s are counted');
  } finally {
    await stopCleanly(s);
  }
});

// ---- server 5: an API key ----------------------------------------------------------------------------

await test('server_api_key', async () => {
  const s = await startServer(['--api-key', 'sekret'], 'server --api-key');
  try {
    const body = chatReq(PROMPT, { max_tokens: 10 });
    assertHttpError(await post(s, '/v1/chat/completions', body), 401, 'no key');
    assertHttpError(await post(s, '/v1/chat/completions', body, { authorization: 'Bearer wrong' }), 401, 'wrong key');
    assertHttpError(await post(s, '/v1/chat/completions', body, { authorization: 'Bearer sekretX' }), 401, 'key with a suffix');
    assertHttpError(await post(s, '/v1/chat/completions', body, { authorization: 'Bearer sekre' }), 401, 'key prefix');
    assertHttpError(await post(s, '/v1/chat/completions', body, { authorization: 'sekret' }), 401, 'no Bearer');
    await assertClientError(s.client({ apiKey: 'wrong' }).chat.completions.create(body), OpenAI.AuthenticationError, 401, 'client wrong key');
    const ok = await s.client({ apiKey: 'sekret' }).chat.completions.create(body);
    assert.equal(ok.choices[0].message.role, 'assistant');
    assert.equal((await post(s, '/v1/chat/completions', body, { authorization: 'Bearer sekret' })).status, 200);
    const h = await get(s, '/health');
    assert.equal(h.status, 200, '/health needs no key');
    assert.deepEqual(h.json, { status: 'ok' });
  } finally {
    await stopCleanly(s);
  }
});

await test('server_api_key_all_generation_routes', async () => {
  // the unprefixed aliases of the generation routes must not bypass the key
  const s = await startServer(['--api-key', 'sekret'], 'server --api-key');
  try {
    for (const [path, body] of [['/chat/completions', chatReq(PROMPT, { max_tokens: 5 })], ['/completions', cmplReq(PROMPT, { max_tokens: 5 })]]) {
      const r = await post(s, path, body);
      assertHttpError(r, 401, `POST ${path} without a key`);
      assert.equal((await post(s, path, body, { authorization: 'Bearer sekret' })).status, 200, `POST ${path} with the key`);
    }
  } finally {
    await stopCleanly(s);
  }
});

// ---- server 6: a long context, for long generations ----------------------------------------------

let L;
let tFull = null;           // ms of a LONG-token generation on L
await test('server_long_starts', async () => {
  L = await startServer(['-c', '8192'], 'server -c 8192');
});

await test('server_concurrent_streams', async () => {
  if (!L) throw new Skip('no server');
  const c = L.client();
  const prompts = ['Once upon a time', 'Lily', 'The cat', 'One day, Tom'];
  const alone = [];
  for (const p of prompts) alone.push((await chatStream(c, chatReq(p, { max_tokens: 48 }))).text);
  // 32 clients on the default --batch 8: 8 rows generate, the rest wait in the queue and join as
  // rows free up; every output equals the same request made alone.
  const runs = await Promise.all(Array.from({ length: 32 }, (_, i) =>
    chatStream(c, chatReq(prompts[i % 4], { max_tokens: 48, seed: i, stream_options: { include_usage: true } }))));
  runs.forEach((r, i) => {
    assert.equal(r.text, alone[i % 4], `client ${i}: the output differs from the same request made alone`);
    assert.ok(r.finish, `client ${i}: no finish_reason`);
    assert.ok(r.usage, `client ${i}: no usage chunk`);
    assert.equal(r.role, 'assistant');
  });
  assert.equal(new Set(runs.map((r) => r.chunks[0].id)).size, 32, 'ids are unique');
  await waitIdle(L);
});

await test('server_responsive_during_generation', async () => {
  if (!L) throw new Skip('no server');
  const c = L.client();
  const t0 = Date.now();
  let tDone = null;
  const long = c.completions.create(cmplReq(PROMPT, { max_tokens: LONG, ignore_eos: true })).then((r) => {
    tDone = Date.now();
    return r;
  });
  while ((await stats(L)).active !== 1) {
    assert.equal(tDone, null, 'the long generation ended before it was seen running');
    await sleep(10);
  }
  let worst = 0;
  for (let round = 0; round < 3; round++) {
    for (const path of ['/health', '/v1/models', '/metrics']) {
      const a = Date.now();
      const r = await get(L, path);
      const ms = Date.now() - a;
      worst = Math.max(worst, ms);
      assert.equal(r.status, 200, path);
      assert.ok(ms < 1000, `${path} took ${ms} ms during a generation`);
    }
  }
  const running = tDone === null;
  const r = await long;
  tFull = tDone - t0;
  assert.equal(r.usage.completion_tokens, LONG);
  assert.ok(running, `the generation (${tFull} ms) ended before the probes did (worst ${worst} ms): not meaningful`);
}, 120000);   // the whole long generation is awaited: tens of seconds in a sanitizer build on a busy machine

await test('server_client_disconnect_cancels', async () => {
  if (!L) throw new Skip('no server');
  const c = L.client();
  const before = await stats(L);
  const ac = new AbortController();
  let chunks = 0;
  let aborted = false;
  let tAbort = 0;
  try {
    const stream = await c.completions.create(cmplReq(PROMPT, { max_tokens: LONG, ignore_eos: true, stream: true }), { signal: ac.signal });
    for await (const ch of stream) {
      if (ch.choices[0]?.text && ++chunks === 3) {
        tAbort = Date.now();
        ac.abort();
      }
    }
    aborted = ac.signal.aborted;   // the client's stream ends quietly when aborted
  } catch (e) {
    aborted = e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError';
    if (!aborted) throw e;
  }
  assert.ok(aborted, `the stream ended without being aborted (${chunks} chunks)`);
  let idleMs;
  for (;;) {
    const s = await stats(L);
    idleMs = Date.now() - tAbort;
    if (s.active === 0 && s.queued === 0) break;
    assert.ok(idleMs < 5000, `the generation still runs ${idleMs} ms after the client left`);
    await sleep(10);
  }
  const after = await stats(L);
  const limit = tFull ? Math.min(2000, tFull / 2) : 2000;
  assert.ok(idleMs < limit, `generation ended ${idleMs} ms after the disconnect (limit ${limit} ms; full generation ${tFull} ms)`);
  assert.equal(after.completions, before.completions + 1, 'the cancelled generation is counted once');
  const gen = after.generated_tokens - before.generated_tokens;
  assert.ok(gen < LONG / 2, `${gen} tokens were generated after the client left (of ${LONG})`);
  const r = await c.chat.completions.create(chatReq(PROMPT, { max_tokens: 40 }));
  assert.equal(r.choices[0].message.content, greedy40, 'a normal request after the disconnect');
});

await test('server_sigterm_during_stream', async () => {
  if (!L) throw new Skip('no server');
  const c = L.client();
  let chunks = 0;
  let tSig = 0;
  let stopped;
  let streamEnd = null;
  try {
    const stream = await c.completions.create(cmplReq(PROMPT, { max_tokens: LONG, ignore_eos: true, stream: true }));
    for await (const ch of stream) {
      if (ch.choices[0]?.text && ++chunks === 3) {
        tSig = Date.now();
        stopped = L.stop(15000);
      }
    }
    streamEnd = 'ended';
  } catch (e) {
    streamEnd = `error ${e.constructor.name}: ${e.message}`;
  }
  const tStream = Date.now() - tSig;
  assert.ok(stopped, 'no chunks arrived');
  const r = await stopped;
  assert.equal(r.signal, null, `killed by ${r.signal}: did not exit within 15 s`);
  assert.equal(r.code, 0, `exit status ${r.code}`);
  // the running generation may finish within serve.c's 10 s grace period, then the server exits
  const limit = Math.min(tFull ?? 10000, 10000) + 3000;
  assert.ok(r.ms < limit, `exit took ${r.ms} ms (limit ${limit} ms; the full generation takes ${tFull} ms)`);
  assert.ok(tStream < limit, `the stream ended (${streamEnd}) ${tStream} ms after SIGTERM (limit ${limit} ms)`);
  assert.ok(/stopped/.test(L.stderr()), 'no "stopped" line on stderr');
}, 40000);

// ---- server 7: two signals cancel the running generation at once (serve.c's contract) ------------

await test('server_sigterm_twice_cancels', async () => {
  if (!tFull || tFull < 1000) throw new Skip(`a ${LONG}-token generation took ${tFull} ms: too fast to tell`);
  const s = await startServer(['-c', '8192'], 'server -c 8192 (2 signals)');
  const c = s.client();
  let chunks = 0;
  let tSig = 0;
  let exited;
  try {
    const stream = await c.completions.create(cmplReq(PROMPT, { max_tokens: LONG, ignore_eos: true, stream: true }));
    for await (const ch of stream) {
      if (ch.choices[0]?.text && ++chunks === 3) {
        tSig = Date.now();
        exited = s.exited();
        s.proc.kill('SIGTERM');
        await sleep(100);
        s.proc.kill('SIGTERM');
      }
    }
  } catch { /* an error event or a reset connection: either is fine */ }
  const r = await s.stop(15000);   // no-op when already gone; SIGKILL after 15 s
  const e = await exited;
  const ms = e.at - tSig;
  assert.ok(exited, 'no chunks arrived');
  assert.equal(r.signal, null, `killed by ${r.signal}`);
  assert.equal(r.code, 0, `exit status ${r.code}`);
  const limit = Math.min(3000, tFull / 2);
  assert.ok(ms < limit, `exited ${ms} ms after the first of two SIGTERMs (limit ${Math.round(limit)} ms; the full generation takes ${tFull} ms)`);
}, 40000);

console.log(`# server tests: ${((Date.now() - t_start) / 1000).toFixed(1)} s`);
process.exit(failed() ? 1 : 0);

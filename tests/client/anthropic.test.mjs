// anthropic.test.mjs - Anthropic's Messages API on `kiln serve` (POST /v1/messages and
// /v1/messages/count_tokens) with the official @anthropic-ai/sdk client: stories260K served with the
// Qwen2.5 template (the hermes tool format) and an API key. messages.create (content blocks,
// stop_reason, usage with the prefix cache's cache_read_input_tokens, stop_sequences, prefill),
// messages.stream with the SDK's helpers (text events, finalMessage), the raw event sequence, a tool
// use round trip (tool_choice any and tool are enforced: the tool_use input validates against its
// input_schema; the tool_result goes back into the prompt exactly as the chat route renders it),
// count_tokens, thinking mapped to the template's switch (Qwen3.5 template), every bad input in
// Anthropic's error shape with the server still serving, x-api-key and Authorization: Bearer, and a
// replay of the requests Claude Code sends when ANTHROPIC_BASE_URL points at kiln.
// One PASS/FAIL/SKIP line per case (see lib.mjs); run by tests/cli/test_anthropic.sh.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';
import { MODEL, Skip, failed, get, post, startServer, stopCleanly, test } from './lib.mjs';
import { TEMPLATE, WEATHER } from './tool_fixtures.mjs';

const t_start = Date.now();
const THINK_TEMPLATE = resolve(dirname(MODEL), '../../chat-templates/llama.cpp-2026/Qwen3.5-4B.jinja');
if (!existsSync(MODEL) || !existsSync(TEMPLATE)) {
  console.log(`SKIP anthropic_tests: no model ${MODEL} or template ${TEMPLATE}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL anthropic_tests: the suite did not finish within 170 s');
  process.exit(1);
}, 170000).unref();

const KEY = 'sk-ant-kiln-test';
const SEARCH = {
  type: 'object',
  properties: { query: { type: 'string', maxLength: 20 }, limit: { type: 'integer', minimum: 1, maximum: 5 } },
  required: ['query', 'limit'],
  additionalProperties: false,
};
const TOOLS = [
  { name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER },
  { name: 'search', description: 'Search the web', input_schema: SEARCH },
];
const ajv = new Ajv({ strict: true, allErrors: true });
const validators = { get_weather: ajv.compile(WEATHER), search: ajv.compile(SEARCH) };
const MODEL_NAME = 'claude-sonnet-4-5'; // what clients send; kiln serves its one model
const ASK = [{ role: 'user', content: 'What is the weather in Paris?' }];

// A tool_use block of a final message whose input validates against its tool's schema.
function assertToolUse(block, name, what) {
  assert.equal(block.type, 'tool_use', `${what}: ${JSON.stringify(block)}`);
  assert.match(block.id, /^\S{6,}$/, `${what}: id ${block.id}`);
  if (name) assert.equal(block.name, name, `${what}: name`);
  const validate = validators[block.name];
  assert.ok(validate, `${what}: unknown tool ${block.name}`);
  assert.equal(typeof block.input, 'object', `${what}: input is an object`);
  assert.ok(validate(block.input), `${what}: ${JSON.stringify(block.input)}: ${ajv.errorsText(validate.errors)}`);
}

// Anthropic's error body {"type": "error", "error": {"type", "message"}}.
function assertAnthropicError(body, type, what) {
  assert.ok(body && typeof body === 'object', `${what}: body is not JSON: ${body}`);
  assert.equal(body.type, 'error', `${what}: ${JSON.stringify(body)}`);
  assert.equal(body.error?.type, type, `${what}: ${JSON.stringify(body)}`);
  assert.equal(typeof body.error.message, 'string', `${what}: error.message`);
  assert.ok(body.error.message.length > 0, `${what}: empty message`);
  return body.error;
}

// The SDK call rejects with an instance of Cls carrying status and Anthropic's error body.
async function assertSdkError(promise, Cls, status, type, what) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `${what}: the call succeeded, expected HTTP ${status}`);
  assert.ok(err instanceof Cls, `${what}: threw ${err?.constructor?.name} (${err?.message}), expected ${Cls.name}`);
  assert.equal(err.status, status, `${what}: status ${err.status}`);
  return assertAnthropicError(err.error, type, what);
}

// The named events of a server-sent-event body: [{event, data}], checking that each event's name is
// its data's type.
function sseEvents(text) {
  const out = [];
  for (const chunk of text.split('\n\n')) {
    const lines = chunk.split('\n');
    const ev = lines.find((l) => l.startsWith('event: '));
    const data = lines.find((l) => l.startsWith('data: '));
    if (!ev && !data) continue;
    assert.ok(ev && data, `an event has a name and data: ${JSON.stringify(chunk)}`);
    const d = JSON.parse(data.slice(6));
    assert.equal(d.type, ev.slice(7), `event name = data.type: ${chunk}`);
    out.push({ event: ev.slice(7), data: d });
  }
  return out;
}

// Checks Anthropic's event order: message_start, ping(s), blocks each start/delta*/stop with
// indices 0, 1, ..., one message_delta, message_stop last. Returns the blocks rebuilt from the
// deltas and the message_delta.
function assertEventOrder(events) {
  const names = events.map((e) => e.event);
  assert.equal(names[0], 'message_start', names.join(' '));
  assert.equal(names.at(-1), 'message_stop', names.join(' '));
  assert.equal(names.filter((n) => n === 'message_delta').length, 1, names.join(' '));
  assert.equal(names.at(-2), 'message_delta', names.join(' '));
  assert.ok(names.includes('ping'), 'a ping event');
  const start = events[0].data.message;
  assert.equal(start.role, 'assistant');
  assert.deepEqual(start.content, []);
  assert.equal(start.stop_reason, null);
  assert.ok(start.usage.input_tokens > 0);
  const blocks = [];
  let open = -1;
  for (const { event, data } of events.slice(1, -2)) {
    if (event === 'ping') continue;
    if (event === 'content_block_start') {
      assert.equal(open, -1, 'a block starts after the previous one stopped');
      assert.equal(data.index, blocks.length, 'blocks are numbered in order');
      open = data.index;
      blocks.push({ ...data.content_block, json: '' });
    } else if (event === 'content_block_delta') {
      assert.equal(data.index, open, 'a delta is for the open block');
      const b = blocks[open];
      const d = data.delta;
      if (d.type === 'text_delta') { assert.equal(b.type, 'text'); b.text += d.text; }
      else if (d.type === 'thinking_delta') { assert.equal(b.type, 'thinking'); b.thinking += d.thinking; }
      else if (d.type === 'input_json_delta') { assert.equal(b.type, 'tool_use'); b.json += d.partial_json; }
      else assert.fail(`unexpected delta ${JSON.stringify(d)}`);
    } else if (event === 'content_block_stop') {
      assert.equal(data.index, open, 'the open block stops');
      open = -1;
    } else assert.fail(`unexpected event ${event}`);
  }
  assert.equal(open, -1, 'every block stopped before message_delta');
  return { blocks, delta: events.at(-2).data };
}

let S;
await test('anthropic_server_starts', async () => {
  S = await startServer(['--chat-template-file', TEMPLATE, '--api-key', KEY, '-c', '8192'], 'anthropic server');
});
if (!S) process.exit(1);
const client = new Anthropic({ baseURL: S.base, apiKey: KEY, maxRetries: 0, timeout: 60000 });
const headers = { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' };

await test('anthropic_create', async () => {
  const m = await client.messages.create({ model: MODEL_NAME, max_tokens: 24, messages: [{ role: 'user', content: 'Hi' }] });
  assert.match(m.id, /^msg_[A-Za-z0-9]{24}$/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(typeof m.model, 'string');
  assert.equal(m.content.length, 1, JSON.stringify(m.content));
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0);
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.input_tokens > 0);
  assert.ok(m.usage.output_tokens > 0 && m.usage.output_tokens <= 24, `output_tokens ${m.usage.output_tokens}`);
  assert.equal(m.usage.cache_creation_input_tokens, 0);
  assert.equal(typeof m.usage.cache_read_input_tokens, 'number');
  const short = await client.messages.create({ model: MODEL_NAME, max_tokens: 3, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(short.stop_reason, 'max_tokens');
  assert.equal(short.usage.output_tokens, 3);
});

await test('anthropic_system_blocks_and_cache_read', async () => {
  const req = {
    model: MODEL_NAME, max_tokens: 8, temperature: 0,
    system: [{ type: 'text', text: 'You tell stories.', cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'Keep them short.' }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'A story about a cat', cache_control: { type: 'ephemeral' } }] }],
  };
  const { input_tokens: total } = await client.messages.countTokens({ model: MODEL_NAME, system: req.system, messages: req.messages });
  const a = await client.messages.create(req);
  const b = await client.messages.create(req);
  assert.equal(a.usage.input_tokens + a.usage.cache_read_input_tokens, total, 'count_tokens counts the prompt');
  assert.equal(b.usage.input_tokens + b.usage.cache_read_input_tokens, total);
  assert.ok(b.usage.cache_read_input_tokens > total / 2, `the repeat reads the prefix cache: ${JSON.stringify(b.usage)}`);
  assert.deepEqual(b.content, a.content, 'temperature 0 repeats');
  const one = await client.messages.countTokens({ model: MODEL_NAME, system: req.system.slice(0, 1), messages: req.messages });
  assert.ok(one.input_tokens < total, 'the second system block is in the prompt');
});

await test('anthropic_stop_sequences', async () => {
  const req = { model: MODEL_NAME, max_tokens: 40, temperature: 0, messages: [{ role: 'user', content: 'Tell me a story' }] };
  const full = (await client.messages.create(req)).content[0].text;
  assert.ok(full.length > 20, full);
  const stop = full.slice(12, 15);
  const m = await client.messages.create({ ...req, stop_sequences: ['\u0001never', stop] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  assert.equal(m.content[0]?.text ?? '', full.slice(0, full.indexOf(stop)));
});

await test('anthropic_stream_helpers', async () => {
  const req = { model: MODEL_NAME, max_tokens: 30, temperature: 0, messages: [{ role: 'user', content: 'Tell me a story' }] };
  const whole = await client.messages.create(req);
  const stream = client.messages.stream(req);
  let texts = '';
  let n = 0;
  stream.on('text', (delta, snapshot) => {
    texts += delta;
    n++;
    assert.equal(snapshot, texts, 'the snapshot is the text so far');
  });
  const final = await stream.finalMessage();
  assert.ok(n > 1, `text arrives in pieces (${n})`);
  assert.equal(final.content.length, 1);
  assert.equal(final.content[0].text, texts);
  assert.deepEqual(final.content, whole.content, 'the stream gives the non-streaming reply');
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(final.usage.input_tokens + final.usage.cache_read_input_tokens,
    whole.usage.input_tokens + whole.usage.cache_read_input_tokens);
  assert.match(final.id, /^msg_/);
  assert.equal(await stream.finalText(), texts);
});

await test('anthropic_stream_event_sequence', async () => {
  const r = await fetch(S.url('/v1/messages'), {
    method: 'POST', headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL_NAME, max_tokens: 12, stream: true, messages: [{ role: 'user', content: 'Hi' }] }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const { blocks, delta } = assertEventOrder(sseEvents(await r.text()));
  assert.equal(blocks.length, 1);
  assert.equal(blocks[0].type, 'text');
  assert.equal(delta.delta.stop_reason, 'max_tokens');
  assert.equal(delta.delta.stop_sequence, null);
  assert.equal(delta.usage.output_tokens, 12);
});

await test('anthropic_prefill', async () => {
  const base = [{ role: 'user', content: 'Tell me a story' }];
  const prefilled = [...base, { role: 'assistant', content: 'Once upon a time' }];
  const a = await client.messages.countTokens({ model: MODEL_NAME, messages: base });
  const b = await client.messages.countTokens({ model: MODEL_NAME, messages: prefilled });
  assert.ok(b.input_tokens > a.input_tokens, 'the prefill is in the prompt');
  const m = await client.messages.create({ model: MODEL_NAME, max_tokens: 10, messages: prefilled });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, b.input_tokens);
  assert.equal(m.content[0].type, 'text');
});

let CALL; // the tool_use message of the round trip
await test('anthropic_tool_choice_any', async () => {
  const rs = await Promise.all([1, 2].map(() => client.messages.create({
    model: MODEL_NAME, max_tokens: 300, temperature: 1, tools: TOOLS, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: ASK,
  })));
  rs.forEach((m, i) => {
    assert.equal(m.stop_reason, 'tool_use', `${i}: ${JSON.stringify(m)}`);
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1, JSON.stringify(m.content));
    assertToolUse(uses[0], null, `reply ${i}`);
  });
  CALL = rs[0];
}, 60000);

await test('anthropic_tool_choice_tool_streamed', async () => {
  const stream = client.messages.stream({
    model: MODEL_NAME, max_tokens: 300, temperature: 1, tools: TOOLS, tool_choice: { type: 'tool', name: 'search', disable_parallel_tool_use: true },
    messages: ASK,
  });
  let partial = null;
  stream.on('inputJson', (_delta, snapshot) => { partial = snapshot; });
  const final = await stream.finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  const use = final.content.find((b) => b.type === 'tool_use');
  assertToolUse(use, 'search', 'streamed');
  assert.deepEqual(partial, use.input, 'the last partial input is the final input');
}, 60000);

await test('anthropic_tool_round_trip', async () => {
  if (!CALL) throw new Skip('no tool_use reply to continue');
  const use = CALL.content.find((b) => b.type === 'tool_use');
  const history = [...ASK, { role: 'assistant', content: CALL.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: '18 degrees and sunny' }] }] }];
  const m = await client.messages.create({ model: MODEL_NAME, max_tokens: 40, tools: TOOLS, messages: history });
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(m.stop_reason), m.stop_reason);
  assert.ok(Array.isArray(m.content));
  // The translated history renders exactly as the chat route renders the same exchange.
  const openai = {
    messages: [
      ASK[0],
      { role: 'assistant', content: '', tool_calls: [{ id: use.id, type: 'function', function: { name: use.name, arguments: JSON.stringify(use.input) } }] },
      { role: 'tool', tool_call_id: use.id, content: '18 degrees and sunny' },
    ],
    tools: TOOLS.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } })),
  };
  const tmpl = await post(S, '/apply-template', openai, { authorization: `Bearer ${KEY}` });
  assert.equal(tmpl.status, 200, tmpl.text);
  assert.ok(tmpl.json.prompt.includes('<tool_response>\n18 degrees and sunny\n</tool_response>'), tmpl.json.prompt);
  const tok = await post(S, '/tokenize', { content: tmpl.json.prompt, add_special: true }, { authorization: `Bearer ${KEY}` });
  const { input_tokens } = await client.messages.countTokens({ model: MODEL_NAME, tools: TOOLS, messages: history });
  assert.equal(input_tokens, tok.json.tokens.length, 'count_tokens counts the same prompt');
});

await test('anthropic_tool_choice_none_and_auto', async () => {
  const none = await client.messages.create({ model: MODEL_NAME, max_tokens: 16, tools: TOOLS, tool_choice: { type: 'none' }, messages: ASK });
  assert.ok(none.content.every((b) => b.type === 'text'), JSON.stringify(none.content));
  const auto = await client.messages.create({ model: MODEL_NAME, max_tokens: 16, tools: TOOLS, tool_choice: { type: 'auto', disable_parallel_tool_use: true }, messages: ASK });
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(auto.stop_reason));
});

await test('anthropic_auth', async () => {
  const bearer = new Anthropic({ baseURL: S.base, apiKey: null, authToken: KEY, maxRetries: 0 });
  const m = await bearer.messages.create({ model: MODEL_NAME, max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(m.type, 'message');
  const wrong = new Anthropic({ baseURL: S.base, apiKey: 'sk-wrong', maxRetries: 0 });
  await assertSdkError(wrong.messages.create({ model: MODEL_NAME, max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] }),
    Anthropic.AuthenticationError, 401, 'authentication_error', 'wrong key');
  const none = await post(S, '/v1/messages/count_tokens', { model: MODEL_NAME, messages: ASK }, { 'anthropic-version': '2023-06-01' });
  assert.equal(none.status, 401);
  assertAnthropicError(none.json, 'authentication_error', 'no key');
  const oai = await post(S, '/v1/chat/completions', { messages: ASK }, { 'x-api-key': 'sk-wrong' });
  assert.equal(oai.status, 401);
  assert.equal(typeof oai.json.error.message, 'string', 'OpenAI routes keep their error shape');
});

const BAD = [
  ['missing max_tokens', { max_tokens: undefined }, /max_tokens/],
  ['max_tokens zero', { max_tokens: 0 }, /max_tokens/],
  ['missing model', { model: undefined }, /model/],
  ['no messages', { messages: [] }, /messages/],
  ['system role in messages', { messages: [{ role: 'system', content: 'x' }] }, /messages\.0\.role/],
  ['unknown role', { messages: [{ role: 'tool', content: 'x' }] }, /messages\.0\.role/],
  ['content not text', { messages: [{ role: 'user', content: 42 }] }, /messages\.0\.content/],
  ['image block', { messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }, /messages\.0\.content\.0\.type/],
  ['tool_result without id', { messages: [{ role: 'user', content: [{ type: 'tool_result', content: 'r' }] }] }, /tool_use_id/],
  ['tool_use without input', { messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f' }] }] }, /messages\.1\.content\.0\.input/],
  ['system not text', { system: [{ type: 'image' }] }, /system/],
  ['temperature above 1', { temperature: 1.5 }, /temperature/],
  ['stop_sequences not strings', { stop_sequences: [1] }, /stop_sequences/],
  ['tools not a list', { tools: { a: 1 } }, /tools/],
  ['tool without input_schema', { tools: [{ name: 'f' }] }, /tools\.0\.input_schema/],
  ['tool with a bad name', { tools: [{ name: 'a b', input_schema: { type: 'object' } }] }, /tools\.0\.name/],
  ['server tool type', { tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, /tools\.0\.type/],
  ['tool_choice any without tools', { tool_choice: { type: 'any' } }, /tool_choice/],
  ['tool_choice names an unknown tool', { tools: TOOLS, tool_choice: { type: 'tool', name: 'nope' } }, /tool_choice\.name/],
  ['tool_choice unknown type', { tools: TOOLS, tool_choice: { type: 'always' } }, /tool_choice/],
  ['thinking budget too small', { thinking: { type: 'enabled', budget_tokens: 10 } }, /budget_tokens/],
  ['thinking budget over max_tokens', { max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 4000 } }, /max_tokens/],
  ['metadata not an object', { metadata: 'x' }, /metadata/],
  ['stream not a boolean', { stream: 'yes' }, /stream/],
];

await test('anthropic_bad_requests', async () => {
  for (const [what, change, re] of BAD) {
    const body = { model: MODEL_NAME, max_tokens: 8, messages: [{ role: 'user', content: 'Hi' }], ...change };
    for (const k of Object.keys(change)) if (change[k] === undefined) delete body[k];
    const r = await post(S, '/v1/messages', body, headers);
    assert.equal(r.status, 400, `${what}: HTTP ${r.status}: ${r.text.slice(0, 300)}`);
    const e = assertAnthropicError(r.json, 'invalid_request_error', what);
    assert.match(e.message, re, `${what}: ${e.message}`);
  }
  await assertSdkError(client.messages.create({ model: MODEL_NAME, messages: ASK }), Anthropic.BadRequestError, 400,
    'invalid_request_error', 'SDK without max_tokens');
  await assertSdkError(client.messages.create({ model: MODEL_NAME, max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }),
    Anthropic.BadRequestError, 400, 'invalid_request_error', 'SDK with a bad role');
  for (const [what, raw] of [['malformed JSON', '{"model": "x", '], ['not an object', '[1, 2]']]) {
    const r = await post(S, '/v1/messages', raw, headers);
    assert.equal(r.status, 400, `${what}: ${r.status}`);
    assertAnthropicError(r.json, 'invalid_request_error', what);
  }
  const ct = await fetch(S.url('/v1/messages'), { method: 'POST', headers: { ...headers, 'content-type': 'text/plain' }, body: '{}' });
  assertAnthropicError(await ct.json(), 'invalid_request_error', 'text/plain body');
  const nf = await post(S, '/v1/messages/batches', {}, headers);
  assert.equal(nf.status, 404);
  assertAnthropicError(nf.json, 'not_found_error', 'unknown route');
  const wrongMethod = await get(S, '/v1/messages', headers);
  assert.equal(wrongMethod.status, 405);
  assertAnthropicError(wrongMethod.json, 'invalid_request_error', 'GET /v1/messages');
  const long = await post(S, '/v1/messages', { model: MODEL_NAME, max_tokens: 5, messages: [{ role: 'user', content: 'word '.repeat(5000) }] }, headers);
  assert.equal(long.status, 400);
  assertAnthropicError(long.json, 'invalid_request_error', 'prompt over the context');
});

await test('anthropic_still_serving', async () => {
  assert.equal((await get(S, '/health')).status, 200);
  const m = await client.messages.create({ model: MODEL_NAME, max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(m.type, 'message');
});

// ---- Claude Code's requests ---------------------------------------------------------------------

// Tools shaped like Claude Code's own (JSON Schema draft-07 with $schema, additionalProperties,
// enums, arrays of objects), more than a dozen of them.
const schema = (properties, required) => ({
  type: 'object', properties, required, additionalProperties: false, $schema: 'http://json-schema.org/draft-07/schema#',
});
const str = (description) => ({ type: 'string', description });
const CC_TOOLS = [
  { name: 'Task', description: 'Launch a new agent to handle complex, multi-step tasks autonomously.', input_schema: schema({ description: str('A short description'), prompt: str('The task'), subagent_type: str('The agent type') }, ['description', 'prompt', 'subagent_type']) },
  { name: 'Bash', description: 'Executes a given bash command in a persistent shell session.', input_schema: schema({ command: str('The command to execute'), timeout: { type: 'number', description: 'Optional timeout in milliseconds' }, description: str('What the command does'), run_in_background: { type: 'boolean' } }, ['command']) },
  { name: 'Glob', description: 'Fast file pattern matching tool.', input_schema: schema({ pattern: str('The glob pattern'), path: str('The directory to search in') }, ['pattern']) },
  { name: 'Grep', description: 'A powerful search tool built on ripgrep.', input_schema: schema({ pattern: str('The regular expression'), path: str('File or directory'), output_mode: { type: 'string', enum: ['content', 'files_with_matches', 'count'] }, '-i': { type: 'boolean' }, head_limit: { type: 'number' } }, ['pattern']) },
  { name: 'Read', description: 'Reads a file from the local filesystem.', input_schema: schema({ file_path: str('The absolute path'), offset: { type: 'number' }, limit: { type: 'number' } }, ['file_path']) },
  { name: 'Edit', description: 'Performs exact string replacements in files.', input_schema: schema({ file_path: str('The absolute path'), old_string: str('The text to replace'), new_string: str('The replacement'), replace_all: { type: 'boolean', default: false } }, ['file_path', 'old_string', 'new_string']) },
  { name: 'Write', description: 'Writes a file to the local filesystem.', input_schema: schema({ file_path: str('The absolute path'), content: str('The content') }, ['file_path', 'content']) },
  { name: 'NotebookEdit', description: 'Replaces the contents of a cell in a Jupyter notebook.', input_schema: schema({ notebook_path: str('Path'), cell_id: str('Cell'), new_source: str('Source'), edit_mode: { type: 'string', enum: ['replace', 'insert', 'delete'] } }, ['notebook_path', 'new_source']) },
  { name: 'WebFetch', description: 'Fetches content from a URL.', input_schema: schema({ url: { type: 'string', format: 'uri' }, prompt: str('What to extract') }, ['url', 'prompt']) },
  { name: 'TodoWrite', description: 'Create and manage a structured task list.', input_schema: schema({ todos: { type: 'array', items: { type: 'object', properties: { content: { type: 'string', minLength: 1 }, status: { type: 'string', enum: ['pending', 'in_progress', 'completed'] }, activeForm: { type: 'string', minLength: 1 } }, required: ['content', 'status', 'activeForm'], additionalProperties: false } } }, ['todos']) },
  { name: 'WebSearch', description: 'Search the web.', input_schema: schema({ query: { type: 'string', minLength: 2 }, allowed_domains: { type: 'array', items: { type: 'string' } } }, ['query']) },
  { name: 'BashOutput', description: 'Retrieves output from a background bash shell.', input_schema: schema({ bash_id: str('The shell id'), filter: str('A regular expression') }, ['bash_id']) },
  { name: 'KillShell', description: 'Kills a running background bash shell.', input_schema: schema({ shell_id: str('The shell id') }, ['shell_id']) },
  { name: 'ExitPlanMode', description: 'Leave plan mode.', input_schema: schema({ plan: str('The plan') }, ['plan']) },
  { name: 'mcp__ide__getDiagnostics', description: 'Get language diagnostics from VS Code.', input_schema: schema({ uri: str('Optional file URI') }, []), cache_control: { type: 'ephemeral' } },
];
const CC_SYSTEM = [
  { type: 'text', text: "You are Claude Code, Anthropic's official CLI for Claude.", cache_control: { type: 'ephemeral' } },
  { type: 'text', text: 'You are an interactive CLI tool that helps users with software engineering tasks. Be concise.\n\n# Environment\nWorking directory: /home/user/project\nIs directory a git repo: Yes\nPlatform: linux', cache_control: { type: 'ephemeral' } },
];
const CC_HEADERS = {
  ...headers,
  'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14',
  'anthropic-dangerous-direct-browser-access': 'true',
  'x-app': 'cli',
  'user-agent': 'claude-cli/2.0.0 (external, cli)',
  'x-stainless-lang': 'js',
  'x-stainless-retry-count': '0',
};
const CC_USER = { role: 'user', content: [
  { type: 'text', text: '<system-reminder>\nAs you answer the user\'s questions, you can use the following context.\n</system-reminder>' },
  { type: 'text', text: 'list the files here', cache_control: { type: 'ephemeral' } },
] };

const CC_TURN2 = [CC_USER,
  { role: 'assistant', content: [{ type: 'text', text: 'I will list them.' }, { type: 'tool_use', id: 'toolu_01A', name: 'Bash', input: { command: 'ls', description: 'List files' } }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01A', content: 'README.md\nsrc', cache_control: { type: 'ephemeral' } }] }];

// Claude Code asks for max_tokens 32000: its turns run on a server whose context ends a few dozen
// tokens past the second turn's prompt, so that each turn stops at the context's end (max_tokens)
// in bounded time. That server renders with the model's own (plain) prompt format, which leaves the
// tools out of the prompt: with the Qwen2.5 template their schemas make a prompt of thousands of
// tokens, which count_tokens measures on the first server instead.
await test('anthropic_claude_code_replay', async () => {
  const counts = [];
  for (const messages of [[CC_USER], CC_TURN2]) {
    const count = await post(S, '/v1/messages/count_tokens?beta=true', { model: MODEL_NAME, messages, tools: CC_TOOLS, system: CC_SYSTEM }, CC_HEADERS);
    assert.equal(count.status, 200, count.text.slice(0, 300));
    counts.push(count.json.input_tokens);
  }
  assert.ok(counts[0] > 1000 && counts[1] > counts[0], `count_tokens with the tools: ${counts}`);
  const P = await startServer(['--api-key', KEY], 'plain-format server');
  for (const [i, messages] of [[CC_USER], CC_TURN2].entries()) {
    const count = await post(P, '/v1/messages/count_tokens?beta=true', { model: MODEL_NAME, messages, tools: CC_TOOLS, system: CC_SYSTEM }, CC_HEADERS);
    assert.equal(count.status, 200, count.text.slice(0, 300));
    counts[i] = count.json.input_tokens;
  }
  await stopCleanly(P);
  const R = await startServer(['--api-key', KEY, '-c', String(counts[1] + 48)], 'replay server');
  try {
    // the quick non-streaming request (a title for the session)
    const quick = await post(R, '/v1/messages?beta=true', {
      model: 'claude-haiku-4-5', max_tokens: 512, messages: [{ role: 'user', content: 'list the files here' }],
      system: [{ type: 'text', text: 'Summarize this coding conversation in under 50 characters.' }], temperature: 0,
      metadata: { user_id: 'user_0123abcd_account__session_4567efgh' },
    }, CC_HEADERS);
    assert.equal(quick.status, 200, `quick: ${quick.text.slice(0, 300)}`);
    assert.equal(quick.json.type, 'message');
    // the main streaming request of a turn
    const body = {
      model: MODEL_NAME, max_tokens: 32000, temperature: 1, stream: true, system: CC_SYSTEM, tools: CC_TOOLS,
      messages: [CC_USER], metadata: { user_id: 'user_0123abcd_account__session_4567efgh' },
    };
    const r = await fetch(R.url('/v1/messages?beta=true'), { method: 'POST', headers: { ...CC_HEADERS, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    if (r.status !== 200) assert.fail(`turn: ${r.status}: ${(await r.text()).slice(0, 400)}`);
    const { blocks, delta } = assertEventOrder(sseEvents(await r.text()));
    assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(delta.delta.stop_reason), delta.delta.stop_reason);
    for (const b of blocks.filter((x) => x.type === 'tool_use')) assert.ok(CC_TOOLS.some((t) => t.name === b.name), b.name);
    assert.equal(delta.usage.input_tokens + delta.usage.cache_read_input_tokens, counts[0],
      'the turn\'s prompt is what count_tokens counted');
    // the next turn, with the tool call Claude Code made and its result, streamed through the SDK
    const cc = new Anthropic({ baseURL: R.base, apiKey: KEY, maxRetries: 0, defaultHeaders: { 'anthropic-beta': CC_HEADERS['anthropic-beta'] } });
    const turn = cc.messages.stream({ ...body, stream: undefined, messages: CC_TURN2 });
    const final = await turn.finalMessage();
    assert.equal(final.role, 'assistant');
    assert.equal(final.usage.input_tokens + final.usage.cache_read_input_tokens, counts[1]);
    assert.ok(final.usage.cache_read_input_tokens > counts[0] / 2, `the second turn reuses the first one's prefix: ${JSON.stringify(final.usage)}`);
  } finally {
    await stopCleanly(R);
  }
}, 90000);

await test('anthropic_server_stops_cleanly', () => stopCleanly(S));

// ---- thinking -----------------------------------------------------------------------------------

await test('anthropic_thinking_switch', async () => {
  if (!existsSync(THINK_TEMPLATE)) throw new Skip(`no ${THINK_TEMPLATE}`);
  const T = await startServer(['--chat-template-file', THINK_TEMPLATE, '-c', '4096'], 'thinking server');
  try {
    const c = new Anthropic({ baseURL: T.base, apiKey: 'unused', maxRetries: 0 });
    const req = { model: MODEL_NAME, max_tokens: 1100, messages: [{ role: 'user', content: 'Hi' }] };
    const on = c.messages.stream({ ...req, thinking: { type: 'enabled', budget_tokens: 1024 } });
    let thinking = '';
    on.on('thinking', (delta) => { thinking += delta; });
    const a = await on.finalMessage();
    assert.equal(a.content[0]?.type, 'thinking', `thinking enabled opens the reply in thinking: ${JSON.stringify(a.content).slice(0, 300)}`);
    assert.equal(a.content[0].thinking, thinking);
    assert.ok(thinking.length > 0);
    assert.equal(typeof a.content[0].signature, 'string');
    const off = await c.messages.create({ ...req, max_tokens: 20, thinking: { type: 'disabled' } });
    assert.ok(off.content.every((b) => b.type !== 'thinking'), `thinking disabled: ${JSON.stringify(off.content)}`);
    const back = await c.messages.countTokens({ model: MODEL_NAME, messages: [
      { role: 'user', content: 'Hi' }, { role: 'assistant', content: a.content.map((b) => (b.type === 'thinking' ? { ...b, thinking: 'short' } : b)).concat([{ type: 'text', text: 'Hello' }]) },
      { role: 'user', content: 'And?' }] });
    assert.ok(back.input_tokens > 0);
  } finally {
    await stopCleanly(T);
  }
}, 60000);

console.log(`# anthropic tests: ${((Date.now() - t_start) / 1000).toFixed(1)} s`);
process.exit(failed() ? 1 : 0);

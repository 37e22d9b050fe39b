// ollama.test.mjs - Ollama's API on `kiln serve` with the official `ollama` npm client: version, tags
// (the served model and the other local models), ps and show; generate and chat, whole and streamed,
// give the same greedy text as the OpenAI endpoints of the same server; options map onto kiln's
// sampling (num_predict, seed, stop), `format` ("json" or a schema) goes through the constrained
// decoder, tools through the chat parser (calls with their arguments as objects, a history with calls
// and tool results), thinking through the reasoning parser; bad input (malformed JSON, unknown or
// unloaded models, bad options, images, embeddings of a generation model) is an error in Ollama's shape {"error": "..."}
// and the server keeps serving. One PASS/FAIL/SKIP line per case (see lib.mjs); run by
// tests/cli/test_ollama.sh.
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import Ajv from 'ajv';
import { Ollama } from 'ollama';
import { MODEL, MODEL_ID, failed, get, post, startServer, stopCleanly, test } from './lib.mjs';
import { TEMPLATE, WEATHER } from './tool_fixtures.mjs';

const THINKING_TEMPLATE = resolve(dirname(MODEL), '../../chat-templates/llama.cpp-2026/Qwen3.5-4B.jinja');
if (!existsSync(MODEL)) {
  console.log(`SKIP ollama_tests: no model ${MODEL}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL ollama_tests: the suite did not finish within 170 s');
  process.exit(1);
}, 170000).unref();

// Another local model for /api/tags: a copy of the served file under another name, found through
// KILN_MODELS by the server's discovery (the copy is a different file, so it is listed).
const models = mkdtempSync(join(tmpdir(), 'kiln-ollama-'));
copyFileSync(MODEL, join(models, 'other.gguf'));
process.env.KILN_MODELS = models;
process.on('exit', () => rmSync(models, { recursive: true, force: true }));

const NAME = `${MODEL_ID}:latest`;
const greedy = (n) => ({ temperature: 0, num_predict: n });

// Asserts an ollama client call fails with HTTP status and an error message matching re.
async function assertOllamaError(promise, status, re, what) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `${what}: the call succeeded, expected HTTP ${status}`);
  assert.equal(err.name, 'ResponseError', `${what}: threw ${err.name}: ${err.message}`);
  assert.equal(err.status_code, status, `${what}: status ${err.status_code}: ${err.message}`);
  assert.match(err.error, re, `${what}: message`);
}

// Asserts a raw response is Ollama's error shape: {"error": "non-empty string"} and nothing else.
function assertOllamaBody(r, status, re, what) {
  assert.equal(r.status, status, `${what}: HTTP ${r.status}: ${r.text.slice(0, 300)}`);
  assert.match(r.headers.get('content-type') || '', /application\/json/, `${what}: content-type`);
  assert.deepEqual(Object.keys(r.json || {}), ['error'], `${what}: body ${r.text.slice(0, 300)}`);
  assert.equal(typeof r.json.error, 'string');
  assert.match(r.json.error, re, `${what}: message`);
}

async function collect(stream) {
  const parts = [];
  for await (const p of stream) parts.push(p);
  return parts;
}

let S;
await test('ollama_server_starts', async () => {
  S = await startServer([], 'ollama server');
});
if (!S) process.exit(1);
const ollama = new Ollama({ host: S.base });
const openai = S.client();

await test('ollama_version', async () => {
  const v = await ollama.version();
  assert.match(v.version, /^\d+\.\d+\.\d+$/);
});

await test('ollama_tags_served_and_local', async () => {
  const { models: list } = await ollama.list();
  assert.equal(list[0].name, NAME, JSON.stringify(list[0]));
  assert.equal(list[0].model, NAME);
  assert.equal(list[0].details.format, 'gguf');
  assert.equal(list[0].details.family, 'llama');
  assert.ok(list[0].size > 100000, `size ${list[0].size}`);
  assert.ok(!Number.isNaN(Date.parse(list[0].modified_at)), `modified_at ${list[0].modified_at}`);
  const other = list.find((m) => m.name === 'other');
  assert.ok(other, `no 'other' in ${JSON.stringify(list.map((m) => m.name))}`);
  assert.equal(other.details.family, 'llama');
  assert.equal(list.filter((m) => m.size === list[0].size && m.name === NAME).length, 1, 'the served file once');
});

await test('ollama_ps_and_show', async () => {
  const ps = await ollama.ps();
  assert.equal(ps.models.length, 1);
  assert.equal(ps.models[0].name, NAME);
  assert.ok(ps.models[0].context_length > 0);
  const show = await ollama.show({ model: NAME });
  assert.equal(show.details.family, 'llama');
  assert.equal(show.model_info['general.architecture'], 'llama');
  assert.ok(show.model_info['general.parameter_count'] > 0);
  assert.ok(show.capabilities.includes('completion'));
  await assertOllamaError(ollama.show({ model: 'missing' }), 404, /not found/, 'show of an unknown model');
});

await test('ollama_generate_equals_completions', async () => {
  const r = await ollama.generate({ model: NAME, prompt: 'Once upon a time', options: greedy(16) });
  const c = await openai.completions.create({ model: MODEL_ID, prompt: 'Once upon a time', temperature: 0, max_tokens: 16 });
  assert.equal(r.response, c.choices[0].text);
  assert.ok(r.response.length > 10, r.response);
  assert.equal(r.done, true);
  assert.equal(r.done_reason, 'length');
  assert.equal(r.eval_count, 16);
  assert.equal(r.prompt_eval_count, c.usage.prompt_tokens);
  assert.ok(r.total_duration > 0 && r.eval_duration > 0, JSON.stringify(r));
  assert.equal(r.model, NAME);
});

await test('ollama_generate_stream', async () => {
  const whole = await ollama.generate({ model: MODEL_ID, prompt: 'Lily', options: greedy(20) });
  const parts = await collect(await ollama.generate({ model: MODEL_ID, prompt: 'Lily', options: greedy(20), stream: true }));
  assert.ok(parts.length >= 3, `${parts.length} parts`);
  assert.ok(parts.slice(0, -1).every((p) => p.done === false), 'done only at the end');
  const last = parts.at(-1);
  assert.equal(last.done, true);
  assert.equal(last.eval_count, 20);
  assert.equal(parts.map((p) => p.response).join(''), whole.response);
});

await test('ollama_generate_and_chat_load', async () => {
  const r = await ollama.generate({ model: MODEL_ID, prompt: '' });
  assert.equal(r.done, true);
  assert.equal(r.done_reason, 'load');
  const c = await ollama.chat({ model: NAME, messages: [] });
  assert.equal(c.done_reason, 'load');
  assert.equal(c.message.content, '');
  await assertOllamaError(ollama.chat({ model: 'nosuch', messages: [] }), 404, /not found/, 'loading an unknown model');
});

const MSGS = [{ role: 'user', content: 'Once upon a time' }, { role: 'assistant', content: ' there was a cat.' },
  { role: 'user', content: 'The cat' }];

await test('ollama_chat_equals_chat_completions', async () => {
  const r = await ollama.chat({ model: NAME, messages: MSGS, options: greedy(12) });
  const c = await openai.chat.completions.create({ model: MODEL_ID, messages: MSGS, temperature: 0, max_tokens: 12 });
  assert.equal(r.message.role, 'assistant');
  assert.equal(r.message.content, c.choices[0].message.content);
  assert.ok(r.message.content.length > 5, r.message.content);
  assert.equal(r.prompt_eval_count, c.usage.prompt_tokens);
  assert.equal(r.eval_count, 12);
});

await test('ollama_chat_stream', async () => {
  const whole = await ollama.chat({ model: NAME, messages: MSGS, options: greedy(15) });
  const parts = await collect(await ollama.chat({ model: NAME, messages: MSGS, options: greedy(15), stream: true }));
  assert.ok(parts.length >= 3);
  assert.ok(parts.every((p) => p.message && p.message.role === 'assistant'));
  assert.equal(parts.at(-1).done, true);
  assert.equal(parts.at(-1).done_reason, 'length');
  assert.equal(parts.map((p) => p.message.content).join(''), whole.message.content);
});

await test('ollama_options_seed_and_stop', async () => {
  const sample = (seed) => ollama.generate({ model: MODEL_ID, prompt: 'Lily', options: { temperature: 1, seed, num_predict: 40 } });
  const [a, b, c] = await Promise.all([sample(42), sample(42), sample(43)]);
  assert.equal(a.response, b.response, 'the same seed');
  assert.notEqual(a.response, c.response, 'another seed');
  const full = await ollama.generate({ model: MODEL_ID, prompt: 'Once upon a time', options: greedy(16) });
  const at = full.response.indexOf('little');
  assert.ok(at > 0, full.response);
  const cut = await ollama.generate({ model: MODEL_ID, prompt: 'Once upon a time', options: { ...greedy(16), stop: ['little'] } });
  assert.equal(cut.response, full.response.slice(0, at));
  assert.equal(cut.done_reason, 'stop');
  const top1 = await ollama.generate({ model: MODEL_ID, prompt: 'Lily', options: { temperature: 1, top_k: 1, seed: 5, num_predict: 16 } });
  const g = await ollama.generate({ model: MODEL_ID, prompt: 'Lily', options: greedy(16) });
  assert.equal(top1.response, g.response, 'top_k 1 is greedy');
});

const PERSON = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 8 }, age: { type: 'integer', minimum: 1, maximum: 99 } },
  required: ['name', 'age'],
  additionalProperties: false,
};

await test('ollama_format_schema_and_json', async () => {
  const validate = new Ajv({ strict: true }).compile(PERSON);
  const r = await ollama.chat({ model: NAME, messages: [{ role: 'user', content: 'Lily' }], format: PERSON,
    options: { temperature: 1, seed: 3, num_predict: 200 } });
  const v = JSON.parse(r.message.content);
  assert.ok(validate(v), `${r.message.content}: ${JSON.stringify(validate.errors)}`);
  const g = await ollama.generate({ model: NAME, prompt: 'Tom', format: 'json', options: { temperature: 1, seed: 4, num_predict: 200 } });
  assert.match(g.response, /^\s*\{/, g.response);
  if (g.done_reason === 'stop') assert.equal(typeof JSON.parse(g.response), 'object');
});

await test('ollama_bad_input_errors', async () => {
  const chat = (extra) => ollama.chat({ model: NAME, messages: [{ role: 'user', content: 'Hi' }], ...extra });
  await assertOllamaError(chat({ model: 'nosuch' }), 404, /model 'nosuch' not found/, 'unknown model');
  const other = await chat({ model: 'other', options: { num_predict: 2 } }); // another local model loads on demand
  assert.equal(other.model, 'other');
  await assertOllamaError(chat({ options: { temperature: 'hot' } }), 400, /temperature/, 'a bad temperature');
  await assertOllamaError(chat({ options: { num_predict: 'x' } }), 400, /num_predict/, 'a bad num_predict');
  await assertOllamaError(chat({ options: { top_p: 7 } }), 400, /top_p/, 'top_p out of range');
  await assertOllamaError(chat({ options: { stop: 'x'.repeat(5000) } }), 400, /stop/, 'a stop string too long');
  await assertOllamaError(chat({ options: [1, 2] }), 400, /'options' must be an object/, 'options not an object');
  await assertOllamaError(chat({ format: 'yaml' }), 400, /format/, 'an unknown format');
  await assertOllamaError(chat({ format: { type: 'nonsense' } }), 400, /.+/, 'a schema that does not compile');
  await assertOllamaError(chat({ messages: 'Hi' }), 400, /messages/, 'messages not an array');
  await assertOllamaError(chat({ messages: [{ content: 'Hi' }] }), 400, /role/, 'a message without a role');
  await assertOllamaError(chat({ messages: [{ role: 'user', content: 7 }] }), 400, /content/, 'content not a string');
  await assertOllamaError(chat({ messages: [{ role: 'user', content: 'Hi', images: ['aGk='] }] }), 400, /images/, 'images');
  await assertOllamaError(ollama.generate({ model: NAME, prompt: 'Hi', suffix: 'end' }), 400, /suffix/, 'suffix');
  await assertOllamaError(ollama.embed({ model: NAME, input: 'Hi' }), 400, /not an embedding model/, 'embed on a generation model');
  await assertOllamaError(ollama.chat({ messages: [{ role: 'user', content: 'Hi' }] }), 400, /model is required/, 'no model');
  assertOllamaBody(await post(S, '/api/chat', '{"model": "stories260K", "messages": ['), 400, /not valid JSON/, 'malformed JSON');
  assertOllamaBody(await post(S, '/api/generate', '[1, 2]'), 400, /JSON object/, 'not an object');
  assertOllamaBody(await post(S, '/api/pull', { model: NAME }), 404, /not part of kiln's Ollama API/, 'an unknown route');
  assertOllamaBody(await get(S, '/api/chat'), 405, /not allowed/, 'GET on a POST route');
  assertOllamaBody(await post(S, '/api/embeddings', { model: NAME, prompt: 'Hi' }), 400, /not an embedding model/, 'old embeddings on a generation model');
  // OpenAI's routes keep OpenAI's shape
  const o = await post(S, '/v1/chat/completions', '{');
  assert.equal(o.status, 400);
  assert.equal(typeof o.json.error, 'object');
  // and the server still serves
  const r = await ollama.generate({ model: NAME, prompt: 'Once upon a time', options: greedy(4) });
  assert.equal(r.eval_count, 4);
});

await test('ollama_server_stops_cleanly', () => stopCleanly(S));

// ---- tools and thinking: stories260K with a chat template ----------------------------------------

const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER } }];
let T;
if (existsSync(TEMPLATE)) {
  await test('ollama_tools_server_starts', async () => {
    T = await startServer(['--chat-template-file', TEMPLATE], 'ollama tools server');
  });
} else {
  console.log(`SKIP ollama_tools: no template ${TEMPLATE}`);
}
if (T) {
  const client = new Ollama({ host: T.base });
  const validate = new Ajv({ strict: true }).compile(WEATHER);
  const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
  await test('ollama_tool_call_arguments_object', async () => {
    // tool_choice and parallel_tool_calls (kiln's extension, OpenAI's values) make the reply one call
    const r = await client.chat({ model: T.modelId, messages: ask, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false,
      options: { temperature: 1, seed: 2, num_predict: 300 } });
    const calls = r.message.tool_calls;
    assert.equal(calls?.length, 1, JSON.stringify(r.message));
    assert.equal(calls[0].function.name, 'get_weather');
    assert.equal(typeof calls[0].function.arguments, 'object');
    assert.ok(validate(calls[0].function.arguments), JSON.stringify(calls[0].function.arguments));
    assert.ok(!r.message.content.includes('<tool_call>'), `markup in content: ${r.message.content}`);
    const parts = await collect(await client.chat({ model: T.modelId, messages: ask, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false,
      options: { temperature: 1, seed: 2, num_predict: 300 }, stream: true }));
    const streamed = parts.flatMap((p) => p.message.tool_calls || []);
    assert.deepEqual(streamed.map((c) => c.function), calls.map((c) => c.function));
    assert.equal(parts.at(-1).done, true);
  });
  await test('ollama_tool_history_renders', async () => {
    const plain = await client.chat({ model: T.modelId, messages: ask, options: greedy(4) });
    const withTools = await client.chat({ model: T.modelId, messages: ask, tools: TOOLS, options: greedy(4) });
    assert.ok(withTools.prompt_eval_count > plain.prompt_eval_count + 20, 'the tools are in the prompt');
    const history = [...ask,
      { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris', days: 1, unit: 'celsius' } } }] },
      { role: 'tool', content: '{"temperature": 21}', tool_name: 'get_weather' }];
    const r = await client.chat({ model: T.modelId, messages: history, tools: TOOLS, options: greedy(8) });
    assert.equal(r.done, true);
    assert.equal(typeof r.message.content, 'string');
    assert.ok(r.prompt_eval_count > withTools.prompt_eval_count + 10, `${r.prompt_eval_count} vs ${withTools.prompt_eval_count}`);
    await assertOllamaError(client.chat({ model: T.modelId, messages: ask, tools: [{ type: 'function' }] }), 400, /tools/,
      'a tool without a function');
  });
  await test('ollama_tools_server_stops_cleanly', () => stopCleanly(T));
}

let R;
if (existsSync(THINKING_TEMPLATE)) {
  await test('ollama_thinking_server_starts', async () => {
    R = await startServer(['--chat-template-file', THINKING_TEMPLATE], 'ollama thinking server');
  });
} else {
  console.log(`SKIP ollama_thinking: no template ${THINKING_TEMPLATE}`);
}
if (R) {
  const client = new Ollama({ host: R.base });
  await test('ollama_thinking_field', async () => {
    // the template's generation prompt opens a thinking block: the whole (short) reply is thinking
    const r = await client.chat({ model: R.modelId, messages: [{ role: 'user', content: 'Hi' }], options: greedy(12) });
    assert.ok(r.message.thinking && r.message.thinking.length > 0, JSON.stringify(r.message));
    assert.equal(r.message.content, '');
    const parts = await collect(await client.chat({ model: R.modelId, messages: [{ role: 'user', content: 'Hi' }],
      options: greedy(12), stream: true }));
    assert.equal(parts.map((p) => p.message.thinking || '').join(''), r.message.thinking);
  });
  await test('ollama_thinking_server_stops_cleanly', () => stopCleanly(R));
}

process.exit(failed() ? 1 : 0);

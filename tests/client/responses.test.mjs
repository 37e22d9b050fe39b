// responses.test.mjs - OpenAI's Responses API on `kiln serve` (POST /v1/responses, GET and DELETE
// /v1/responses/{id}) with the official openai npm client: stories260K served with the Qwen2.5
// template (the hermes tool format). responses.create (output items, output_text, status and
// incomplete_details, usage), input items and instructions, responses.stream with its typed events,
// a function-call loop (tool_choice required is enforced: the arguments validate against the
// schema; the function_call_output goes back through previous_response_id), previous_response_id
// chains whose prompt hits the prefix cache, text.format json_schema through the constrained
// decoder, the store (retrieve, delete, store: false), and bad inputs as OpenAI's 400s.
// One PASS/FAIL/SKIP line per case (see lib.mjs); run by tests/cli/test_responses.sh.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import Ajv from 'ajv';
import OpenAI from 'openai';
import { MODEL, MODEL_ID, assertClientError, failed, post, startServer, stopCleanly, test } from './lib.mjs';
import { TEMPLATE, WEATHER } from './tool_fixtures.mjs';

const t_start = Date.now();
if (!existsSync(MODEL) || !existsSync(TEMPLATE)) {
  console.log(`SKIP responses_tests: no model ${MODEL} or template ${TEMPLATE}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL responses_tests: the suite did not finish within 120 s');
  process.exit(1);
}, 120000).unref();

const ajv = new Ajv({ strict: true, allErrors: true });
const validWeather = ajv.compile(WEATHER);
const TOOLS = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: WEATHER, strict: true }];

let S;
await test('responses_server_starts', async () => {
  S = await startServer(['--chat-template-file', TEMPLATE, '-c', '4096'], 'responses server');
});
if (!S) process.exit(1);
const client = S.client();

await test('responses_create', async () => {
  const r = await client.responses.create({ model: MODEL_ID, input: 'Tell me a story', max_output_tokens: 8 });
  assert.match(r.id, /^resp_[A-Za-z0-9]{24}$/);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.output.length, 1, JSON.stringify(r.output));
  const m = r.output[0];
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, 'output_text');
  assert.equal(r.output_text, m.content[0].text, 'the client\'s output_text is the message text');
  assert.ok(r.output_text.length > 0);
  assert.equal(r.usage.output_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 8);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  assert.equal(r.max_output_tokens, 8);
  assert.equal(r.store, true);
});

await test('responses_input_items_and_instructions', async () => {
  const items = [
    { role: 'developer', content: 'Answer in one line.' },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi' }] },
    { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hello!' }] },
    { role: 'user', content: 'Tell me a story' },
  ];
  const a = await client.responses.create({ model: MODEL_ID, input: items, max_output_tokens: 4, instructions: 'You tell stories.' });
  const b = await client.responses.create({ model: MODEL_ID, input: items.slice(1), max_output_tokens: 4, instructions: 'You tell stories.' });
  assert.ok(a.usage.input_tokens > b.usage.input_tokens, 'the developer message is in the prompt');
  assert.equal(a.instructions, 'You tell stories.');
});

await test('responses_stream', async () => {
  const stream = client.responses.stream({ model: MODEL_ID, input: 'Tell me a story', max_output_tokens: 12, temperature: 0 });
  let text = '';
  const types = [];
  let seq = -1;
  stream.on('event', (e) => {
    types.push(e.type);
    assert.equal(e.sequence_number, seq + 1, 'sequence numbers count up');
    seq = e.sequence_number;
  });
  stream.on('response.output_text.delta', (e) => {
    text += e.delta;
    assert.equal(e.snapshot, text);
  });
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.deepEqual(types.slice(2, 4), ['response.output_item.added', 'response.content_part.added']);
  assert.deepEqual(types.slice(-4, -1), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done']);
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)), types.at(-1));
  assert.ok(types.slice(4, -4).every((t) => t === 'response.output_text.delta'), types.join(' '));
  assert.equal(final.output[0].content[0].text, text);
  const whole = await client.responses.create({ model: MODEL_ID, input: 'Tell me a story', max_output_tokens: 12, temperature: 0 });
  assert.equal(whole.output_text, text, 'the stream gives the non-streaming reply');
});

let CALL;
await test('responses_function_call_loop', async () => {
  const r = await client.responses.create({
    model: MODEL_ID, input: 'What is the weather in Paris?', tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 300, temperature: 1,
  });
  assert.equal(r.status, 'completed', JSON.stringify(r.output));
  const calls = r.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 1, JSON.stringify(r.output));
  const c = calls[0];
  assert.equal(c.name, 'get_weather');
  assert.match(c.id, /^fc_/);
  assert.ok(c.call_id.length > 5);
  const args = JSON.parse(c.arguments);
  assert.ok(validWeather(args), `${c.arguments}: ${ajv.errorsText(validWeather.errors)}`);
  CALL = r;
  const next = await client.responses.create({
    model: MODEL_ID, previous_response_id: r.id, tools: TOOLS, max_output_tokens: 10,
    input: [{ type: 'function_call_output', call_id: c.call_id, output: '{"forecast":"sunny"}' }],
  });
  assert.equal(next.previous_response_id, r.id);
  assert.ok(next.usage.input_tokens > r.usage.input_tokens, 'the call and its output are in the prompt');
  assert.ok(next.usage.input_tokens_details.cached_tokens > r.usage.input_tokens / 2,
    `the chain's prompt hits the prefix cache: ${JSON.stringify(next.usage)}`);
});

await test('responses_stream_function_call', async () => {
  const stream = client.responses.stream({
    model: MODEL_ID, input: 'What is the weather in Paris?', tools: TOOLS,
    tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false, max_output_tokens: 300, temperature: 1,
  });
  let args = '';
  stream.on('response.function_call_arguments.delta', (e) => {
    args += e.delta;
    assert.equal(e.snapshot, args);
  });
  const final = await stream.finalResponse();
  const c = final.output.find((o) => o.type === 'function_call');
  assert.ok(c, JSON.stringify(final.output));
  assert.equal(c.arguments, args);
  assert.ok(validWeather(JSON.parse(args)), args);
});

await test('responses_chain_hits_prefix_cache', async () => {
  const a = await client.responses.create({ model: MODEL_ID, input: 'Tell me a story', max_output_tokens: 16 });
  const b = await client.responses.create({ model: MODEL_ID, previous_response_id: a.id, input: 'And then?', max_output_tokens: 8 });
  const c = await client.responses.create({ model: MODEL_ID, previous_response_id: b.id, input: 'The end?', max_output_tokens: 8 });
  assert.ok(b.usage.input_tokens > a.usage.input_tokens + 16 - 2, 'the first turn is in the second prompt');
  assert.ok(b.usage.input_tokens_details.cached_tokens >= a.usage.input_tokens - 8, JSON.stringify(b.usage));
  assert.ok(c.usage.input_tokens_details.cached_tokens >= b.usage.input_tokens - 8, JSON.stringify(c.usage));
});

await test('responses_json_schema', async () => {
  const r = await client.responses.create({
    model: MODEL_ID, input: 'The weather, as JSON', max_output_tokens: 200, temperature: 1,
    text: { format: { type: 'json_schema', name: 'weather', schema: WEATHER, strict: true } },
  });
  assert.equal(r.status, 'completed');
  const v = JSON.parse(r.output_text);
  assert.ok(validWeather(v), r.output_text);
});

await test('responses_store', async () => {
  const r = await client.responses.create({ model: MODEL_ID, input: 'Hi', max_output_tokens: 4 });
  const got = await client.responses.retrieve(r.id);
  assert.equal(got.id, r.id);
  assert.deepEqual(got.output, r.output);
  assert.deepEqual(got.usage, r.usage);
  await client.responses.delete(r.id);
  await assertClientError(client.responses.retrieve(r.id), OpenAI.NotFoundError, 404, 'deleted');
  const gone = await client.responses.create({ model: MODEL_ID, input: 'Hi', max_output_tokens: 2, store: false });
  await assertClientError(client.responses.retrieve(gone.id), OpenAI.NotFoundError, 404, 'store false');
  const e = await assertClientError(client.responses.create({ model: MODEL_ID, previous_response_id: gone.id, input: 'x' }),
    OpenAI.BadRequestError, 400, 'unknown previous_response_id');
  assert.equal(e.param, 'previous_response_id');
});

const BAD = [
  ['no input', { input: undefined }, 'input'],
  ['input not text', { input: 42 }, 'input'],
  ['unknown item', { input: [{ type: 'computer_call' }] }, 'input[0]'],
  ['image part', { input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input[0].content'],
  ['function_call_output without call_id', { input: [{ type: 'function_call_output', output: 'x' }] }, 'input[0]'],
  ['web search tool', { tools: [{ type: 'web_search' }] }, 'tools[0]'],
  ['tool_choice unknown', { tools: TOOLS, tool_choice: { type: 'mcp' } }, 'tool_choice'],
  ['max_output_tokens zero', { max_output_tokens: 0 }, 'max_output_tokens'],
  ['instructions not text', { instructions: 1 }, 'instructions'],
  ['background', { background: true }, 'background'],
  ['bad schema', { text: { format: { type: 'json_schema', name: 'x', schema: { type: 'nope' } } } }, 'response_format.json_schema.schema'],
];

await test('responses_bad_requests', async () => {
  for (const [what, change, param] of BAD) {
    const body = { model: MODEL_ID, input: 'Hi', max_output_tokens: 4, ...change };
    for (const k of Object.keys(change)) if (change[k] === undefined) delete body[k];
    const r = await post(S, '/v1/responses', body);
    assert.equal(r.status, 400, `${what}: HTTP ${r.status}: ${r.text.slice(0, 300)}`);
    assert.equal(r.json.error.param, param, `${what}: ${JSON.stringify(r.json)}`);
  }
  const ok = await client.responses.create({ model: MODEL_ID, input: 'Hi', max_output_tokens: 2 });
  assert.equal(ok.object, 'response', 'still serving');
});

await test('responses_server_stops_cleanly', () => stopCleanly(S));

console.log(`# responses tests: ${((Date.now() - t_start) / 1000).toFixed(1)} s`);
process.exit(failed() ? 1 : 0);

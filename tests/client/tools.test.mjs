// tools.test.mjs - tool calls of `kiln serve` with the official openai npm client: stories260K served
// with --chat-template-file set to the Qwen2.5 template (the hermes format), tool_choice "required"
// and a named function return calls whose arguments validate against the tool's schema (ajv), one
// call with parallel_tool_calls false and several with it true, not streaming and streaming (the
// first delta of a call carries its id, type and name, the argument fragments concatenate to the
// final JSON, the id never changes), runTools runs the tool; a second server with the Functionary
// v3.2 template: a named function through another format, and tool_choice "auto" with a strict tool
// (a lazy grammar: free text without the trigger, a valid call once it is forced); a
// multi-turn exchange (call -> tool result -> answer) renders with the arguments as an object; every
// malformed tools / tool_choice / tool message is a 400 naming the field and the server keeps
// serving; the CLI refuses an unknown --tool-format and an unreadable --chat-template-file.
// One PASS/FAIL/SKIP line per case (see lib.mjs); run by tests/cli/test_server.sh.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import Ajv from 'ajv';
import OpenAI from 'openai';
import { KILN, MODEL, MODEL_ID, Skip, assertClientError, assertHttpError, failed, get, post, startServer, stopCleanly, test } from './lib.mjs';
import { FUNCTIONARY, TEMPLATE, WEATHER } from './tool_fixtures.mjs';

const t_start = Date.now();
if (!existsSync(MODEL) || !existsSync(TEMPLATE)) {
  console.log(`SKIP tools_tests: no model ${MODEL} or template ${TEMPLATE}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL tools_tests: the suite did not finish within 170 s');
  process.exit(1);
}, 170000).unref();

// Bounded schemas (WEATHER in tool_fixtures.mjs), so every constrained call can finish.
const SEARCH = {
  type: 'object',
  properties: { query: { type: 'string', maxLength: 20 }, limit: { type: 'integer', minimum: 1, maximum: 5 } },
  required: ['query', 'limit'],
  additionalProperties: false,
};
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER } },
  { type: 'function', function: { name: 'search', description: 'Search the web', parameters: SEARCH } },
];
const PICK_SCHEMA = {
  type: 'object', properties: { n: { type: 'integer', enum: [1, 2, 3] } }, required: ['n'], additionalProperties: false,
};
const PICK = { type: 'function', function: { name: 'pick', description: 'Pick a number', parameters: PICK_SCHEMA } };
const ajv = new Ajv({ strict: true, allErrors: true });
const validators = { get_weather: ajv.compile(WEATHER), search: ajv.compile(SEARCH), pick: ajv.compile(PICK_SCHEMA) };
const MAX = 300;

// One call per reply unless a case asks for parallel calls.
const chatReq = (extra = {}) => ({
  model: MODEL_ID, messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools: TOOLS,
  max_tokens: MAX, parallel_tool_calls: false, ...extra,
});

// Checks one tool call of a final message; returns its parsed arguments.
function assertCall(call, name, what) {
  assert.equal(call.type, 'function', `${what}: type`);
  assert.match(call.id, /^\S{6,}$/, `${what}: id ${call.id}`);
  if (name) assert.equal(call.function.name, name, `${what}: name`);
  const validate = validators[call.function.name];
  assert.ok(validate, `${what}: unknown function ${call.function.name}`);
  assert.equal(typeof call.function.arguments, 'string', `${what}: arguments must be a JSON string`);
  const args = JSON.parse(call.function.arguments);
  assert.ok(validate(args), `${what}: ${call.function.arguments}: ${ajv.errorsText(validate.errors)}`);
  return args;
}

let S;
await test('tools_server_starts', async () => {
  S = await startServer(['--chat-template-file', TEMPLATE], 'tools server');
});
if (!S) process.exit(1);
const client = S.client();

await test('tools_required_calls_validate', async () => {
  const seeds = [1, 2, 3, 4];
  const rs = await Promise.all(seeds.map((seed) => client.chat.completions.create(
    chatReq({ tool_choice: 'required', temperature: 1, seed }))));
  rs.forEach((r, i) => {
    const c = r.choices[0];
    const what = `seed ${seeds[i]}`;
    assert.equal(c.finish_reason, 'tool_calls', `${what}: finish_reason: ${JSON.stringify(c.message)}`);
    assert.equal(c.message.role, 'assistant');
    assert.equal(c.message.content, null, `${what}: content beside the calls`);
    assert.equal(c.message.tool_calls.length, 1, `${what}: one call`);
    assertCall(c.message.tool_calls[0], null, what);
  });
}, 60000); // the first constrained replies: four at once on a machine shared with the other suites

await test('tools_named_function_calls_it', async () => {
  for (const name of ['search', 'get_weather']) {
    const r = await client.chat.completions.create(
      chatReq({ tool_choice: { type: 'function', function: { name } }, temperature: 1, seed: 9 }));
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assertCall(r.choices[0].message.tool_calls[0], name, name);
  }
});

await test('tools_required_parallel_calls', async () => {
  // parallel_tool_calls true: one call or more, each well-formed; stories260K never ends on its own
  // after a call, so the replies run into max_tokens with several calls done
  const rs = await Promise.all([1, 2].map((seed) => client.chat.completions.create(
    chatReq({ tools: [PICK], tool_choice: 'required', parallel_tool_calls: true, temperature: 1, seed, max_tokens: 400 }))));
  for (const r of rs) {
    const c = r.choices[0];
    const calls = c.message.tool_calls || [];
    assert.ok(calls.length >= 2, `several calls: ${JSON.stringify(c.message)}`);
    assert.ok(['tool_calls', 'length'].includes(c.finish_reason), c.finish_reason);
    // every call but one cut by max_tokens is complete and valid
    const done = c.finish_reason === 'length' ? calls.slice(0, -1) : calls;
    done.forEach((call, i) => {
      assert.equal(call.function.name, 'pick');
      assert.ok(validators.pick(JSON.parse(call.function.arguments)), call.function.arguments);
      assert.equal(new Set(calls.map((x) => x.id)).size, calls.length, `call ${i}: ids are distinct`);
    });
  }
});

await test('tools_streaming_deltas_as_openai', async () => {
  const req = chatReq({ tool_choice: 'required', temperature: 1, seed: 4 });
  const whole = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  let args = '';
  let id = null;
  let name = null;
  let finish = null;
  let deltas = 0;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.finish_reason) finish = c.finish_reason;
    assert.ok(!c.delta.content, `no content beside a required call: ${JSON.stringify(c.delta)}`);
    for (const tc of c.delta.tool_calls || []) {
      assert.equal(tc.index, 0, 'one call, index 0');
      if (deltas++ === 0) {
        assert.equal(typeof tc.id, 'string', 'the first delta carries the id');
        assert.equal(tc.type, 'function', 'the first delta carries the type');
        assert.equal(typeof tc.function.name, 'string', 'the first delta carries the name');
        id = tc.id;
        name = tc.function.name;
      } else {
        assert.ok(tc.id === undefined || tc.id === id, 'the id never changes');
        assert.equal(tc.function.name, undefined, 'later deltas carry no name');
      }
      args += tc.function.arguments || '';
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.ok(deltas > 1, `arguments arrive in pieces (${deltas} deltas)`);
  const call = whole.choices[0].message.tool_calls[0];
  assert.equal(name, call.function.name, 'same call as the non-streaming reply');
  assert.equal(args, call.function.arguments, 'the concatenated argument deltas are the final JSON');
  assertCall({ id, type: 'function', function: { name, arguments: args } }, null, 'streamed call');
});

await test('tools_run_tools', async () => {
  if (typeof client.chat.completions.runTools !== 'function') throw new Skip('no runTools in this client version');
  const seen = [];
  const runner = client.chat.completions.runTools({
    ...chatReq({ tool_choice: { type: 'function', function: { name: 'get_weather' } }, temperature: 1, seed: 2 }),
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather',
        parameters: WEATHER,
        parse: JSON.parse,
        function: (args) => {
          seen.push(args);
          return { forecast: 'sunny' };
        },
      },
    }],
  }, { maxChatCompletions: 2 });
  await runner.done();
  assert.ok(seen.length >= 1, 'runTools ran the tool');
  for (const a of seen) assert.ok(validators.get_weather(a), JSON.stringify(a));
  const msgs = runner.messages;
  assert.ok(msgs.some((m) => m.role === 'tool'), 'the tool result went back to the model');
});

// The exchange an agent has: the model's call (arguments as a JSON string, as OpenAI sends them),
// the tool's result, the model's answer.
const HISTORY = [
  { role: 'user', content: 'What is the weather in Paris?' },
  {
    role: 'assistant', content: null,
    tool_calls: [{
      id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Paris","days":1,"unit":"celsius"}' },
    }],
  },
  { role: 'tool', tool_call_id: 'call_1', content: '{"forecast":"sunny"}' },
];

await test('tools_multi_turn_renders', async () => {
  const r = await post(S, '/apply-template', { messages: HISTORY, tools: TOOLS });
  assert.equal(r.status, 200, r.text);
  const p = r.json.prompt;
  assert.ok(p.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 1, "unit": "celsius"}}\n</tool_call>'),
    `the call's arguments render as an object: ${p}`);
  assert.ok(p.includes('<tool_response>\n{"forecast":"sunny"}\n</tool_response>'), p);
  assert.ok(p.endsWith('<|im_start|>assistant\n'), p);
  const a = await client.chat.completions.create(chatReq({ messages: HISTORY, tool_choice: 'none', max_tokens: 16, seed: 1 }));
  assert.equal(typeof a.choices[0].message.content, 'string');
  assert.equal(a.choices[0].message.tool_calls, undefined, 'tool_choice none: no calls');
  assert.ok(['stop', 'length'].includes(a.choices[0].finish_reason));
});

const fn = (f) => ({ type: 'function', function: f });
// A parameter schema kiln refuses to enforce (a lookahead in a pattern).
const LOOKAROUND = { type: 'object', properties: { a: { type: 'string', pattern: '(?=a)b' } } };
const BAD = [
  ['tools not a list', { tools: { a: 1 } }, 'tools'],
  ['tool entry without type function', { tools: [{ type: 'retrieval' }] }, 'tools[0]'],
  ['function without a name', { tools: [fn({ parameters: WEATHER })] }, 'tools[0].function.name'],
  ['function with a bad name', { tools: [fn({ name: 'a b' })] }, 'tools[0].function.name'],
  ['function declared twice', { tools: [fn({ name: 'f' }), fn({ name: 'f' })] }, 'tools[1].function.name'],
  ['parameters not a schema', { tools: [fn({ name: 'f', parameters: 'object' })] }, 'tools[0].function.parameters'],
  ['tool_choice unknown word', { tool_choice: 'always' }, 'tool_choice'],
  ['tool_choice object without a name', { tool_choice: { type: 'function' } }, 'tool_choice'],
  ['tool_choice names an unknown function', { tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
  ['required without tools', { tools: [], tool_choice: 'required' }, 'tool_choice'],
  ['required with a response_format', { tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice'],
  ['required with a schema kiln cannot enforce', { tools: [fn({ name: 'f', parameters: LOOKAROUND })], tool_choice: 'required' },
    'tools[0].function.parameters'],
  ['auto with a strict tool kiln cannot enforce', { tools: [fn({ name: 'f', strict: true, parameters: LOOKAROUND })] },
    'tools[0].function.parameters'],
  ['reasoning_format unknown', { reasoning_format: 'verbose' }, 'reasoning_format'],
  ['parallel_tool_calls not a boolean', { parallel_tool_calls: 'yes' }, 'parallel_tool_calls'],
  ['tool message without tool_call_id', { messages: [{ role: 'user', content: 'x' }, { role: 'tool', content: 'r' }] },
    'messages[1].tool_call_id'],
  ['assistant tool_calls not a list', { messages: [{ role: 'assistant', content: null, tool_calls: {} }] },
    'messages[0].tool_calls'],
  ['assistant tool call without a name',
    { messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { arguments: '{}' } }] }] },
    'messages[0].tool_calls[0]'],
  ['assistant tool call arguments a number',
    { messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: 3 } }] }] },
    'messages[0].tool_calls[0]'],
];

await test('tools_bad_input_400', async () => {
  for (const [what, extra, param] of BAD) {
    for (const stream of [false, true]) {
      const r = await post(S, '/v1/chat/completions', chatReq({ max_tokens: 4, stream, ...extra }));
      const e = assertHttpError(r, 400, `${what}${stream ? ' (stream)' : ''}`);
      assert.equal(e.param, param, `${what}: param (${e.message})`);
    }
  }
  // the same schema under "auto" without strict: the reply runs unconstrained
  const ok = await post(S, '/v1/chat/completions', chatReq({ max_tokens: 4, tools: [fn({ name: 'f', parameters: LOOKAROUND })] }));
  assert.equal(ok.status, 200, ok.text);
  const e = await assertClientError(client.chat.completions.create(chatReq({ tool_choice: 'sometimes' })),
    OpenAI.BadRequestError, 400, 'client');
  assert.equal(e.param, 'tool_choice');
});

await test('tools_still_serving', async () => {
  assert.equal((await get(S, '/health')).status, 200);
  const r = await client.chat.completions.create(chatReq({ tool_choice: 'required', seed: 11, temperature: 1 }));
  assertCall(r.choices[0].message.tool_calls[0], null, 'after the bad inputs');
  const plain = await client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 });
  assert.equal(typeof plain.choices[0].message.content, 'string');
});

// A second server with a template of another family: Functionary v3.2, whose calls are recipient
// lines (">>>name\n{arguments}") and whose prompt ends with ">>>".
let F;
await test('tools_functionary_server_starts', async () => {
  F = await startServer(['--chat-template-file', FUNCTIONARY], 'functionary server');
});
const fclient = F && F.client();

await test('tools_named_function_other_format', async () => {
  if (!F) throw new Skip('no functionary server');
  for (const name of ['search', 'get_weather']) {
    const r = await fclient.chat.completions.create(
      chatReq({ tool_choice: { type: 'function', function: { name } }, temperature: 1, seed: 3 }));
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0].message));
    assert.equal(r.choices[0].message.tool_calls.length, 1);
    assertCall(r.choices[0].message.tool_calls[0], name, name);
  }
});

// tool_choice "auto" with a strict tool: a lazy grammar. Without the format's trigger (">>>") the
// reply is the model's own free text, the same as with tool_choice "none"; with the trigger forced
// (logit_bias on stories260K's '>' token, 505) what follows is a well-formed call of a declared tool
// (the '>' bias cannot pull it off course: the grammar masks '>' inside the call).
await test('tools_auto_strict_lazy', async () => {
  if (!F) throw new Skip('no functionary server');
  const strict = [{ type: 'function', function: { name: 'get_weather', strict: true, parameters: WEATHER } }];
  const base = { tools: strict, temperature: 0, max_tokens: 40, seed: 1 };
  const free = await fclient.chat.completions.create(chatReq({ ...base, tool_choice: 'none' }));
  const auto = await fclient.chat.completions.create(chatReq({ ...base, tool_choice: 'auto' }));
  assert.equal(auto.choices[0].message.tool_calls, undefined, JSON.stringify(auto.choices[0].message));
  assert.equal(auto.choices[0].message.content, free.choices[0].message.content, 'free text stays free');
  for (const seed of [1, 2]) {
    const r = await fclient.chat.completions.create(chatReq({
      tools: strict, tool_choice: 'auto', logit_bias: { 505: 100 }, temperature: 1, seed, max_tokens: MAX,
    }));
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', `seed ${seed}: ${JSON.stringify(c.message)}`);
    assert.equal(c.message.tool_calls.length, 1, 'parallel_tool_calls false: one call');
    assertCall(c.message.tool_calls[0], 'get_weather', `seed ${seed}`);
  }
  // the same under the hermes template: no trigger, free text
  const h = await client.chat.completions.create(chatReq({ ...base, tool_choice: 'auto' }));
  assert.equal(h.choices[0].message.tool_calls, undefined);
  assert.equal(typeof h.choices[0].message.content, 'string');
});

await test('tools_functionary_server_stops_cleanly', () => (F ? stopCleanly(F) : undefined));
await test('tools_server_stops_cleanly', () => stopCleanly(S));

await test('tools_cli_flags_refused', async () => {
  const bad = spawnSync(KILN, ['serve', '-m', MODEL, '--port', '0', '--tool-format', 'klingon'], { encoding: 'utf8', timeout: 10000 });
  assert.equal(bad.status, 2, `unknown --tool-format: status ${bad.status}: ${bad.stderr}`);
  assert.match(bad.stderr, /unknown --tool-format 'klingon'.*hermes.*gpt-oss/s);
  const missing = spawnSync(KILN, ['run', '-m', MODEL, '-p', 'hi', '-n', '2', '--chat-template-file', '/nonexistent.jinja'],
    { encoding: 'utf8', timeout: 10000 });
  assert.notEqual(missing.status, 0);
  assert.match(missing.stderr, /cannot read the chat template '\/nonexistent.jinja'/);
  const ok = spawnSync(KILN, ['run', '-m', MODEL, '-p', 'hi', '-n', '4', '--chat-template-file', TEMPLATE], { encoding: 'utf8', timeout: 20000 });
  assert.equal(ok.status, 0, ok.stderr);
});

console.log(`# tool call tests: ${((Date.now() - t_start) / 1000).toFixed(1)} s`);
process.exit(failed() ? 1 : 0);

// structured.test.mjs - structured output of `kiln serve` with the official openai npm client:
// response_format json_schema (as the client types it) and json_object, llama-server's grammar,
// json_schema and json_object+schema, streaming and not, finish_reason "length", logprobs of the
// constrained distribution, stop strings, batching with free rows; every bad constraint is a 400 in
// OpenAI's error shape naming the field, and the server keeps serving. End to end on the real
// stories260K model: 20 seeded sampled generations under a schema (an enum, an integer range, an
// array with minItems, string patterns) all parse and validate with ajv.
// One PASS/FAIL/SKIP line per case (see lib.mjs); run by tests/cli/test_server.sh.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import Ajv from 'ajv';
import OpenAI from 'openai';
import {
  MODEL, MODEL_ID, assertClientError, assertHttpError, failed, get, post, startServer, stopCleanly, test,
} from './lib.mjs';

const t_start = Date.now();
if (!existsSync(MODEL)) {
  console.log(`SKIP structured_tests: no model ${MODEL}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL structured_tests: the suite did not finish within 170 s');
  process.exit(1);
}, 170000).unref();

// The end-to-end schema: every string and array is bounded, so every generation can finish.
const SCHEMA = {
  type: 'object',
  properties: {
    mood: { type: 'string', enum: ['happy', 'sad', 'sleepy'] },
    age: { type: 'integer', minimum: 3, maximum: 12 },
    friends: {
      type: 'array', items: { type: 'string', pattern: '^[A-Z][a-z]{1,7}$' }, minItems: 2, maxItems: 3,
    },
    code: { type: 'string', pattern: '^[a-z]{3}-[0-9]{2}$' },
  },
  required: ['mood', 'age', 'friends', 'code'],
  additionalProperties: false,
};
const ajv = new Ajv({ strict: true, allErrors: true });
const validate = ajv.compile(SCHEMA);
const RESPONSE_FORMAT = { type: 'json_schema', json_schema: { name: 'child', schema: SCHEMA, strict: true } };
const YESNO = 'root ::= ("yes" | "no") "."';
const MAX = 600; // tokens: more than the longest sentence of SCHEMA's language takes

const chatReq = (extra = {}) => ({
  model: MODEL_ID, messages: [{ role: 'user', content: 'Tell me about a child.' }], ...extra,
});
const cmplReq = (extra = {}) => ({ model: MODEL_ID, prompt: 'Once upon a time', ...extra });

// Parses and validates text under SCHEMA; returns the value.
function assertValid(text, what) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    assert.fail(`${what}: not JSON (${e.message}): ${JSON.stringify(text.slice(0, 300))}`);
  }
  assert.ok(validate(v), `${what}: invalid under the schema: ${ajv.errorsText(validate.errors)}: ${text.slice(0, 300)}`);
  return v;
}

let S;
await test('structured_server_starts', async () => {
  S = await startServer([], 'structured server');
});
if (!S) process.exit(1);
const client = S.client();

// ---- end to end on stories260K ----------------------------------------------------------------

await test('structured_schema_20_seeded_samples_valid', async () => {
  const seeds = Array.from({ length: 20 }, (_, i) => i + 1);
  const rs = await Promise.all(seeds.map((seed) => client.chat.completions.create(
    chatReq({ response_format: RESPONSE_FORMAT, temperature: 1, seed, max_tokens: MAX }))));
  const texts = new Set();
  rs.forEach((r, i) => {
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', `seed ${seeds[i]}: finish_reason ${c.finish_reason}: ${c.message.content}`);
    assertValid(c.message.content, `seed ${seeds[i]}`);
    texts.add(c.message.content);
  });
  assert.ok(texts.size >= 5, `only ${texts.size} distinct outputs from 20 seeds`);
}, 150000);

await test('structured_schema_seed_reproducible', async () => {
  const req = chatReq({ response_format: RESPONSE_FORMAT, temperature: 1, seed: 7, max_tokens: MAX });
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assertValid(a.choices[0].message.content, 'seed 7');
});

await test('structured_schema_stream_equals_nonstream', async () => {
  const req = chatReq({ response_format: RESPONSE_FORMAT, temperature: 0, max_tokens: MAX });
  const whole = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  let text = '';
  let finish = null;
  for await (const ch of stream) {
    for (const c of ch.choices) {
      if (typeof c.delta?.content === 'string') text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'stop');
  assertValid(text, 'stream');
  assert.equal(text, whole.choices[0].message.content);
});

await test('structured_schema_cached_compile_same_output', async () => {
  // The second request with the same schema text is served by the cached compiled grammar.
  const req = cmplReq({ response_format: RESPONSE_FORMAT, temperature: 0, max_tokens: MAX });
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assertValid(a.choices[0].text, 'completions');
});

await test('structured_schema_length_cut', async () => {
  const r = await client.chat.completions.create(
    chatReq({ response_format: RESPONSE_FORMAT, temperature: 1, seed: 3, max_tokens: 3 }));
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 3);
  assert.ok(r.choices[0].message.content.startsWith('{'), `content ${JSON.stringify(r.choices[0].message.content)}`);
  const stream = await client.completions.create(cmplReq({ response_format: RESPONSE_FORMAT, max_tokens: 2, stream: true }));
  let finish = null;
  for await (const ch of stream) if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  assert.equal(finish, 'length');
});

await test('structured_json_object', async () => {
  for (const seed of [1, 2]) {
    const r = await client.chat.completions.create(
      chatReq({ response_format: { type: 'json_object' }, temperature: 1, seed, max_tokens: 300 }));
    const c = r.choices[0];
    assert.ok(c.message.content.startsWith('{'), `seed ${seed}: ${JSON.stringify(c.message.content.slice(0, 100))}`);
    if (c.finish_reason === 'stop') {
      const v = JSON.parse(c.message.content);
      assert.ok(v && typeof v === 'object' && !Array.isArray(v), `seed ${seed}: not an object: ${c.message.content}`);
    } else {
      assert.equal(c.finish_reason, 'length');
      assert.equal(r.usage.completion_tokens, 300);
    }
  }
});

await test('structured_llama_server_fields', async () => {
  // top-level json_schema, and response_format json_object with a schema
  const a = await client.completions.create(cmplReq({ json_schema: SCHEMA, temperature: 1, seed: 11, max_tokens: MAX }));
  assertValid(a.choices[0].text, 'json_schema');
  const b = await client.chat.completions.create(chatReq({
    response_format: { type: 'json_object', schema: SCHEMA }, temperature: 1, seed: 12, max_tokens: MAX,
  }));
  assertValid(b.choices[0].message.content, 'json_object + schema');
  // {"type": "text"} and an empty grammar are no constraint
  const c = await client.completions.create(cmplReq({
    response_format: { type: 'text' }, grammar: '', temperature: 0, max_tokens: 8,
  }));
  assert.equal(c.choices[0].finish_reason, 'length');
});

await test('structured_grammar_extra_body', async () => {
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.completions.create(cmplReq({ grammar: YESNO, temperature: 1, seed, max_tokens: 10 }));
    assert.match(r.choices[0].text, /^(yes|no)\.$/, `seed ${seed}`);
    assert.equal(r.choices[0].finish_reason, 'stop');
  }
  const c = await client.chat.completions.create(chatReq({ grammar: YESNO, temperature: 0, max_tokens: 10 }));
  assert.match(c.choices[0].message.content, /^(yes|no)\.$/);
  const stream = await client.completions.create(cmplReq({ grammar: YESNO, temperature: 0, max_tokens: 10, stream: true }));
  let text = '';
  for await (const ch of stream) text += ch.choices[0]?.text ?? '';
  assert.match(text, /^(yes|no)\.$/);
});

await test('structured_grammar_with_stop_string', async () => {
  const r = await client.completions.create(cmplReq({ grammar: YESNO, stop: ['.'], temperature: 0, max_tokens: 10 }));
  assert.match(r.choices[0].text, /^(yes|no)$/);
  assert.equal(r.choices[0].finish_reason, 'stop');
});

await test('structured_logprobs_constrained', async () => {
  const r = await client.chat.completions.create(
    chatReq({ grammar: YESNO, temperature: 0, max_tokens: 10, logprobs: true, top_logprobs: 10 }));
  const c = r.choices[0];
  assert.match(c.message.content, /^(yes|no)\.$/);
  const entries = c.logprobs.content;
  assert.ok(entries.length > 0);
  let sofar = '';
  for (const [i, e] of entries.entries()) {
    let mass = 0;
    for (const t of e.top_logprobs) {
      assert.ok(Number.isFinite(t.logprob), `step ${i}: logprob ${t.logprob} of ${JSON.stringify(t.token)}`);
      const text = sofar === '' ? t.token.replace(/^ /, '') : t.token;
      assert.ok(['yes.', 'no.'].some((s) => s.startsWith(sofar + text)),
        `step ${i}: ${JSON.stringify(t.token)} after ${JSON.stringify(sofar)} is outside the grammar`);
      mass += Math.exp(t.logprob);
    }
    assert.ok(mass <= 1 + 1e-3, `step ${i}: the top alternatives hold ${mass}`);
    if (e.top_logprobs.length < 10) assert.ok(mass > 0.999, `step ${i}: all allowed tokens listed, mass ${mass}`);
    sofar += sofar === '' ? e.token.replace(/^ /, '') : e.token;
  }
  assert.equal(sofar, c.message.content);
});

await test('structured_batch_leaves_free_rows_unchanged', async () => {
  const free = cmplReq({ temperature: 0, max_tokens: 60 });
  const alone = (await client.completions.create(free)).choices[0].text;
  const [together, ...constrained] = await Promise.all([
    client.completions.create(free),
    ...[1, 2, 3].map((seed) => client.completions.create(
      cmplReq({ response_format: RESPONSE_FORMAT, temperature: 1, seed, max_tokens: MAX }))),
  ]);
  assert.equal(together.choices[0].text, alone);
  for (const r of constrained) assertValid(r.choices[0].text, 'batched');
});

await test('structured_strict_mode', async () => {
  // The same schema with and without strict: strict admits only the listed property. Where the
  // value of "a" ends, the constrained alternatives (logprobs) offer a comma only without strict.
  const schema = { type: 'object', properties: { a: { enum: [1] } }, required: ['a'] };
  const run = (strict) => client.chat.completions.create(chatReq({
    response_format: { type: 'json_schema', json_schema: { name: 'a', schema, strict } },
    temperature: 0, max_tokens: 200, logprobs: true, top_logprobs: 20,
  }));
  const commaOffered = (r) => r.choices[0].logprobs.content.some((e) => e.top_logprobs.some((t) => t.token.includes(',')));
  const strict = await run(true);
  assert.deepEqual(JSON.parse(strict.choices[0].message.content), { a: 1 }, strict.choices[0].message.content);
  assert.ok(!commaOffered(strict), 'strict: a comma was offered');
  const loose = await run(false);
  assert.ok(commaOffered(loose), 'without strict: no comma was offered after the value');
}, 60000);

await test('structured_unique_enum_samples_valid', async () => {
  // A multi-select (uniqueItems over listed values) is enforced exactly: hot seeded samples, which
  // repeat values when they may, all validate, and no approximation is reported.
  const schema = {
    type: 'array', items: { enum: ['red', 'green', 'blue', 'cyan', 'pink'] }, uniqueItems: true, minItems: 2, maxItems: 4,
  };
  const check = new Ajv({ strict: true }).compile(schema);
  const rs = await Promise.all(Array.from({ length: 12 }, (_, i) => client.chat.completions.create(chatReq({
    response_format: { type: 'json_schema', json_schema: { name: 'colors', schema } },
    temperature: 1.5, seed: 100 + i, max_tokens: MAX,
  })).withResponse()));
  for (const { data, response } of rs) {
    const text = data.choices[0].message.content;
    assert.ok(check(JSON.parse(text)), `invalid: ${text}`);
    assert.equal(response.headers.get('x-kiln-schema-approximation'), null);
  }
}, 60000);

await test('structured_approximation_reported', async () => {
  // A schema kiln enforces only approximately says so in a response header (the official client
  // reads it with .withResponse()), streaming or not, from the compile and from the cache; an
  // exact schema, JSON mode and a grammar send none.
  const H = 'x-kiln-schema-approximation';
  const approx = { type: 'object', properties: { id: { oneOf: [{ type: 'integer' }, { type: 'number', maximum: 5 }] } } };
  const fmt = (schema) => ({ type: 'json_schema', json_schema: { name: 's', schema } });
  for (const stream of [false, true, false]) {
    const { data, response } = await client.chat.completions.create(chatReq({
      response_format: fmt(approx), max_tokens: 30, temperature: 0, stream,
    })).withResponse();
    if (stream) for await (const _ of data); // eslint-disable-line no-unused-vars
    assert.equal(response.headers.get(H),
      '#/properties/id/oneOf: enforced as anyOf: a value valid under several branches is accepted', `stream ${stream}`);
  }
  for (const extra of [{ response_format: RESPONSE_FORMAT }, { response_format: { type: 'json_object' } },
    { grammar: YESNO }]) {
    const { response } = await client.chat.completions.create(chatReq({ ...extra, max_tokens: 5 })).withResponse();
    assert.equal(response.headers.get(H), null, JSON.stringify(extra).slice(0, 80));
  }
  // a tool's parameters: the header names the tool
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { type: 'string' } } } } },
    { type: 'function', function: { name: 'g', parameters: { type: 'object', properties: { to: { type: 'string', format: 'url' } } } } }];
  const { response } = await client.chat.completions.create(chatReq({ tools, tool_choice: 'required', max_tokens: 30 })).withResponse();
  assert.equal(response.headers.get(H),
    "tools[1].function.parameters: #/properties/to/format: the format's usual shape is enforced, not its full grammar");
}, 60000);

await test('structured_many_schemas_through_the_cache', async () => {
  // More distinct schemas than the cache holds, at once and twice over: entries leave the cache
  // while requests still use them, and each request keeps its own grammar.
  const one = (i) => client.completions.create(cmplReq({
    json_schema: { type: 'integer', minimum: 100 * i, maximum: 100 * i + 9 }, temperature: 1, seed: i, max_tokens: 20,
  }));
  for (let round = 0; round < 2; round++) {
    const n = 40;
    const rs = await Promise.all(Array.from({ length: n }, (_, i) => one(i)));
    rs.forEach((r, i) => {
      const v = Number(r.choices[0].text);
      assert.ok(Number.isInteger(v) && v >= 100 * i && v <= 100 * i + 9, `round ${round}, schema ${i}: ${r.choices[0].text}`);
    });
  }
}, 60000);

// ---- bad input: 400 naming the field --------------------------------------------------------------

const rf = (json_schema) => ({ response_format: { type: 'json_schema', json_schema } });
const big = 'x'.repeat((1 << 20) + 10);
const BAD = [
  ['rf_string', { response_format: 'json' }, 'response_format', /must be an object/],
  ['rf_array', { response_format: [] }, 'response_format', /must be an object/],
  ['rf_no_type', { response_format: {} }, 'response_format.type', /must be a string/],
  ['rf_unknown_type', { response_format: { type: 'xml' } }, 'response_format.type', /'xml' is not supported/],
  ['rf_json_schema_missing', { response_format: { type: 'json_schema' } }, 'response_format.json_schema', /must be an object/],
  ['rf_json_schema_string', rf('x'), 'response_format.json_schema', /must be an object/],
  ['rf_schema_missing', rf({ name: 'x' }), 'response_format.json_schema.schema', /is required/],
  ['rf_schema_number', rf({ name: 'x', schema: 42 }), 'response_format.json_schema.schema', /must be a JSON Schema/],
  ['rf_schema_string', rf({ name: 'x', schema: '{}' }), 'response_format.json_schema.schema', /must be a JSON Schema/],
  ['rf_name_number', rf({ name: 5, schema: {} }), 'response_format.json_schema.name', /must be a string/],
  ['rf_strict_string', rf({ name: 'x', schema: {}, strict: 'yes' }), 'response_format.json_schema.strict', /must be a boolean/],
  ['rf_json_object_schema_number', { response_format: { type: 'json_object', schema: 3 } }, 'response_format.schema', /must be a JSON Schema/],
  ['json_schema_string', { json_schema: 'x' }, 'json_schema', /must be a JSON Schema/],
  ['json_schema_array', { json_schema: [1] }, 'json_schema', /must be a JSON Schema/],
  ['grammar_number', { grammar: 5 }, 'grammar', /must be a string/],
  ['grammar_object', { grammar: {} }, 'grammar', /must be a string/],
  ['grammar_over_1mib', { grammar: `root ::= "a" # ${big}` }, 'grammar', /bytes/],
  ['schema_over_1mib', rf({ name: 'x', schema: { type: 'object', description: big } }), 'response_format.json_schema.schema', /bytes/],
  ['grammar_undefined_rule', { grammar: 'root ::= value' }, 'grammar', /does not compile: .*line 1, column \d+/],
  ['grammar_syntax', { grammar: 'root ::= "open' }, 'grammar', /does not compile: .*line 1, column \d+/],
  ['grammar_no_root', { grammar: 'item ::= "a"' }, 'grammar', /does not compile: .*root/],
  ['grammar_left_recursion', { grammar: 'root ::= list\nlist ::= list "," "i" | "i"' }, 'grammar', /does not compile: .*line \d+/],
  ['schema_remote_ref', rf({ name: 'x', schema: { type: 'object', properties: { x: { $ref: 'https://example.com/s.json' } } } }),
    'response_format.json_schema.schema', /does not compile: .*\/properties\/x/],
  ['schema_unsupported_regex', { json_schema: { type: 'object', properties: { x: { type: 'string', pattern: '(?<=a)b' } } } },
    'json_schema', /does not compile: .*\/properties\/x/],
  ['schema_unknown_type', { json_schema: { type: 'frob' } }, 'json_schema', /does not compile/],
  // a star before a long count: its automaton would cost seconds to build (refused by its work)
  ['schema_costly_regex', rf({ name: 'x', schema: { type: 'string', pattern: '^>*>?>{4890}$' } }),
    'response_format.json_schema.schema', /does not compile: .*too costly to compile/],
  ['two_grammar_and_rf', { grammar: YESNO, ...rf({ name: 'x', schema: SCHEMA }) }, 'grammar', /both constrain the output/],
  ['two_json_schema_and_json_object', { json_schema: SCHEMA, response_format: { type: 'json_object' } }, 'json_schema', /both constrain/],
  ['two_grammar_and_json_schema', { json_schema: SCHEMA, grammar: YESNO }, 'grammar', /both constrain/],
];

await test('structured_bad_input_400_chat', async () => {
  for (const [what, extra, param, msg] of BAD) {
    const r = await post(S, '/v1/chat/completions', chatReq({ max_tokens: 4, ...extra }));
    const e = assertHttpError(r, 400, what);
    assert.equal(e.type, 'invalid_request_error', `${what}: type`);
    assert.equal(e.param, param, `${what}: param (message: ${e.message})`);
    assert.match(e.message, msg, `${what}: message`);
  }
});

await test('structured_bad_input_400_completions', async () => {
  for (const [what, extra, param, msg] of BAD.filter((_, i) => i % 3 === 0)) {
    const r = await post(S, '/v1/completions', cmplReq({ max_tokens: 4, ...extra }));
    const e = assertHttpError(r, 400, what);
    assert.equal(e.param, param, `${what}: param`);
    assert.match(e.message, msg, `${what}: message`);
  }
});

await test('structured_bad_input_400_client', async () => {
  const e = await assertClientError(
    client.chat.completions.create(chatReq({ response_format: { type: 'xml' } })), OpenAI.BadRequestError, 400, 'xml');
  assert.equal(e.param, 'response_format.type');
  await assertClientError(client.completions.create(cmplReq({ grammar: 'root ::= nothing' })),
    OpenAI.BadRequestError, 400, 'undefined rule');
  await assertClientError(client.chat.completions.create(chatReq({ ...rf({ name: 'x', schema: 42 }), stream: true })),
    OpenAI.BadRequestError, 400, 'streaming request with a bad schema');
});

await test('structured_still_serving', async () => {
  const h = await get(S, '/health');
  assert.equal(h.status, 200);
  const r = await client.completions.create(cmplReq({ grammar: YESNO, temperature: 0, max_tokens: 10 }));
  assert.match(r.choices[0].text, /^(yes|no)\.$/);
});

await test('structured_server_stops_cleanly', () => stopCleanly(S));

console.log(`# structured output tests: ${((Date.now() - t_start) / 1000).toFixed(1)} s`);
process.exit(failed() ? 1 : 0);

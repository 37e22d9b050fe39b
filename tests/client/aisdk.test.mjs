// aisdk.test.mjs - tool calls of `kiln serve` with the Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`)
// as a second real client beside the openai package: stories260K served with --chat-template-file set
// to the Qwen2.5 template (the hermes format), `generateText` with a tool and toolChoice "required"
// returns a tool call whose input validates against the tool's schema (ajv), and the SDK runs the
// tool's execute with that input; streamText gives the same call as its stream parts. One
// PASS/FAIL/SKIP line per case (see lib.mjs); run by tests/cli/test_server.sh.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, jsonSchema, streamText, tool } from 'ai';
import Ajv from 'ajv';
import { MODEL, MODEL_ID, failed, startServer, stopCleanly, test } from './lib.mjs';
import { TEMPLATE, WEATHER } from './tool_fixtures.mjs';

const t_start = Date.now();
if (!existsSync(MODEL) || !existsSync(TEMPLATE)) {
  console.log(`SKIP aisdk_tests: no model ${MODEL} or template ${TEMPLATE}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL aisdk_tests: the suite did not finish within 110 s');
  process.exit(1);
}, 110000).unref();

// The tool's schema (tool_fixtures.mjs) is bounded, so every constrained call can finish.
const ajv = new Ajv({ strict: true, allErrors: true });
const validate = ajv.compile(WEATHER);

let S;
await test('aisdk_server_starts', async () => {
  S = await startServer(['--chat-template-file', TEMPLATE], 'ai sdk server');
});
if (!S) process.exit(1);

const kiln = createOpenAICompatible({ name: 'kiln', baseURL: `${S.base}/v1`, apiKey: 'none' });
const model = kiln.chatModel(MODEL_ID);
const executed = [];
// One call per reply: parallel_tool_calls false, passed through to the request body.
const ONE_CALL = { kiln: { parallel_tool_calls: false } };
const tools = {
  get_weather: tool({
    description: 'The weather in a city',
    inputSchema: jsonSchema(WEATHER),
    execute: async (input) => {
      executed.push(input);
      return { temperature: 21 };
    },
  }),
};

function assertCall(call, what) {
  assert.equal(call.toolName, 'get_weather', `${what}: tool name`);
  assert.equal(typeof call.toolCallId, 'string', `${what}: toolCallId`);
  assert.ok(call.toolCallId.length >= 6, `${what}: toolCallId ${call.toolCallId}`);
  assert.ok(validate(call.input), `${what}: ${JSON.stringify(call.input)}: ${ajv.errorsText(validate.errors)}`);
}

await test('aisdk_generate_text_required_tool_validates', async () => {
  for (const seed of [1, 2, 3]) {
    executed.length = 0;
    const r = await generateText({
      model, tools, toolChoice: 'required', prompt: 'What is the weather in Paris?',
      maxOutputTokens: 300, temperature: 1, seed, maxRetries: 0, providerOptions: ONE_CALL,
    });
    const what = `seed ${seed}`;
    assert.equal(r.finishReason, 'tool-calls', `${what}: finishReason ${r.finishReason}: ${r.text}`);
    assert.equal(r.toolCalls.length, 1, `${what}: one call: ${JSON.stringify(r.toolCalls)}`);
    assertCall(r.toolCalls[0], what);
    assert.equal(r.text, '', `${what}: no text beside the call`);
    // The SDK ran the tool with the validated input.
    assert.deepEqual(executed, [r.toolCalls[0].input], `${what}: execute ran with the call's input`);
    assert.equal(r.toolResults.length, 1, `${what}: one tool result`);
    assert.deepEqual(r.toolResults[0].output, { temperature: 21 });
  }
}, 60000);

await test('aisdk_stream_text_required_tool_validates', async () => {
  const r = streamText({
    model, tools, toolChoice: 'required', prompt: 'What is the weather in Paris?',
    maxOutputTokens: 300, temperature: 1, seed: 4, maxRetries: 0, providerOptions: ONE_CALL,
  });
  let deltas = '';
  let callPart = null;
  for await (const part of r.fullStream) {
    if (part.type === 'error') throw part.error;
    if (part.type === 'tool-input-delta') deltas += part.delta;
    if (part.type === 'tool-call') callPart = part;
    assert.ok(part.type !== 'text-delta' || part.text === '', `no text beside a required call: ${JSON.stringify(part)}`);
  }
  assert.ok(callPart, 'a tool-call part');
  assertCall(callPart, 'stream');
  assert.deepEqual(JSON.parse(deltas), callPart.input, 'the input deltas concatenate to the call input');
  assert.equal(await r.finishReason, 'tool-calls');
}, 30000);

await test('aisdk_server_stops_cleanly', () => stopCleanly(S));

console.log(`# ai sdk tests: ${((Date.now() - t_start) / 1000).toFixed(1)} s`);
process.exit(failed() ? 1 : 0);

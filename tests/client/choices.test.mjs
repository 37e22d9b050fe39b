// choices.test.mjs - `n` > 1 on /v1/chat/completions and /v1/completions with the `openai` npm client:
// n = 3 gives three choices with indexes 0..2; greedy choices are identical (and the text one
// request alone gives); seeded sampling is reproducible (the same seed, the same three texts) and its
// choices differ from each other; usage counts the prompt once and the completion tokens of every
// choice; the choices after the first restore the prompt's KV from the prefix cache (its hit count
// grows by n - 1); a stream carries every choice's chunks with its index (the role first, a
// finish_reason each, one usage chunk, the texts of the whole response); n above the cap (16) is a 400. One PASS/FAIL/SKIP line
// per case (see lib.mjs); run by tests/cli/test_choices.sh.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import OpenAI from 'openai';
import { MODEL, assertClientError, failed, startServer, stats, stopCleanly, test } from './lib.mjs';

if (!existsSync(MODEL)) {
  console.log(`SKIP choices_tests: no model ${MODEL}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL choices_tests: the suite did not finish within 120 s');
  process.exit(1);
}, 120000).unref();

const S = await startServer([], 'choices server');
const client = S.client();

await test('choices_greedy_identical', async () => {
  const before = (await stats(S)).prompt_cache.hits;
  const r = await client.completions.create({ model: S.modelId, prompt: 'Once upon a time, in a small town', n: 3, max_tokens: 16, temperature: 0 });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.ok(r.choices.every((c) => c.text === r.choices[0].text && c.text.length > 0));
  assert.equal(r.usage.completion_tokens, 48);
  assert.ok(r.usage.prompt_tokens > 5 && r.usage.prompt_tokens < 20, JSON.stringify(r.usage)); // counted once
  assert.equal((await stats(S)).prompt_cache.hits, before + 2); // choices 1 and 2 restored the prompt
  const one = await client.completions.create({ model: S.modelId, prompt: 'Once upon a time, in a small town', max_tokens: 16, temperature: 0 });
  assert.equal(one.choices[0].text, r.choices[0].text);
});

await test('choices_seeded_reproducible', async () => {
  const ask = () => client.chat.completions.create({ model: S.modelId, messages: [{ role: 'user', content: 'Tell me a story' }],
    n: 3, max_tokens: 24, temperature: 1, seed: 42 });
  const a = await ask(), b = await ask();
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1, 'the choices of one seeded request all agree');
  assert.ok(a.choices.every((c, i) => c.index === i && c.message.role === 'assistant' && c.finish_reason));
});

await test('choices_errors', async () => {
  await assertClientError(client.completions.create({ model: S.modelId, prompt: 'x', n: 17 }), OpenAI.BadRequestError, 400, 'n above the cap');
  await assertClientError(client.completions.create({ model: S.modelId, prompt: 'x', n: 0 }), OpenAI.BadRequestError, 400, 'n = 0');
});

await test('choices_stream_indexes', async () => {
  const body = { model: S.modelId, messages: [{ role: 'user', content: 'Tell me a story' }], n: 3, max_tokens: 12, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const text = ['', '', ''], roles = [0, 0, 0], finish = [];
  let usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.role) roles[ch.index]++;
      text[ch.index] += ch.delta.content || '';
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
  }
  assert.deepEqual(roles, [1, 1, 1]);
  assert.deepEqual(text, whole.choices.map((c) => c.message.content));
  assert.deepEqual(finish, ['length', 'length', 'length']);
  assert.deepEqual([usage.prompt_tokens, usage.completion_tokens], [whole.usage.prompt_tokens, whole.usage.completion_tokens]);
});

await stopCleanly(S);
process.exit(failed() ? 1 : 0);

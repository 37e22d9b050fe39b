// choices.test.mjs - `n` > 1 on /v1/chat/completions and /v1/completions with the `openai` npm client:
// n = 3 gives three choices with indexes 0..2; greedy choices are identical (and the text one
// request alone gives); seeded sampling is reproducible (the same seed, the same three texts) and its
// choices differ from each other; usage counts the prompt once and the completion tokens of every
// choice; the choices after the first restore the prompt's KV from the prefix cache (its hit count
// grows by n - 1); a stream carries every choice's chunks with its index (the role first, a
// finish_reason each, one usage chunk, the texts of the whole response); n above the cap (16) is a 400.
// /v1/completions also takes a batch of prompts (strings or token-id arrays): choice p * n + k is
// what prompt p alone gives as its choice k (greedy and seeded), streamed or not, usage summing
// every prompt once; `echo` starts each choice's text with its prompt (streams send it first), and
// with `logprobs` lists the prompt's tokens too (the first with null, as OpenAI does), each with the
// logprob the model gives it, equal to what it gets when generated (evaluation harnesses score
// texts this way); what kiln does not do is a 400 naming the field, never ignored (suffix, best_of
// other than n, mixed or empty batches, more than 64 choices; on chat the deprecated functions /
// function_call and audio output). One PASS/FAIL/SKIP line per case (see lib.mjs); run by
// tests/cli/test_choices.sh.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import OpenAI from 'openai';
import { MODEL, assertClientError, assertHttpError, failed, post, startServer, stats, stopCleanly, test } from './lib.mjs';

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

const PROMPTS = ['Once upon a time, in a small town', 'Lily and Tom went to the park', 'The sun'];
const cmpl = (prompt, extra = {}) => client.completions.create({ model: S.modelId, prompt, max_tokens: 12, temperature: 0, ...extra });

await test('choices_prompt_batch', async () => {
  const singles = [];
  for (const p of PROMPTS) singles.push(await cmpl(p));
  const r = await cmpl(PROMPTS);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(r.choices.map((c) => c.text), singles.map((s) => s.choices[0].text));
  assert.ok(r.choices.every((c) => c.text.length > 0 && c.finish_reason === 'length'));
  const sum = (k) => singles.reduce((a, s) => a + s.usage[k], 0);
  assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens], [sum('prompt_tokens'), sum('completion_tokens')]);
  // the same prompts as token ids (what /tokenize gives, BOS first as a string prompt gets it)
  const ids = [];
  for (const p of PROMPTS) ids.push([1, ...(await post(S, '/tokenize', { content: p })).json.tokens]);
  const byIds = await cmpl(ids);
  assert.deepEqual(byIds.choices.map((c) => c.text), r.choices.map((c) => c.text));
  assert.equal(byIds.usage.prompt_tokens, r.usage.prompt_tokens);
});

await test('choices_prompt_batch_seeded_n', async () => {
  const extra = { n: 2, temperature: 1, seed: 7, max_tokens: 16 };
  const r = await cmpl(PROMPTS.slice(0, 2), extra);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  const alone = [...(await cmpl(PROMPTS[0], extra)).choices, ...(await cmpl(PROMPTS[1], extra)).choices];
  assert.deepEqual(r.choices.map((c) => c.text), alone.map((c) => c.text));
  assert.ok(r.choices[0].text !== r.choices[1].text || r.choices[2].text !== r.choices[3].text, 'seeded choices all agree');
  assert.equal(r.usage.completion_tokens, 64);
});

await test('choices_prompt_batch_stream', async () => {
  const whole = await cmpl(PROMPTS, { n: 2 });
  const stream = await client.completions.create({ model: S.modelId, prompt: PROMPTS, n: 2, max_tokens: 12, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  const text = Array(6).fill(''), finish = [];
  let usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text[ch.index] += ch.text;
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
  }
  assert.deepEqual(text, whole.choices.map((c) => c.text));
  assert.deepEqual(finish, Array(6).fill('length'));
  assert.deepEqual([usage.prompt_tokens, usage.completion_tokens], [whole.usage.prompt_tokens, whole.usage.completion_tokens]);
});

await test('choices_echo', async () => {
  const plain = await cmpl(PROMPTS[0]);
  const r = await cmpl(PROMPTS[0], { echo: true });
  assert.equal(r.choices[0].text, PROMPTS[0] + plain.choices[0].text);
  assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens], [plain.usage.prompt_tokens, plain.usage.completion_tokens]);
  assert.equal((await cmpl(PROMPTS[0], { echo: true, max_tokens: 0 })).choices[0].text, PROMPTS[0]);
  const batch = await cmpl(PROMPTS.slice(0, 2), { echo: true, n: 2 });
  assert.ok(batch.choices.every((c, i) => c.text.startsWith(PROMPTS[i >> 1]) && c.text.length > PROMPTS[i >> 1].length));
  const ids = [1, ...(await post(S, '/tokenize', { content: PROMPTS[1] })).json.tokens];
  const byIds = await cmpl(ids, { echo: true, max_tokens: 0 });
  assert.equal(byIds.choices[0].text, (await post(S, '/detokenize', { tokens: ids })).json.content);
  // byte tokens (stories260K: id 3 + b is the byte b): a lone 0xE2 is no character (U+FFFD), E2 82 A2 is U+20A2
  assert.equal((await cmpl([1, 229, 68, 229, 133, 165], { echo: true, max_tokens: 0 })).choices[0].text, '\uFFFDA\u20A2');
  // a stream sends each choice's prompt first, then its tokens
  const stream = await client.completions.create({ model: S.modelId, prompt: PROMPTS.slice(0, 2), echo: true, max_tokens: 12,
    temperature: 0, stream: true });
  const firsts = [], text = ['', ''];
  for await (const c of stream) for (const ch of c.choices) {
    if (firsts[ch.index] === undefined) firsts[ch.index] = ch.text;
    text[ch.index] += ch.text;
  }
  assert.deepEqual(firsts, PROMPTS.slice(0, 2));
  assert.deepEqual(text, (await cmpl(PROMPTS.slice(0, 2), { echo: true })).choices.map((c) => c.text));
});

await test('choices_echo_logprobs', async () => {
  // a generation, echoed with logprobs; then its whole text as a prompt: the same tokens, and each
  // prompt token's logprob (computed in the prompt's pass) is the one it had when it was generated
  const gen = (await cmpl(PROMPTS[0], { echo: true, logprobs: 2, max_tokens: 6 })).choices[0];
  const lp = gen.logprobs;
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  assert.ok(lp.token_logprobs.slice(1).every((x) => typeof x === 'number' && x <= 0));
  assert.ok(lp.top_logprobs.slice(1).every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2));
  const plain = (await cmpl(PROMPTS[0], { logprobs: 2, max_tokens: 6 })).choices[0].logprobs;
  assert.deepEqual(lp.token_logprobs.slice(-6), plain.token_logprobs);
  const again = await cmpl(gen.text.trimStart(), { echo: true, logprobs: 2, max_tokens: 0 });
  const alp = again.choices[0].logprobs;
  assert.equal(again.choices[0].text, gen.text);
  assert.deepEqual(alp.tokens, lp.tokens);
  assert.deepEqual(alp.token_logprobs, lp.token_logprobs);
  assert.deepEqual(alp.top_logprobs, lp.top_logprobs);
  assert.equal(again.usage.prompt_tokens, lp.tokens.length);
  assert.equal(again.usage.prompt_tokens_details.cached_tokens, 0); // every position computed
  // text_offset indexes the echoed text: each token's text is there (the BOS renders as nothing)
  for (let i = 1; i < alp.tokens.length; i++)
    assert.equal(again.choices[0].text.slice(alp.text_offset[i], alp.text_offset[i] + alp.tokens[i].length), alp.tokens[i]);
  // streamed: the first chunk is the prompt with its logprobs, then a chunk per token
  const stream = await client.completions.create({ model: S.modelId, prompt: gen.text.trimStart(), echo: true, logprobs: 2,
    max_tokens: 0, stream: true });
  const chunks = [];
  for await (const c of stream) for (const ch of c.choices) chunks.push(ch);
  assert.equal(chunks[0].text, gen.text);
  assert.deepEqual(chunks[0].logprobs.token_logprobs, lp.token_logprobs);
  // a batch, n = 2: every choice lists its own prompt's tokens first
  const batch = await cmpl(PROMPTS.slice(0, 2), { echo: true, logprobs: 0, max_tokens: 2, n: 2 });
  assert.equal(batch.choices.length, 4);
  for (const [i, c] of batch.choices.entries()) {
    const solo = (await cmpl(PROMPTS[i >> 1], { echo: true, logprobs: 0, max_tokens: 2 })).choices[0];
    assert.deepEqual(c.logprobs.tokens, solo.logprobs.tokens);
    assert.deepEqual(c.logprobs.token_logprobs, solo.logprobs.token_logprobs);
  }
}, 60000);

await test('choices_unsupported_refused', async () => {
  const bad = async (path, body, param, what) => {
    const e = assertHttpError(await post(S, path, { model: S.modelId, ...body }), 400, what);
    assert.equal(e.param, param, `${what}: error.param`);
  };
  const c = '/v1/completions', ch = '/v1/chat/completions', msgs = [{ role: 'user', content: 'hi' }];
  await bad(c, { prompt: 'x', echo: 'yes' }, 'echo', 'echo a string');
  await bad(c, { prompt: 'x', suffix: ' the end' }, 'suffix', 'suffix');
  await bad(c, { prompt: 'x', best_of: 3 }, 'best_of', 'best_of above n');
  await bad(c, { prompt: 'x', n: 3, best_of: 2 }, 'best_of', 'best_of below n');
  await bad(c, { prompt: ['x', [1, 2]] }, 'prompt', 'a mixed batch');
  await bad(c, { prompt: [] }, 'prompt', 'an empty prompt array');
  await bad(c, { prompt: [[1, 2], []] }, 'prompt', 'an empty prompt in a batch');
  await bad(c, { prompt: [[1, 2], [1, 1e6]] }, 'prompt', 'a token out of the vocabulary in a batch');
  await bad(c, { prompt: Array(9).fill('x'), n: 8 }, 'prompt', '72 choices');
  await bad(ch, { messages: msgs, functions: [{ name: 'f', parameters: { type: 'object' } }] }, 'functions', 'functions');
  await bad(ch, { messages: msgs, function_call: 'auto' }, 'function_call', 'function_call');
  await bad(ch, { messages: msgs, modalities: ['text', 'audio'] }, 'modalities', 'audio modality');
  await bad(ch, { messages: msgs, audio: { voice: 'alloy', format: 'wav' } }, 'audio', 'audio');
  // what is equivalent to the default is accepted
  const ok = await cmpl('x', { suffix: '', best_of: 1, echo: false, max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
  const okChat = await client.chat.completions.create({ model: S.modelId, messages: msgs, modalities: ['text'], functions: null, max_tokens: 2 });
  assert.equal(okChat.choices.length, 1);
});

await stopCleanly(S);
process.exit(failed() ? 1 : 0);

// embeddings.test.mjs - embeddings on `kiln serve` with the official clients: the `openai` client's
// embeddings.create (a string, a list of strings, token ids, base64 as the client asks by default and
// floats, dimensions) and the `ollama` client's embed (and Ollama's older /api/embeddings); identical
// texts give identical vectors, different texts cosine below 1, a batch gives each input the vector
// it gets alone (bit for bit), usage counts the prompt tokens; errors in OpenAI's shape: an input over
// the model's limit (400 naming it, or truncation with "truncate": true), dimensions beyond the
// width, an empty string, a bad encoding_format, a generation model asked for embeddings and an
// embedding model asked to chat. One PASS/FAIL/SKIP line per case (see lib.mjs); run by
// tests/cli/test_embed.sh with KILN_MODEL (a tiny bert written by kiln-gen) and KILN_GEN_MODEL (a
// generation model).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { Ollama } from 'ollama';
import OpenAI from 'openai';
import { MODEL, assertClientError, assertHttpError, failed, post, startServer, stopCleanly, test } from './lib.mjs';

const GEN_MODEL = process.env.KILN_GEN_MODEL;
if (!existsSync(MODEL)) {
  console.log(`SKIP embeddings_tests: no model ${MODEL}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL embeddings_tests: the suite did not finish within 170 s');
  process.exit(1);
}, 170000).unref();

const S = await startServer(['-c', '64'], 'embedding server');
const openai = S.client();
const ollama = new Ollama({ host: S.base });
const DIM = 64;

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const cosine = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / (norm(a) * norm(b));

await test('embeddings_create_one', async () => {
  const r = await openai.embeddings.create({ model: S.modelId, input: 'the cat sat on the mat' });
  assert.equal(r.object, 'list');
  assert.equal(r.data.length, 1);
  assert.equal(r.data[0].index, 0);
  assert.equal(r.data[0].embedding.length, DIM);
  assert.ok(Math.abs(norm(r.data[0].embedding) - 1) < 1e-5, `norm ${norm(r.data[0].embedding)}`);
  assert.ok(r.usage.prompt_tokens > 2 && r.usage.total_tokens === r.usage.prompt_tokens, JSON.stringify(r.usage));
});

await test('embeddings_batch_equals_alone', async () => {
  const texts = ['the cat sat on the mat', 'a brave little bird', 'the cat sat on the mat', 'one, two, three!'];
  const r = await openai.embeddings.create({ model: S.modelId, input: texts, encoding_format: 'float' });
  assert.deepEqual(r.data.map((d) => d.index), [0, 1, 2, 3]);
  const v = r.data.map((d) => d.embedding);
  assert.deepEqual(v[0], v[2]); // identical text: cosine 1
  assert.ok(Math.abs(cosine(v[0], v[2]) - 1) < 1e-12);
  assert.ok(cosine(v[0], v[1]) < 0.999, `cosine ${cosine(v[0], v[1])}`);
  assert.ok(cosine(v[0], v[3]) < 0.999, `cosine ${cosine(v[0], v[3])}`);
  let tokens = 0;
  for (let i = 0; i < texts.length; i++) {
    const one = await openai.embeddings.create({ model: S.modelId, input: texts[i], encoding_format: 'float' });
    assert.deepEqual(one.data[0].embedding, v[i], `input ${i} alone`);
    tokens += one.usage.prompt_tokens;
  }
  assert.equal(r.usage.prompt_tokens, tokens);
});

await test('embeddings_base64_and_float', async () => {
  // the client asks for base64 by default and decodes it; the raw response holds little-endian float32
  const dflt = await openai.embeddings.create({ model: S.modelId, input: 'hello world' });
  const flt = await openai.embeddings.create({ model: S.modelId, input: 'hello world', encoding_format: 'float' });
  assert.deepEqual(Array.from(dflt.data[0].embedding), flt.data[0].embedding);
  const raw = await post(S, '/v1/embeddings', { input: 'hello world', encoding_format: 'base64' });
  assert.equal(raw.status, 200);
  const b = Buffer.from(raw.json.data[0].embedding, 'base64');
  assert.equal(b.length, DIM * 4);
  for (let i = 0; i < DIM; i++) assert.equal(b.readFloatLE(i * 4), flt.data[0].embedding[i]);
});

await test('embeddings_dimensions', async () => {
  const full = await openai.embeddings.create({ model: S.modelId, input: 'the little girl', encoding_format: 'float' });
  const cut = await openai.embeddings.create({ model: S.modelId, input: 'the little girl', dimensions: 16, encoding_format: 'float' });
  const v = cut.data[0].embedding;
  assert.equal(v.length, 16);
  assert.ok(Math.abs(norm(v) - 1) < 1e-5);
  const head = full.data[0].embedding.slice(0, 16), n = norm(head);
  for (let i = 0; i < 16; i++) assert.ok(Math.abs(v[i] - head[i] / n) < 1e-6, `value ${i}`);
  const e = await assertClientError(openai.embeddings.create({ model: S.modelId, input: 'x', dimensions: DIM + 1 }),
    OpenAI.BadRequestError, 400, 'dimensions too large');
  assert.match(e.message, /dimensions/);
});

await test('embeddings_token_ids', async () => {
  const t = await post(S, '/tokenize', { content: 'the cat sat', add_special: true });
  assert.equal(t.status, 200);
  const ids = t.json.tokens;
  const byText = await openai.embeddings.create({ model: S.modelId, input: 'the cat sat', encoding_format: 'float' });
  const byIds = await openai.embeddings.create({ model: S.modelId, input: ids, encoding_format: 'float' });
  const lists = await openai.embeddings.create({ model: S.modelId, input: [ids, ids], encoding_format: 'float' });
  assert.deepEqual(byIds.data[0].embedding, byText.data[0].embedding);
  assert.equal(lists.data.length, 2);
  assert.deepEqual(lists.data[1].embedding, byText.data[0].embedding);
  assertHttpError(await post(S, '/v1/embeddings', { input: [1, 999999] }), 400, 'an id outside the vocabulary');
});

await test('embeddings_too_long', async () => {
  const long = Array(200).fill('the cat').join(' ');
  const e = await assertClientError(openai.embeddings.create({ model: S.modelId, input: long }), OpenAI.BadRequestError,
    400, 'an input over the limit');
  assert.match(e.message, /64 tokens/);
  assert.equal(e.code, 'context_length_exceeded');
  const r = await post(S, '/v1/embeddings', { input: long, truncate: true });
  assert.equal(r.status, 200, r.text.slice(0, 300));
  assert.equal(r.json.usage.prompt_tokens, 64);
});

await test('embeddings_bad_requests', async () => {
  assertHttpError(await post(S, '/v1/embeddings', { input: '' }), 400, 'an empty string');
  assertHttpError(await post(S, '/v1/embeddings', { input: [] }), 400, 'no inputs');
  assertHttpError(await post(S, '/v1/embeddings', {}), 400, 'no input');
  assertHttpError(await post(S, '/v1/embeddings', { input: 'x', encoding_format: 'int8' }), 400, 'encoding_format');
  assertHttpError(await post(S, '/v1/embeddings', { input: [{ text: 'x' }] }), 400, 'an object input');
  assertHttpError(await post(S, '/v1/embeddings', '{"input": '), 400, 'malformed JSON');
  const c = assertHttpError(await post(S, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }), 400,
    'chat on an embedding model');
  assert.match(c.message, /embedding model/);
  // still serving
  const r = await openai.embeddings.create({ model: S.modelId, input: 'still here' });
  assert.equal(r.data.length, 1);
});

await test('ollama_embed', async () => {
  const r = await ollama.embed({ model: S.modelId, input: ['the cat sat on the mat', 'a brave little bird'] });
  assert.equal(r.embeddings.length, 2);
  const o = await openai.embeddings.create({ model: S.modelId, input: ['the cat sat on the mat', 'a brave little bird'], encoding_format: 'float' });
  assert.deepEqual(r.embeddings, o.data.map((d) => d.embedding));
  assert.ok(r.prompt_eval_count === o.usage.prompt_tokens, `${r.prompt_eval_count} vs ${o.usage.prompt_tokens}`);
  const one = await ollama.embed({ model: S.modelId, input: 'the cat sat on the mat', dimensions: 8 });
  assert.equal(one.embeddings[0].length, 8);
  // Ollama truncates by default; truncate: false makes an over-long input an error
  const long = Array(200).fill('the cat').join(' ');
  assert.equal((await ollama.embed({ model: S.modelId, input: long })).embeddings.length, 1);
  await assert.rejects(ollama.embed({ model: S.modelId, input: long, truncate: false }), (e) => e.status_code === 400);
  // the older route: one vector, not normalized
  const old = await post(S, '/api/embeddings', { model: S.modelId, prompt: 'the cat sat on the mat' });
  assert.equal(old.status, 200, old.text.slice(0, 300));
  const v = old.json.embedding;
  assert.equal(v.length, DIM);
  const n = norm(v);
  for (let i = 0; i < DIM; i++) assert.ok(Math.abs(v[i] / n - r.embeddings[0][i]) < 1e-6);
});

await test('embeddings_of_a_generation_model', async () => {
  if (!GEN_MODEL || !existsSync(GEN_MODEL)) throw new Error(`no generation model (${GEN_MODEL})`);
  const G = await startServer(['-m', GEN_MODEL], 'generation server');
  try {
    const e = await assertClientError(G.client().embeddings.create({ model: G.modelId, input: 'hi' }),
      OpenAI.BadRequestError, 400, 'embeddings of a generation model');
    assert.match(e.message, /not an embedding model/);
    await assert.rejects(new Ollama({ host: G.base }).embed({ model: G.modelId, input: 'hi' }),
      (x) => x.status_code === 400 && /not an embedding model/.test(x.message));
  } finally {
    await stopCleanly(G);
  }
}, 60000);

await stopCleanly(S);
process.exit(failed() ? 1 : 0);

// web.test.mjs - the chat page that `kiln serve` serves at "/", tested in real headless Chromium
// (driven by playwright-core) against real servers on ephemeral ports: the static routes and their
// headers, a streamed reply (and the exact request the page sends), Stop in the middle of a long
// reply, conversations surviving a reload, rename and delete, the Markdown renderer's safety, and
// the inline errors (server gone, API key needed, 400, 429). One PASS/FAIL/SKIP line per case (see
// lib.mjs); run by tests/cli/test_web.sh with KILN, KILN_MODEL and KILN_ARTIFACTS set. Nothing here
// depends on how fast the model runs: every wait is for a state of the page or the server.
//
// Environment: CHROMIUM (default /usr/bin/chromium), KILN_ARTIFACTS (where web-chat.png goes).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { chromium } from 'playwright-core';
import {
  MODEL, MODEL_ID, assertHttpError, failed, get, post, sleep, startServer, stats, stopCleanly, test, waitIdle,
} from './lib.mjs';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.KILN_ARTIFACTS || 'build/artifacts';
const LONG = 8000;   // max tokens of a reply that is stopped midway (on a server with -c 8192)

if (!existsSync(MODEL)) {
  console.log(`SKIP web_tests: no model ${MODEL}`);
  process.exit(0);
}
if (!existsSync(CHROMIUM)) {
  console.log(`SKIP web_tests: no Chromium at ${CHROMIUM}`);
  process.exit(0);
}
setTimeout(() => {
  console.log('FAIL web_tests: the suite did not finish within 200 s');
  process.exit(1);
}, 200000).unref();

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });

// ---- page helpers -----------------------------------------------------------------------------------

// A fresh browser context (its own localStorage) with a page open on the server's chat page.
async function openPage(srv) {
  const context = await browser.newContext({ viewport: { width: 1180, height: 800 } });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') page.errors.push(m.text()); });
  await page.goto(srv.base + '/');
  await page.waitForSelector('body[data-state="ready"]');
  return page;
}

// Page errors that are not the expected failed network requests of the error cases.
function scriptErrors(page) {
  return page.errors.filter((e) => !/Failed to load resource|net::ERR_|status of 4\d\d/.test(e));
}

async function setSettings(page, values, scope = false) {
  await page.click('#open-settings');
  await page.waitForSelector('#settings[open]');
  const ids = { system: '#s-system', temperature: '#s-temperature', top_p: '#s-top-p', max_tokens: '#s-max-tokens', seed: '#s-seed' };
  for (const [k, v] of Object.entries(values)) await page.fill(ids[k], String(v));
  await page.setChecked('#s-scope', scope);
  await page.click('#s-save');
  await page.waitForSelector('#settings:not([open])', { state: 'attached' });
}

// Types a message and sends it with Enter; resolves once the page is generating or done.
async function sendMessage(page, text) {
  await page.fill('#input', text);
  await page.press('#input', 'Enter');
}

const waitReady = (page, timeout = 60000) => page.waitForSelector('body[data-state="ready"]', { timeout });
const lastReply = (page) => page.locator('.msg.assistant').last();

// The text of locator once it matches re (at most timeout ms), else its last text: a reply is redrawn on
// the next animation frame, which may come after body[data-state] says ready.
async function textWhen(locator, re, timeout = 10000) {
  const end = Date.now() + timeout;
  for (;;) {
    const text = (await locator.count()) ? await locator.innerText() : '';
    if (re.test(text) || Date.now() > end) return text;
    await sleep(25);
  }
}

// The conversations as the page stored them.
const storedConversations = (page) => page.evaluate(() => JSON.parse(localStorage.getItem('kiln.conversations') || '[]'));

// The reply of the API itself (not streamed, greedy) to one user message.
async function chatText(srv, content, extra = {}, headers = {}) {
  const r = await post(srv, '/v1/chat/completions', { messages: [{ role: 'user', content }], temperature: 0, ...extra }, headers);
  assert.equal(r.status, 200, `direct request: ${r.text.slice(0, 200)}`);
  return r.json.choices[0].message.content;
}

// ---- the static routes -------------------------------------------------------------------------------

const s1 = await startServer(['-c', '8192'], 'server -c 8192');

await test('web_routes', async () => {
  const page = await get(s1, '/');
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html; charset=utf-8/);
  assert.equal(page.headers.get('cache-control'), 'no-cache');
  assert.match(page.headers.get('content-security-policy') || '', /default-src 'self'/);
  assert.match(page.text, /<script type="module" src="\/app\.js"><\/script>/);
  const etag = page.headers.get('etag');
  assert.match(etag || '', /^"\d+-\d+"$/, 'an ETag');
  assert.equal((await get(s1, '/index.html')).text, page.text, '/index.html is /');
  const head = await get(s1, '/', {}, 'HEAD');
  assert.equal(head.status, 200);
  assert.equal(head.text, '', 'HEAD has no body');
  assert.equal(head.headers.get('content-length'), String(Buffer.byteLength(page.text)));
  const again = await get(s1, '/', { 'If-None-Match': etag });
  assert.equal(again.status, 304, 'If-None-Match with the current ETag');
  assert.equal(again.text, '');
  for (const [path, type] of [['/app.js', /^text\/javascript/], ['/markdown.js', /^text\/javascript/], ['/style.css', /^text\/css/]]) {
    const r = await get(s1, path);
    assert.equal(r.status, 200, path);
    assert.match(r.headers.get('content-type'), type, path);
    assert.equal(r.headers.get('cache-control'), 'no-cache', path);
    assert.ok(r.text.length > 100, `${path} has content`);
  }
  assertHttpError(await post(s1, '/', {}), 405, 'POST /');
  const put = await fetch(s1.url('/app.js'), { method: 'PUT', body: 'x' });
  assertHttpError({ status: put.status, headers: put.headers, text: '', json: await put.json() }, 405, 'PUT /app.js');
  assertHttpError(await get(s1, '/nope.js'), 404, 'GET /nope.js');
  assertHttpError(await get(s1, '/app.js/x'), 404, 'GET /app.js/x');
});

// ---- chatting ----------------------------------------------------------------------------------------

let page;
let greedy40;

await test('web_chat_stream', async () => {
  page = await openPage(s1);
  await page.waitForFunction((id) => document.getElementById('model').textContent === id, MODEL_ID);
  await setSettings(page, { temperature: 0, max_tokens: 40, seed: 7, top_p: 0.9 });
  const bodies = [];
  page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) bodies.push(r.postDataJSON()); });
  await sendMessage(page, 'Hello');
  await waitReady(page);
  assert.equal(bodies.length, 1, 'one request');
  const b = bodies[0];
  assert.deepEqual(b.messages, [{ role: 'user', content: 'Hello' }]);
  assert.equal(b.stream, true);
  assert.deepEqual(b.stream_options, { include_usage: true });
  assert.equal(b.model, MODEL_ID);
  assert.equal(b.temperature, 0);
  assert.equal(b.top_p, 0.9);
  assert.equal(b.max_tokens, 40);
  assert.equal(b.seed, 7);
  // what the page shows and stored is exactly what the API gives for the same request
  greedy40 = await chatText(s1, 'Hello', { max_tokens: 40 });
  assert.ok(greedy40.length > 0);
  const convs = await storedConversations(page);
  assert.equal(convs.length, 1);
  assert.equal(convs[0].title, 'Hello');
  assert.equal(convs[0].messages[1].content, greedy40, 'the stored reply');
  const meta = await textWhen(lastReply(page).locator('.meta'), /max tokens reached/);
  const shown = (await lastReply(page).locator('.body').innerText()).replace(/\s+/g, ' ').trim();
  assert.equal(shown, greedy40.replace(/\s+/g, ' ').trim(), 'the rendered reply');
  assert.match(meta, /^40 tokens · \d+(\.\d)? tok\/s · first token \d+ ms/, `statistics line: ${meta}`);
  assert.match(meta, /max tokens reached/);
  assert.equal(await lastReply(page).locator('.error').isVisible(), false);
  assert.equal(await page.locator('.msg.user .body').innerText(), 'Hello');
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: `${ARTIFACTS}/web-chat.png` });
  assert.deepEqual(scriptErrors(page), []);
});

await test('web_chat_stop', async () => {
  if (!page) throw new Error('no page (web_chat_stream failed)');
  const before = await stats(s1);
  await page.click('#new-chat');
  await setSettings(page, { max_tokens: LONG }, true);   // this conversation only
  await sendMessage(page, 'Hello');
  // streamed text shows while the reply is still being generated
  await page.waitForFunction(() => document.body.dataset.state === 'generating' &&
    document.querySelector('.msg.assistant:last-of-type .body')?.innerText.trim().length > 0);
  assert.equal(await page.isVisible('#stop'), true, 'Stop shows while generating');
  assert.equal(await page.isVisible('#send'), false);
  await page.click('#stop');
  await waitReady(page);
  assert.equal(await page.isVisible('#send'), true, 'Send is back');
  assert.equal(await page.isEnabled('#send'), true);
  assert.equal(await page.isVisible('#stop'), false);
  assert.equal(await page.isEditable('#input'), true);
  const meta = await textWhen(lastReply(page).locator('.meta'), /stopped/);
  assert.match(meta, /stopped/, `statistics line: ${meta}`);
  assert.equal(await lastReply(page).locator('.error').isVisible(), false, 'no error for a stop');
  const convs = await storedConversations(page);
  const conv = convs.find((c) => c.messages.length === 2 && c.messages[1].stopped);
  assert.ok(conv, 'the stopped reply is stored');
  assert.deepEqual(conv.settings?.max_tokens, LONG, 'settings of this conversation');
  const partial = conv.messages[1].content;
  const n = conv.messages[1].stats.tokens;
  assert.ok(partial.length > 0 && n > 0, 'a partial reply');
  assert.ok(n < LONG, `stopped early (${n} tokens)`);
  // the server cancelled the generation: it goes idle long before LONG tokens
  await waitIdle(s1, 15000);
  const after = await stats(s1);
  assert.equal(after.completions, before.completions + 1);
  assert.ok(after.generated_tokens - before.generated_tokens < LONG, `generated ${after.generated_tokens - before.generated_tokens}`);
  // the partial reply is the start of the same greedy reply
  const full = await chatText(s1, 'Hello', { max_tokens: n + 8 });
  assert.ok(full.startsWith(partial), `partial reply ${JSON.stringify(partial.slice(0, 80))} vs ${JSON.stringify(full.slice(0, 80))}`);
  assert.ok(partial.startsWith(greedy40) || greedy40.startsWith(partial));
  assert.deepEqual(scriptErrors(page), []);
});

await test('web_reload_keeps_conversations', async () => {
  if (!page) throw new Error('no page');
  const before = await storedConversations(page);
  await page.reload();
  await waitReady(page);
  const items = page.locator('#conv-list li');
  assert.equal(await items.count(), 2, 'two conversations listed');
  // the current one (the stopped reply) is shown again
  assert.equal(await page.locator('.msg').count(), 2);
  assert.match(await lastReply(page).locator('.meta').innerText(), /stopped/);
  const stopped = before.find((c) => c.messages[1].stopped);
  assert.equal((await lastReply(page).locator('.body').innerText()).replace(/\s+/g, ' ').trim(),
    stopped.messages[1].content.replace(/\s+/g, ' ').trim());
  // the other one opens with its messages
  const other = before.find((c) => !c.messages[1].stopped);
  await page.click(`#conv-list li[data-id="${other.id}"] .conv-open`);
  await page.waitForSelector(`#conv-list li.active[data-id="${other.id}"]`);
  assert.equal(await page.locator('.msg.user .body').innerText(), 'Hello');
  assert.equal((await lastReply(page).locator('.body').innerText()).replace(/\s+/g, ' ').trim(),
    greedy40.replace(/\s+/g, ' ').trim());
  assert.match(await lastReply(page).locator('.meta').innerText(), /40 tokens/);
});

await test('web_rename_delete', async () => {
  if (!page) throw new Error('no page');
  const first = page.locator('#conv-list li').first();
  const id = await first.getAttribute('data-id');
  await first.hover();
  await first.locator('.conv-rename').click();
  await page.fill('.conv-title-input', 'Renamed chat');
  await page.press('.conv-title-input', 'Enter');
  await page.waitForSelector(`#conv-list li[data-id="${id}"] .conv-open:text-is("Renamed chat")`);
  await page.reload();
  await waitReady(page);
  assert.equal(await page.locator(`#conv-list li[data-id="${id}"] .conv-open`).innerText(), 'Renamed chat');
  const del = page.locator(`#conv-list li[data-id="${id}"] .conv-delete`);
  await page.locator(`#conv-list li[data-id="${id}"]`).hover();
  await del.click();
  assert.equal(await page.locator('#conv-list li').count(), 2, 'the first click only asks');
  await del.click();
  await page.waitForFunction(() => document.querySelectorAll('#conv-list li').length === 1);
  await page.reload();
  await waitReady(page);
  assert.equal(await page.locator('#conv-list li').count(), 1, 'deleted for good');
  assert.equal((await storedConversations(page)).some((c) => c.id === id), false);
});

await test('web_markdown', async () => {
  if (!page) throw new Error('no page');
  const md = [
    '# Title', '', 'Some **bold**, *italic* and `a<b>` code, a [link](https://example.com/?a=1&b=2).', '',
    '- one', '- two', '  1. nested', '', '```c', 'int main(void) { return 0 < 1; }', '```', '',
    '<img src=x onerror="window.__xss=1"> <script>window.__xss=2</script>',
    '[bad](javascript:window.__xss=3) [also bad](data:text/html,x) "><svg onload=window.__xss=4>',
  ].join('\n');
  // a stored conversation whose reply is Markdown, as if the model had written it
  await page.evaluate((content) => {
    const convs = JSON.parse(localStorage.getItem('kiln.conversations'));
    convs.push({ id: 'md1', title: 'Markdown', created: 1, updated: Date.now(), settings: null,
      messages: [{ role: 'user', content: '<b>not bold</b>' }, { role: 'assistant', content }] });
    localStorage.setItem('kiln.conversations', JSON.stringify(convs));
    localStorage.setItem('kiln.current', JSON.stringify('md1'));
  }, md);
  await page.reload();
  await waitReady(page);
  const body = lastReply(page).locator('.body');
  assert.equal(await body.locator('h1').innerText(), 'Title');
  assert.equal(await body.locator('strong').innerText(), 'bold');
  assert.equal(await body.locator('em').innerText(), 'italic');
  assert.equal(await body.locator('p code').innerText(), 'a<b>');
  assert.equal(await body.locator('a').count(), 1, 'only the https link is a link');
  assert.equal(await body.locator('a').getAttribute('href'), 'https://example.com/?a=1&b=2');
  assert.equal(await body.locator('a').getAttribute('rel'), 'noopener noreferrer');
  assert.equal(await body.locator('ul > li').count(), 2);
  assert.equal(await body.locator('ul ol > li').innerText(), 'nested');
  assert.equal(await body.locator('pre code').innerText(), 'int main(void) { return 0 < 1; }');
  assert.equal(await body.locator('.code-head span').innerText(), 'c');
  assert.equal(await body.locator('img, script, svg, [onerror], [onload]').count(), 0, 'no markup from the text');
  assert.match(await body.innerText(), /<img src=x onerror=/, 'HTML shows as text');
  assert.equal(await page.locator('.msg.user .body b').count(), 0, 'user text is plain text');
  await sleep(50);
  assert.equal(await page.evaluate(() => window.__xss), undefined, 'nothing ran');
  // the renderer itself, on inputs built to break out
  const out = await page.evaluate(async () => {
    const { renderMarkdown } = await import('/markdown.js');
    return ['[x](https://a.b/"onclick="alert(1))', '`<i>`', '<a href="javascript:1">x</a>', '```\n</code></pre><script>1</script>']
      .map((s) => {
        const d = document.createElement('div');
        d.innerHTML = renderMarkdown(s);
        return { html: d.innerHTML, bad: d.querySelectorAll('script, i, [onclick]').length, hrefs: [...d.querySelectorAll('a')].map((a) => a.getAttribute('href')) };
      });
  });
  for (const o of out) {
    assert.equal(o.bad, 0, o.html);
    for (const h of o.hrefs) assert.match(h, /^https?:\/\//, o.html);
  }
  assert.deepEqual(scriptErrors(page), []);
});

// ---- errors ------------------------------------------------------------------------------------------

await test('web_error_server_gone', async () => {
  if (!page) throw new Error('no page');
  await page.click('#new-chat');
  await stopCleanly(s1);
  await sendMessage(page, 'Anyone there?');
  await waitReady(page);
  const err = lastReply(page).locator('.error');
  // the reply is redrawn on the next animation frame, which may come after the state changed
  await err.waitFor({ state: 'visible', timeout: 60000 });
  assert.match(await err.innerText(), /Cannot reach the kiln server/);
  assert.equal(await err.locator('button.retry').isVisible(), true, 'with a Retry button');
  assert.equal(await page.isEnabled('#send'), true);
  await page.context().close();
  page = null;
});

await test('web_error_api_key_and_400', async () => {
  const s = await startServer(['--api-key', 'secret', '-c', '64'], 'server --api-key -c 64');
  try {
    // the page and its files need no key; the API does
    assert.equal((await get(s, '/')).status, 200);
    assert.equal((await get(s, '/app.js')).status, 200);
    assertHttpError(await get(s, '/v1/models'), 401, 'GET /v1/models without a key');
    assertHttpError(await get(s, '/nope'), 401, 'other paths keep the key check');
    const p = await openPage(s);
    await p.waitForFunction(() => document.getElementById('model').textContent === 'API key needed');
    await setSettings(p, { temperature: 0, max_tokens: 8 });
    await sendMessage(p, 'Hello');
    await waitReady(p);
    const err = lastReply(p).locator('.error');
    assert.match(await textWhen(err, /needs an API key/), /needs an API key/);
    await err.locator('input.api-key').fill('wrong');
    await err.locator('button.save-key').click();
    await p.waitForFunction(() => /did not accept/.test(document.querySelector('.msg.assistant:last-of-type .error')?.innerText || ''));
    await waitReady(p);
    await lastReply(p).locator('.error input.api-key').fill('secret');
    await lastReply(p).locator('.error button.save-key').click();
    await p.waitForFunction(() => document.body.dataset.state === 'ready' &&
      document.querySelector('.msg.assistant:last-of-type .error')?.hidden);
    const want = await chatText(s, 'Hello', { max_tokens: 8 }, { Authorization: 'Bearer secret' });
    const stored = (await storedConversations(p))[0].messages;
    assert.equal(stored.length, 2, 'the retries reused the reply');
    assert.equal(stored[1].content, want);
    assert.match(await textWhen(lastReply(p).locator('.meta'), /^8 tokens/), /^8 tokens/);
    assert.equal(await p.evaluate(() => JSON.parse(localStorage.getItem('kiln.apiKey'))), 'secret');
    await p.waitForFunction((id) => document.getElementById('model').textContent === id, MODEL_ID);
    // a prompt longer than the context: the server's 400 message shows inline
    await sendMessage(p, 'Once upon a time there was a little dog. '.repeat(8));
    await waitReady(p);
    const too = /^Error 400: this model's context holds 64 tokens/;
    assert.match(await textWhen(lastReply(p).locator('.error'), too), too);
    assert.deepEqual(scriptErrors(p), []);
    await p.context().close();
  } finally {
    await stopCleanly(s);
  }
}, 60000);

await test('web_error_busy_429', async () => {
  const s = await startServer(['--batch', '1', '--max-queue', '1', '-c', '8192'], 'server --batch 1 --max-queue 1');
  const ctrl = new AbortController();
  try {
    // one long request generating, then one waiting: the queue is full (one at a time: two
    // arriving together could both be waiting for a moment, and the second would get the 429)
    const body = JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }], temperature: 0, max_tokens: LONG, stream: true });
    const hold = [];
    for (const want of [{ active: 1, queued: 0 }, { active: 1, queued: 1 }]) {
      const res = await fetch(s.url('/v1/chat/completions'), { method: 'POST', body, signal: ctrl.signal, headers: { 'content-type': 'application/json' } });
      assert.equal(res.status, 200, 'a request to fill the server');
      // read on until aborted: a client that stops reading is disconnected after --timeout
      const reader = res.body.getReader();
      hold.push((async () => { while (!(await reader.read()).done); })().catch(() => null));
      for (let st = await stats(s); st.active !== want.active || st.queued !== want.queued; st = await stats(s)) {
        assert.equal(st.completions, 0, 'the long request is still running');
        await sleep(20);
      }
    }
    const p = await openPage(s);
    await sendMessage(p, 'Hello');
    await waitReady(p);
    const err = lastReply(p).locator('.error');
    const busy = /^Too many requests right now \(HTTP 429\): the server is busy: .*Try again in a moment\./s;
    assert.match(await textWhen(err, busy), busy);
    assert.equal(await err.locator('button.retry').isVisible(), true);
    ctrl.abort();
    await Promise.all(hold);
    await waitIdle(s, 15000);
    await p.context().close();
  } finally {
    ctrl.abort();
    await stopCleanly(s);
  }
}, 60000);

await browser.close();
process.exit(failed() ? 1 : 0);

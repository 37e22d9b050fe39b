// app.js - the chat page of `kiln serve`: conversations, settings and streaming replies.
//
// The page talks only to the server it was loaded from, through the same OpenAI-compatible API as
// any other client: GET /v1/models for the model's name, POST /v1/chat/completions with
// stream: true for replies (server-sent events, with stream_options.include_usage for the token
// counts). Stop aborts the fetch; the server notices the closed connection and cancels the
// generation. Everything the user owns stays in this browser's localStorage under "kiln.*":
// the conversations (each with its messages and, optionally, its own settings), the default
// settings, the current conversation and the API key (sent as "Authorization: Bearer KEY").
//
// The page's state is mirrored on <body data-state="loading|ready|generating"> for tests and styles.
import { renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);
const els = {
  app: $('app'), list: $('conv-list'), messages: $('messages'), empty: $('empty'), input: $('input'),
  send: $('send'), stop: $('stop'), composer: $('composer'), model: $('model'), title: $('conv-title'),
  notice: $('notice'), scrim: $('scrim'), dialog: $('settings'), form: $('settings-form'),
};

// ---- storage ---------------------------------------------------------------------------------------

const KEY = { convs: 'kiln.conversations', current: 'kiln.current', defaults: 'kiln.settings', apiKey: 'kiln.apiKey' };
const NO_SETTINGS = Object.freeze({ system: '', temperature: null, top_p: null, max_tokens: null, seed: null });

function load(key, fallback) {
  try {
    const v = localStorage.getItem(key);
    return v === null ? fallback : JSON.parse(v);
  } catch {
    return fallback;
  }
}

function store(key, value) {
  try {
    if (value === null || value === undefined) localStorage.removeItem(key);
    else localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch (e) {
    showNotice(`This browser would not save the conversations (${e.name}): delete some to make room.`);
    return false;
  }
}

// Settings as stored: every field present, numbers or null.
function cleanSettings(s) {
  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  return {
    system: typeof s?.system === 'string' ? s.system : '',
    temperature: num(s?.temperature), top_p: num(s?.top_p), max_tokens: num(s?.max_tokens), seed: num(s?.seed),
  };
}

// Conversations from storage, repaired: a reply that was streaming when the page went away is
// kept as far as it got and marked interrupted.
function loadConversations() {
  const list = load(KEY.convs, []);
  if (!Array.isArray(list)) return [];
  return list.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages)).map((c) => ({
    id: c.id,
    title: typeof c.title === 'string' ? c.title : 'Chat',
    renamed: !!c.renamed,
    created: Number(c.created) || Date.now(),
    updated: Number(c.updated) || Date.now(),
    settings: c.settings ? cleanSettings(c.settings) : null,
    messages: c.messages.filter((m) => m && (m.role === 'user' || m.role === 'assistant')).map((m) => {
      const out = { role: m.role, content: typeof m.content === 'string' ? m.content : '' };
      if (m.stats) out.stats = m.stats;
      if (m.error) out.error = m.error;
      if (m.stopped) out.stopped = true;
      if (m.pending) out.stopped = true;
      return out;
    }),
  }));
}

const state = {
  convs: loadConversations(),
  currentId: load(KEY.current, null),
  draft: null,             // the new conversation shown until its first message
  defaults: cleanSettings(load(KEY.defaults, NO_SETTINGS)),
  apiKey: load(KEY.apiKey, ''),
  model: null,             // the served model's id, once /v1/models answered
  run: null,               // the generation in progress: {ctrl, conv, reply}
  lastSave: 0,
};

function saveConversations() {
  state.lastSave = performance.now();
  const convs = state.convs.map((c) => ({
    ...c,
    messages: c.messages.map(({ el, ...m }) => m),
  }));
  return store(KEY.convs, convs);
}

function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

function newDraft() {
  const now = Date.now();
  return { id: newId(), title: 'New chat', renamed: false, created: now, updated: now, settings: null, messages: [] };
}

function current() {
  const c = state.convs.find((x) => x.id === state.currentId);
  if (c) return c;
  if (!state.draft) state.draft = newDraft();
  return state.draft;
}

function effectiveSettings(conv) {
  return conv.settings || state.defaults;
}

function titleFrom(text) {
  const t = text.replace(/\s+/g, ' ').trim();
  return t.length > 48 ? `${t.slice(0, 47)}…` : t || 'Chat';
}

// ---- rendering -------------------------------------------------------------------------------------

function setState(s) {
  document.body.dataset.state = s;
  const busy = s === 'generating';
  els.send.hidden = busy;
  els.stop.hidden = !busy;
  els.stop.disabled = !busy;
  els.send.disabled = busy || s === 'loading';
}

function showNotice(text) {
  els.notice.textContent = text;
  els.notice.hidden = !text;
}

function renderList() {
  const cur = current();
  const items = [...state.convs].sort((a, b) => b.updated - a.updated);
  els.list.replaceChildren(...items.map((c) => {
    const li = document.createElement('li');
    li.className = 'conv' + (c.id === cur.id ? ' active' : '');
    li.dataset.id = c.id;
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'conv-open';
    open.textContent = c.title;
    open.title = c.title;
    open.addEventListener('click', () => selectConversation(c.id));
    const rename = document.createElement('button');
    rename.type = 'button';
    rename.className = 'conv-rename icon';
    rename.setAttribute('aria-label', 'Rename');
    rename.title = 'Rename';
    rename.textContent = '✎';
    rename.addEventListener('click', () => startRename(li, c));
    const del = document.createElement('button');
    del.type = 'button';
    del.className = 'conv-delete icon';
    del.setAttribute('aria-label', 'Delete');
    del.title = 'Delete';
    del.textContent = '×';
    del.addEventListener('click', () => {
      // the first click arms the button, the second deletes
      if (!del.classList.contains('armed')) {
        del.classList.add('armed');
        del.textContent = 'Delete?';
        setTimeout(() => {
          if (!del.isConnected) return;
          del.classList.remove('armed');
          del.textContent = '×';
        }, 4000);
        return;
      }
      deleteConversation(c.id);
    });
    li.append(open, rename, del);
    return li;
  }));
  els.title.textContent = cur.title;
  document.title = cur.messages.length ? `${cur.title} · kiln` : 'kiln chat';
}

function startRename(li, conv) {
  const input = document.createElement('input');
  input.className = 'conv-title-input';
  input.value = conv.title;
  input.setAttribute('aria-label', 'Conversation name');
  let done = false;
  const finish = (keep) => {
    if (done) return;
    done = true;
    const t = input.value.replace(/\s+/g, ' ').trim();
    if (keep && t) {
      conv.title = t.slice(0, 120);
      conv.renamed = true;
      saveConversations();
    }
    renderList();
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') finish(true);
    else if (e.key === 'Escape') finish(false);
  });
  input.addEventListener('blur', () => finish(true));
  li.replaceChildren(input);
  input.focus();
  input.select();
}

function renderMessages() {
  const conv = current();
  const nodes = conv.messages.map((m, i) => messageNode(conv, m, i));
  els.empty.hidden = nodes.length > 0;
  els.messages.replaceChildren(els.empty, ...nodes);
  scrollToEnd(true);
}

function messageNode(conv, m, index) {
  const art = document.createElement('article');
  art.className = `msg ${m.role}`;
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = m.role === 'user' ? 'You' : (state.model || 'Model');
  const body = document.createElement('div');
  body.className = 'body';
  art.append(who, body);
  if (m.role === 'assistant') {
    const meta = document.createElement('div');
    meta.className = 'meta';
    const err = document.createElement('div');
    err.className = 'error';
    art.append(meta, err);
  }
  Object.defineProperty(m, 'el', { value: art, writable: true, configurable: true, enumerable: false });
  art._msg = { conv, m, index };
  updateMessage(m);
  return art;
}

// Redraws one message's body, statistics line and error from the message object.
function updateMessage(m) {
  const art = m.el;
  if (!art) return;
  const body = art.querySelector('.body');
  if (m.role === 'user') {
    body.textContent = m.content;
    return;
  }
  body.innerHTML = renderMarkdown(m.content);
  if (m.pending && !m.content) body.innerHTML = '<span class="typing" aria-label="waiting for the first token"><i></i><i></i><i></i></span>';
  art.classList.toggle('pending', !!m.pending);
  art.querySelector('.meta').textContent = statsText(m);
  renderError(art.querySelector('.error'), art._msg);
}

function statsText(m) {
  const s = m.stats;
  const parts = [];
  if (s) {
    if (s.tokens) parts.push(`${s.tokens} token${s.tokens === 1 ? '' : 's'}`);
    if (s.tps) parts.push(`${s.tps.toFixed(1)} tok/s`);
    if (s.ttft != null) parts.push(`first token ${Math.round(s.ttft)} ms`);
    if (s.cached) parts.push(`${s.cached} prompt tokens cached`);
  }
  if (m.stopped) parts.push('stopped');
  else if (s?.finish === 'length') parts.push('max tokens reached');
  return parts.join(' · ');
}

function renderError(box, ctx) {
  const { m } = ctx;
  box.replaceChildren();
  box.hidden = !m.error;
  if (!m.error) return;
  const text = document.createElement('p');
  text.textContent = m.error.message;
  box.append(text);
  if (m.error.kind === 'auth') {
    const key = document.createElement('input');
    key.type = 'password';
    key.className = 'api-key';
    key.placeholder = 'API key';
    key.setAttribute('aria-label', 'API key');
    key.autocomplete = 'off';
    const save = document.createElement('button');
    save.type = 'button';
    save.className = 'primary save-key';
    save.textContent = 'Save key and retry';
    const go = () => {
      setApiKey(key.value.trim());
      retry(ctx);
    };
    save.addEventListener('click', go);
    key.addEventListener('keydown', (e) => { if (e.key === 'Enter') go(); });
    const row = document.createElement('div');
    row.className = 'row';
    row.append(key, save);
    box.append(row);
  } else {
    const again = document.createElement('button');
    again.type = 'button';
    again.className = 'retry';
    again.textContent = 'Retry';
    again.addEventListener('click', () => retry(ctx));
    box.append(again);
  }
}

let frame = 0;
const dirty = new Set();
// Redraws a message at the next animation frame (tokens arrive faster than the screen refreshes).
function scheduleUpdate(m) {
  dirty.add(m);
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    const stick = nearEnd();
    for (const x of dirty) updateMessage(x);
    dirty.clear();
    if (stick) scrollToEnd(true);
  });
}

function nearEnd() {
  const el = els.messages;
  return el.scrollHeight - el.scrollTop - el.clientHeight < 80;
}

function scrollToEnd(force) {
  if (force || nearEnd()) els.messages.scrollTop = els.messages.scrollHeight;
}

// ---- conversations ---------------------------------------------------------------------------------

// Shows conversation id. A reply streaming in another conversation goes on in the background and
// is saved when it ends.
function selectConversation(id) {
  state.currentId = id;
  state.draft = null;
  store(KEY.current, id);
  els.app.classList.remove('show-list');
  els.scrim.hidden = true;
  renderList();
  renderMessages();
  els.input.focus();
}

function newConversation() {
  state.currentId = null;
  state.draft = newDraft();
  store(KEY.current, null);
  els.app.classList.remove('show-list');
  els.scrim.hidden = true;
  renderList();
  renderMessages();
  els.input.focus();
}

function deleteConversation(id) {
  if (state.run && state.run.conv.id === id) state.run.ctrl.abort();
  state.convs = state.convs.filter((c) => c.id !== id);
  saveConversations();
  if (state.currentId === id) {
    state.currentId = null;
    state.draft = null;
    store(KEY.current, null);
  }
  renderList();
  renderMessages();
}

// ---- the API ---------------------------------------------------------------------------------------

function setApiKey(key) {
  state.apiKey = key;
  store(KEY.apiKey, key || null);
  loadModel();
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  if (state.apiKey) h.Authorization = `Bearer ${state.apiKey}`;
  return h;
}

// What a failed response says: {kind, message}, from an OpenAI-style error body when there is one.
async function httpError(res) {
  let msg = '';
  try {
    const body = await res.json();
    if (typeof body?.error?.message === 'string') msg = body.error.message;
  } catch {
    /* not JSON */
  }
  if (res.status === 401) {
    return {
      kind: 'auth',
      message: state.apiKey ? 'The server did not accept the API key. Enter the key it was started with (--api-key).'
        : 'This server needs an API key (it was started with --api-key). Enter it to continue.',
    };
  }
  if (res.status === 429) {
    return { kind: 'busy', message: `Too many requests right now (HTTP 429): ${msg || 'the server is busy'}. Try again in a moment.` };
  }
  return { kind: 'http', message: `Error ${res.status}: ${msg || res.statusText || 'the request failed'}` };
}

async function loadModel() {
  try {
    const res = await fetch('/v1/models', { headers: headers(false) });
    if (!res.ok) {
      const e = await httpError(res);
      els.model.textContent = res.status === 401 ? 'API key needed' : `model unknown (${res.status})`;
      els.model.classList.add('warn');
      if (res.status === 401) showNotice(e.message.replace(' Enter it to continue.', ' Open Settings to enter it, or send a message.'));
      return;
    }
    const body = await res.json();
    const id = body?.data?.[0]?.id;
    if (typeof id === 'string') {
      state.model = id;
      els.model.textContent = id;
      els.model.classList.remove('warn');
      if (body.data[0].meta?.n_ctx) els.model.title = `${id}: ${body.data[0].meta.arch || 'model'}, context ${body.data[0].meta.n_ctx} tokens`;
      for (const el of els.messages.querySelectorAll('.msg.assistant .who')) el.textContent = id;
    }
    showNotice('');
  } catch {
    els.model.textContent = 'server unreachable';
    els.model.classList.add('warn');
  }
}

// The messages sent for a reply at position upto: the system prompt, then the conversation before
// it (replies that failed with nothing to show are left out).
function requestMessages(conv, upto, settings) {
  const msgs = [];
  if (settings.system.trim()) msgs.push({ role: 'system', content: settings.system });
  for (const m of conv.messages.slice(0, upto)) {
    if (m.role === 'assistant' && !m.content) continue;
    msgs.push({ role: m.role, content: m.content });
  }
  return msgs;
}

function requestBody(conv, upto) {
  const s = effectiveSettings(conv);
  const body = {
    messages: requestMessages(conv, upto, s),
    stream: true,
    stream_options: { include_usage: true },
  };
  if (state.model) body.model = state.model;
  if (s.temperature !== null) body.temperature = s.temperature;
  if (s.top_p !== null) body.top_p = s.top_p;
  if (s.max_tokens !== null) body.max_tokens = s.max_tokens;
  if (s.seed !== null) body.seed = s.seed;
  return body;
}

// Tokens per second of a reply so far: the tokens after the first over the time since the first
// arrived; while that span is too short to measure (tokens that came together), all tokens over the
// time since the request was sent.
function rate(n, t0, tFirst, tLast) {
  if (n > 1 && tLast - tFirst >= 20) return ((n - 1) * 1000) / (tLast - tFirst);
  return tLast > t0 ? (n * 1000) / (tLast - t0) : null;
}

// Streams the reply `reply` (an assistant message of conv) from the server. Resolves when the
// reply is complete, stopped or failed; the outcome is recorded on the message and saved.
async function generate(conv, reply) {
  const upto = conv.messages.indexOf(reply);
  const ctrl = new AbortController();
  state.run = { ctrl, conv, reply };
  reply.pending = true;
  reply.content = '';
  delete reply.error;
  delete reply.stopped;
  reply.stats = { tokens: 0, tps: null, ttft: null };
  setState('generating');
  scheduleUpdate(reply);

  const t0 = performance.now();
  let tFirst = null;
  let tLast = null;
  let finished = false;
  const onChunk = (data) => {
    if (data.error) {
      reply.error = { kind: 'stream', message: `The server stopped the reply: ${data.error.message || 'unknown error'}` };
      finished = true;
      return;
    }
    const choice = data.choices?.[0];
    const delta = choice?.delta;
    if (delta && typeof delta.content === 'string' && !delta.role) {
      // one chunk per generated token (its text may be empty: part of a character)
      const now = performance.now();
      if (tFirst === null) tFirst = now;
      tLast = now;
      reply.content += delta.content;
      reply.stats.tokens++;
      reply.stats.ttft = tFirst - t0;
      reply.stats.tps = rate(reply.stats.tokens, t0, tFirst, tLast);
    }
    if (choice?.finish_reason) reply.stats.finish = choice.finish_reason;
    if (data.usage) {
      reply.stats.tokens = data.usage.completion_tokens;
      reply.stats.prompt = data.usage.prompt_tokens;
      reply.stats.cached = data.usage.prompt_tokens_details?.cached_tokens || 0;
    }
  };

  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(true), body: JSON.stringify(requestBody(conv, upto)), signal: ctrl.signal,
    });
    if (!res.ok) {
      reply.error = await httpError(res);
    } else {
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true }).replace(/\r\n/g, '\n');
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
          if (!data) continue; // a comment (keep-alive)
          if (data === '[DONE]') {
            finished = true;
            continue;
          }
          try {
            onChunk(JSON.parse(data));
          } catch {
            /* not JSON: ignored */
          }
          scheduleUpdate(reply);
          if (performance.now() - state.lastSave > 1000) saveConversations();
        }
      }
      if (!finished) reply.error = { kind: 'network', message: 'The connection closed before the reply was complete.' };
    }
  } catch (e) {
    if (ctrl.signal.aborted) {
      reply.stopped = true;
    } else if (tFirst !== null || reply.content) {
      reply.error = { kind: 'network', message: 'The connection to the server was lost; the reply is incomplete.' };
    } else {
      reply.error = { kind: 'network', message: 'Cannot reach the kiln server. Is `kiln serve` still running?' };
    }
  } finally {
    reply.pending = false;
    if (state.run?.reply === reply) state.run = null;
    conv.updated = Date.now();
    saveConversations();
    scheduleUpdate(reply);
    setState('ready');
    renderList();
  }
}

async function send(text) {
  if (state.run) return;
  const conv = current();
  if (!state.convs.includes(conv)) {
    state.convs.push(conv);
    state.currentId = conv.id;
    state.draft = null;
    store(KEY.current, conv.id);
  }
  if (!conv.renamed && !conv.messages.some((m) => m.role === 'user')) conv.title = titleFrom(text);
  conv.messages.push({ role: 'user', content: text });
  const reply = { role: 'assistant', content: '', pending: true };
  conv.messages.push(reply);
  conv.updated = Date.now();
  saveConversations();
  renderList();
  renderMessages();
  await generate(conv, reply);
}

function retry(ctx) {
  if (state.run) return;
  const { conv, m } = ctx;
  if (!conv.messages.includes(m)) return;
  generate(conv, m);
}

function stop() {
  if (state.run) state.run.ctrl.abort();
}

// ---- settings --------------------------------------------------------------------------------------

function openSettings() {
  const conv = current();
  const s = effectiveSettings(conv);
  const f = (id) => $(id);
  f('s-scope').checked = !!conv.settings;
  f('s-system').value = s.system;
  f('s-temperature').value = s.temperature ?? '';
  f('s-top-p').value = s.top_p ?? '';
  f('s-max-tokens').value = s.max_tokens ?? '';
  f('s-seed').value = s.seed ?? '';
  f('s-api-key').value = state.apiKey || '';
  f('s-error').hidden = true;
  els.dialog.showModal();
}

// The dialog's values as settings, or a message saying which field is wrong.
function readSettings() {
  const num = (id, name, lo, hi, integer) => {
    const raw = $(id).value.trim();
    if (raw === '') return null;
    const v = Number(raw);
    if (!Number.isFinite(v) || v < lo || v > hi || (integer && !Number.isInteger(v))) {
      throw new Error(`${name} must be ${integer ? 'a whole number' : 'a number'} from ${lo} to ${hi}.`);
    }
    return v;
  };
  return {
    system: $('s-system').value,
    temperature: num('s-temperature', 'Temperature', 0, 2, false),
    top_p: num('s-top-p', 'Top-p', 0, 1, false),
    max_tokens: num('s-max-tokens', 'Max tokens', 1, 1e9, true),
    seed: num('s-seed', 'Seed', -(2 ** 53), 2 ** 53, true),
  };
}

function saveSettings() {
  let s;
  try {
    s = readSettings();
  } catch (e) {
    $('s-error').textContent = e.message;
    $('s-error').hidden = false;
    return;
  }
  const conv = current();
  if ($('s-scope').checked) {
    conv.settings = s;
  } else {
    conv.settings = null;
    state.defaults = s;
    store(KEY.defaults, s);
  }
  if (state.convs.includes(conv)) saveConversations();
  const key = $('s-api-key').value.trim();
  if (key !== (state.apiKey || '')) setApiKey(key);
  els.dialog.close();
}

// ---- events ----------------------------------------------------------------------------------------

function submit() {
  const text = els.input.value;
  if (!text.trim() || state.run || document.body.dataset.state === 'loading') return;
  els.input.value = '';
  autosize();
  send(text);
}

function autosize() {
  els.input.style.height = 'auto';
  els.input.style.height = `${Math.min(els.input.scrollHeight, 240)}px`;
}

els.composer.addEventListener('submit', (e) => {
  e.preventDefault();
  submit();
});
els.input.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    submit();
  }
});
els.input.addEventListener('input', autosize);
els.stop.addEventListener('click', stop);
$('new-chat').addEventListener('click', newConversation);
$('open-settings').addEventListener('click', openSettings);
$('open-settings-top').addEventListener('click', openSettings);
$('s-cancel').addEventListener('click', () => els.dialog.close());
els.form.addEventListener('submit', (e) => {
  e.preventDefault();
  saveSettings();
});
$('menu').addEventListener('click', () => {
  const open = els.app.classList.toggle('show-list');
  els.scrim.hidden = !open;
});
els.scrim.addEventListener('click', () => {
  els.app.classList.remove('show-list');
  els.scrim.hidden = true;
});
// Copy buttons of code blocks (rendered inside messages).
els.messages.addEventListener('click', async (e) => {
  const btn = e.target.closest('button.copy');
  if (!btn) return;
  const code = btn.closest('.code')?.querySelector('code')?.textContent ?? '';
  try {
    await navigator.clipboard.writeText(code);
    btn.textContent = 'Copied';
  } catch {
    btn.textContent = 'Copy failed';
  }
  setTimeout(() => { btn.textContent = 'Copy'; }, 1500);
});
// Another tab changed the conversations: show its version (unless this tab is generating).
window.addEventListener('storage', (e) => {
  if (e.key !== KEY.convs || state.run) return;
  state.convs = loadConversations();
  renderList();
  renderMessages();
});

// ---- start -----------------------------------------------------------------------------------------

if (!state.convs.some((c) => c.id === state.currentId)) state.currentId = null;
renderList();
renderMessages();
setState('ready');
loadModel();
els.input.focus();

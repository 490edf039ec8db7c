// claw WebChat: the page's code (served at /webchat.js, no build step, no dependencies).
// Talks to the same origin's API with the bearer token: GET /v1/sessions,
// GET /v1/sessions/{key}/messages and streaming POST /v1/chat/completions (SSE
// `chat.completion.chunk`s; tool activity arrives as chunks with an empty delta and a
// `claw.tool` field; a gated call arrives as an event with `"type": "approval_request"`,
// shown with Approve / Always / Deny buttons that POST /v1/approvals/{id}, and its end
// as `claw.approval`).
//
// Safety: model output is never inserted as HTML as it is. Markdown is rendered by
// escaping everything first, then turning a small whitelist back into tags (paragraphs,
// code blocks, inline code, bold/italic, lists, http/https links); every other string
// goes in through textContent. The page is served with a Content-Security-Policy that
// allows only this script (no inline scripts or handlers) as a second line of defence.
// The token, the API calls and the DOM helpers are common.js's (`window.claw`).
'use strict';
(function () {
  const { $, el, load, store, setStatus, tokenState, Unauthorized, hasToken, needsToken, startToken } = window.claw;
  const api = window.claw.authFetch;
  const SESSION_KEY = 'claw.session';
  const state = { session: '', busy: false };

  // ---- Markdown, safely: escape everything, then a small whitelist ----------
  const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  function esc(s) { return String(s).replace(/[&<>"']/g, (c) => ESC[c]); }

  // Inline markup of one block's raw text. Code spans and links are cut out
  // first (their content is escaped and kept verbatim), the rest is escaped
  // and then bold/italic are applied; placeholders use characters that were
  // removed from the input.
  function inline(raw) {
    const keep = [];
    const hold = (html) => '\u0001' + (keep.push(html) - 1) + '\u0002';
    let s = raw.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, __, code) => hold('<code>' + esc(code) + '</code>'));
    s = s.replace(/\[([^\]\n\u0001\u0002]+)\]\((https?:\/\/[^\s()<>\u0001\u0002]+)\)/gi, (_, text, url) =>
      hold('<a href="' + esc(url) + '" rel="noopener noreferrer nofollow" target="_blank">' + emphasis(esc(text)) + '</a>'));
    s = emphasis(esc(s));
    return s.replace(/\u0001(\d+)\u0002/g, (_, i) => keep[Number(i)]);
  }
  function emphasis(h) {
    return h
      .replace(/\*\*(?=\S)([^*]*?\S)\*\*/g, '<strong>$1</strong>')
      .replace(/(^|[^_\w])__(?=\S)([^_]*?\S)__(?!\w)/g, '$1<strong>$2</strong>') // not inside words: snake__case, __proto__
      .replace(/(^|[^*\w])\*(?=\S)([^*\n]*?\S)\*(?!\w)/g, '$1<em>$2</em>')
      .replace(/(^|[^_\w])_(?=\S)([^_\n]*?\S)_(?!\w)/g, '$1<em>$2</em>');
  }

  const FENCE = /^ {0,3}(```+|~~~+)/;
  const ITEM = /^ {0,3}([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
  function renderMarkdown(src) {
    const lines = String(src).replace(/[\u0000-\u0002]/g, '').replace(/\r\n?/g, '\n').split('\n');
    const out = [];
    let para = [];
    const flush = () => { if (para.length) { out.push('<p>' + para.map(inline).join('<br>') + '</p>'); para = []; } };
    for (let i = 0; i < lines.length;) {
      const line = lines[i];
      const fence = FENCE.exec(line);
      if (fence) {
        flush();
        const body = [];
        i++;
        while (i < lines.length && !(lines[i].trim().startsWith(fence[1]) && lines[i].trim().replace(/[`~]/g, '') === '')) { body.push(lines[i]); i++; }
        i++; // the closing fence (an unclosed fence runs to the end: a streaming answer)
        out.push('<pre><code>' + esc(body.join('\n')) + '</code></pre>');
        continue;
      }
      if (!line.trim()) { flush(); i++; continue; }
      const item = ITEM.exec(line);
      if (item) {
        flush();
        const ordered = /\d/.test(item[1]);
        const items = [];
        while (i < lines.length) {
          const m = ITEM.exec(lines[i]);
          if (m && /\d/.test(m[1]) === ordered) { items.push([m[2]]); i++; continue; }
          // An indented line continues the item.
          if (!m && items.length && /^\s{2,}\S/.test(lines[i])) { items[items.length - 1].push(lines[i].trim()); i++; continue; }
          break;
        }
        const tag = ordered ? 'ol' : 'ul';
        out.push('<' + tag + '>' + items.map((it) => '<li>' + it.map(inline).join('<br>') + '</li>').join('') + '</' + tag + '>');
        continue;
      }
      const heading = /^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$/.exec(line);
      if (heading) { flush(); out.push('<p><strong>' + inline(heading[1]) + '</strong></p>'); i++; continue; }
      para.push(line);
      i++;
    }
    flush();
    return out.join('');
  }
  window.clawMarkdown = renderMarkdown; // for the browser test

  // ---- UI helpers ------------------------------------------------------------
  function scrollDown() { const l = $('log'); l.scrollTop = l.scrollHeight; }
  async function errorText(r) {
    try { const j = await r.json(); return (j.error && j.error.message) || JSON.stringify(j); } catch (_) { return 'HTTP ' + r.status; }
  }

  // ---- sessions --------------------------------------------------------------
  async function loadSessions() {
    let list = [];
    try {
      const r = await api('/v1/sessions');
      if (!r.ok) { setStatus('sessions: ' + await errorText(r), true); return; }
      list = (await r.json()).data || [];
      tokenState('token saved');
    } catch (e) { if (!(e instanceof Unauthorized)) setStatus('sessions: ' + e.message, true); return; }
    if (state.session && !list.some((s) => s.key === state.session)) list.unshift({ key: state.session, messages: 0 });
    const ul = $('sessions');
    ul.replaceChildren();
    for (const s of list) {
      const li = el('li');
      li.dataset.key = s.key;
      if (s.key === state.session) li.className = 'current';
      const b = el('button', '', s.key);
      b.type = 'button';
      b.title = s.key + (s.last_activity ? ' · last activity ' + s.last_activity : '');
      b.appendChild(el('span', 'count', String(s.messages || 0)));
      b.addEventListener('click', () => selectSession(s.key));
      li.appendChild(b);
      ul.appendChild(li);
    }
    return list;
  }

  async function selectSession(key) {
    state.session = key;
    store(SESSION_KEY, key);
    $('session-key').textContent = key;
    for (const li of $('sessions').children) li.classList.toggle('current', li.dataset.key === key);
    $('log').replaceChildren();
    if (!hasToken()) return;
    try {
      const r = await api('/v1/sessions/' + encodeURIComponent(key) + '/messages');
      if (r.status === 404) return; // a new session: created by its first message
      if (!r.ok) { setStatus('history: ' + await errorText(r), true); return; }
      const msgs = (await r.json()).data || [];
      if (state.session !== key) return; // switched meanwhile
      for (const m of msgs) {
        if (m.role === 'user') addUser(m.content);
        else { const t = addAssistant(); appendText(t, m.content); finishTurn(t); }
      }
      scrollDown();
    } catch (e) { if (!(e instanceof Unauthorized)) setStatus('history: ' + e.message, true); }
  }

  function newSessionKey(name) {
    const clean = (name || '').trim().replace(/[^A-Za-z0-9:._-]+/g, '-').slice(0, 80);
    if (clean) return clean.includes(':') ? clean : 'webchat:' + clean;
    const d = new Date();
    const p = (n) => String(n).padStart(2, '0');
    return 'webchat:' + d.getFullYear() + p(d.getMonth() + 1) + p(d.getDate()) + '-' + p(d.getHours()) + p(d.getMinutes()) + p(d.getSeconds())
      + '-' + Math.random().toString(36).slice(2, 6);
  }

  // ---- the conversation --------------------------------------------------------
  function addUser(text) { const m = el('div', 'msg user', text); $('log').appendChild(m); return m; }
  function addAssistant() {
    const m = el('div', 'msg assistant');
    $('log').appendChild(m);
    return { el: m, seg: null, tools: new Map() };
  }
  // Answer text goes into the current segment; a tool call or the end of an
  // answer closes it, so text, tool calls and text read in the order they happened.
  function appendText(t, text) {
    if (!t.seg) { t.seg = { el: el('div', 'md'), text: '' }; t.el.appendChild(t.seg.el); }
    t.seg.text += text;
    t.seg.el.innerHTML = renderMarkdown(t.seg.text); // escaped, then the whitelist
    scrollDown();
  }
  function closeSegment(t) { t.seg = null; }
  function showTool(t, tool) {
    closeSegment(t);
    const id = String(tool.id || tool.name || '');
    let card = t.tools.get(id);
    if (!card) {
      card = el('div', 'tool');
      card.dataset.toolId = id;
      card.append(el('span', 'tool-status'), el('span', 'tool-name'), document.createTextNode(' '), el('span', 'tool-args'), el('div', 'tool-preview'));
      t.tools.set(id, card);
      t.el.appendChild(card);
    }
    const args = String(tool.arguments || '');
    card.dataset.status = String(tool.status || '');
    card.querySelector('.tool-name').textContent = String(tool.name || '?');
    card.querySelector('.tool-args').textContent = args.length > 200 ? args.slice(0, 200) + '…' : args;
    card.querySelector('.tool-status').textContent = { started: 'running…', done: 'done', error: 'error' }[tool.status] || String(tool.status || '');
    card.querySelector('.tool-preview').textContent = String(tool.preview || '');
    scrollDown();
  }
  // A gated call waits for the user: Approve (once), Always (this session), Deny.
  const DECIDED = { once: 'approved once', always: 'approved for this session', deny: 'denied', timeout: 'not answered in time: denied' };
  function showApproval(t, a) {
    closeSegment(t);
    const id = String(a.id || '');
    const card = el('div', 'approval');
    card.dataset.approvalId = id;
    card.setAttribute('role', 'group');
    card.setAttribute('aria-label', 'approval request');
    const q = el('div', 'approval-question');
    q.append(document.createTextNode('Run '), el('code', '', String(a.preview || a.tool || '?')), document.createTextNode('?'));
    const meta = el('div', 'approval-meta', 'reaches ' + String(a.reach || '?') + ' · Always allows ' + String(a.always || 'this') +
      ' for this session · denied after ' + String(a.timeout_seconds || '?') + ' s without an answer');
    const buttons = el('div', 'approval-buttons');
    const state = el('div', 'approval-state');
    for (const [decision, label] of [['once', 'Approve'], ['always', 'Always'], ['deny', 'Deny']]) {
      const b = el('button', 'approval-' + decision, label);
      b.type = 'button';
      b.dataset.decision = decision;
      b.addEventListener('click', async () => {
        for (const x of buttons.querySelectorAll('button')) x.disabled = true;
        state.textContent = 'sending…';
        try {
          const r = await api('/v1/approvals/' + encodeURIComponent(id), {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({ decision }),
          });
          if (!r.ok) { state.textContent = await errorText(r); card.classList.add('bad'); return; }
          state.textContent = DECIDED[decision];
        } catch (e) { state.textContent = e.message || String(e); card.classList.add('bad'); }
      });
      buttons.appendChild(b);
    }
    card.append(q, meta, buttons, state);
    t.el.appendChild(card);
    const first = buttons.querySelector('button');
    if (first) first.focus();
    scrollDown();
  }
  function resolveApproval(t, r) {
    for (const card of t.el.querySelectorAll('.approval')) {
      if (card.dataset.approvalId !== String(r.id || '')) continue;
      for (const b of card.querySelectorAll('button')) b.disabled = true;
      card.dataset.decision = String(r.decision || '');
      card.querySelector('.approval-state').textContent = DECIDED[r.decision] || String(r.decision || '');
    }
  }

  function finishTurn(t, error) {
    t.el.classList.remove('streaming');
    if (t.seg) t.seg.el.innerHTML = renderMarkdown(t.seg.text);
    if (error) t.el.appendChild(el('div', 'error', error));
  }

  // Server-sent events from a fetch body: `data:` lines, events end at a blank line.
  async function readSse(body, onData) {
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      buf += done ? dec.decode() : dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line === '') { if (data.length) onData(data.join('\n')); data = []; }
        else if (line.startsWith('data:')) data.push(line.slice(line[5] === ' ' ? 6 : 5));
      }
      if (done) { if (data.length) onData(data.join('\n')); return; }
    }
  }

  async function send() {
    const text = $('input').value;
    if (!text.trim() || state.busy) return;
    if (needsToken()) return;
    if (!state.session) await selectSession(newSessionKey());
    state.busy = true;
    $('send').disabled = true;
    $('input').value = '';
    setStatus('');
    addUser(text);
    const t = addAssistant();
    t.el.classList.add('streaming');
    scrollDown();
    let ended = null;
    try {
      const r = await api('/v1/chat/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Claw-Session': state.session },
        body: JSON.stringify({ model: 'claw', stream: true, messages: [{ role: 'user', content: text }] }),
      });
      if (!r.ok) { finishTurn(t, await errorText(r)); return; }
      await readSse(r.body, (data) => {
        if (data === '[DONE]') return;
        let c;
        try { c = JSON.parse(data); } catch (_) { return; }
        if (c.type === 'approval_request') { showApproval(t, c); return; }
        const delta = (c.choices && c.choices[0] && c.choices[0].delta) || {};
        if (typeof delta.content === 'string' && delta.content) appendText(t, delta.content);
        const x = c.claw;
        if (!x) return;
        if (x.tool) showTool(t, x.tool);
        if (x.approval) resolveApproval(t, x.approval);
        if (x.end_answer) closeSegment(t);
        if (typeof x.status === 'string') setStatus(x.status);
        if (x.end) ended = x;
      });
      if (!ended) finishTurn(t, 'the stream ended without a result');
      else if (ended.end !== 'answered') finishTurn(t, ended.end.replace(/_/g, ' ') + (ended.message ? ': ' + ended.message : ''));
      else finishTurn(t);
    } catch (e) {
      finishTurn(t, e.message || String(e));
    } finally {
      state.busy = false;
      $('send').disabled = false;
      $('input').focus();
      loadSessions();
    }
  }

  // ---- wiring ----------------------------------------------------------------
  $('new-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const key = newSessionKey($('new-name').value);
    $('new-name').value = '';
    await selectSession(key);
    await loadSessions();
    $('input').focus();
  });
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });

  // A new token (saved in the form, or given as `#token=`): the sessions it sees.
  async function withNewToken() {
    await loadSessions();
    if (state.session) await selectSession(state.session);
  }

  async function start() {
    state.session = load(SESSION_KEY);
    $('session-key').textContent = state.session || '(none yet)';
    if (!startToken(withNewToken)) return;
    const list = await loadSessions();
    if (!state.session) state.session = (list && list[0] && list[0].key) || newSessionKey();
    await selectSession(state.session);
    await loadSessions();
  }
  start().finally(() => { document.body.dataset.ready = '1'; });
})();

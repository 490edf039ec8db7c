// claw Memory: the page's code (served at /memory.js, no build step, no dependencies).
// Reads the memory through the same origin's API with WebChat's bearer token (the same
// localStorage key, so a token saved in WebChat works here): POST /v1/memory/search
// (explain: the scores of each stage), POST /v1/memory/get, GET /v1/memory/status,
// GET /v1/memory/sources and GET /v1/memory/files?source=NAME. Read-only.
//
// Safety: notes are attacker-controlled (anything in the workspace can be indexed), so
// every string from the API goes in through textContent or an attribute set with
// setAttribute/dataset, never as HTML. The page is served with WebChat's
// Content-Security-Policy (no inline script or handlers) as a second line of defence.
// The token, the API calls and the DOM helpers are common.js's (`window.claw`).
//
// Keyboard: `/` focuses the search box, Enter searches, Tab reaches every hit, file
// and tab (each is a button), Enter opens it, Esc closes the open note.
'use strict';
(function () {
  const { $, el, setStatus, tokenState, Unauthorized, startToken } = window.claw;
  const state = { sources: [], opened: null, next: null };

  // A list item holding a button of class `cls` labelled `label`, then `span`;
  // `data` goes into its dataset, `props` onto it; a click calls `onClick`.
  function listButton(cls, label, data, props, span, onClick) {
    const li = el('li');
    const b = el('button', cls, label);
    b.type = 'button';
    Object.assign(b.dataset, data);
    Object.assign(b, props);
    b.appendChild(span);
    b.addEventListener('click', onClick);
    li.appendChild(b);
    return li;
  }
  // GET `path`, or POST `body` as JSON; the answer's JSON (an error's message thrown).
  async function api(path, body) {
    const opts = body === undefined ? {} : {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    };
    const r = await window.claw.authFetch(path, opts);
    let j = null;
    try { j = await r.json(); } catch (_) { /* not JSON */ }
    if (!r.ok) throw new Error((j && j.error && j.error.message) || ('HTTP ' + r.status));
    return j;
  }
  function report(what, e) { if (!(e instanceof Unauthorized)) setStatus(what + ': ' + e.message, true); }

  // ---- formatting ------------------------------------------------------------
  function date(unix) {
    if (unix === null || unix === undefined) return '';
    return new Date(unix * 1000).toISOString().slice(0, 10);
  }
  function when(unix) {
    if (unix === null || unix === undefined) return 'never';
    return new Date(unix * 1000).toISOString().replace('T', ' ').slice(0, 16) + ' UTC';
  }
  function num(v) { return (v === null || v === undefined) ? '–' : Number(v).toFixed(3); }
  function bytes(n) {
    if (n < 1024) return n + ' B';
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
    return (n / 1024 / 1024).toFixed(1) + ' MiB';
  }
  function rootOf(name) {
    const s = state.sources.find((x) => x.name === name);
    return s ? s.root : null;
  }
  // The path `get` is asked for: absolute beneath its source's root (two sources may
  // hold the same relative path), the relative path when the root is unknown.
  function getPath(source, path) {
    const root = rootOf(source);
    return root ? root.replace(/\/+$/, '') + '/' + path : path;
  }

  // ---- tabs ------------------------------------------------------------------
  const TABS = ['search', 'browse', 'status'];
  function showTab(name) {
    for (const t of TABS) {
      $('tab-' + t).setAttribute('aria-selected', String(t === name));
      $('view-' + t).hidden = t !== name;
    }
    document.body.dataset.tab = name;
    if (name === 'status') { $('reader').hidden = true; loadStatus(); }
    if (name === 'browse') loadSources();
  }
  for (const t of TABS) $('tab-' + t).addEventListener('click', () => showTab(t));
  $('tabs').addEventListener('keydown', (e) => {
    const i = TABS.indexOf(document.body.dataset.tab || 'search');
    if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
      const next = TABS[(i + (e.key === 'ArrowRight' ? 1 : TABS.length - 1)) % TABS.length];
      showTab(next);
      $('tab-' + next).focus();
      e.preventDefault();
    }
  });

  // ---- sources ---------------------------------------------------------------
  async function loadSources() {
    let list;
    try { list = (await api('/v1/memory/sources')).data || []; } catch (e) { report('sources', e); return; }
    tokenState('token saved');
    state.sources = list;
    const sel = $('source');
    const keep = sel.value;
    sel.replaceChildren(el('option', '', 'all'));
    sel.firstChild.value = 'all';
    for (const s of list) { const o = el('option', '', s.name); o.value = s.name; sel.appendChild(o); }
    sel.value = list.some((s) => s.name === keep) ? keep : 'all';
    // Rebuilt only when the sources changed: replacing the buttons on every
    // refresh (start-up, then the Browse tab) could swallow a click that lands
    // on a button just as it is replaced.
    const ul = $('source-list');
    const sig = JSON.stringify(list.map((s) => [s.name, s.kind, s.root]));
    if (ul.dataset.sig === sig) return;
    ul.dataset.sig = sig;
    ul.replaceChildren();
    for (const s of list) {
      ul.appendChild(listButton('source', s.name, { source: s.name }, { title: s.root },
        el('span', 'kind', String(s.kind).toLowerCase()), () => loadFiles(s.name)));
    }
  }

  async function loadFiles(name) {
    for (const b of $('source-list').querySelectorAll('button')) b.classList.toggle('current', b.dataset.source === name);
    let r;
    try { r = await api('/v1/memory/files?source=' + encodeURIComponent(name)); } catch (e) { report('files', e); return; }
    const files = r.data || [];
    $('files-info').textContent = name + ': ' + files.length + (files.length === 1 ? ' indexed file' : ' indexed files') + (r.root ? ' in ' + r.root : '');
    const ul = $('file-list');
    ul.replaceChildren();
    for (const f of files) {
      ul.appendChild(listButton('file', f.path, { path: f.path }, {},
        el('span', 'meta', bytes(f.size) + ' · ' + date(f.mtime)), () => openNote(name, f.path, 1, 0)));
    }
  }

  // ---- search ----------------------------------------------------------------
  async function search() {
    const query = $('query').value.trim();
    if (!query) { $('query').focus(); return; }
    const body = {
      query,
      mode: $('mode').value,
      source: $('source').value,
      explain: $('explain').checked,
      limit: Math.max(1, Math.min(50, Number($('limit').value) || 8)),
    };
    $('search').disabled = true;
    setStatus('searching…');
    let r;
    try { r = await api('/v1/memory/search', body); } catch (e) { report('search', e); return; } finally { $('search').disabled = false; }
    setStatus('');
    const hits = r.results || [];
    let info = hits.length + (hits.length === 1 ? ' hit' : ' hits') + ' · mode ' + r.mode;
    if (r.fallback) info += ' (fallback: ' + r.fallback + ')';
    if (r.sync && r.sync.status) info += ' · index ' + r.sync.status;
    $('search-info').textContent = info;
    const ol = $('results');
    ol.replaceChildren();
    for (const h of hits) ol.appendChild(hitItem(h));
    document.body.dataset.searched = String((Number(document.body.dataset.searched) || 0) + 1);
  }

  function hitItem(h) {
    const li = el('li', 'hit');
    const b = el('button', 'hit-open');
    b.type = 'button';
    b.title = 'open ' + h.citation;
    b.appendChild(el('span', 'hit-cite', h.citation));
    b.appendChild(el('span', 'hit-score', h.score.toFixed(3)));
    b.addEventListener('click', () => openNote(h.source, h.path, h.start_line, h.end_line));
    li.appendChild(b);
    const meta = el('div', 'hit-meta');
    meta.appendChild(el('span', 'hit-source', h.source));
    const x = h.explain;
    if (x && x.note_time !== null && x.note_time !== undefined) meta.appendChild(el('span', 'hit-date', date(x.note_time)));
    else if (x) meta.appendChild(el('span', 'hit-date', 'evergreen'));
    li.appendChild(meta);
    li.appendChild(el('div', 'hit-snippet', h.snippet));
    if (x) {
      const parts = [
        ['keyword', num(x.keyword)], ['vector', num(x.vector)], ['calibrated', num(x.vector_calibrated)],
        ['coverage', num(x.coverage)], ['blended', num(x.blended)], ['decay', num(x.decay)],
        ['score', num(x.score)], ['mmr', x.mmr_rank === null || x.mmr_rank === undefined ? '–' : String(x.mmr_rank)],
        ['weights', x.weights ? x.weights.map((w) => Number(w).toFixed(2)).join('/') : '–'],
        ['fusion', String(x.fusion || '')],
      ];
      if (x.pinned) parts.push(['pinned', 'yes']);
      if (x.keyword_best) parts.push(['keyword best', 'yes']);
      const dl = el('dl', 'explain');
      for (const [k, v] of parts) { dl.appendChild(el('dt', '', k)); dl.appendChild(el('dd', '', v)); }
      li.appendChild(dl);
    }
    return li;
  }

  // ---- the reader --------------------------------------------------------------
  // Opens `path` of `source` around lines start..end (highlighted), or from line 1 when
  // end is 0 (from line `at`, when given); "Whole note" reads it from the top, "Next
  // lines" goes on where get stopped (`next_from`).
  async function openNote(source, path, start, end, at) {
    const context = 3;
    const from = end ? Math.max(1, start - context) : (at || 1);
    const lines = end ? (end - from + 1) + context : 400;
    let r;
    try { r = await api('/v1/memory/get', { path: getPath(source, path), from, lines }); } catch (e) { report('open ' + path, e); return; }
    state.opened = { source, path };
    $('reader').hidden = false;
    $('reader-title').textContent = r.source + ' · ' + r.path;
    let meta = 'lines ' + r.from + '–' + r.to + ' of ' + r.total_lines;
    if (end) meta += ' · cited ' + start + '–' + end;
    if (r.truncated) meta += ' · cut to fit';
    $('reader-meta').textContent = meta;
    const pre = $('reader-text');
    pre.replaceChildren();
    const text = r.text.endsWith('\n') ? r.text.slice(0, -1) : r.text;
    text.split('\n').forEach((line, i) => {
      const n = r.from + i;
      const row = el('span', 'line');
      row.dataset.n = String(n);
      if (end && n >= start && n <= end) row.classList.add('cited');
      row.appendChild(el('span', 'ln', String(n)));
      row.appendChild(document.createTextNode(line + '\n'));
      pre.appendChild(row);
    });
    $('reader-whole').hidden = r.from === 1 && r.next_from === null;
    state.next = r.next_from;
    $('reader-more').hidden = r.next_from === null || r.next_from === undefined;
    const first = pre.querySelector('.cited') || pre.firstChild;
    if (first && first.scrollIntoView) first.scrollIntoView({ block: 'nearest' });
    pre.focus();
  }
  $('reader-close').addEventListener('click', () => { $('reader').hidden = true; state.opened = null; });
  $('reader-more').addEventListener('click', () => { if (state.opened && state.next) openNote(state.opened.source, state.opened.path, state.next, 0, state.next); });
  $('reader-whole').addEventListener('click', () => { if (state.opened) openNote(state.opened.source, state.opened.path, 1, 0); });

  // ---- status ----------------------------------------------------------------
  async function loadStatus() {
    let s;
    try { s = await api('/v1/memory/status'); } catch (e) { report('status', e); return; }
    tokenState('token saved');
    const rows = [
      ['backend', s.backend + ' · ' + s.location],
      ['workspace', s.workspace],
      ['files', String(s.files)],
      ['chunks', String(s.chunks)],
      ['vectors', String(s.vectors)],
      ['model', s.model ? s.model + ' (' + s.dims + ' dims)' : 'none (keyword-only)'],
      ['last indexed', when(s.last_index_at)],
      ['changed on disk', s.changed_on_disk.new + ' new, ' + s.changed_on_disk.modified + ' modified, ' + s.changed_on_disk.deleted + ' deleted'],
      ['watcher', watcherText(s.watcher)],
      ['keyword stage', (s.fts_tokenizers || []).join(', ')],
      ['vector stage', s.vector_backend],
      ['skipped files', String(s.skipped_files)],
    ];
    for (const n of s.too_big || []) rows.push(['too big, not indexed', n.path + ' (' + bytes(n.size) + ')']);
    const dl = $('status-list');
    dl.replaceChildren();
    for (const [k, v] of rows) {
      const dt = el('dt', '', k);
      const dd = el('dd', '', v);
      dd.dataset.key = k;
      dl.appendChild(dt);
      dl.appendChild(dd);
    }
    const tb = $('sources-table').tBodies[0];
    tb.replaceChildren();
    for (const src of s.sources || []) {
      const tr = el('tr');
      tr.appendChild(el('td', '', src.name));
      tr.appendChild(el('td', '', String(src.kind).toLowerCase()));
      tr.appendChild(el('td', '', src.root));
      tb.appendChild(tr);
    }
    state.sources = s.sources || state.sources;
    await loadConsolidation();
    document.body.dataset.status = 'loaded';
  }
  function watcherText(w) {
    if (!w) return 'none has run';
    let t = (w.alive ? 'running' : 'not running') + ' (pid ' + w.pid + ', heartbeat ' + w.heartbeat_age_secs + ' s ago';
    if (w.last_sync) t += ', last sync ' + when(w.last_sync);
    t += ', ' + w.pending + ' pending)';
    return t;
  }

  // What consolidation keeps: nothing records its runs, so the page shows MEMORY.md
  // itself: its sections, how many facts each holds, and the facts it dated
  // (consolidation writes `(since YYYY-MM-DD; was …)` when a fact changes).
  async function loadConsolidation() {
    const box = $('consolidation');
    box.replaceChildren();
    let r;
    try {
      r = await api('/v1/memory/get', { path: 'MEMORY.md', from: 1, lines: 2000 });
    } catch (e) {
      if (e instanceof Unauthorized) return;
      box.appendChild(el('p', 'note', 'MEMORY.md is not indexed (' + e.message + '): consolidation has promoted nothing yet.'));
      return;
    }
    box.appendChild(el('p', 'note', 'claw keeps no log of consolidation runs; MEMORY.md, where it promotes facts, holds:'));
    const sections = [];
    const dated = [];
    for (const line of r.text.split('\n')) {
      const h = /^#{2,3}\s+(.*)$/.exec(line);
      if (h) { sections.push({ name: h[1].trim(), facts: 0 }); continue; }
      if (/^\s*[-*]\s+\S/.test(line) && sections.length) sections[sections.length - 1].facts++;
      const since = /\(since (\d{4}-\d{2}-\d{2})[;)]/.exec(line);
      if (since) dated.push({ day: since[1], fact: line.replace(/^\s*[-*]\s+/, '') });
    }
    const ul = el('ul', 'sections');
    for (const s of sections) ul.appendChild(el('li', '', s.name + ': ' + s.facts + (s.facts === 1 ? ' fact' : ' facts')));
    if (!sections.length) ul.appendChild(el('li', '', 'no sections'));
    box.appendChild(ul);
    if (dated.length) {
      dated.sort((a, b) => (a.day < b.day ? 1 : -1));
      box.appendChild(el('p', 'note', 'Recently updated facts:'));
      const ol = el('ul', 'dated');
      for (const d of dated.slice(0, 10)) ol.appendChild(el('li', '', d.day + ' · ' + d.fact));
      box.appendChild(ol);
    }
    const open = el('button', '', 'Open MEMORY.md');
    open.type = 'button';
    open.addEventListener('click', () => { showTab('browse'); openNote(r.source, r.path, 1, 0); });
    box.appendChild(open);
  }

  // ---- wiring ----------------------------------------------------------------
  $('search-form').addEventListener('submit', (e) => { e.preventDefault(); search(); });
  document.addEventListener('keydown', (e) => {
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test((document.activeElement || {}).tagName || '');
    if (e.key === '/' && !typing) { e.preventDefault(); showTab('search'); $('query').focus(); }
    if (e.key === 'Escape' && !$('reader').hidden) { $('reader').hidden = true; state.opened = null; }
  });

  async function start() {
    showTab('search');
    if (!startToken(loadSources)) return;
    await loadSources();
    $('query').focus();
  }
  start().finally(() => { document.body.dataset.ready = '1'; });
})();

// claw's pages: what WebChat (/webchat.js) and Memory (/memory.js) share, served at
// /common.js before the page's own script (no build step, no dependencies), as
// `window.claw`: the gateway's bearer token (the header's token form, a `#token=`
// fragment, localStorage under one key, so a token saved on one page works on the
// other), calls to the same origin's API with it, and small DOM helpers. Like the
// pages, it sets text through textContent only, never as HTML.
'use strict';
window.claw = (function () {
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = 'claw.token';
  let token = '';

  // ---- storage (localStorage may be unavailable: the pages still work) ------
  function load(k) { try { return localStorage.getItem(k) || ''; } catch (_) { return ''; } }
  function store(k, v) { try { if (v) localStorage.setItem(k, v); else localStorage.removeItem(k); } catch (_) { /* private mode */ } }

  // ---- DOM helpers -----------------------------------------------------------
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function setStatus(text, bad) { $('status').textContent = text || ''; $('status').classList.toggle('bad', !!bad); }
  function tokenState(text, bad) { $('token-state').textContent = text; $('token-state').classList.toggle('bad', !!bad); }

  // ---- the token ---------------------------------------------------------------
  class Unauthorized extends Error {}
  // Without a token: say so at the token field, and true.
  function needsToken() {
    if (token) return false;
    tokenState('enter the token first', true);
    $('token').focus();
    return true;
  }
  function setToken(t) { token = t; store(TOKEN_KEY, token); }
  // `#token=…` (how `claw` can open a page): store it, drop it from the URL.
  function tokenFromHash() {
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (!m) return false;
    let t;
    try { t = decodeURIComponent(m[1]); } catch (_) { t = m[1]; }
    setToken(t);
    history.replaceState(null, '', location.pathname + location.search);
    $('token').value = token;
    return true;
  }
  // Wires the token form and `#token=` (also given to the page already open: no
  // reload happens); `onToken()` runs for each new token. Starts with the stored
  // token; without one, asks for it and returns false.
  function startToken(onToken) {
    $('token-form').addEventListener('submit', async (e) => {
      e.preventDefault();
      setToken($('token').value.trim());
      if (!token) { tokenState('no token', true); return; }
      tokenState('checking…');
      await onToken();
    });
    window.addEventListener('hashchange', async () => {
      if (!tokenFromHash()) return;
      tokenState('checking…');
      await onToken();
    });
    if (!tokenFromHash()) token = load(TOKEN_KEY);
    $('token').value = token;
    if (token) return true;
    tokenState('enter the token (the state dir\'s gateway.token) and Save');
    $('token').focus();
    return false;
  }

  // fetch(path, opts) on the same origin with the token; throws Unauthorized
  // without a token and when the gateway refuses it (401), saying so.
  async function authFetch(path, opts) {
    opts = opts || {};
    if (needsToken()) throw new Unauthorized('no token');
    const headers = Object.assign({ Authorization: 'Bearer ' + token }, opts.headers || {});
    const r = await fetch(path, Object.assign({}, opts, { headers, cache: 'no-store' }));
    if (r.status === 401) {
      tokenState('the gateway refused this token (401)', true);
      throw new Unauthorized('the gateway refused the token');
    }
    return r;
  }

  return {
    $, el, load, store, setStatus, tokenState,
    Unauthorized, needsToken, hasToken: () => !!token, startToken, authFetch,
  };
})();

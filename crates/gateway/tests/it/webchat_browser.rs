//! WebChat in a real browser: the gateway, in-process (against the scripted
//! OpenAI-compatible LLM server) serves its page to headless Chromium (Debian's
//! `chromium`, installed by `scripts/setup-chromium.sh`), driven over the DevTools
//! protocol by the small CDP client below (a websocket on `tungstenite`, real mouse
//! clicks and typed text through `Input.*`). The page is opened without a token, the
//! token is typed and saved, a new session is started, a message is typed and sent;
//! the test watches the DOM while the turn runs and asserts that the tool call is
//! shown before the answer, that the answer streams in (a partial answer is seen
//! before the rest arrives), that the Markdown whitelist is rendered and that the
//! injection payload in the model's answer (`<img onerror>`, `<script>`, a
//! `javascript:` link) created no element and ran nothing. Then: the renderer against
//! hostile and randomly generated inputs (every element and attribute it produces is
//! on the whitelist), a reload (token and session kept in localStorage, history
//! rendered from `/v1/sessions/{key}/messages`), `#token=` in the URL and a refused
//! token; and the page's Content-Security-Policy (an inline handler is refused).
//! A second test: a turn that writes a file shows an approval card, a real click
//! on *Approve* answers it (`POST /v1/approvals/{id}`), the write runs and the card
//! says so; a second write in another turn is denied with *Deny*.
//!
//! Chromium: `CLAW_CHROMIUM`, else `chromium` on PATH. Missing under `CI=true`: the
//! test fails saying how to install it; elsewhere it says so and passes.

use crate::common::Gateway;
use claw_testkit::scripted_server::{Reply, ScriptedServer, Step, openai};
use serde_json::{Value, json};
use std::io::ErrorKind;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tungstenite::{Message, WebSocket};

/// Chromium at `bin` with one page open at `url`; the browser outlives the
/// connection.
pub(crate) fn open_browser(bin: &Path, url: &str) -> (Browser, Cdp) {
    let browser = Browser::launch(bin);
    let mut cdp = Cdp::connect(&browser.ws_url);
    cdp.open_page();
    cdp.navigate(url);
    (browser, cdp)
}

/// The Chromium binary, or None (outside CI) when there is none.
pub(crate) fn chromium() -> Option<PathBuf> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if let Some(p) = std::env::var_os("CLAW_CHROMIUM").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "CLAW_CHROMIUM={} does not exist (scripts/setup-chromium.sh installs Debian's chromium)",
            p.display()
        );
        return Some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    assert!(
        !ci,
        "the WebChat browser test needs headless Chromium: run `. scripts/setup-chromium.sh` \
         (installs Debian's `chromium`, exports CLAW_CHROMIUM) or set CLAW_CHROMIUM"
    );
    eprintln!(
        "webchat_browser: NOT RUN: no chromium (CLAW_CHROMIUM unset, none on PATH); \
         `. scripts/setup-chromium.sh` installs it"
    );
    None
}

/// Headless Chromium in its own process group (killed with all its helpers on drop).
pub(crate) struct Browser {
    child: Child,
    pub(crate) ws_url: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub(crate) fn launch(bin: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let home = profile.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let data = profile.path().join("data");
        let child = Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-breakpad",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1200,900",
            ])
            .arg(format!("--user-data-dir={}", data.display()))
            .arg("about:blank")
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let mut b = Browser {
            child,
            ws_url: String::new(),
            _profile: profile,
        };
        // Chromium writes the port it bound (and the browser target's path) here.
        let port_file = data.join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    b.ws_url = format!("ws://127.0.0.1:{}{}", port.trim(), path.trim());
                    return b;
                }
            }
            if let Some(status) = b.child.try_wait().unwrap() {
                panic!("chromium exited ({status}) before listening");
            }
            assert!(
                Instant::now() < deadline,
                "chromium did not write {} within 60 s",
                port_file.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // SAFETY: signals the process group of the browser this test started.
        unsafe {
            libc::killpg(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// A DevTools-protocol client: one websocket to the browser target, one page
/// attached in flat mode (its commands carry the `sessionId`).
pub(crate) struct Cdp {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    session: Option<String>,
    /// Console output and exceptions of the page (shown when an assertion fails).
    pub(crate) console: Vec<String>,
}

impl Cdp {
    pub(crate) fn connect(ws_url: &str) -> Cdp {
        let hostport = ws_url
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let tcp = TcpStream::connect(&hostport).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let (ws, _) = tungstenite::client(ws_url, tcp)
            .unwrap_or_else(|e| panic!("websocket handshake with {ws_url}: {e}"));
        Cdp {
            ws,
            next_id: 1,
            session: None,
            console: Vec::new(),
        }
    }

    /// Send one command and wait for its answer (events met meanwhile are kept
    /// when they are console output).
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send(Message::text(msg.to_string())).unwrap();
        loop {
            let m = match self.ws.read() {
                Ok(m) => m,
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    panic!(
                        "no answer to {method} within 60 s; console: {:?}",
                        self.console
                    )
                }
                Err(e) => panic!("reading the DevTools socket ({method}): {e}"),
            };
            let Message::Text(text) = m else { continue };
            let v: Value = serde_json::from_str(text.as_str()).unwrap();
            if v["id"] == json!(id) {
                if let Some(err) = v.get("error") {
                    panic!("{method} failed: {err}");
                }
                return v["result"].clone();
            }
            match v["method"].as_str() {
                Some("Runtime.consoleAPICalled") => {
                    let args: Vec<String> = v["params"]["args"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| a.get("value").unwrap_or(&a["description"]).to_string())
                        .collect();
                    self.console.push(format!(
                        "console.{}: {}",
                        v["params"]["type"].as_str().unwrap_or("?"),
                        args.join(" ")
                    ));
                }
                Some("Runtime.exceptionThrown") => self.console.push(format!(
                    "exception: {}",
                    v["params"]["exceptionDetails"]["exception"]["description"]
                )),
                _ => {}
            }
        }
    }

    /// Open a new page and attach to it.
    pub(crate) fn open_page(&mut self) {
        let t = self.call("Target.createTarget", json!({"url": "about:blank"}));
        let target = t["targetId"].as_str().unwrap().to_string();
        let a = self.call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        self.session = Some(a["sessionId"].as_str().unwrap().to_string());
        self.call("Runtime.enable", json!({}));
        self.call("Page.enable", json!({}));
    }

    /// Evaluate `expr` in the page (promises awaited) and return its value.
    pub(crate) fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(ex) = r.get("exceptionDetails") {
            panic!("evaluating {expr:?} threw: {ex}");
        }
        r["result"].get("value").cloned().unwrap_or(Value::Null)
    }

    /// Poll `expr` until it is true (or fail after `secs`).
    pub(crate) fn wait_for(&mut self, what: &str, expr: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        // A page in the middle of loading may not have a body yet: not yet true.
        let guarded = format!(
            "(() => {{ try {{ return ({expr}) === true; }} catch (_) {{ return false; }} }})()"
        );
        while self.eval(&guarded) != json!(true) {
            if Instant::now() >= deadline {
                let page = self.eval("document.body.innerText");
                panic!(
                    "timed out waiting for {what} ({expr}); console: {:?}; page: {page}",
                    self.console
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Load `url` and wait for the page's start-up to finish.
    pub(crate) fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for(
            "the page to start",
            "document.readyState === 'complete' && document.body && document.body.dataset.ready === '1'",
            30,
        );
    }

    /// A real left click in the middle of the element `selector`.
    pub(crate) fn click(&mut self, selector: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        let r = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); e.scrollIntoView({{block: 'center'}}); \
             const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2, e.disabled === true]; }})()"
        ));
        assert_eq!(r[2], json!(false), "{selector} is disabled");
        let (x, y) = (r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Press and release Enter in the focused element.
    pub(crate) fn press_enter(&mut self) {
        for kind in ["keyDown", "keyUp"] {
            let mut ev = json!({"type": kind, "key": "Enter", "code": "Enter",
                "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13});
            if kind == "keyDown" {
                ev["text"] = json!("\r");
            }
            self.call("Input.dispatchKeyEvent", ev);
        }
    }

    /// Focus `selector` and type `text` into it (as an IME commit: real input events).
    pub(crate) fn type_into(&mut self, selector: &str, text: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        self.eval(&format!("document.querySelector({sel}).focus()"));
        self.call("Input.insertText", json!({"text": text}));
    }
}

/// What the page shows of the last assistant message, and around it.
const SNAPSHOT: &str = r#"(() => {
  const msgs = document.querySelectorAll('#log .msg.assistant');
  const a = msgs[msgs.length - 1];
  const tools = a ? [...a.querySelectorAll('.tool')].map((t) => ({
    name: t.querySelector('.tool-name').textContent,
    args: t.querySelector('.tool-args').textContent,
    status: t.dataset.status,
    preview: t.querySelector('.tool-preview').textContent,
  })) : [];
  const md = a ? [...a.querySelectorAll('.md')] : [];
  return {
    exists: !!a,
    streaming: !!a && a.classList.contains('streaming'),
    text: md.map((m) => m.textContent).join('\n'),
    html: md.map((m) => m.innerHTML).join('\n'),
    tools,
    toolsBeforeText: !!a && a.firstElementChild !== null && a.firstElementChild.classList.contains('tool'),
    errors: a ? [...a.querySelectorAll('.error')].map((e) => e.textContent) : [],
    sendEnabled: !document.getElementById('send').disabled,
  };
})()"#;

/// Elements in the conversation that model output must never create.
const INJECTED: &str = "JSON.stringify({ \
    elements: document.querySelectorAll('#log img, #log script, #log iframe, #log svg, #log object, #log style').length, \
    handlers: [...document.querySelectorAll('#log *')].filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length, \
    badLinks: [...document.querySelectorAll('#log a')].filter((a) => !/^https?:\\/\\//.test(a.getAttribute('href') || '')).length, \
    pwned: window.__pwned === undefined ? null : String(window.__pwned) })";

/// The renderer against hostile and random inputs: every element it produces is
/// on the whitelist, every attribute too, links are http(s) only, and text that
/// has no Markdown in it comes out exactly as it went in.
const RENDERER_CHECK: &str = r#"(() => {
  const TAGS = new Set(['P', 'BR', 'PRE', 'CODE', 'STRONG', 'EM', 'UL', 'OL', 'LI', 'A']);
  const bad = [];
  const check = (input) => {
    const t = document.createElement('template');
    t.innerHTML = window.clawMarkdown(input);
    for (const e of t.content.querySelectorAll('*')) {
      if (!TAGS.has(e.tagName)) bad.push([input, 'tag ' + e.tagName]);
      for (const a of e.attributes) {
        const ok = e.tagName === 'A' && ['href', 'rel', 'target'].includes(a.name);
        if (!ok) bad.push([input, 'attribute ' + e.tagName + ' ' + a.name]);
      }
      if (e.tagName === 'A' && !/^https?:\/\//i.test(e.getAttribute('href') || '')) bad.push([input, 'href ' + e.getAttribute('href')]);
    }
    return t.content.textContent;
  };
  const hostile = [
    '<img src=x onerror="window.__pwned=1">', '<script>window.__pwned=2</script>',
    '<svg onload=alert(1)>', '<iframe src="javascript:alert(1)"></iframe>',
    '[x](javascript:alert(1))', '[x](JAVASCRIPT:alert(1))', '[x](data:text/html,<script>alert(1)</script>)',
    '[x](https://e.com/"onmouseover="alert(1))', "[x](https://e.com/' onmouseover='alert(1))",
    '[<img src=x onerror=alert(1)>](https://e.com)', '**<b onclick=alert(1)>x</b>**',
    '`<script>`', '```\n<script>alert(1)</script>\n```', '- <a href="javascript:alert(1)">x</a>',
    '1. <style>*{}</style>', '&lt;script&gt; &amp;', '\u0001' + '0' + '\u0002<img src=x>',
    '<<script>script>alert(1)<</script>/script>', '<a href=https://e.com onclick=alert(1)>x</a>',
  ];
  for (const h of hostile) check(h);
  const plain = ['<script>alert(1)</script>', '<img src=x onerror=alert(1)>', 'a < b > c & "d" \'e\'',
    'window.__pwned=1 and window.__pwned=2', 'snake_case_name and 2 * 3 * 4'];
  const changed = plain.filter((p) => check(p) !== p);
  // Random strings over the characters that matter to HTML and to the Markdown rules.
  const alphabet = ['<', '>', '"', "'", '&', '*', '_', '`', '[', ']', '(', ')', '#', '-', '1.', ' ', '\n', '\n\n',
    '```', 'img', 'script', ' onerror=', 'javascript:', 'https://', 'a', '=', '/', '\u0001', '\u0002', '0'];
  let seed = 12345;
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  for (let i = 0; i < 3000; i++) {
    let s = '';
    const len = 1 + rnd(40);
    for (let j = 0; j < len; j++) s += alphabet[rnd(alphabet.length)];
    check(s);
  }
  return JSON.stringify({ bad: bad.slice(0, 10), badCount: bad.length, changed,
    bold: window.clawMarkdown('**b** *i* `c` [l](https://e.com/?a=1&b=2)') });
})()"#;

fn parse(v: Value) -> Value {
    serde_json::from_str(v.as_str().unwrap()).unwrap()
}

#[test]
fn webchat_in_headless_chromium_streams_tools_and_renders_safely() {
    let Some(bin) = chromium() else { return };

    let dir = claw_testkit::workspace(&[(
        "notes/garden.md",
        "# Garden\n\nThe tomatoes need water every morning.\n",
    )]);
    let ws = dir.path();
    // The model: one memory_search call, then an answer that streams in two parts
    // with pauses (so the page is seen with the tool call and no answer yet, then
    // with half an answer), carrying Markdown and an injection payload.
    let c = openai::chunk;
    let answer = vec![
        c(json!({"role": "assistant", "content": ""}), None),
        Step::delay_ms(1200),
        c(
            json!({"content": "PART-ONE: the **tomatoes** need `water <daily>`"}),
            None,
        ),
        Step::delay_ms(1500),
        c(
            json!({"content": "\n\nPART-TWO <img src=x onerror=\"window.__pwned=1\"> and \
                <script>window.__pwned=2</script> done.\n\n- item *one*\n- see \
                [the docs](https://example.com/garden?a=1&b=2) or [this](javascript:window.__pwned=3)\n\n\
                ```\n<b>not bold</b>\n```"}),
            None,
        ),
        c(json!({}), Some("stop")),
        openai::usage(10, 20),
        Step::done(),
    ];
    let llm = ScriptedServer::start([
        openai::tool_call(
            "call_1",
            "memory_search",
            &[r#"{"query": "tomatoes"#, r#" water"}"#],
        ),
        Reply::sse(answer),
    ]);
    let gw = Gateway::start(ws, Some(&llm.url()));
    let base = gw.client().info.base_url();
    let token = std::fs::read_to_string(claw_testkit::state_dir(ws).join("gateway.token"))
        .unwrap()
        .trim()
        .to_string();

    let (browser, mut cdp) = open_browser(&bin, &format!("{base}/"));

    // No token yet: the page asks for one and has called nothing.
    assert_eq!(
        cdp.eval("document.getElementById('token').value"),
        json!("")
    );
    assert_eq!(
        cdp.eval("document.querySelectorAll('#sessions li').length"),
        json!(0)
    );

    // Type the token, save: the session list loads (the token worked).
    cdp.type_into("#token", &token);
    cdp.click("#save-token");
    cdp.wait_for(
        "the token to be accepted",
        "document.getElementById('token-state').textContent === 'token saved'",
        20,
    );
    assert_eq!(
        cdp.eval("localStorage.getItem('claw.token')"),
        json!(token),
        "the token is kept in localStorage"
    );

    // A new session, named.
    cdp.type_into("#new-name", "garden");
    cdp.click("#new-session");
    cdp.wait_for(
        "the new session",
        "document.getElementById('session-key').textContent === 'webchat:garden'",
        10,
    );

    // Type a message and click Send.
    let question = "What do the <b>tomatoes</b> need?";
    cdp.type_into("#input", question);
    cdp.click("#send");

    // Watch the turn.
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut saw_tool_first, mut saw_partial, mut saw_running_tool) = (false, false, false);
    let last = loop {
        let s = cdp.eval(SNAPSHOT);
        let text = s["text"].as_str().unwrap_or("");
        let tools = s["tools"].as_array().cloned().unwrap_or_default();
        if s["streaming"] == json!(true) {
            if !tools.is_empty() && text.trim().is_empty() {
                saw_tool_first = true;
            }
            if tools.iter().any(|t| t["status"] == "started") {
                saw_running_tool = true;
            }
            if text.contains("PART-ONE") && !text.contains("PART-TWO") {
                saw_partial = true;
            }
        }
        if s["exists"] == json!(true)
            && s["streaming"] == json!(false)
            && s["sendEnabled"] == json!(true)
        {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the turn did not finish in the page: {s}; console: {:?}",
            cdp.console
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("webchat_browser: final answer html: {}", last["html"]);
    assert_eq!(
        last["errors"],
        json!([]),
        "the turn failed in the page: {last}"
    );
    assert!(
        saw_tool_first,
        "the tool call was not shown before the answer arrived: {last}"
    );
    assert!(
        saw_partial,
        "no partial answer was seen: the answer did not stream in: {last}"
    );
    let _ = saw_running_tool; // `started` → `done` may be quicker than a poll
    let tools = last["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "one tool card: {last}");
    assert_eq!(tools[0]["name"], "memory_search");
    assert!(
        tools[0]["args"]
            .as_str()
            .unwrap()
            .contains("tomatoes water"),
        "the arguments are previewed: {}",
        tools[0]
    );
    assert_eq!(tools[0]["status"], "done", "{}", tools[0]);
    assert_eq!(last["toolsBeforeText"], json!(true), "{last}");

    // Nothing from the model became an element or ran.
    let injected = parse(cdp.eval(INJECTED));
    assert_eq!(
        injected,
        json!({"elements": 0, "handlers": 0, "badLinks": 0, "pwned": null}),
        "model output created elements or ran code"
    );
    // The answer: all of it, Markdown rendered, the payload shown as text.
    let text = last["text"].as_str().unwrap();
    let html = last["html"].as_str().unwrap();
    assert!(
        text.contains("PART-ONE") && text.contains("PART-TWO"),
        "{text}"
    );
    assert!(html.contains("<strong>tomatoes</strong>"), "{html}");
    assert!(html.contains("<code>water &lt;daily&gt;</code>"), "{html}");
    assert!(html.contains("<li>item <em>one</em></li>"), "{html}");
    assert!(
        html.contains(r#"<a href="https://example.com/garden?a=1&amp;b=2" rel="noopener noreferrer nofollow" target="_blank">the docs</a>"#),
        "{html}"
    );
    assert!(
        html.contains("<pre><code>&lt;b&gt;not bold&lt;/b&gt;</code></pre>"),
        "{html}"
    );
    assert!(
        text.contains(r#"<img src=x onerror="window.__pwned=1">"#)
            && text.contains("<script>window.__pwned=2</script>")
            && text.contains("[this](javascript:window.__pwned=3)"),
        "the payload is shown as text: {text}"
    );
    // The user's own message is text too.
    assert_eq!(
        cdp.eval("document.querySelector('#log .msg.user').textContent"),
        json!(question)
    );
    assert_eq!(
        cdp.eval("document.querySelectorAll('#log b').length"),
        json!(0)
    );
    // The gateway got both model calls; the session appears in the list.
    assert_eq!(llm.requests().len(), 2, "the model was called twice");
    cdp.wait_for(
        "the session in the list with 2 messages",
        "[...document.querySelectorAll('#sessions li')].some((li) => li.dataset.key === 'webchat:garden' \
         && li.querySelector('.count').textContent === '2')",
        10,
    );

    // The second line of defence: the page's Content-Security-Policy allows no inline
    // handler, so even markup that got in could not run.
    let csp = cdp.eval("fetch('/').then((r) => r.headers.get('content-security-policy'))");
    assert!(
        csp.as_str()
            .is_some_and(|c| c.contains("script-src 'self'") && !c.contains("unsafe-inline")),
        "CSP: {csp}"
    );
    // An image that fails to load (same origin, 404) with an inline onerror: the
    // handler is refused (a `script-src` violation) and never runs.
    let violated = cdp.eval(
        "new Promise((done) => { \
           const seen = []; \
           document.addEventListener('securitypolicyviolation', (e) => seen.push(e.violatedDirective)); \
           const d = document.createElement('div'); \
           d.innerHTML = '<img src=\"/webchat-missing.png\" onerror=\"window.__csp = 1\">'; \
           document.body.appendChild(d); \
           const t0 = Date.now(); \
           const poll = () => (seen.length || Date.now() - t0 > 5000) ? (d.remove(), done(seen)) : setTimeout(poll, 20); \
           poll(); })",
    );
    assert!(
        violated.as_array().is_some_and(|v| v
            .iter()
            .any(|d| d.as_str().is_some_and(|d| d.starts_with("script-src")))),
        "the CSP did not refuse an inline handler: {violated}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cdp.eval("window.__csp === undefined"), json!(true));

    // The renderer on its own: hostile and random inputs.
    let r = parse(cdp.eval(RENDERER_CHECK));
    assert_eq!(r["badCount"], json!(0), "non-whitelisted output: {r}");
    assert_eq!(r["changed"], json!([]), "plain text was altered: {r}");
    assert_eq!(
        r["bold"],
        json!(
            "<p><strong>b</strong> <em>i</em> <code>c</code> <a href=\"https://e.com/?a=1&amp;b=2\" rel=\"noopener noreferrer nofollow\" target=\"_blank\">l</a></p>"
        )
    );

    // A turn that fails (the model server refuses), sent with Enter: the page says
    // why, in that answer's place, and the composer works again.
    llm.push(openai::error(400, "scripted refusal", None));
    cdp.type_into("#input", "and the peppers?");
    cdp.press_enter(); // Enter sends (Shift+Enter would be a new line)
    cdp.wait_for(
        "the failed turn to be reported",
        "(() => { const a = [...document.querySelectorAll('#log .msg.assistant')].pop(); \
         return document.querySelectorAll('#log .msg.assistant').length === 2 && !a.classList.contains('streaming') \
         && a.querySelector('.error') !== null && !document.getElementById('send').disabled; })()",
        60,
    );
    let err = cdp.eval(
        "[...document.querySelectorAll('#log .msg.assistant')].pop().querySelector('.error').textContent",
    );
    assert!(
        err.as_str()
            .is_some_and(|e| e.starts_with("failed") && e.contains("scripted refusal")),
        "the failure shown: {err}"
    );

    // Reload: token and session come back from localStorage, the history from the
    // gateway, rendered the same safe way.
    cdp.call("Page.reload", json!({}));
    cdp.wait_for(
        "the reloaded page with its history",
        "document.body.dataset.ready === '1' && document.querySelector('#log .msg.user').textContent.includes('tomatoes') \
         && [...document.querySelectorAll('#log .msg.assistant')].some((a) => a.textContent.includes('PART-TWO'))",
        30,
    );
    assert_eq!(
        cdp.eval("document.getElementById('token').value"),
        json!(token)
    );
    assert_eq!(
        cdp.eval("document.getElementById('session-key').textContent"),
        json!("webchat:garden")
    );
    let h = cdp.eval(&SNAPSHOT.replace(
        "msgs[msgs.length - 1]",
        "[...msgs].find((m) => m.textContent.includes('PART-TWO'))",
    ));
    assert!(
        h["text"].as_str().unwrap().contains("PART-TWO <img src=x"),
        "history: {h}"
    );
    assert!(
        h["html"]
            .as_str()
            .unwrap()
            .contains("<strong>tomatoes</strong>"),
        "history: {h}"
    );
    assert_eq!(
        parse(cdp.eval(INJECTED)),
        json!({"elements": 0, "handlers": 0, "badLinks": 0, "pwned": null}),
        "the history created elements or ran code"
    );

    // `#token=` in the URL (how the CLI can open the page): stored, then dropped
    // from the address.
    // A fresh load...
    cdp.eval("localStorage.clear()");
    cdp.call("Page.navigate", json!({"url": "about:blank"}));
    cdp.wait_for("about:blank", "location.href === 'about:blank'", 10);
    cdp.navigate(&format!("{base}/#token={token}"));
    cdp.wait_for(
        "the sessions listed with the token from the URL",
        "[...document.querySelectorAll('#sessions li')].some((li) => li.dataset.key === 'webchat:garden')",
        20,
    );
    assert_eq!(cdp.eval("location.hash"), json!(""));
    assert_eq!(cdp.eval("localStorage.getItem('claw.token')"), json!(token));
    assert_eq!(
        cdp.eval("document.getElementById('token').value"),
        json!(token)
    );
    // ... and the page already open, given a new `#token=` (no reload).
    cdp.eval("localStorage.clear(); document.getElementById('token').value = ''");
    cdp.eval(&format!("location.hash = '#token={token}'"));
    cdp.wait_for(
        "the token from a changed fragment",
        &format!("localStorage.getItem('claw.token') === '{token}' && location.hash === ''"),
        10,
    );
    assert_eq!(
        cdp.eval("document.getElementById('token').value"),
        json!(token)
    );

    // A wrong token: the page says so.
    cdp.eval("localStorage.setItem('claw.token', 'not-the-token')");
    cdp.navigate(&format!("{base}/"));
    cdp.wait_for(
        "the refused token to be reported",
        "document.getElementById('token-state').textContent.includes('refused')",
        20,
    );
    assert_eq!(
        cdp.eval("document.querySelectorAll('#sessions li').length"),
        json!(0)
    );
    assert!(
        cdp.console.iter().all(|l| !l.starts_with("exception")),
        "page exceptions: {:?}",
        cdp.console
    );
    drop(browser);
}

#[test]
fn webchat_approve_and_deny_buttons_answer_approval_requests() {
    let Some(bin) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let llm = ScriptedServer::start(openai::write_file_turns(&[
        ("w1", "approved.txt", "wrote it"),
        ("w2", "denied.txt", "did not write it"),
    ]));
    let gw = Gateway::start(ws, Some(&llm.url()));
    let base = gw.client().info.base_url();
    let (_browser, mut cdp) = open_browser(&bin, &format!("{base}/#token={}", gw.token));
    cdp.wait_for(
        "the page with the token",
        "document.body.dataset.ready === '1' && document.getElementById('token-state').textContent === 'token saved'",
        20,
    );
    cdp.type_into("#new-name", "approvals");
    cdp.click("#new-session");
    cdp.wait_for(
        "the new session",
        "document.getElementById('session-key').textContent === 'webchat:approvals'",
        10,
    );

    for (n, (button, file, decision, state)) in [
        ("approval-once", "approved.txt", "once", "approved once"),
        ("approval-deny", "denied.txt", "deny", "denied"),
    ]
    .into_iter()
    .enumerate()
    {
        cdp.type_into("#input", &format!("write {file}"));
        cdp.click("#send");
        let card = format!("document.querySelectorAll('#log .approval')[{n}]");
        cdp.wait_for(
            "the approval card",
            &format!(
                "!!{card} && {card}.querySelector('code').textContent === 'write_file: {file}'"
            ),
            30,
        );
        assert!(!ws.join(file).exists(), "nothing runs before the click");
        assert_eq!(
            cdp.eval(&format!(
                "[...{card}.querySelectorAll('button')].map(b => b.textContent).join('/')"
            )),
            json!("Approve/Always/Deny")
        );
        let id = cdp.eval(&format!("{card}.dataset.approvalId"));
        let id = id.as_str().unwrap();
        assert!(id.starts_with("appr-"), "{id}");
        cdp.click(&format!("[data-approval-id=\"{id}\"] .{button}"));
        cdp.wait_for(
            "the turn to end",
            &format!(
                "{card}.dataset.decision === '{decision}' && !document.querySelector('#log .msg.assistant.streaming') \
                 && !document.getElementById('send').disabled"
            ),
            30,
        );
        assert_eq!(
            cdp.eval(&format!(
                "{card}.querySelector('.approval-state').textContent"
            )),
            json!(state)
        );
        assert_eq!(
            cdp.eval(&format!(
                "[...{card}.querySelectorAll('button')].every(b => b.disabled)"
            )),
            json!(true)
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("approved.txt")).unwrap(),
        "w1"
    );
    assert!(!ws.join("denied.txt").exists());
    assert_eq!(
        llm.tool_result(3, "w2"),
        "Error: the user declined to run `write_file`"
    );
    assert!(
        cdp.console
            .iter()
            .all(|l| !l.contains("Content Security Policy")),
        "{:?}",
        cdp.console
    );
}

//! The Memory page (`/memory`) in headless Chromium, driven over the DevTools
//! protocol with WebChat's client (`webchat_browser`'s `Browser` and `Cdp`). A
//! small workspace (MEMORY.md with consolidated facts, dated notes, a note holding
//! an injection payload) and a registered folder are indexed keyword-only, the
//! gateway serves them, and the page is opened without a token: the token is typed
//! and saved, a search with explain shows the hits with their scores per stage,
//! source and date, the mode and source filters narrow it, a hit opens at its cited
//! lines (highlighted), the hostile note renders as text and runs nothing (its
//! payload is real markup: the positive control), Browse lists the sources and a
//! source's files and opens one, and Status shows files, chunks, vectors,
//! freshness, the watcher, the model and MEMORY.md's sections. Also: the read-only
//! endpoints over plain HTTP (401 without the token, an unknown source is 400) and
//! the page's Content-Security-Policy.
//!
//! With `CLAW_SCREENSHOTS_DIR` set, the search and status views are saved there as
//! `memory-search.png` and `memory-status.png` (how `docs/img/` was made).

use crate::common::Gateway;
use crate::webchat_browser::{Cdp, chromium, open_browser};
use claw_memory_api::{IndexOptions, Memory};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const MEMORY_MD: &str = "# Memory\n\n## People\n- Ada runs the payments team.\n- Grace reviews every schema change.\n\n## Decisions\n- The billing service uses PostgreSQL 16. (since 2026-11-28; was PostgreSQL 15)\n\n## Preferences\n- Deploys happen on Tuesdays.\n";

const STANDUP: &str = "# Standup 2026-11-02\n\nAda opened the sprint.\nThe billing migration is tracked as ticket ZX-4471.\nDeploy is planned for Friday.\nThe billing dashboard moved to Grafana.\n";

/// A note whose text is markup: it must be shown, never parsed.
const HOSTILE: &str = "# Quokka notes\n\nThe quokka colony <img src=x onerror=\"window.__pwned=1\"> lives on Rottnest.\n<script>window.__pwned=2</script>\n";

/// Index `ws` (and register `garden`) keyword-only, as `claw memory add` and
/// `claw memory index` would.
fn index(ws: &Path, garden: &Path) {
    let cfg = claw_testkit::cli_memory_config(ws, claw_memory::config::EmbedProvider::None);
    claw_memory_api::private::create_dir_all(&cfg.state_dir()).unwrap();
    let memory = Memory::open(cfg).unwrap();
    memory.add_source(garden, Some("garden"), false).unwrap();
    let lock = memory.writer_lock("test", Duration::from_secs(10)).unwrap();
    let report = memory
        .index(&IndexOptions::default(), None, &lock, &|_| {})
        .unwrap();
    assert!(
        report.issues.iter().all(|i| !i.skipped),
        "{:?}",
        report.issues
    );
}

/// Standard base64 (what `Page.captureScreenshot` returns), decoded.
fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').map(val).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for q in bytes.chunks(4) {
        let n = q
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, v)| n | (u32::from(*v) << (18 - 6 * i)));
        out.push((n >> 16) as u8);
        if q.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if q.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}

/// Save the page as `name` under `CLAW_SCREENSHOTS_DIR`, when it is set.
fn screenshot(cdp: &mut Cdp, name: &str) {
    let Some(dir) = std::env::var_os("CLAW_SCREENSHOTS_DIR").filter(|d| !d.is_empty()) else {
        return;
    };
    let shot = cdp.call("Page.captureScreenshot", json!({"format": "png"}));
    let png = base64(shot["data"].as_str().unwrap());
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let path = Path::new(&dir).join(name);
    std::fs::write(&path, png).unwrap();
    eprintln!("saved {}", path.display());
}

/// Clicks Search and waits for `what`, the page's `n`th search.
fn search(cdp: &mut Cdp, what: &str, n: u32) {
    cdp.click("#search");
    cdp.wait_for(
        what,
        &format!("document.body.dataset.searched === '{n}'"),
        30,
    );
}

/// Opens the first hit in the reader.
fn open_first_hit(cdp: &mut Cdp) {
    cdp.click("#results .hit-open");
    cdp.wait_for(
        "the reader",
        "!document.getElementById('reader').hidden",
        10,
    );
}

/// Field `key` of every item of a listing's `data`.
fn data_strs<'a>(listing: &'a Value, key: &str) -> Vec<&'a str> {
    listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item[key].as_str().unwrap())
        .collect()
}

fn get(gw: &Gateway, path: &str) -> (u16, Value) {
    let r = gw.client().request("GET", path, None).unwrap();
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

#[test]
fn memory_endpoints_are_read_only_json_behind_the_token() {
    let dir =
        claw_testkit::workspace(&[("MEMORY.md", MEMORY_MD), ("memory/2026-11-02.md", STANDUP)]);
    let garden =
        claw_testkit::workspace(&[("tomatoes.md", "# Tomatoes\n\nWater every morning.\n")]);
    index(dir.path(), garden.path());
    let gw = Gateway::start(dir.path(), None);

    for path in [
        "/v1/memory/status",
        "/v1/memory/sources",
        "/v1/memory/files?source=memory",
    ] {
        let r = gw.client_with("wrong").request("GET", path, None).unwrap();
        assert_eq!(r.status, 401, "{path} without the token");
    }
    let (code, status) = get(&gw, "/v1/memory/status");
    assert_eq!(code, 200, "{status}");
    assert_eq!(status["backend"], "sqlite");
    assert_eq!(status["files"], json!(3), "{status}");
    assert!(status["chunks"].as_i64().unwrap() >= 3, "{status}");
    assert_eq!(status["model"], "");
    let (code, sources) = get(&gw, "/v1/memory/sources");
    assert_eq!(code, 200);
    let names: Vec<&str> = data_strs(&sources, "name");
    assert!(
        names.contains(&"memory") && names.contains(&"garden"),
        "{sources}"
    );

    let (code, files) = get(&gw, "/v1/memory/files?source=memory");
    assert_eq!(code, 200, "{files}");
    let paths: Vec<&str> = data_strs(&files, "path");
    assert_eq!(paths, ["MEMORY.md", "memory/2026-11-02.md"], "{files}");
    assert_eq!(files["data"][0]["size"], json!(MEMORY_MD.len()));
    assert!(files["root"].as_str().is_some(), "{files}");
    let (_, garden_files) = get(&gw, "/v1/memory/files?source=garden");
    assert_eq!(garden_files["data"][0]["path"], "tomatoes.md");

    let (code, unknown) = get(&gw, "/v1/memory/files?source=nope");
    assert_eq!(code, 400, "{unknown}");
    assert_eq!(unknown["error"]["kind"], "unknown_source");
    let (code, _) = get(&gw, "/v1/memory/files");
    assert_eq!(code, 400, "no source named");

    // The page and its scripts: public (no data in them), under WebChat's policy.
    for path in ["/memory", "/memory.js", "/common.js"] {
        let r = gw.client_with("").request("GET", path, None).unwrap();
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(
            r.header("content-security-policy"),
            Some(claw_gateway::http::WEBCHAT_CSP),
            "{path}"
        );
    }
}

#[test]
fn memory_page_in_headless_chromium_searches_opens_browses_and_shows_status() {
    let Some(bin) = chromium() else { return };
    let dir = claw_testkit::workspace(&[
        ("MEMORY.md", MEMORY_MD),
        ("memory/2026-11-02.md", STANDUP),
        (
            "memory/2026-11-20.md",
            "# Retro\n\nThe billing cutover went fine.\nNext: the invoices service.\n",
        ),
        ("memory/quokka.md", HOSTILE),
    ]);
    let long: String = (1..=600)
        .map(|i| format!("Row {i} of the seed log.\n"))
        .collect();
    let garden = claw_testkit::workspace(&[
        (
            "tomatoes.md",
            "# Tomatoes\n\nWater every morning.\nThe billing of seeds is yearly.\n",
        ),
        ("seedlog.md", &long),
    ]);
    index(dir.path(), garden.path());
    let gw = Gateway::start(dir.path(), None);
    let base = gw.client().info.base_url();

    let (_browser, mut cdp) = open_browser(&bin, &format!("{base}/memory"));

    // No token yet: the page asks for it and lists nothing.
    assert_eq!(
        cdp.eval("document.querySelectorAll('#source option').length"),
        json!(1)
    );
    cdp.type_into("#token", &gw.token);
    cdp.click("#save-token");
    cdp.wait_for(
        "the sources to load",
        "document.querySelectorAll('#source option').length === 4",
        20,
    );
    assert_eq!(
        cdp.eval("localStorage.getItem('claw.token')"),
        json!(gw.token)
    );

    // `/` focuses the search box; typing and Enter searches (explain is on).
    cdp.eval("document.activeElement.blur()");
    for kind in ["keyDown", "keyUp"] {
        let mut ev =
            json!({"type": kind, "key": "/", "code": "Slash", "windowsVirtualKeyCode": 191});
        if kind == "keyDown" {
            ev["text"] = json!("/");
        }
        cdp.call("Input.dispatchKeyEvent", ev);
    }
    assert_eq!(cdp.eval("document.activeElement.id"), json!("query"));
    cdp.call("Input.insertText", json!({"text": "billing"}));
    cdp.press_enter();
    cdp.wait_for("the hits", "document.body.dataset.searched === '1'", 30);
    let hits = cdp.eval(
        "[...document.querySelectorAll('#results .hit')].map((h) => ({ \
           cite: h.querySelector('.hit-cite').textContent, \
           source: h.querySelector('.hit-source').textContent, \
           date: (h.querySelector('.hit-date') || {}).textContent, \
           explain: [...h.querySelectorAll('.explain dt')].map((d) => d.textContent) }))",
    );
    let standup = hits
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["cite"] == "memory/2026-11-02.md#L1-L6")
        .unwrap_or_else(|| panic!("the standup is a hit: {hits}"));
    assert_eq!(standup["source"], "memory");
    assert_eq!(standup["date"], "2026-11-02", "{hits}");
    for stage in ["keyword", "vector", "blended", "decay", "score"] {
        assert!(
            standup["explain"]
                .as_array()
                .unwrap()
                .contains(&json!(stage)),
            "{hits}"
        );
    }
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .any(|h| h["source"] == "garden"),
        "all sources searched: {hits}"
    );
    // The first hit opened beside the list, for the screenshot.
    open_first_hit(&mut cdp);
    screenshot(&mut cdp, "memory-search.png");

    // Filters: the garden source only, keyword mode.
    cdp.eval("document.getElementById('source').value = 'garden'; document.getElementById('mode').value = 'fts'");
    search(&mut cdp, "the filtered hits", 2);
    let sources = cdp
        .eval("[...document.querySelectorAll('#results .hit-source')].map((s) => s.textContent)");
    assert_eq!(sources, json!(["garden"]), "source filter");
    assert!(
        cdp.eval("document.getElementById('search-info').textContent")
            .as_str()
            .unwrap()
            .contains("mode fts"),
    );

    // Open a hit: the note at its cited lines, highlighted, with context around.
    cdp.click("#reader-close");
    assert_eq!(
        cdp.eval("document.getElementById('reader').hidden"),
        json!(true)
    );
    cdp.eval("document.getElementById('source').value = 'all'; document.getElementById('mode').value = 'hybrid'");
    cdp.eval("document.getElementById('query').value = 'ZX-4471'");
    search(&mut cdp, "the ticket hit", 3);
    open_first_hit(&mut cdp);
    let cited = cdp.eval(
        "[...document.querySelectorAll('#reader-text .line.cited')].map((l) => l.dataset.n + ':' + l.lastChild.textContent)",
    );
    let cited: Vec<String> = serde_json::from_value(cited).unwrap();
    assert_eq!(cited.len(), 6, "{cited:?}");
    assert_eq!(
        cited[3],
        "4:The billing migration is tracked as ticket ZX-4471.\n"
    );
    assert!(
        cdp.eval("document.getElementById('reader-title').textContent")
            .as_str()
            .unwrap()
            .ends_with("memory/2026-11-02.md")
    );
    // Esc closes it.
    for kind in ["keyDown", "keyUp"] {
        cdp.call(
            "Input.dispatchKeyEvent",
            json!({"type": kind, "key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27}),
        );
    }
    assert_eq!(
        cdp.eval("document.getElementById('reader').hidden"),
        json!(true)
    );

    // The hostile note: found, opened, shown as its text; nothing ran, no element made.
    cdp.eval("document.getElementById('query').value = 'quokka colony'");
    search(&mut cdp, "the quokka hit", 4);
    open_first_hit(&mut cdp);
    std::thread::sleep(Duration::from_millis(300));
    let shown = cdp.eval("document.getElementById('reader-text').textContent");
    assert!(
        shown
            .as_str()
            .unwrap()
            .contains("<img src=x onerror=\"window.__pwned=1\">"),
        "the payload is shown as text: {shown}"
    );
    let injected = cdp.eval(
        "({ elements: document.querySelectorAll('#mem img, #mem script:not([src])').length, \
            pwned: window.__pwned === undefined ? null : String(window.__pwned), \
            snippet: [...document.querySelectorAll('.hit-snippet')].some((s) => s.textContent.includes('<img')) })",
    );
    assert_eq!(injected["elements"], json!(0), "{injected}");
    assert_eq!(injected["pwned"], Value::Null, "{injected}");
    assert_eq!(
        injected["snippet"],
        json!(true),
        "the snippet is text too: {injected}"
    );
    // Positive control: the same text parsed as HTML does make an element.
    assert_eq!(
        cdp.eval(
            "(() => { const t = document.createElement('template'); \
               t.innerHTML = document.getElementById('reader-text').textContent; \
               return t.content.querySelectorAll('img[onerror]').length; })()"
        ),
        json!(1)
    );

    // Browse: the sources, a source's files, one opened from the top.
    cdp.click("#tab-browse");
    cdp.wait_for(
        "the source buttons",
        "document.querySelectorAll('#source-list button').length === 3",
        10,
    );
    cdp.click("#source-list button[data-source='garden']");
    cdp.wait_for(
        "the garden files",
        "document.querySelectorAll('#file-list button').length === 2",
        10,
    );
    // A long note opens at its top; "Next lines" goes on where it stopped.
    cdp.click("#file-list button[data-path='seedlog.md']");
    cdp.wait_for(
        "the seed log",
        "document.getElementById('reader-title').textContent === 'garden · seedlog.md' \
         && !document.getElementById('reader-more').hidden",
        10,
    );
    let last =
        cdp.eval("Number(document.querySelector('#reader-text .line:last-child').dataset.n)");
    let last = last.as_u64().unwrap();
    assert!(last > 1 && last < 600, "a window of the note: {last}");
    cdp.click("#reader-more");
    let next = format!(
        "document.querySelector('#reader-text .line').dataset.n === '{}'",
        last + 1
    );
    cdp.wait_for("the next lines", &next, 10);
    assert!(
        cdp.eval("document.querySelector('#reader-text .line').textContent")
            .as_str()
            .unwrap()
            .contains(&format!("Row {} of the seed log.", last + 1))
    );
    cdp.click("#file-list button[data-path='tomatoes.md']");
    cdp.wait_for(
        "the note",
        "document.getElementById('reader-title').textContent === 'garden · tomatoes.md'",
        10,
    );
    assert!(
        cdp.eval("document.getElementById('reader-text').textContent")
            .as_str()
            .unwrap()
            .contains("Water every morning.")
    );
    cdp.click("#source-list button[data-source='memory']");
    cdp.wait_for(
        "the memory files",
        "document.querySelectorAll('#file-list button').length === 4",
        10,
    );

    // Status: the index, the sources, MEMORY.md's sections.
    cdp.click("#tab-status");
    cdp.wait_for(
        "the status",
        "document.body.dataset.status === 'loaded'",
        20,
    );
    let status = cdp.eval(
        "Object.fromEntries([...document.querySelectorAll('#status-list dd')].map((d) => [d.dataset.key, d.textContent]))",
    );
    assert_eq!(status["files"], "6", "{status}");
    assert_eq!(status["vectors"], "0");
    assert_eq!(status["model"], "none (keyword-only)");
    assert_eq!(status["changed on disk"], "0 new, 0 modified, 0 deleted");
    assert!(
        status["chunks"].as_str().unwrap().parse::<u32>().unwrap() >= 5,
        "{status}"
    );
    assert!(
        status["watcher"].as_str().unwrap().starts_with("running"),
        "{status}"
    );
    assert!(
        status["last indexed"].as_str().unwrap().ends_with("UTC"),
        "{status}"
    );
    assert_eq!(
        cdp.eval("document.querySelectorAll('#sources-table tbody tr').length"),
        json!(3)
    );
    let consolidation = cdp.eval("document.getElementById('consolidation').textContent");
    let c = consolidation.as_str().unwrap();
    assert!(
        c.contains("People: 2 facts") && c.contains("Decisions: 1 fact"),
        "{c}"
    );
    assert!(
        c.contains("2026-11-28 · The billing service uses PostgreSQL 16."),
        "{c}"
    );
    screenshot(&mut cdp, "memory-status.png");

    // A phone-sized viewport: one column, nothing wider than the screen.
    cdp.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": true}),
    );
    std::thread::sleep(Duration::from_millis(200));
    let wide = cdp.eval(
        "[document.documentElement.scrollWidth, ...[...document.querySelectorAll('body *')] \
           .filter((e) => e.getBoundingClientRect().right > 391) \
           .map((e) => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))]",
    );
    assert_eq!(wide[0], json!(390), "the page fits a phone's width: {wide}");

    // WebChat links here, and this page links back.
    assert_eq!(
        cdp.eval("document.getElementById('to-chat').getAttribute('href')"),
        json!("/")
    );
    let chat =
        cdp.eval("fetch('/').then((r) => r.text()).then((t) => t.includes('href=\"/memory\"'))");
    assert_eq!(chat, json!(true));

    // The page's policy refuses an inline handler (the second line of defence).
    let csp = cdp.eval("fetch('/memory').then((r) => r.headers.get('content-security-policy'))");
    assert_eq!(csp, json!(claw_gateway::http::WEBCHAT_CSP));
    assert!(
        cdp.console.iter().all(|c| !c.starts_with("exception")),
        "{:?}",
        cdp.console
    );
}

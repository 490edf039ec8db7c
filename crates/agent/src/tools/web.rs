//! Web tools: `web_fetch` (http/https only, size and time limits, HTML turned
//! into readable text with a real HTML parser, JSON and plain text passed
//! through) and `web_search` (Brave Search API, offered only with a key).
//!
//! Invariant: only `http` and `https` URLs are fetched; a download never holds
//! more than `ToolContext::fetch_max_bytes` of body in memory; `web_fetch`
//! connects only to addresses the network guard (`netguard`) checked, for the
//! URL and for every redirect hop (followed here, never by the HTTP client).

use claw_base::http::{HttpOptions, Redirects};
use std::time::Duration;

use scraper::{ElementRef, Html, Node, Selector};
use serde::{Deserialize, Serialize};

use super::netguard::{self, GuardError, Pins};
use super::{ToolContext, ToolError, ToolOutput, ToolResult};

/// Characters of page text returned when the model does not say.
pub const DEFAULT_FETCH_CHARS: usize = 20_000;
/// Most characters of page text one `web_fetch` returns.
pub const MAX_FETCH_CHARS: usize = 100_000;
/// Results of one `web_search` when the model does not say, and the most allowed.
pub const DEFAULT_SEARCH_COUNT: u32 = 5;
pub const MAX_SEARCH_COUNT: u32 = 20;

/// Arguments of `web_fetch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebFetchArgs {
    pub url: String,
    #[serde(default)]
    pub max_chars: Option<usize>,
}

/// Arguments of `web_search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearchArgs {
    pub query: String,
    #[serde(default)]
    pub count: Option<u32>,
}

/// One web search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub title: String,
    pub url: String,
    pub description: String,
}

/// The HTTP client of `web_search` (its endpoint comes from the configuration,
/// not from the model; `web_fetch` builds a guarded client per call).
pub(super) fn build_client(timeout: Duration) -> reqwest::Client {
    claw_base::http::builder(&HttpOptions {
        connect_timeout: timeout,
        timeout: Some(timeout),
        redirects: Redirects::Limited(5),
        system_proxy: true,
    })
    .build()
    .unwrap_or_else(|_| reqwest::Client::new())
}

/// Parses and checks a URL: http and https only.
pub fn check_url(raw: &str) -> Result<reqwest::Url, ToolError> {
    let url = reqwest::Url::parse(raw.trim()).map_err(|e| ToolError::UrlRefused {
        url: raw.to_string(),
        reason: format!("not a valid URL ({e})"),
    })?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(ToolError::UrlRefused {
            url: raw.to_string(),
            reason: format!("scheme `{other}` is not allowed; only http and https"),
        }),
    }
}

fn fetch_error(url: &str, e: reqwest::Error) -> ToolError {
    let message = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        format!("could not connect ({e})")
    } else {
        e.to_string()
    };
    ToolError::Fetch {
        url: url.to_string(),
        message,
    }
}

/// Redirects `web_fetch` follows (each hop is checked by the network guard).
pub const MAX_REDIRECTS: usize = 5;

/// Why one hop of a fetch was stopped by the guard, as a tool error naming the
/// URL the model asked for.
fn guard_error(requested: &str, hop: usize, hop_url: &reqwest::Url, e: GuardError) -> ToolError {
    let via = if hop == 0 {
        String::new()
    } else {
        format!("it redirects (hop {hop}) to {hop_url}, and ")
    };
    match e {
        GuardError::Refused { .. } => ToolError::UrlRefused {
            url: requested.to_string(),
            reason: format!("{via}{e}"),
        },
        other => ToolError::Fetch {
            url: requested.to_string(),
            message: format!("{via}{other}"),
        },
    }
}

/// `web_fetch`: every hop (the URL, then each redirect, at most
/// [`MAX_REDIRECTS`]) is resolved and checked by [`netguard::check_target`]
/// under `ctx.net`, and the connection goes only to the checked addresses.
pub async fn fetch(ctx: &ToolContext, args: &WebFetchArgs) -> ToolResult {
    let url = check_url(&args.url)?;
    let max_chars = args
        .max_chars
        .unwrap_or(DEFAULT_FETCH_CHARS)
        .clamp(100, MAX_FETCH_CHARS);
    let pins = Pins::default();
    let client = netguard::guarded_client(ctx.fetch_timeout, pins.clone()).map_err(|e| {
        ToolError::Fetch {
            url: args.url.clone(),
            message: e.to_string(),
        }
    })?;
    let work = async {
        let mut current = url;
        let mut hop = 0;
        let mut resp = loop {
            let target = netguard::check_target(&current, &ctx.net)
                .await
                .map_err(|e| guard_error(&args.url, hop, &current, e))?;
            pins.pin(&target);
            let resp = client
                .get(current.clone())
                .header(
                    reqwest::header::ACCEPT,
                    "text/html, application/xhtml+xml, application/json, text/plain;q=0.9, */*;q=0.5",
                )
                .send()
                .await
                .map_err(|e| fetch_error(&args.url, e))?;
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok());
            let next = match location {
                Some(loc) if matches!(resp.status().as_u16(), 301 | 302 | 303 | 307 | 308) => loc,
                _ => break resp,
            };
            if hop == MAX_REDIRECTS {
                return Err(ToolError::Fetch {
                    url: args.url.clone(),
                    message: format!("stopped after {MAX_REDIRECTS} redirects"),
                });
            }
            let next = current.join(next).map_err(|e| ToolError::UrlRefused {
                url: args.url.clone(),
                reason: format!("it redirects to an invalid URL `{next}` ({e})"),
            })?;
            hop += 1;
            check_url(next.as_str()).map_err(|e| match e {
                ToolError::UrlRefused { reason, .. } => ToolError::UrlRefused {
                    url: args.url.clone(),
                    reason: format!("it redirects (hop {hop}) to {next}, and {reason}"),
                },
                other => other,
            })?;
            current = next;
        };
        let status = resp.status();
        let final_url = current.to_string();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut body = Vec::new();
        let mut cut = false;
        while let Some(chunk) = resp.chunk().await.map_err(|e| fetch_error(&args.url, e))? {
            let room = ctx.fetch_max_bytes.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok::<_, ToolError>((status, final_url, content_type, body, cut))
    };
    let (status, final_url, content_type, body, cut) =
        tokio::time::timeout(ctx.fetch_timeout, work)
            .await
            .map_err(|_| ToolError::Fetch {
                url: args.url.clone(),
                message: format!("timed out after {} s", ctx.fetch_timeout.as_secs_f64()),
            })??;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        let snippet: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        return Err(ToolError::HttpStatus {
            url: args.url.clone(),
            status: status.as_u16(),
            body: snippet.chars().take(300).collect(),
        });
    }
    let (title, text) = page_text(&args.url, &content_type, &body)?;
    let (text, text_cut) = cut_chars(&text, max_chars);
    Ok(ToolOutput::WebPage {
        url: args.url.clone(),
        final_url,
        status: status.as_u16(),
        content_type,
        title,
        text,
        truncated: cut || text_cut,
    })
}

/// Turns a body into (title, text) by content type. Pure.
pub fn page_text(
    url: &str,
    content_type: &str,
    body: &[u8],
) -> Result<(Option<String>, String), ToolError> {
    let ct = content_type.to_ascii_lowercase();
    let text = String::from_utf8_lossy(body);
    let sniff_html = || {
        let head: String = text
            .chars()
            .take(512)
            .collect::<String>()
            .to_ascii_lowercase();
        head.contains("<!doctype html") || head.contains("<html")
    };
    if ct.contains("html") || (ct.is_empty() || ct.starts_with("text/plain")) && sniff_html() {
        let (title, text) = html_to_text(&text);
        return Ok((title, text));
    }
    if ct.contains("json") {
        let pretty = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| text.into_owned());
        return Ok((None, pretty));
    }
    let textual = ct.starts_with("text/")
        || ct.contains("xml")
        || ct.contains("javascript")
        || ct.contains("yaml")
        || (ct.is_empty() && !body.iter().take(8192).any(|b| *b == 0));
    if textual {
        return Ok((None, text.into_owned()));
    }
    Err(ToolError::UnsupportedContent {
        url: url.to_string(),
        content_type: content_type.to_string(),
    })
}

fn cut_chars(text: &str, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        Some((i, _)) => (text[..i].to_string(), true),
        None => (text.to_string(), false),
    }
}

/// Elements whose content is not page text.
const SKIPPED: &[&str] = &[
    "script", "style", "nav", "noscript", "template", "svg", "head", "iframe", "object", "canvas",
];
/// Elements that start a new block of text.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "aside",
    "ul",
    "ol",
    "table",
    "tr",
    "blockquote",
    "figure",
    "figcaption",
    "dl",
    "dt",
    "dd",
    "form",
    "address",
    "details",
    "summary",
    "body",
    "html",
    "hr",
    "fieldset",
    "caption",
];

/// Accumulates readable text: whitespace collapsed within a line, blank lines between blocks.
#[derive(Default)]
struct TextBuilder {
    lines: Vec<String>,
    cur: String,
    space: bool,
}

impl TextBuilder {
    fn inline(&mut self, text: &str) {
        if text.starts_with(char::is_whitespace) {
            self.space = true;
        }
        for (i, word) in text.split_whitespace().enumerate() {
            if (i > 0 || self.space) && !self.cur.is_empty() && !self.cur.ends_with(' ') {
                self.cur.push(' ');
            }
            self.cur.push_str(word);
            self.space = false;
        }
        if text.ends_with(char::is_whitespace) {
            self.space = true;
        }
    }

    fn raw(&mut self, text: &str) {
        self.cur.push_str(text);
        self.space = false;
    }

    fn line_break(&mut self) {
        let line = self.cur.trim_end().to_string();
        self.cur.clear();
        self.space = false;
        if !line.trim().is_empty() {
            self.lines.push(line);
        }
    }

    fn block_break(&mut self) {
        self.line_break();
        if self.lines.last().is_some_and(|l| !l.is_empty()) {
            self.lines.push(String::new());
        }
    }

    fn finish(mut self) -> String {
        self.line_break();
        self.lines.join("\n").trim().to_string()
    }
}

fn walk(el: ElementRef<'_>, out: &mut TextBuilder) {
    let e = el.value();
    let name = e.name();
    if SKIPPED.contains(&name) {
        return;
    }
    match name {
        "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
            let level = name[1..].parse::<usize>().unwrap_or(1);
            out.block_break();
            out.raw(&format!("{} ", "#".repeat(level)));
            walk_children(el, out);
            out.block_break();
        }
        "li" => {
            out.line_break();
            out.raw("- ");
            walk_children(el, out);
            out.line_break();
        }
        "br" => out.line_break(),
        "pre" => {
            out.block_break();
            let text: String = el.text().collect();
            for line in text.trim_matches('\n').lines() {
                out.raw(line);
                out.line_break();
            }
            out.block_break();
        }
        "td" | "th" => {
            out.inline(" ");
            walk_children(el, out);
            out.inline(" ");
        }
        "img" => {
            if let Some(alt) = e.attr("alt").filter(|a| !a.trim().is_empty()) {
                out.inline(&format!(" [{}] ", alt.trim()));
            }
        }
        n if BLOCKS.contains(&n) => {
            out.block_break();
            walk_children(el, out);
            out.block_break();
        }
        _ => walk_children(el, out),
    }
}

fn walk_children(el: ElementRef<'_>, out: &mut TextBuilder) {
    for child in el.children() {
        match child.value() {
            Node::Text(t) => out.inline(&t[..]),
            Node::Element(_) => {
                if let Some(child_el) = ElementRef::wrap(child) {
                    walk(child_el, out);
                }
            }
            _ => {}
        }
    }
}

/// Converts an HTML document to (title, readable text). Pure.
pub fn html_to_text(html: &str) -> (Option<String>, String) {
    let doc = Html::parse_document(html);
    let title = Selector::parse("title").ok().and_then(|sel| {
        doc.select(&sel)
            .next()
            .map(|t| t.text().collect::<Vec<_>>().join(" "))
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|t| !t.is_empty())
    });
    let mut out = TextBuilder::default();
    walk(doc.root_element(), &mut out);
    (title, out.finish())
}

/// Text of an HTML fragment (Brave marks matches with `<strong>`).
fn strip_tags(fragment: &str) -> String {
    let frag = Html::parse_fragment(fragment);
    let text: String = frag.root_element().text().collect();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Deserialize)]
struct BraveResponse {
    #[serde(default)]
    web: Option<BraveWeb>,
}

#[derive(Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Deserialize)]
struct BraveResult {
    #[serde(default)]
    title: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    description: String,
}

/// `web_search` through the Brave Search API.
pub async fn search(
    client: &reqwest::Client,
    ctx: &ToolContext,
    args: &WebSearchArgs,
) -> ToolResult {
    let Some(key) = ctx.brave_api_key.as_deref() else {
        return Err(ToolError::invalid(
            "web_search",
            "web search is not configured (no Brave API key)",
        ));
    };
    if args.query.trim().is_empty() {
        return Err(ToolError::invalid(
            "web_search",
            "`query` must not be empty",
        ));
    }
    let count = args
        .count
        .unwrap_or(DEFAULT_SEARCH_COUNT)
        .clamp(1, MAX_SEARCH_COUNT);
    let endpoint = &ctx.brave_endpoint;
    let resp = client
        .get(endpoint)
        .query(&[("q", args.query.as_str()), ("count", &count.to_string())])
        .header(reqwest::header::ACCEPT, "application/json")
        .header("X-Subscription-Token", key)
        .send()
        .await
        .map_err(|e| fetch_error(endpoint, e))?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| fetch_error(endpoint, e))?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        return Err(ToolError::HttpStatus {
            url: endpoint.clone(),
            status: status.as_u16(),
            body: text.chars().take(300).collect(),
        });
    }
    let parsed: BraveResponse = serde_json::from_slice(&body).map_err(|e| ToolError::Fetch {
        url: endpoint.clone(),
        message: format!("unexpected search response: {e}"),
    })?;
    let results = parsed
        .web
        .map(|w| w.results)
        .unwrap_or_default()
        .into_iter()
        .take(count as usize)
        .map(|r| SearchHit {
            title: strip_tags(&r.title),
            url: r.url,
            description: strip_tags(&r.description),
        })
        .collect();
    Ok(ToolOutput::WebSearch {
        query: args.query.clone(),
        results,
    })
}

/// Renders the web tools' outputs for the model.
pub(super) fn render(output: &ToolOutput) -> String {
    match output {
        ToolOutput::WebPage {
            final_url,
            status,
            content_type,
            title,
            text,
            truncated,
            ..
        } => {
            let mut out = String::new();
            if let Some(t) = title {
                out.push_str(&format!("# {t}\n"));
            }
            out.push_str(&format!(
                "{final_url} (HTTP {status}, {content_type})\n\n{text}"
            ));
            if *truncated {
                out.push_str("\n[truncated: the page is longer than the size limit]");
            }
            out
        }
        ToolOutput::WebSearch { query, results } => {
            if results.is_empty() {
                return format!("No web results for \"{query}\".");
            }
            let mut out = format!("Web results for \"{query}\":");
            for (i, r) in results.iter().enumerate() {
                out.push_str(&format!("\n{}. {}\n   {}", i + 1, r.title, r.url));
                if !r.description.is_empty() {
                    out.push_str(&format!("\n   {}", r.description));
                }
            }
            out
        }
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https() {
        assert!(check_url("https://example.com/x").is_ok());
        assert!(check_url("http://127.0.0.1:8080/").is_ok());
        for bad in [
            "file:///etc/passwd",
            "ftp://example.com/",
            "javascript:alert(1)",
            "not a url",
            "data:text/plain,hi",
        ] {
            assert!(
                matches!(check_url(bad), Err(ToolError::UrlRefused { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn html_to_readable_text() {
        let html = r#"<!doctype html><html><head><title>  The   Page </title>
            <style>body { color: red }</style><script>var x = "hidden";</script></head>
            <body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
            <h1>Main   heading</h1>
            <p>First   paragraph with a <a href="https://x.test">link   text</a> inside.</p>
            <ul><li>one</li><li>two <b>bold</b></li></ul>
            <h2>Second</h2><p>Line<br>break</p>
            <pre>  indented
    code</pre>
            <noscript>enable js</noscript>
            </body></html>"#;
        let (title, text) = html_to_text(html);
        assert_eq!(title.as_deref(), Some("The Page"));
        assert_eq!(
            text,
            "# Main heading\n\nFirst paragraph with a link text inside.\n\n- one\n- two bold\n\n## Second\n\nLine\nbreak\n\n  indented\n    code"
        );
        for hidden in ["color: red", "hidden", "Home", "About", "enable js"] {
            assert!(!text.contains(hidden), "{hidden} leaked into {text}");
        }
    }

    #[test]
    fn content_types() {
        let (t, text) = page_text("u", "application/json", br#"{"a":[1,2]}"#).unwrap();
        assert!(t.is_none());
        assert!(text.contains("\"a\": ["), "{text}");
        let (_, text) = page_text("u", "text/plain; charset=utf-8", b"plain  text").unwrap();
        assert_eq!(text, "plain  text");
        let (t, _) = page_text("u", "", b"<html><title>T</title></html>").unwrap();
        assert_eq!(t.as_deref(), Some("T"));
        assert!(matches!(
            page_text("u", "image/png", b"\x89PNG\x00"),
            Err(ToolError::UnsupportedContent { .. })
        ));
    }

    #[test]
    fn cut_is_char_safe() {
        assert_eq!(cut_chars("héllo", 2), ("hé".to_string(), true));
        assert_eq!(cut_chars("hé", 2), ("hé".to_string(), false));
    }

    #[test]
    fn strip_tags_from_search_snippets() {
        assert_eq!(
            strip_tags("The <strong>Rust</strong>  book"),
            "The Rust book"
        );
    }
}

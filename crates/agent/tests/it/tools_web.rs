//! `web_fetch` and `web_search` against a real HTTP server on 127.0.0.1
//! (hand-rolled on a tokio TcpListener, started per test): HTML to text, JSON
//! and plain text, size and time limits, redirects, HTTP errors, refused
//! schemes, and the Brave API request shape (query, key header).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{fetch, fetch_call, page};
use claw_agent::message::ToolCall;
use claw_agent::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry, render_for_model};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
struct Seen {
    target: String,
    headers: Vec<(String, String)>,
}

struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

const PAGE: &str = r#"<!DOCTYPE html>
<html><head><title>Claw   Test Page</title>
<script>window.secret = "do not show";</script>
<style>.x { display: none }</style></head>
<body>
<nav><a href="/">Home</a><a href="/docs">Docs</a></nav>
<h1>Release notes</h1>
<p>Version 2 adds <a href="/memory">memory search</a> and    faster indexing.</p>
<ul><li>hybrid retrieval</li><li>temporal decay</li></ul>
</body></html>"#;

const BRAVE: &str = r#"{"type":"search","web":{"results":[
 {"title":"The <strong>Rust</strong> Book","url":"https://doc.rust-lang.org/book/","description":"Learn <strong>Rust</strong> step by step."},
 {"title":"Rust by Example","url":"https://doc.rust-lang.org/rust-by-example/","description":"Examples."}
]}}"#;

fn response(status: &str, content_type: &str, body: &[u8], extra: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

async fn start() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let mut lines = head.split("\r\n");
                let target = lines
                    .next()
                    .and_then(|l| l.split_whitespace().nth(1))
                    .unwrap_or("/")
                    .to_string();
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                log.lock().unwrap().push(Seen {
                    target: target.clone(),
                    headers: headers.clone(),
                });
                let path = target.split('?').next().unwrap_or("/");
                let reply = match path {
                    "/page" => response("200 OK", "text/html; charset=utf-8", PAGE.as_bytes(), ""),
                    "/data.json" => response(
                        "200 OK",
                        "application/json",
                        br#"{"name":"claw","tags":["a","b"]}"#,
                        "",
                    ),
                    "/notes.txt" => response("200 OK", "text/plain", b"line one\n  line two\n", ""),
                    "/redirect" => response("302 Found", "text/plain", b"", "Location: /page\r\n"),
                    "/missing" => response("404 Not Found", "text/plain", b"no such page", ""),
                    "/image.png" => {
                        response("200 OK", "image/png", b"\x89PNG\r\n\x1a\n\x00\x00", "")
                    }
                    "/big" => {
                        let body = "abcdefghij".repeat(300_000);
                        response("200 OK", "text/plain", body.as_bytes(), "")
                    }
                    "/slow" => {
                        // Never answers: the client's time limit must end the request.
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    }
                    "/res/v1/web/search" => {
                        let key = headers
                            .iter()
                            .find(|(k, _)| k == "x-subscription-token")
                            .map(|(_, v)| v.as_str());
                        if key == Some("test-key") {
                            response("200 OK", "application/json", BRAVE.as_bytes(), "")
                        } else {
                            response(
                                "401 Unauthorized",
                                "application/json",
                                br#"{"error":"bad key"}"#,
                                "",
                            )
                        }
                    }
                    _ => response("404 Not Found", "text/plain", b"", ""),
                };
                let _ = sock.write_all(&reply).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    Server { addr, seen }
}

fn registry() -> ToolRegistry {
    let mut ctx = ToolContext::new(std::env::temp_dir());
    ctx.fetch_timeout = Duration::from_millis(800);
    ctx.fetch_max_bytes = 64 * 1024;
    // The test server is on 127.0.0.1: opt in, as `web.allow_private: true` does.
    ctx.net.allow_private = true;
    ToolRegistry::new(ctx)
}

#[tokio::test]
async fn html_page_becomes_readable_text() {
    let server = start().await;
    let out = registry()
        .dispatch(&fetch_call(&server.url("/page")))
        .await
        .unwrap();
    let ToolOutput::WebPage {
        status,
        ref title,
        ref text,
        truncated,
        ..
    } = out
    else {
        panic!("{out:?}")
    };
    assert_eq!(status, 200);
    assert_eq!(title.as_deref(), Some("Claw Test Page"));
    assert!(!truncated);
    assert_eq!(
        text,
        "# Release notes\n\nVersion 2 adds memory search and faster indexing.\n\n- hybrid retrieval\n- temporal decay"
    );
    let rendered = out.render();
    assert!(rendered.starts_with("# Claw Test Page\n"), "{rendered}");
    assert!(!rendered.contains("do not show"));
    assert!(!rendered.contains("Docs"));
}

#[tokio::test]
async fn json_text_and_redirects() {
    let server = start().await;
    let reg = registry();
    let json = fetch(&reg, &server.url("/data.json"))
        .await
        .unwrap()
        .render();
    assert!(json.contains("\"name\": \"claw\""), "{json}");
    let text = fetch(&reg, &server.url("/notes.txt"))
        .await
        .unwrap()
        .render();
    assert!(text.ends_with("line one\n  line two\n"), "{text}");
    let (final_url, title) = page(fetch(&reg, &server.url("/redirect")).await.unwrap());
    assert_eq!(final_url, server.url("/page"));
    assert_eq!(title.as_deref(), Some("Claw Test Page"));
}

#[tokio::test]
async fn limits_and_errors() {
    let server = start().await;
    let reg = registry();

    // Size: the body is 3,000,000 bytes, the limit 64 KiB; max_chars cuts the text further.
    let out = reg
        .dispatch(&ToolCall {
            arguments: serde_json::json!({"url": server.url("/big"), "max_chars": 1000})
                .to_string(),
            ..fetch_call("")
        })
        .await
        .unwrap();
    let ToolOutput::WebPage {
        text, truncated, ..
    } = out
    else {
        panic!()
    };
    assert!(truncated);
    assert_eq!(text.chars().count(), 1000);

    // Time: the server never answers.
    let err = reg
        .dispatch(&fetch_call(&server.url("/slow")))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Fetch { .. }), "{err:?}");
    assert!(err.render().contains("timed out"), "{}", err.render());

    let err = reg
        .dispatch(&fetch_call(&server.url("/missing")))
        .await
        .unwrap_err();
    assert_eq!(
        err.render(),
        format!(
            "Error: {} answered HTTP 404: no such page",
            server.url("/missing")
        )
    );

    let err = reg
        .dispatch(&fetch_call(&server.url("/image.png")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::UnsupportedContent { .. }),
        "{err:?}"
    );

    for bad in ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://x"] {
        let (text, is_error) = render_for_model(&reg.dispatch(&fetch_call(bad)).await);
        assert!(is_error);
        assert!(text.contains("only http and https"), "{text}");
    }

    // A closed port: a connection error, not a panic.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let err = reg
        .dispatch(&fetch_call(&format!("http://127.0.0.1:{port}/")))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Fetch { .. }), "{err:?}");
}

#[tokio::test]
async fn brave_search_through_an_overridden_endpoint() {
    let server = start().await;
    let mut ctx = ToolContext::new(std::env::temp_dir());
    ctx.brave_api_key = Some("test-key".into());
    ctx.brave_endpoint = server.url("/res/v1/web/search");
    let reg = ToolRegistry::new(ctx.clone());
    assert!(reg.specs().iter().any(|s| s.name == "web_search"));
    let call = ToolCall {
        id: "s".into(),
        name: "web_search".into(),
        arguments: r#"{"query":"rust book & more","count":2}"#.into(),
    };
    let out = reg.dispatch(&call).await.unwrap();
    let ToolOutput::WebSearch { ref results, .. } = out else {
        panic!("{out:?}")
    };
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].title, "The Rust Book");
    assert_eq!(results[0].description, "Learn Rust step by step.");
    assert_eq!(
        out.render(),
        "Web results for \"rust book & more\":\n1. The Rust Book\n   https://doc.rust-lang.org/book/\n   Learn Rust step by step.\n2. Rust by Example\n   https://doc.rust-lang.org/rust-by-example/\n   Examples."
    );
    let seen = server.seen.lock().unwrap().clone();
    let req = seen.last().unwrap();
    assert!(
        req.target.contains("q=rust+book+%26+more")
            || req.target.contains("q=rust%20book%20%26%20more"),
        "{}",
        req.target
    );
    assert!(req.target.contains("count=2"), "{}", req.target);
    assert!(
        req.headers
            .iter()
            .any(|(k, v)| k == "x-subscription-token" && v == "test-key")
    );

    // A wrong key: the API's 401 is an error result.
    ctx.brave_api_key = Some("wrong".into());
    let err = ToolRegistry::new(ctx).dispatch(&call).await.unwrap_err();
    assert!(
        matches!(err, ToolError::HttpStatus { status: 401, .. }),
        "{err:?}"
    );
}

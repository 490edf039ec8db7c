//! The streamable-HTTP service the gateway will mount at `/mcp`
//! ([`claw_mcp::http_service`]), served here by hyper on 127.0.0.1 (a port
//! chosen at run time), and claw's MCP client configured with its `url`:
//! initialisation, tool listing with annotations, a search whose first call
//! syncs the notes in, concurrent calls over HTTP sessions sharing one engine,
//! and a read-only server that refuses `memory_append`.

use chrono::FixedOffset;
use claw_agent::tools::{DynamicTools, ToolError, ToolOutput};
use claw_mcp::{McpClients, McpConfig, MemoryServer, ServerOptions, ServerSpec, ServerState};
use claw_memory::config::{EmbedProvider, MemoryConfig};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use std::path::Path;

async fn serve(ws: &Path, read_only: bool) -> String {
    let server = MemoryServer::new(ServerOptions {
        mem: MemoryConfig::for_workspace(ws, EmbedProvider::None),
        read_only,
        jail: true,
        utc_offset: FixedOffset::east_opt(0).unwrap(),
        consolidation: None,
    });
    let service = claw_mcp::http_service(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let svc = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

async fn client(url: &str) -> McpClients {
    let mut config = McpConfig {
        startup_timeout_secs: Some(20),
        ..Default::default()
    };
    config.servers.insert(
        "claw".into(),
        ServerSpec {
            url: Some(url.into()),
            ..Default::default()
        },
    );
    McpClients::start(&config).await
}

fn text(out: ToolOutput) -> String {
    match out {
        ToolOutput::External { text, .. } => text,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claws_client_searches_claws_memory_over_streamable_http() {
    let dir = claw_testkit::workspace(&[(
        "memory/2026-11-02.md",
        "# 2026-11-02\n\nThe payment webhook kept retrying on HTTP 500.\n",
    )]);
    let ws = dir.path();
    let url = serve(ws, false).await;
    let clients = client(&url).await;
    let s = &clients.summaries()[0];
    assert_eq!(s.state, ServerState::Ready, "{s:?}");
    assert_eq!(s.transport, format!("http: {url}"));
    let names: Vec<(&str, bool)> = s
        .tools
        .iter()
        .map(|t| (t.name.as_str(), t.read_only))
        .collect();
    assert_eq!(
        names,
        [
            ("mcp__claw__memory_search", true),
            ("mcp__claw__memory_get", true),
            ("mcp__claw__memory_status", true),
            ("mcp__claw__memory_append", false)
        ]
    );
    let out = clients
        .call_tool(
            "mcp__claw__memory_search",
            json!({"query": "webhook retrying"}),
        )
        .await
        .unwrap();
    let t = text(out);
    assert!(t.contains("memory/2026-11-02.md#L1-L3"), "{t}");
    assert!(t.contains("synced 1 changed"), "{t}");
    let calls = (0..6).map(|_| {
        clients.call_tool(
            "mcp__claw__memory_get",
            json!({"path": "memory/2026-11-02.md", "from": 3, "lines": 1}),
        )
    });
    for r in futures_util::future::join_all(calls).await {
        assert!(text(r.unwrap()).contains("kept retrying"));
    }
    // A second HTTP session shares the engine (and its index).
    let other = client(&url).await;
    let out = other
        .call_tool("mcp__claw__memory_status", json!({}))
        .await
        .unwrap();
    assert!(text(out).contains("indexed: 1 files"));
    // Bad arguments come back as the server's refusal, not a crash.
    let e = clients
        .call_tool("mcp__claw__memory_search", json!({"query": ""}))
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::External { .. }), "{e:?}");
    assert!(e.to_string().contains("`query` must not be empty"), "{e}");
    assert_eq!(clients.summaries()[0].restarts, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_offers_and_runs_no_append() {
    let dir = tempfile::tempdir().unwrap();
    let url = serve(dir.path(), true).await;
    let clients = client(&url).await;
    assert!(clients.is_read_only("mcp__claw__memory_append").is_none());
    assert_eq!(clients.specs().len(), 3);
    assert!(!dir.path().join("memory").exists());
}

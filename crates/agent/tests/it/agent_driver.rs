//! The driver in-process with the real provider chain and the real tool registry
//! against the scripted server (real HTTP, real SSE): text deltas reach the UI as
//! they stream, cancel mid-stream ends the turn and keeps the driver usable with a
//! consistent session, confirmations gate side effects.

use claw_testkit::scripted_server;

use claw_agent::core::TurnEnd;
use claw_agent::driver::{Driver, Ui};
use claw_agent::provider::ProviderChain;
use claw_agent::session;
use claw_agent::tools::{ToolContext, ToolRegistry};
use scripted_server::{Reply, ScriptedServer, Step, openai};
use serde_json::json;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct RecordingUi {
    texts: Mutex<Vec<(Instant, String)>>,
    statuses: Mutex<Vec<String>>,
    answer: bool,
    /// Cancel this token when the first text delta arrives.
    cancel_on_text: Mutex<Option<CancellationToken>>,
}

impl Ui for RecordingUi {
    fn text(&self, delta: &str) {
        self.texts
            .lock()
            .unwrap()
            .push((Instant::now(), delta.to_string()));
        if let Some(t) = self.cancel_on_text.lock().unwrap().take() {
            t.cancel();
        }
    }
    fn end_answer(&self) {}
    fn status(&self, line: &str) {
        self.statuses.lock().unwrap().push(line.to_string());
    }
    fn confirm(&self, _question: &str) -> bool {
        self.answer
    }
}

async fn driver(
    ws: &Path,
    server: &ScriptedServer,
    ui: Arc<RecordingUi>,
    confirm: bool,
) -> Driver<ProviderChain, ToolRegistry> {
    let mut ctx = ToolContext::new(ws);
    ctx.confirm_side_effects = confirm;
    crate::common::open_driver(ws, "test:driver", server, ctx, ui).await
}

#[tokio::test]
async fn text_reaches_the_ui_while_the_stream_is_still_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut steps = vec![openai::chunk(
        json!({"role": "assistant", "content": "Hel"}),
        None,
    )];
    steps.push(Step::delay_ms(300));
    steps.push(openai::chunk(json!({"content": "lo"}), None));
    steps.push(Step::delay_ms(300));
    steps.extend(openai::text_steps(&[" world"]));
    let server = ScriptedServer::start([Reply::sse(steps)]);
    let ui = Arc::new(RecordingUi::default());
    let mut d = driver(dir.path(), &server, ui.clone(), false).await;
    let start = Instant::now();
    let out = d.run_turn("hi", &CancellationToken::new()).await.unwrap();
    let done = Instant::now();
    assert_eq!(out.end, TurnEnd::Answered("Hello world".into()));
    let texts = ui.texts.lock().unwrap().clone();
    let pieces: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(pieces, ["Hel", "lo", " world"]);
    // The first piece was shown long before the answer completed.
    assert!(
        done - texts[0].0 >= Duration::from_millis(500),
        "{:?}",
        done - start
    );
}

#[tokio::test]
async fn cancel_mid_stream_ends_the_turn_and_the_driver_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let mut steps = vec![openai::chunk(
        json!({"role": "assistant", "content": "partial"}),
        None,
    )];
    steps.push(Step::delay_ms(30_000));
    steps.extend(openai::text_steps(&["never shown"]));
    let server = ScriptedServer::start([Reply::sse(steps), openai::text(&["second turn"])]);
    let ui = Arc::new(RecordingUi::default());
    let mut d = driver(dir.path(), &server, ui.clone(), false).await;
    let cancel = CancellationToken::new();
    *ui.cancel_on_text.lock().unwrap() = Some(cancel.clone());
    let start = Instant::now();
    let out = d.run_turn("tell me a long story", &cancel).await.unwrap();
    assert_eq!(out.end, TurnEnd::Cancelled);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "cancel is prompt"
    );

    let out = d
        .run_turn("again", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.end, TurnEnd::Answered("second turn".into()));
    let text = std::fs::read_to_string(d.session_path()).unwrap();
    let loaded = session::parse(&text);
    let roles: Vec<_> = loaded
        .history()
        .messages
        .iter()
        .map(|m| (m.role, m.content.clone()))
        .collect();
    use claw_agent::message::Role;
    assert_eq!(
        roles,
        [
            (Role::User, "tell me a long story".to_string()),
            (Role::User, "again".to_string()),
            (Role::Assistant, "second turn".to_string()),
        ]
    );
}

#[tokio::test]
async fn cancel_while_a_tool_runs_answers_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([
        openai::tool_call("c1", "exec", &[r#"{"command": "sleep 30"}"#]),
        openai::text(&["after"]),
    ]);
    let ui = Arc::new(RecordingUi::default());
    let mut d = driver(dir.path(), &server, ui.clone(), false).await;
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        c2.cancel();
    });
    let start = Instant::now();
    let out = d.run_turn("run it", &cancel).await.unwrap();
    assert_eq!(out.end, TurnEnd::Cancelled);
    assert!(start.elapsed() < Duration::from_secs(10));
    let text = std::fs::read_to_string(d.session_path()).unwrap();
    let msgs = session::parse(&text).history().messages;
    let result = msgs
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("c1"))
        .expect("the call got a result");
    assert!(result.is_error && result.content.contains("cancelled"));
    // The next turn sends a valid history (call + result) and is answered.
    let out = d.run_turn("next", &CancellationToken::new()).await.unwrap();
    assert_eq!(out.end, TurnEnd::Answered("after".into()));
}

#[tokio::test]
async fn declined_confirmation_never_runs_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([
        openai::tool_call(
            "w1",
            "write_file",
            &[r#"{"path": "x.txt", "content": "no"}"#],
        ),
        openai::text(&["ok, I did not write it"]),
    ]);
    let ui = Arc::new(RecordingUi::default()); // answers "no"
    let mut d = driver(dir.path(), &server, ui.clone(), true).await;
    let out = d
        .run_turn("write x", &CancellationToken::new())
        .await
        .unwrap();
    assert!(out.end.is_success());
    assert!(!dir.path().join("x.txt").exists());
    let second = server.requests()[1].json.to_string();
    assert!(second.contains("declined"), "{second}");
}

#[tokio::test]
async fn read_only_calls_of_one_batch_all_run_and_answer_in_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "AAA").unwrap();
    std::fs::write(dir.path().join("b.txt"), "BBB").unwrap();
    let two_calls = Reply::sse(vec![
        openai::chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": "ra", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
                {"index": 1, "id": "rb", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"b.txt\"}"}}
            ]}),
            None,
        ),
        openai::chunk(json!({}), Some("tool_calls")),
        Step::done(),
    ]);
    let server = ScriptedServer::start([two_calls, openai::text(&["both read"])]);
    let ui = Arc::new(RecordingUi::default());
    let mut d = driver(dir.path(), &server, ui.clone(), false).await;
    let out = d
        .run_turn("read both", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.tool_calls, 2);
    assert!(out.end.is_success());
    let msgs = server.requests()[1].json["messages"].clone();
    let tools: Vec<(String, String)> = msgs
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0].0, "ra");
    assert!(
        tools[0].1.contains("AAA") && tools[1].1.contains("BBB"),
        "{tools:?}"
    );
    let statuses = ui.statuses.lock().unwrap().clone();
    assert!(
        statuses.iter().any(|s| s.contains("read_file: a.txt")),
        "{statuses:?}"
    );
}

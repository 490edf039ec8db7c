//! Confirmation of side effects through the real driver, provider chain and tool
//! registry against the scripted server (real HTTP/SSE) and a local web server:
//! "always" covers a tool (or a web host) for the rest of the session and only
//! that, "once" covers one call, "deny" and "no one to ask" reach the model as the
//! call's error and the tool never runs, a new session forgets the grants, and
//! read-only tools never ask.

use claw_testkit::route_server::{Route, RouteServer};
use claw_testkit::scripted_server::{ScriptedServer, openai};

use claw_agent::driver::{ConfirmRequest, Driver, Ui};
use claw_agent::provider::ProviderChain;
use claw_agent::tools::{Answer, Grant, ToolContext, ToolId, ToolRegistry};
use serde_json::json;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Answers confirmation requests from a script and records them.
#[derive(Default)]
struct ScriptedUi {
    answers: Mutex<VecDeque<Answer>>,
    asked: Mutex<Vec<ConfirmRequest>>,
}

impl ScriptedUi {
    fn with(answers: &[Answer]) -> Arc<ScriptedUi> {
        Arc::new(ScriptedUi {
            answers: Mutex::new(answers.iter().copied().collect()),
            asked: Mutex::default(),
        })
    }

    fn asked(&self) -> Vec<ConfirmRequest> {
        self.asked.lock().unwrap().clone()
    }
}

impl Ui for ScriptedUi {
    fn text(&self, _delta: &str) {}
    fn end_answer(&self) {}
    fn status(&self, _line: &str) {}
    fn confirm(&self, question: &str) -> bool {
        panic!("the driver asks through `ask`, not `confirm`: {question}");
    }
    fn ask(&self, request: &ConfirmRequest) -> Answer {
        self.asked.lock().unwrap().push(request.clone());
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("an answer was scripted for every question")
    }
}

async fn driver(
    ws: &Path,
    server: &ScriptedServer,
    ui: Arc<ScriptedUi>,
) -> Driver<ProviderChain, ToolRegistry> {
    let mut ctx = ToolContext::new(ws);
    ctx.jail = true;
    ctx.confirm_side_effects = true;
    // The local web server stands in for an internet host.
    ctx.net.allow_private = true;
    crate::common::open_driver(ws, "test:confirm", server, ctx, ui).await
}

#[tokio::test]
async fn always_once_deny_and_no_one_to_ask() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let web = RouteServer::start("127.0.0.1:0");
    web.route("/a", Route::Page("first page".into()));
    web.route("/b", Route::Page("second page".into()));
    let host = format!("127.0.0.1:{}", web.port());
    let write = openai::write_file_call;
    let fetch = |id: &str, url: String| {
        openai::tool_call(id, "web_fetch", &[&json!({ "url": url }).to_string()])
    };
    let server = ScriptedServer::start([
        write("w1", "a.txt"),
        write("w2", "b.txt"),
        openai::tool_call("r1", "read_file", &[r#"{"path": "a.txt"}"#]),
        fetch("f1", web.url("/a")),
        fetch("f2", web.url("/b")),
        openai::tool_call("x1", "exec", &[r#"{"command": "echo ran > ran.txt"}"#]),
        openai::text(&["done"]),
        // The second session.
        write("w3", "c.txt"),
        openai::text(&["could not write"]),
    ]);
    let ui = ScriptedUi::with(&[
        Answer::Always,      // w1: every write_file from now on
        Answer::Once,        // f1
        Answer::Once,        // f2: "once" did not allow the host
        Answer::Deny,        // x1
        Answer::Unavailable, // w3, after /new
    ]);
    let mut d = driver(ws, &server, ui.clone()).await;
    let out = d.run_turn("go", &CancellationToken::new()).await.unwrap();
    assert!(out.end.is_success(), "{:?}", out.end);

    let asked = ui.asked();
    let grants: Vec<Grant> = asked.iter().map(|r| r.grant.clone()).collect();
    assert_eq!(
        grants,
        [
            Grant::Tool(ToolId::WriteFile),
            Grant::Host(host.clone()),
            Grant::Host(host.clone()),
            Grant::Tool(ToolId::Exec),
        ],
        "w2 (covered by always) and r1 (read-only) were not asked about"
    );
    assert_eq!(asked[0].preview, "write_file: a.txt");
    assert_eq!(asked[3].preview, "exec: echo ran > ran.txt");
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "w1");
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "w2");
    assert!(server.tool_result(3, "r1").contains("w1"));
    assert!(server.tool_result(4, "f1").contains("first page"));
    assert!(server.tool_result(5, "f2").contains("second page"));
    assert_eq!(web.hits(), ["/a", "/b"]);
    assert!(!ws.join("ran.txt").exists(), "denied exec never ran");
    assert_eq!(
        server.tool_result(6, "x1"),
        "Error: the user declined to run `exec`"
    );

    // A new session forgets "always"; with no one to ask the write is refused.
    d.new_session().await.unwrap();
    let out = d
        .run_turn("write c", &CancellationToken::new())
        .await
        .unwrap();
    assert!(out.end.is_success());
    assert_eq!(ui.asked().len(), 5);
    assert_eq!(ui.asked()[4].grant, Grant::Tool(ToolId::WriteFile));
    assert!(!ws.join("c.txt").exists());
    let refusal = server.tool_result(8, "w3");
    assert!(
        refusal.starts_with("Error: `write_file` was not run") && refusal.contains("no terminal"),
        "{refusal}"
    );
}

/// Answers from a script on the runtime (no blocking thread), recording each
/// request; a UI that must never be asked.
struct ScriptedApprover {
    answers: Mutex<VecDeque<Answer>>,
    asked: Mutex<Vec<ConfirmRequest>>,
}

impl claw_agent::driver::Approver for ScriptedApprover {
    fn approve(&self, request: ConfirmRequest) -> claw_agent::driver::AnswerFuture {
        self.asked.lock().unwrap().push(request);
        let answer = self.answers.lock().unwrap().pop_front();
        Box::pin(async move {
            // Answered later, as an API client would.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            answer.unwrap_or(Answer::Unavailable)
        })
    }
}

/// With an approver, the driver asks it (not the UI) and honours its answers:
/// "always" covers later calls, "deny" refuses; each request says what it reaches.
#[tokio::test]
async fn an_approver_answers_instead_of_the_ui() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let write = openai::write_file_call;
    let server = ScriptedServer::start([
        write("w1", "a.txt"),
        write("w2", "b.txt"),
        openai::tool_call("x1", "exec", &[r#"{"command": "echo ran > ran.txt"}"#]),
        openai::text(&["done"]),
    ]);
    // A UI that is never asked: `ask` of an empty script panics.
    let ui = ScriptedUi::with(&[]);
    let approver = Arc::new(ScriptedApprover {
        answers: Mutex::new([Answer::Always, Answer::Deny].into_iter().collect()),
        asked: Mutex::default(),
    });
    let mut d = driver(ws, &server, ui.clone())
        .await
        .with_approver(approver.clone());
    let out = d.run_turn("go", &CancellationToken::new()).await.unwrap();
    assert!(out.end.is_success(), "{:?}", out.end);
    assert!(ui.asked().is_empty());
    let asked = approver.asked.lock().unwrap().clone();
    let seen: Vec<(&str, &str)> = asked
        .iter()
        .map(|r| (r.tool.as_str(), r.reach.as_str()))
        .collect();
    assert_eq!(seen, [("write_file", "workspace"), ("exec", "process")]);
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "w2");
    assert!(!ws.join("ran.txt").exists(), "denied exec never ran");
    assert_eq!(
        server.tool_result(3, "x1"),
        "Error: the user declined to run `exec`"
    );
}

//! Retries, backoff, `Retry-After`, cooldown and failover between profiles, the
//! attempt bound, timeouts and cancellation — against real scripted HTTP servers.
//! Backoff waits go through an injected sleeper that records the delays and returns
//! at once, so the tests are deterministic and fast.

use claw_testkit::scripted_server;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use claw_agent::message::{ChatRequest, ChatResponse, Message, StreamDelta};
use claw_agent::provider::{
    Api, AttemptError, Profile, ProviderChain, ProviderError, RetryPolicy, Sleeper,
};
use scripted_server::{Reply, ScriptedServer, Step, anthropic, openai};
use serde_json::json;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_util::sync::CancellationToken;

fn profile(name: &str, api: Api, url: &str) -> Profile {
    Profile {
        name: name.into(),
        api,
        base_url: url.into(),
        model: format!("model-{name}"),
        api_key: Some(format!("key-{name}")),
        context_window: 8192,
    }
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_secs(5),
        ..Default::default()
    }
}

/// A sleeper that records each requested delay and returns immediately.
fn recorder() -> (Sleeper, Arc<Mutex<Vec<Duration>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let s: Sleeper = Arc::new(move |d| {
        l.lock().unwrap().push(d);
        Box::pin(async {})
    });
    (s, log)
}

/// The chain of `profiles` under [`policy`], its sleeps recorded ([`recorder`]).
fn recorded_chain(profiles: Vec<Profile>) -> (ProviderChain, Arc<Mutex<Vec<Duration>>>) {
    let (sleeper, delays) = recorder();
    let c = ProviderChain::new(profiles, policy())
        .unwrap()
        .with_sleeper(sleeper);
    (c, delays)
}

fn request() -> ChatRequest {
    ChatRequest {
        system: "sys".into(),
        messages: vec![Message::user("hi", Utc::now())],
        tools: vec![],
        max_tokens: 64,
    }
}

fn drain(rx: &mut UnboundedReceiver<StreamDelta>) -> Vec<StreamDelta> {
    let mut v = Vec::new();
    while let Ok(d) = rx.try_recv() {
        v.push(d);
    }
    v
}

async fn run(c: &ProviderChain) -> (Result<ChatResponse, ProviderError>, Vec<StreamDelta>) {
    let (tx, mut rx) = unbounded_channel();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        c.complete(&request(), &tx, &CancellationToken::new()),
    )
    .await
    .expect("complete() did not finish within 30 s");
    (r, drain(&mut rx))
}

/// `c.complete` on a task of its own: the token that cancels it, its deltas and
/// the task.
fn spawn_complete(
    c: &Arc<ProviderChain>,
) -> (
    CancellationToken,
    UnboundedReceiver<StreamDelta>,
    tokio::task::JoinHandle<Result<ChatResponse, ProviderError>>,
) {
    let cancel = CancellationToken::new();
    let (tx, rx) = unbounded_channel();
    let task = {
        let (c, cancel) = (c.clone(), cancel.clone());
        tokio::spawn(async move { c.complete(&request(), &tx, &cancel).await })
    };
    (cancel, rx, task)
}

fn retries(d: &[StreamDelta]) -> Vec<(u32, String)> {
    d.iter()
        .filter_map(|d| match d {
            StreamDelta::Retry { attempt, reason } => Some((*attempt, reason.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn rate_limited_with_retry_after_seconds_then_success() {
    let server = ScriptedServer::start([
        openai::error(429, "Rate limit reached", None).header("retry-after", "2"),
        openai::text(&["ok"]),
    ]);
    let (c, delays) = recorded_chain(vec![profile("a", Api::OpenAi, &server.url())]);
    let (r, d) = run(&c).await;
    assert_eq!(r.unwrap().text, "ok");
    assert_eq!(
        *delays.lock().unwrap(),
        [Duration::from_secs(2)],
        "Retry-After honoured"
    );
    let rs = retries(&d);
    assert_eq!(rs.len(), 1, "{d:?}");
    assert_eq!(rs[0].0, 2);
    assert!(
        rs[0].1.contains("HTTP 429: Rate limit reached"),
        "{}",
        rs[0].1
    );
    assert!(rs[0].1.contains("retrying in 2s"), "{}", rs[0].1);
    // The notice comes before the retried answer's text.
    assert!(matches!(d.last(), Some(StreamDelta::Text(t)) if t == "ok"));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn retry_after_http_date_is_honoured() {
    let when = Utc::now() + chrono::Duration::seconds(4);
    let date = when.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
    let server = ScriptedServer::start([
        anthropic::error(429, "rate_limit_error", "slow down").header("retry-after", &date),
        anthropic::text(&["ok"]),
    ]);
    let (c, delays) = recorded_chain(vec![profile("a", Api::Anthropic, &server.url())]);
    assert_eq!(run(&c).await.0.unwrap().text, "ok");
    let d = delays.lock().unwrap().clone();
    assert_eq!(d.len(), 1);
    assert!(
        d[0] >= Duration::from_secs(2) && d[0] <= Duration::from_secs(4),
        "{d:?} for {date}"
    );
}

#[tokio::test]
async fn server_errors_twice_then_success_with_growing_backoff() {
    let server = ScriptedServer::start([
        Reply::json(500, json!({"error": {"message": "internal"}})),
        Reply::text(503, "upstream unavailable"),
        openai::text(&["third time"]),
    ]);
    let (c, delays) = recorded_chain(vec![profile("a", Api::OpenAi, &server.url())]);
    let (r, d) = run(&c).await;
    let r = r.unwrap();
    assert_eq!(r.text, "third time");
    assert_eq!(r.model, "model-a");
    let delays = delays.lock().unwrap().clone();
    assert_eq!(delays.len(), 2);
    // Equal jitter: retry n waits within [base*2^(n-1)/2, base*2^(n-1)].
    assert!(
        delays[0] >= Duration::from_millis(50) && delays[0] <= Duration::from_millis(100),
        "{delays:?}"
    );
    assert!(
        delays[1] >= Duration::from_millis(100) && delays[1] <= Duration::from_millis(200),
        "{delays:?}"
    );
    let rs = retries(&d);
    assert_eq!(rs.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 3]);
    assert!(rs[1].1.contains("HTTP 503: upstream unavailable"), "{rs:?}");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn unauthorized_profile_fails_over_and_cools_down() {
    let a = ScriptedServer::start([openai::error(401, "Incorrect API key provided", None)]);
    let b = ScriptedServer::start([anthropic::text(&["from b"]), anthropic::text(&["again b"])]);
    let (c, delays) = recorded_chain(vec![
        profile("a", Api::OpenAi, &a.url()),
        profile("b", Api::Anthropic, &b.url()),
    ]);
    let (r, d) = run(&c).await;
    let r = r.unwrap();
    assert_eq!(r.text, "from b");
    assert_eq!(r.model, "model-b");
    assert!(delays.lock().unwrap().is_empty(), "no backoff on 401");
    let rs = retries(&d);
    assert_eq!(rs.len(), 1);
    assert!(rs[0].1.contains("credentials refused, trying b"), "{rs:?}");
    assert_eq!(
        a.requests()[0].header("authorization"),
        Some("Bearer key-a")
    );
    assert_eq!(b.requests()[0].header("x-api-key"), Some("key-b"));

    // Profile a is cooling down: the next call goes straight to b.
    assert!(c.cooldowns()[0] > Duration::from_secs(30));
    let (r, _) = run(&c).await;
    assert_eq!(r.unwrap().text, "again b");
    assert_eq!(a.requests().len(), 1, "a not retried during its cooldown");
    assert_eq!(b.requests().len(), 2);
}

#[tokio::test]
async fn all_profiles_failing_reports_what_was_tried() {
    let a = ScriptedServer::start([
        Reply::text(500, "boom 1"),
        Reply::text(502, "boom 2"),
        Reply::text(500, "boom 3"),
    ]);
    let b = ScriptedServer::start([anthropic::error(
        403,
        "permission_error",
        "key lacks access",
    )]);
    let (c, delays) = recorded_chain(vec![
        profile("a", Api::OpenAi, &a.url()),
        profile("b", Api::Anthropic, &b.url()),
    ]);
    let (r, _) = run(&c).await;
    let err = r.unwrap_err();
    let ProviderError::AllFailed { attempts } = &err else {
        panic!("expected AllFailed, got {err:?}");
    };
    assert_eq!(attempts.len(), 4);
    assert_eq!(
        delays.lock().unwrap().len(),
        2,
        "two backoffs on a, none after"
    );
    let text = err.to_string();
    for want in [
        "all LLM providers failed after 4 attempt(s)",
        "a (openai model-a) attempt 1: HTTP 500: boom 1",
        "a (openai model-a) attempt 2: HTTP 502: boom 2",
        "a (openai model-a) attempt 3: HTTP 500: boom 3",
        "b (anthropic model-b) attempt 1: HTTP 403: key lacks access",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    // Both are now cooling down; a later call still tries (soonest first) and
    // reports the new failures rather than refusing outright.
    assert!(c.cooldowns().iter().all(|d| *d > Duration::ZERO));
}

#[tokio::test]
async fn total_attempts_are_bounded() {
    let a = ScriptedServer::start((0..10).map(|_| Reply::text(500, "down")));
    let b = ScriptedServer::start((0..10).map(|_| Reply::text(500, "down too")));
    let (sleeper, _) = recorder();
    let pol = RetryPolicy {
        max_attempts_per_profile: 3,
        max_total_attempts: 4,
        ..policy()
    };
    let c = ProviderChain::new(
        vec![
            profile("a", Api::OpenAi, &a.url()),
            profile("b", Api::OpenAi, &b.url()),
        ],
        pol,
    )
    .unwrap()
    .with_sleeper(sleeper);
    let err = run(&c).await.0.unwrap_err();
    assert_eq!(a.requests().len() + b.requests().len(), 4, "{err}");
    assert_eq!(a.requests().len(), 3);
    assert!(err.to_string().contains("after 4 attempt(s)"), "{err}");
}

#[tokio::test]
async fn overlong_retry_after_moves_to_next_profile_without_waiting() {
    let a =
        ScriptedServer::start([openai::error(429, "quota", None).header("retry-after", "3600")]);
    let b = ScriptedServer::start([openai::text(&["b answers"])]);
    let (c, delays) = recorded_chain(vec![
        profile("a", Api::OpenAi, &a.url()),
        profile("b", Api::OpenAi, &b.url()),
    ]);
    assert_eq!(run(&c).await.0.unwrap().text, "b answers");
    assert!(delays.lock().unwrap().is_empty());
    assert!(
        c.cooldowns()[0] > Duration::from_secs(3000),
        "cooldown = Retry-After"
    );
}

#[tokio::test]
async fn stalled_stream_times_out_and_is_retried() {
    let server = ScriptedServer::start([
        Reply::sse(vec![
            openai::chunk(json!({"content": "par"}), None),
            Step::Delay(Duration::from_secs(20)),
        ]),
        openai::text(&["whole"]),
    ]);
    let (sleeper, _) = recorder();
    let pol = RetryPolicy {
        idle_timeout: Duration::from_millis(300),
        ..policy()
    };
    let c = ProviderChain::new(vec![profile("a", Api::OpenAi, &server.url())], pol)
        .unwrap()
        .with_sleeper(sleeper);
    let (r, d) = run(&c).await;
    assert_eq!(r.unwrap().text, "whole");
    let rs = retries(&d);
    assert!(rs[0].1.contains("timed out"), "{rs:?}");
}

#[tokio::test]
async fn connection_refused_is_retried_then_fails_over() {
    // A port with nothing listening: bind, note the port, close.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let b = ScriptedServer::start([openai::text(&["alive"])]);
    let (c, delays) = recorded_chain(vec![
        profile("dead", Api::OpenAi, &dead),
        profile("b", Api::OpenAi, &b.url()),
    ]);
    let (r, d) = run(&c).await;
    assert_eq!(r.unwrap().text, "alive");
    assert_eq!(
        delays.lock().unwrap().len(),
        2,
        "3 attempts on dead, 2 backoffs"
    );
    assert!(
        retries(&d).iter().any(|r| r.1.contains("network error")),
        "{d:?}"
    );
}

#[tokio::test]
async fn cancel_mid_stream_returns_promptly() {
    for api in [Api::OpenAi, Api::Anthropic] {
        let steps = match api {
            Api::OpenAi => vec![
                openai::chunk(json!({"content": "first"}), None),
                Step::Delay(Duration::from_secs(30)),
                openai::chunk(json!({"content": "never"}), Some("stop")),
                Step::done(),
            ],
            Api::Anthropic => vec![
                anthropic::message_start(5),
                anthropic::text_start(0),
                anthropic::text_delta(0, "first"),
                Step::Delay(Duration::from_secs(30)),
                anthropic::message_stop(),
            ],
        };
        let server = ScriptedServer::start([Reply::sse(steps)]);
        let c =
            Arc::new(ProviderChain::new(vec![profile("a", api, &server.url())], policy()).unwrap());
        let (cancel, mut rx, task) = spawn_complete(&c);
        let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("first delta within 10 s");
        assert_eq!(first, Some(StreamDelta::Text("first".into())));
        let t0 = Instant::now();
        cancel.cancel();
        let r = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("cancel honoured within 5 s")
            .unwrap();
        assert_eq!(r, Err(ProviderError::Cancelled), "{api:?}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert_eq!(server.requests().len(), 1, "no retry after cancel");
    }
}

#[tokio::test]
async fn cancel_during_backoff_returns_promptly() {
    let server =
        ScriptedServer::start([openai::error(503, "busy", None).header("retry-after", "30")]);
    // The real tokio sleeper: a 30 s wait that cancel must cut short.
    let c = Arc::new(
        ProviderChain::new(vec![profile("a", Api::OpenAi, &server.url())], policy()).unwrap(),
    );
    let (cancel, mut rx, task) = spawn_complete(&c);
    let notice = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("retry notice within 10 s");
    assert!(
        matches!(notice, Some(StreamDelta::Retry { .. })),
        "{notice:?}"
    );
    cancel.cancel();
    let r = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("cancel honoured within 5 s")
        .unwrap();
    assert_eq!(r, Err(ProviderError::Cancelled));
}

#[test]
fn attempt_errors_render_readably() {
    let e = AttemptError::Http {
        status: 429,
        message: "slow".into(),
        retry_after: None,
    };
    assert_eq!(e.to_string(), "HTTP 429: slow");
}

//! Streaming clients against a real scripted HTTP server with real SSE framing:
//! OpenAI-compatible and Anthropic text, tool calls split over deltas, usage,
//! request shapes, malformed SSE lines, invalid tool arguments, context overflow.

use claw_testkit::scripted_server;

use std::time::Duration;

use chrono::Utc;
use claw_agent::message::{
    ChatRequest, ChatResponse, Message, StopReason, StreamDelta, ToolCall, ToolSpec,
};
use claw_agent::provider::{Api, Profile, ProviderChain, ProviderError, RetryPolicy};
use scripted_server::{Reply, ScriptedServer, Step, anthropic, openai};
use serde_json::json;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_util::sync::CancellationToken;

fn profile(api: Api, server: &ScriptedServer, key: Option<&str>) -> Profile {
    Profile {
        name: "p".into(),
        api,
        base_url: server.url(),
        model: "test-model".into(),
        api_key: key.map(String::from),
        context_window: 8192,
    }
}

/// No retries: these tests are about one stream.
fn chain(p: Profile) -> ProviderChain {
    let policy = RetryPolicy {
        max_attempts_per_profile: 1,
        max_total_attempts: 1,
        ..Default::default()
    };
    ProviderChain::new(vec![p], policy).unwrap()
}

fn request() -> ChatRequest {
    let now = Utc::now();
    ChatRequest {
        system: "You are claw.".into(),
        messages: vec![Message::user("hello", now)],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        max_tokens: 256,
    }
}

fn drain(rx: &mut UnboundedReceiver<StreamDelta>) -> Vec<StreamDelta> {
    let mut v = Vec::new();
    while let Ok(d) = rx.try_recv() {
        v.push(d);
    }
    v
}

async fn run(
    c: &ProviderChain,
    req: &ChatRequest,
) -> (Result<ChatResponse, ProviderError>, Vec<StreamDelta>) {
    let (tx, mut rx) = unbounded_channel();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        c.complete(req, &tx, &CancellationToken::new()),
    )
    .await
    .expect("complete() did not finish within 30 s");
    (r, drain(&mut rx))
}

fn texts(d: &[StreamDelta]) -> Vec<String> {
    d.iter()
        .filter_map(|d| match d {
            StreamDelta::Text(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

// ---------- OpenAI-compatible ----------

#[tokio::test]
async fn openai_text_streams_in_order_with_usage_and_request_shape() {
    let server = ScriptedServer::start([openai::text(&["The ", "answer ", "is ", "42."])]);
    let c = chain(profile(Api::OpenAi, &server, Some("sk-test")));
    let (r, d) = run(&c, &request()).await;
    let r = r.unwrap();
    assert_eq!(texts(&d), ["The ", "answer ", "is ", "42."]);
    assert_eq!(r.text, "The answer is 42.");
    assert_eq!(r.stop, Some(StopReason::EndTurn));
    assert_eq!(r.usage.input_tokens, 10);
    assert_eq!(r.usage.output_tokens, 4);
    assert_eq!(r.model, "test-model");
    assert!(r.tool_calls.is_empty());

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let q = &reqs[0];
    assert_eq!(q.method, "POST");
    assert_eq!(q.path, "/v1/chat/completions");
    assert_eq!(q.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(q.json["model"], "test-model");
    assert_eq!(q.json["stream"], true);
    assert_eq!(q.json["stream_options"]["include_usage"], true);
    assert_eq!(q.json["messages"][0]["role"], "system");
    assert_eq!(q.json["messages"][0]["content"], "You are claw.");
    assert_eq!(q.json["messages"][1]["content"], "hello");
    assert_eq!(q.json["tools"][0]["function"]["name"], "read_file");
}

#[tokio::test]
async fn openai_base_url_with_v1_and_no_key() {
    let server = ScriptedServer::start([openai::text(&["ok"])]);
    let mut p = profile(Api::OpenAi, &server, None);
    p.base_url = format!("{}/v1/", server.url());
    let (r, _) = run(&chain(p), &request()).await;
    assert_eq!(r.unwrap().text, "ok");
    let q = &server.requests()[0];
    assert_eq!(q.path, "/v1/chat/completions");
    assert_eq!(q.header("authorization"), None);
}

#[tokio::test]
async fn openai_tool_call_split_over_deltas_is_assembled() {
    let server = ScriptedServer::start([openai::tool_call(
        "call_7",
        "read_file",
        &["{\"pa", "th\": \"notes/", "a.md\"", "}"],
    )]);
    let c = chain(profile(Api::OpenAi, &server, None));
    let (r, d) = run(&c, &request()).await;
    let r = r.unwrap();
    let want = ToolCall {
        id: "call_7".into(),
        name: "read_file".into(),
        arguments: r#"{"path": "notes/a.md"}"#.into(),
    };
    assert_eq!(r.tool_calls, std::slice::from_ref(&want));
    assert_eq!(r.stop, Some(StopReason::ToolUse));
    assert_eq!(d, [StreamDelta::ToolCall(want)]);
    let args: serde_json::Value = serde_json::from_str(&r.tool_calls[0].arguments).unwrap();
    assert_eq!(args["path"], "notes/a.md");
}

#[tokio::test]
async fn openai_history_with_tool_results_is_sent() {
    let server = ScriptedServer::start([openai::text(&["done"])]);
    let c = chain(profile(Api::OpenAi, &server, None));
    let now = Utc::now();
    let call = ToolCall {
        id: "call_1".into(),
        name: "read_file".into(),
        arguments: "{\"path\":\"x\"}".into(),
    };
    let mut req = request();
    req.messages
        .push(Message::assistant("", vec![call.clone()], now));
    req.messages
        .push(Message::tool_result(&call, "file body", false, now));
    run(&c, &req).await.0.unwrap();
    let m = server.requests()[0].json["messages"].clone();
    assert_eq!(m[2]["role"], "assistant");
    assert_eq!(m[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        m[2]["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\"x\"}"
    );
    assert_eq!(m[3]["role"], "tool");
    assert_eq!(m[3]["tool_call_id"], "call_1");
    assert_eq!(m[3]["content"], "file body");
}

#[tokio::test]
async fn openai_events_split_across_network_chunks_and_crlf() {
    // One event cut in the middle of its JSON, sent as two TCP writes with a pause,
    // plus CRLF framing, comments and a keep-alive.
    let first = r#"data: {"choices":[{"index":0,"delta":{"content":"Hel"#;
    let rest = "lo\"}}]}\r\n\r\n";
    let server = ScriptedServer::start([Reply::sse(vec![
        Step::raw(": keep-alive\r\n\r\n"),
        Step::raw(first),
        Step::delay_ms(50),
        Step::raw(rest),
        Step::raw("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"},"),
        Step::delay_ms(20),
        Step::raw("\"finish_reason\":\"stop\"}]}\r"),
        Step::delay_ms(20),
        Step::raw("\n\r\n"),
        Step::raw("data: [DONE]\r\n\r\n"),
    ])]);
    let c = chain(profile(Api::OpenAi, &server, None));
    let (r, d) = run(&c, &request()).await;
    assert_eq!(r.unwrap().text, "Hello world");
    assert_eq!(texts(&d), ["Hello", " world"]);
}

#[tokio::test]
async fn openai_malformed_sse_line_is_skipped() {
    // Documented: lines that are not SSE fields are ignored (spec), and `data:`
    // that is not JSON is skipped with a warning; the answer still completes.
    let mut steps = vec![
        openai::chunk(json!({"content": "a"}), None),
        Step::raw("this line is not a field\n\n"),
        Step::raw("data: {\"choices\": [{\"delta\": {\"content\": \n\n"),
    ];
    steps.extend(openai::text_steps(&["b"]));
    let server = ScriptedServer::start([Reply::sse(steps)]);
    let c = chain(profile(Api::OpenAi, &server, None));
    let (r, d) = run(&c, &request()).await;
    assert_eq!(r.unwrap().text, "ab");
    assert_eq!(texts(&d), ["a", "b"]);
}

#[tokio::test]
async fn openai_stream_of_only_garbage_is_an_error() {
    let server = ScriptedServer::start([Reply::sse(vec![
        Step::raw("data: not json\n\n"),
        Step::raw("data: {still not\n\n"),
    ])]);
    let c = chain(profile(Api::OpenAi, &server, None));
    let (r, _) = run(&c, &request()).await;
    let err = r.unwrap_err();
    assert!(
        err.to_string()
            .contains("no valid event in the stream (2 malformed)"),
        "{err}"
    );
}

#[tokio::test]
async fn openai_invalid_tool_arguments_pass_through_as_raw_text() {
    let server =
        ScriptedServer::start([openai::tool_call("c1", "exec", &["{\"cmd\": ", "ls -la"])]);
    let c = chain(profile(Api::OpenAi, &server, None));
    let (r, _) = run(&c, &request()).await;
    let r = r.expect("invalid arguments are not a provider error");
    assert_eq!(r.tool_calls[0].arguments, "{\"cmd\": ls -la");
    assert!(serde_json::from_str::<serde_json::Value>(&r.tool_calls[0].arguments).is_err());
}

#[tokio::test]
async fn openai_context_overflow_is_classified_and_not_retried() {
    for reply in [
        openai::error(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
            Some("context_length_exceeded"),
        ),
        // llama.cpp's server
        Reply::json(
            400,
            json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 9000, "n_ctx": 8192}}),
        ),
    ] {
        let server = ScriptedServer::start([reply, openai::text(&["never"])]);
        let policy = RetryPolicy::default(); // retries allowed, but overflow must not retry
        let c = ProviderChain::new(vec![profile(Api::OpenAi, &server, None)], policy).unwrap();
        let (r, _) = run(&c, &request()).await;
        match r {
            Err(ProviderError::ContextOverflow { message, .. }) => {
                assert!(message.contains("context"), "{message}")
            }
            other => panic!("expected ContextOverflow, got {other:?}"),
        }
        assert_eq!(server.requests().len(), 1, "overflow is not retried");
    }
}

// ---------- Anthropic ----------

#[tokio::test]
async fn anthropic_text_streams_with_headers_usage_and_system() {
    let server = ScriptedServer::start([anthropic::text(&["Hi", " there", "!"])]);
    let c = chain(profile(Api::Anthropic, &server, Some("sk-ant")));
    let (r, d) = run(&c, &request()).await;
    let r = r.unwrap();
    assert_eq!(texts(&d), ["Hi", " there", "!"]);
    assert_eq!(r.text, "Hi there!");
    assert_eq!(r.stop, Some(StopReason::EndTurn));
    assert_eq!(r.usage.input_tokens, 10);
    assert_eq!(r.usage.output_tokens, 3);
    assert_eq!(r.model, "test-model");

    let q = &server.requests()[0];
    assert_eq!(q.path, "/v1/messages");
    assert_eq!(q.header("x-api-key"), Some("sk-ant"));
    assert_eq!(q.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(q.header("authorization"), None);
    assert_eq!(q.json["system"], "You are claw.");
    assert_eq!(q.json["max_tokens"], 256);
    assert_eq!(q.json["stream"], true);
    assert_eq!(q.json["messages"][0]["role"], "user");
    assert_eq!(q.json["messages"][0]["content"][0]["text"], "hello");
    assert_eq!(q.json["tools"][0]["input_schema"]["type"], "object");
}

#[tokio::test]
async fn anthropic_tool_use_split_over_deltas_is_assembled() {
    let mut steps = vec![
        anthropic::message_start(30),
        anthropic::text_start(0),
        anthropic::text_delta(0, "Reading it."),
        anthropic::block_stop(0),
        anthropic::tool_start(1, "toolu_01", "read_file"),
    ];
    for p in ["", "{\"path\"", ": \"MEM", "ORY.md\"}"] {
        steps.push(anthropic::json_delta(1, p));
    }
    steps.push(anthropic::block_stop(1));
    steps.push(anthropic::message_delta("tool_use", 17));
    steps.push(anthropic::message_stop());
    let server = ScriptedServer::start([Reply::sse(steps)]);
    let c = chain(profile(Api::Anthropic, &server, None));
    let (r, d) = run(&c, &request()).await;
    let r = r.unwrap();
    let want = ToolCall {
        id: "toolu_01".into(),
        name: "read_file".into(),
        arguments: "{\"path\": \"MEMORY.md\"}".into(),
    };
    assert_eq!(r.text, "Reading it.");
    assert_eq!(r.tool_calls, std::slice::from_ref(&want));
    assert_eq!(r.stop, Some(StopReason::ToolUse));
    assert_eq!(r.usage.input_tokens, 30);
    assert_eq!(r.usage.output_tokens, 17);
    assert_eq!(
        d,
        [
            StreamDelta::Text("Reading it.".into()),
            StreamDelta::ToolCall(want)
        ]
    );
}

#[tokio::test]
async fn anthropic_history_uses_tool_blocks() {
    let server = ScriptedServer::start([anthropic::text(&["ok"])]);
    let c = chain(profile(Api::Anthropic, &server, None));
    let now = Utc::now();
    let call = ToolCall {
        id: "toolu_1".into(),
        name: "read_file".into(),
        arguments: "{\"path\":\"x\"}".into(),
    };
    let mut req = request();
    req.messages
        .push(Message::assistant("let me see", vec![call.clone()], now));
    req.messages
        .push(Message::tool_result(&call, "no such file", true, now));
    run(&c, &req).await.0.unwrap();
    let m = server.requests()[0].json["messages"].clone();
    assert_eq!(m[1]["role"], "assistant");
    assert_eq!(
        m[1]["content"][0],
        json!({"type": "text", "text": "let me see"})
    );
    assert_eq!(
        m[1]["content"][1],
        json!({"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "x"}})
    );
    assert_eq!(m[2]["role"], "user");
    assert_eq!(
        m[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "no such file", "is_error": true})
    );
}

#[tokio::test]
async fn anthropic_invalid_tool_arguments_pass_through() {
    let server = ScriptedServer::start([anthropic::tool_use("t1", "exec", &["{\"cmd\": ", "[1,"])]);
    let c = chain(profile(Api::Anthropic, &server, None));
    let (r, _) = run(&c, &request()).await;
    assert_eq!(r.unwrap().tool_calls[0].arguments, "{\"cmd\": [1,");
}

#[tokio::test]
async fn anthropic_malformed_line_is_skipped() {
    let mut steps = anthropic::text_steps(&["x", "y"]);
    steps.insert(
        3,
        Step::raw("event: content_block_delta\ndata: {broken\n\n"),
    );
    steps.insert(4, Step::raw("garbage without colon\n\n"));
    let server = ScriptedServer::start([Reply::sse(steps)]);
    let c = chain(profile(Api::Anthropic, &server, None));
    let (r, _) = run(&c, &request()).await;
    assert_eq!(r.unwrap().text, "xy");
}

#[tokio::test]
async fn anthropic_prompt_too_long_is_context_overflow() {
    let server = ScriptedServer::start([anthropic::error(
        400,
        "invalid_request_error",
        "prompt is too long: 215000 tokens > 200000 maximum",
    )]);
    let c = ProviderChain::new(
        vec![profile(Api::Anthropic, &server, None)],
        RetryPolicy::default(),
    )
    .unwrap();
    let (r, _) = run(&c, &request()).await;
    assert!(
        matches!(&r, Err(ProviderError::ContextOverflow { message, .. }) if message.contains("prompt is too long")),
        "{r:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn anthropic_overloaded_error_event_is_retried() {
    let server = ScriptedServer::start([
        Reply::sse(vec![
            anthropic::message_start(5),
            anthropic::error_event("overloaded_error", "Overloaded"),
        ]),
        anthropic::text(&["fine"]),
    ]);
    let policy = RetryPolicy {
        base_delay: Duration::from_millis(1),
        ..Default::default()
    };
    let c = ProviderChain::new(vec![profile(Api::Anthropic, &server, None)], policy).unwrap();
    let (r, d) = run(&c, &request()).await;
    assert_eq!(r.unwrap().text, "fine");
    assert!(
        d.iter().any(
            |x| matches!(x, StreamDelta::Retry { attempt: 2, reason } if reason.contains("Overloaded"))
        ),
        "{d:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn servers_ignoring_stream_true_still_work() {
    // OpenAI-compatible: a whole chat.completion JSON with two tool calls.
    let server = ScriptedServer::start([Reply::json(
        200,
        json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}]},
            "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 9}}),
    )]);
    let (r, d) = run(&chain(profile(Api::OpenAi, &server, None)), &request()).await;
    let r = r.unwrap();
    assert_eq!(r.text, "Let me check.");
    assert_eq!(texts(&d), ["Let me check."]);
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[1].id, "c2");
    assert_eq!(r.tool_calls[1].name, "list_dir");
    assert_eq!(r.usage.output_tokens, 9);

    // Anthropic: a whole message JSON.
    let server = ScriptedServer::start([Reply::json(
        200,
        json!({"id": "msg", "type": "message", "role": "assistant", "content": [
            {"type": "text", "text": "On it."},
            {"type": "tool_use", "id": "toolu_9", "name": "exec", "input": {"cmd": "ls"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 11, "output_tokens": 4}}),
    )]);
    let (r, _) = run(&chain(profile(Api::Anthropic, &server, None)), &request()).await;
    let r = r.unwrap();
    assert_eq!(r.text, "On it.");
    assert_eq!(r.tool_calls[0].arguments, "{\"cmd\":\"ls\"}");
    assert_eq!(r.stop, Some(StopReason::ToolUse));
    assert_eq!(r.usage.input_tokens, 11);
}

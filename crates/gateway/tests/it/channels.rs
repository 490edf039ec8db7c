//! The gateway with a chat channel, in-process (`crate::common::Gateway`) with
//! the scripted LLM server and Telegram as a scripted Bot API server
//! (`claw_testkit::telegram_api`): the `message` tool reaches only chats an
//! allowed sender wrote in, and `/stop` typed in a chat cancels the chat's
//! running turn at once; a side effect is asked about in the chat (`yes`/`no`).
//! (The channels themselves — allow-list, splitting,
//! redelivery, offsets, Matrix against Synapse — are tested in `claw-channels`.)

use crate::common::Gateway;
use claw_testkit::scripted_server::{Reply, ScriptedServer, Step, openai};
use claw_testkit::telegram_api::{FakeTelegram, parse_markdown_v2};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// `<ws>/config.json`: the `agent` section and Telegram at `tg`, its token in
/// `CLAW_TG_TOKEN`, `allow` the one allowed sender.
fn config(ws: &Path, tg: &FakeTelegram, allow: &str, agent: Value) {
    let channels = json!({"telegram": {"token_env": "CLAW_TG_TOKEN", "allow_from": [allow], "base_url": tg.url()}});
    std::fs::write(
        ws.join("config.json"),
        json!({"agent": agent, "channels": channels}).to_string(),
    )
    .unwrap();
}

/// A fresh workspace with Telegram (its token `token`, in `CLAW_TG_TOKEN`)
/// allowing `allow`, the scripted LLM answering `replies`, and the gateway over
/// them.
fn telegram_gateway(
    token: &str,
    allow: &str,
    agent: Value,
    replies: impl IntoIterator<Item = Reply>,
) -> (tempfile::TempDir, FakeTelegram, ScriptedServer, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let tg = FakeTelegram::start(token);
    config(dir.path(), &tg, allow, agent);
    let llm = ScriptedServer::start(replies);
    let gw = Gateway::start_with_env(dir.path(), Some(&llm.url()), &[("CLAW_TG_TOKEN", token)]);
    (dir, tg, llm, gw)
}

#[test]
fn telegram_message_tool_reaches_allowed_chats_only() {
    let (_dir, tg, llm, mut gw) = telegram_gateway(
        "999:tool-token",
        "42",
        json!({"confirm_side_effects": false}),
        [
            openai::tool_call(
                "c1",
                "message",
                &[r#"{"channel":"telegram","chat_id":"42","text":"a note for you."}"#],
            ),
            openai::tool_call(
                "c2",
                "message",
                &[r#"{"channel":"telegram","chat_id":"99","text":"spam"}"#],
            ),
            openai::text(&["done"]),
        ],
    );
    tg.push_text(42, None, "send me a note");
    let sent = tg.wait_sent(2, Duration::from_secs(30));
    let shown: Vec<(Value, String)> = sent
        .iter()
        .map(|b| {
            (
                b["chat_id"].clone(),
                parse_markdown_v2(b["text"].as_str().unwrap()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (json!(42), "a note for you.".to_string()),
            (json!(42), "done".to_string())
        ],
        "nothing reaches chat 99"
    );
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3);
    let last_tool = reqs[2].json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .to_string();
    assert!(last_tool.contains("not one I may write to"), "{last_tool}");
    gw.stop().unwrap();
}

/// `/stop` typed in a chat is not queued behind the turn it stops: the chat's
/// running turn is cancelled at once and the chat is told so.
#[test]
fn telegram_stop_cancels_the_running_turn_from_the_chat() {
    // The first answer would take 20 s to start.
    let mut slow = vec![Step::delay_ms(20_000)];
    slow.extend(openai::text_steps(&["far too late"]));
    let (_dir, tg, llm, mut gw) = telegram_gateway(
        "555:stop-token",
        "@ann",
        json!({}),
        [Reply::sse(slow), openai::text(&["after the stop"])],
    );

    tg.push_text(42, Some("ann"), "a long question");
    let deadline = Instant::now() + Duration::from_secs(30);
    while llm.requests().is_empty() {
        assert!(Instant::now() < deadline, "the turn never reached the LLM");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped_at = Instant::now();
    tg.push_text(42, Some("ann"), "/stop");
    let sent = tg.wait_sent(1, Duration::from_secs(15));
    let first = parse_markdown_v2(sent[0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(first, "Stopped the running turn.");
    assert!(
        stopped_at.elapsed() < Duration::from_secs(15),
        "answered before the slow turn could have ended"
    );
    // The chat goes on: the next message is answered (the stop never reached
    // the model, which was asked twice in all).
    tg.push_text(42, Some("ann"), "and now?");
    let sent = tg.wait_sent(2, Duration::from_secs(30));
    let texts: Vec<String> = sent
        .iter()
        .map(|b| parse_markdown_v2(b["text"].as_str().unwrap()).unwrap())
        .collect();
    assert!(texts.iter().any(|t| t == "after the stop"), "{texts:?}");
    assert!(!texts.iter().any(|t| t == "far too late"), "{texts:?}");
    assert_eq!(llm.requests().len(), 2);
    gw.stop().unwrap();
}

/// A write in a Telegram chat asks the allowed user in the chat; `yes` runs it
/// (the reply answers the question, it is not queued behind the waiting turn),
/// `no` refuses the next one (the model is told the user declined).
#[test]
fn telegram_asks_the_chat_before_a_side_effect() {
    let (dir, tg, llm, mut gw) = telegram_gateway(
        "777:approve-token",
        "42",
        json!({}),
        openai::write_file_turns(&[
            ("w1", "yes.txt", "wrote it"),
            ("w2", "no.txt", "did not write it"),
        ]),
    );
    let ws = dir.path();
    let text = |b: &Value| parse_markdown_v2(b["text"].as_str().unwrap()).unwrap();

    tg.push_text(42, None, "write yes.txt");
    let sent = tg.wait_sent(1, Duration::from_secs(30));
    let question = text(&sent[0]);
    assert!(
        question.contains("write_file: yes.txt")
            && question.contains("Reply yes")
            && question.contains("always")
            && question.contains("no"),
        "{question}"
    );
    assert!(
        !ws.join("yes.txt").exists(),
        "nothing runs before the reply"
    );
    tg.push_text(42, None, "yes");
    let sent = tg.wait_sent(2, Duration::from_secs(30));
    assert_eq!(text(&sent[1]), "wrote it");
    assert_eq!(std::fs::read_to_string(ws.join("yes.txt")).unwrap(), "w1");

    tg.push_text(42, None, "write no.txt");
    let sent = tg.wait_sent(3, Duration::from_secs(30));
    assert!(text(&sent[2]).contains("write_file: no.txt"), "{sent:?}");
    tg.push_text(42, None, "No");
    let sent = tg.wait_sent(4, Duration::from_secs(30));
    assert_eq!(text(&sent[3]), "did not write it");
    assert!(!ws.join("no.txt").exists());
    assert_eq!(
        llm.tool_result(3, "w2"),
        "Error: the user declined to run `write_file`"
    );
    // The replies answered questions: the model never saw them as messages.
    assert_eq!(llm.requests().len(), 4);
    gw.stop().unwrap();
}

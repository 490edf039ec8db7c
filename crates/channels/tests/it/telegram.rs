//! Telegram against a scripted Bot API server (`claw_testkit::telegram_api`: real
//! JSON shapes, MarkdownV2 and length checks): an allowed and a refused sender
//! (refused once), typing, MarkdownV2 escaping, a 5,000-char answer split at
//! 4,096, a redelivered update answered once, the offset persisted across a
//! restart; errors retried with backoff, never fatal; a missing token variable
//! named.

use crate::common::{Running, Script, long_answer, resolve, words};
use claw_testkit::telegram_api::{FakeTelegram, parse_markdown_v2};
use serde_json::{Value, json};
use std::time::Duration;

#[test]
fn telegram_allowed_refused_split_redelivered_and_offset_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let token = "123456:TEST-token";
    let tg = FakeTelegram::start(token);
    let section = json!({"telegram": {"token_env": "CLAW_TG_TOKEN", "allow_from": ["@ann"], "base_url": tg.url()}});
    let first = "Hello *Ann*. See [docs](x) - 1+1=2! (ok) `code` #tag_a ~b~ > q | {c}";
    let long = long_answer(5000);
    let script = Script::new([first, long.as_str(), "answer to again", "after restart"]);
    let env = [("CLAW_TG_TOKEN", token)];
    let ch = Running::start(&section, state, &env, script.clone());
    assert!(ch.log().contains("channel telegram started"));
    assert!(!ch.log().contains(token), "the token is never logged");

    tg.push_text(42, Some("ann"), "hi");
    let sent = tg.wait_sent(1, Duration::from_secs(30));
    assert_eq!(sent[0]["chat_id"], 42);
    assert_eq!(sent[0]["parse_mode"], "MarkdownV2");
    let shown = parse_markdown_v2(sent[0]["text"].as_str().unwrap()).expect("valid MarkdownV2");
    assert_eq!(shown, first, "escaped so it shows exactly as written");
    let calls = tg.calls();
    let typing = calls
        .iter()
        .position(|(m, b)| m == "sendChatAction" && b["action"] == "typing" && b["chat_id"] == 42)
        .expect("typing shown");
    let answer = calls.iter().position(|(m, _)| m == "sendMessage").unwrap();
    assert!(typing < answer, "typing before the answer");

    // A refused sender: one clear reply, however often they write; no turn.
    tg.push_text(7, Some("mallory"), "let me in");
    let sent = tg.wait_sent(2, Duration::from_secs(30));
    assert_eq!(sent[1]["chat_id"], 7);
    let refusal = parse_markdown_v2(sent[1]["text"].as_str().unwrap()).unwrap();
    assert!(refusal.contains("allow_from"), "{refusal}");
    tg.push_text(7, Some("mallory"), "please");

    // A 5,000-character answer: two messages under 4,096, nothing lost.
    tg.push_text(42, Some("ann"), "tell me everything");
    let sent = tg.wait_sent(4, Duration::from_secs(30));
    let parts: Vec<String> = sent[2..4]
        .iter()
        .map(|b| parse_markdown_v2(b["text"].as_str().unwrap()).unwrap())
        .collect();
    assert!(parts.iter().all(|p| p.encode_utf16().count() <= 4096));
    assert_eq!(words(&parts.join(" ")), words(&long));

    // The server delivers the last update again: it is not answered twice.
    tg.redeliver_next();
    tg.push_text(42, Some("ann"), "again");
    let sent = tg.wait_sent(5, Duration::from_secs(30));
    assert_eq!(
        parse_markdown_v2(sent[4]["text"].as_str().unwrap()).unwrap(),
        "answer to again"
    );
    ch.wait_log("already handled", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        tg.sent().len(),
        5,
        "mallory refused once, redelivery ignored"
    );
    ch.stop();

    // Restart: polling resumes from the saved offset; nothing is answered again.
    let saved: Value = serde_json::from_slice(
        &std::fs::read(state.join("channels/telegram.json")).expect("state file"),
    )
    .unwrap();
    let saved: i64 = saved["position"].as_str().unwrap().parse().unwrap();
    let polls_before = tg.calls().len();
    let ch = Running::start(&section, state, &env, script.clone());
    tg.push_text(42, Some("ann"), "still there?");
    let sent = tg.wait_sent(6, Duration::from_secs(30));
    assert_eq!(
        parse_markdown_v2(sent[5]["text"].as_str().unwrap()).unwrap(),
        "after restart"
    );
    let first_poll = tg.calls()[polls_before..]
        .iter()
        .find(|(m, _)| m == "getUpdates")
        .cloned()
        .unwrap();
    assert_eq!(
        first_poll.1["offset"], saved,
        "resumed from the saved offset"
    );
    // One turn per allowed message, in the chat's session.
    let turns = script.turns();
    assert_eq!(turns.len(), 4, "one turn per allowed message");
    assert!(
        turns.iter().all(|t| t.session == "telegram:42"),
        "{turns:?}"
    );
    let texts: Vec<&str> = turns.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(texts, ["hi", "tell me everything", "again", "still there?"]);
    ch.stop();
}

#[test]
fn telegram_errors_are_retried_with_backoff_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let tg = FakeTelegram::start("1:right");
    let section = json!({"telegram": {"token_env": "CLAW_TG_TOKEN", "allow_from": ["42"], "base_url": tg.url()}});
    let ch = Running::start(
        &section,
        dir.path(),
        &[("CLAW_TG_TOKEN", "1:wrong-secret")],
        Script::new::<&str>([]),
    );
    ch.wait_log("retrying in 1 s", Duration::from_secs(20));
    ch.wait_log("retrying in 2 s", Duration::from_secs(20));
    // Still polling after the failures: the third one is retried later still.
    ch.wait_log("retrying in 4 s", Duration::from_secs(20));
    assert!(ch.log().contains("Unauthorized"), "{}", ch.log());
    assert!(
        !ch.log().contains("wrong-secret"),
        "the token is never logged"
    );
    ch.stop();

    // Without the token variable the channels do not start, naming it.
    let err = resolve(&section, &[]).unwrap_err().to_string();
    assert!(err.contains("CLAW_TG_TOKEN"), "{err}");
}

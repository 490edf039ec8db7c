//! Chat channels end to end: `claw gateway` as a real process with the scripted
//! LLM server. Telegram against a scripted Bot API server (`claw_testkit::
//! telegram_api`: real JSON shapes, MarkdownV2 and length checks): an allowed and
//! a refused sender (refused once), typing, MarkdownV2 escaping, a 5,000-char
//! answer split at 4,096, a redelivered update answered once, and the offset
//! persisted across a gateway restart. Matrix against a real Synapse
//! (`claw_testkit::synapse`): register bot and users, invite, an allowed and a
//! refused sender, a 10,000-character answer split, a redelivered event (the
//! saved `since` token rewound) answered once, a cron job delivering into the
//! room, and the round-trip overhead (claw's part, p50) printed.

use claw_testkit::gateway_proc::GatewayProc;
use claw_testkit::scripted_server::{Reply, ScriptedServer, Step, openai};
use claw_testkit::synapse::Synapse;
use claw_testkit::telegram_api::{FakeTelegram, parse_markdown_v2};
use serde_json::{Value, json};
use std::path::Path;

use std::time::{Duration, Instant};

/// The gateway with the scripted LLM and the channel tokens in its env.
struct Gw(GatewayProc);

impl Gw {
    fn start(ws: &Path, llm: &str, env: &[(&str, &str)]) -> Gw {
        let mut c = crate::gateway::claw(ws, None);
        c.env("CLAW_LLM_API", "openai")
            .env("CLAW_LLM_BASE_URL", llm)
            .env("CLAW_LLM_MODEL", "scripted");
        for (k, v) in env {
            c.env(k, v);
        }
        let gw = GatewayProc::spawn(c);
        gw.wait_log("started", Duration::from_secs(60));
        Gw(gw)
    }

    fn log(&self) -> String {
        self.0.log()
    }

    fn wait_log(&self, needle: &str, limit: Duration) {
        self.0.wait_log(needle, limit)
    }

    /// SIGTERM and wait for the exit.
    fn stop(mut self) {
        self.0.stop();
    }
}

fn write_config(ws: &Path, channels: Value) {
    std::fs::write(
        ws.join("config.json"),
        serde_json::to_vec_pretty(&json!({ "channels": channels })).unwrap(),
    )
    .unwrap();
}

/// A long answer made of paragraphs of numbered words.
fn long_answer(chars: usize) -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < chars {
        s.push_str(&format!("word{i}"));
        i += 1;
        s.push_str(if i % 60 == 0 { "\n\n" } else { " " });
    }
    s.trim().to_string()
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

#[test]
fn telegram_allowed_refused_split_redelivered_and_offset_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let token = "123456:TEST-token";
    let tg = FakeTelegram::start(token);
    write_config(
        ws,
        json!({"telegram": {"token_env": "CLAW_TG_TOKEN", "allow_from": ["@ann"], "base_url": tg.url()}}),
    );
    let first = "Hello *Ann*. See [docs](x) - 1+1=2! (ok) `code` #tag_a ~b~ > q | {c}";
    let long = long_answer(5000);
    let llm = ScriptedServer::start([
        openai::text(&[first]),
        openai::text(&[long.as_str()]),
        openai::text(&["answer to again"]),
        openai::text(&["after restart"]),
    ]);
    let env = [("CLAW_TG_TOKEN", token)];
    let gw = Gw::start(ws, &llm.url(), &env);
    assert!(!gw.log().contains(token), "the token is never logged");

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

    // A refused sender: one clear reply, however often they write; no LLM call.
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
    gw.wait_log("already handled", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        tg.sent().len(),
        5,
        "mallory refused once, redelivery ignored"
    );
    gw.stop();

    // Restart: polling resumes from the saved offset; nothing is answered again.
    let state: Value = serde_json::from_slice(
        &std::fs::read(claw_testkit::state_dir(ws).join("channels/telegram.json"))
            .expect("state file"),
    )
    .unwrap();
    let saved: i64 = state["position"].as_str().unwrap().parse().unwrap();
    let polls_before = tg.calls().len();
    let gw = Gw::start(ws, &llm.url(), &env);
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
    assert_eq!(llm.requests().len(), 4, "one LLM turn per allowed message");
    let t = std::fs::read_to_string(ws.join("sessions/telegram_42.jsonl"))
        .expect("session telegram:42");
    assert!(t.contains("still there?") && t.contains("tell me everything"));
    gw.stop();
}

/// Messages in `room` (oldest first) as seen by `token`'s user: (sender, body).
fn room_messages(hs: &Synapse, token: &str, room: &str) -> Vec<(String, String)> {
    let v = hs.api(
        token,
        "GET",
        &format!("/rooms/{}/messages?dir=b&limit=200", enc(room)),
        None,
    );
    let mut out: Vec<(String, String)> = v["chunk"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "m.room.message")
        .map(|e| {
            (
                e["sender"].as_str().unwrap().to_string(),
                e["content"]["body"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    out.reverse();
    out
}

/// Server timestamp (ms) of the newest message in `room` whose body is `body`.
fn ts_of(hs: &Synapse, token: &str, room: &str, body: &str) -> i64 {
    let v = hs.api(
        token,
        "GET",
        &format!("/rooms/{}/messages?dir=b&limit=50", enc(room)),
        None,
    );
    v["chunk"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["content"]["body"] == body)
        .and_then(|e| e["origin_server_ts"].as_i64())
        .unwrap_or_else(|| panic!("no message {body:?}"))
}

fn enc(s: &str) -> String {
    s.replace('!', "%21")
        .replace(':', "%3A")
        .replace('@', "%40")
}

fn bot_messages(hs: &Synapse, token: &str, room: &str, bot: &str) -> Vec<String> {
    room_messages(hs, token, room)
        .into_iter()
        .filter(|(s, _)| s == bot)
        .map(|(_, b)| b)
        .collect()
}

fn wait_bot(hs: &Synapse, token: &str, room: &str, bot: &str, n: usize) -> Vec<String> {
    let t = Instant::now();
    loop {
        let m = bot_messages(hs, token, room, bot);
        if m.len() >= n {
            return m;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "only {} of {n} bot messages: {m:?}",
            m.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn send(hs: &Synapse, token: &str, room: &str, text: &str, txn: &str) -> Instant {
    let t = Instant::now();
    hs.api(
        token,
        "PUT",
        &format!("/rooms/{}/send/m.room.message/{txn}", enc(room)),
        Some(json!({"msgtype": "m.text", "body": text})),
    );
    t
}

#[test]
fn matrix_against_synapse() {
    let Some(hs) = Synapse::start() else {
        return;
    };
    let (bot, bot_token) = hs.register("clawbot", "bot-password-1");
    let (me, me_token) = hs.register("me", "me-password-1");
    let (stranger, stranger_token) = hs.register("stranger", "stranger-password-1");
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write_config(
        ws,
        json!({"matrix": {"homeserver": hs.base_url, "user_id": bot,
            "access_token_env": "CLAW_MATRIX_TOKEN", "allow_from": [me], "max_message_chars": 4000}}),
    );
    let long = long_answer(10_000);
    let rounds = 10;
    let mut script = vec![
        openai::text(&["Hello from claw."]),
        openai::text(&[long.as_str()]),
    ];
    for i in 0..rounds {
        script.push(openai::text(&[format!("pong {i}").as_str()]));
    }
    script.push(openai::text(&["Reminder: water the plants."]));
    script.push(openai::text(&["after restart"]));
    let llm = ScriptedServer::start(script);
    let env = [("CLAW_MATRIX_TOKEN", bot_token.as_str())];
    let gw = Gw::start(ws, &llm.url(), &env);
    gw.wait_log("history skipped", Duration::from_secs(30));

    // Invite the bot: it joins (the inviter is allowed).
    let room = hs.api(
        &me_token,
        "POST",
        "/createRoom",
        Some(json!({"preset": "private_chat", "invite": [bot, stranger]})),
    )["room_id"]
        .as_str()
        .unwrap()
        .to_string();
    gw.wait_log("joined", Duration::from_secs(60));
    hs.api(
        &stranger_token,
        "POST",
        &format!("/join/{}", enc(&room)),
        None,
    );

    send(&hs, &me_token, &room, "hello", "t1");
    assert_eq!(
        wait_bot(&hs, &me_token, &room, &bot, 1),
        ["Hello from claw."]
    );
    let rewind = std::fs::read(claw_testkit::state_dir(ws).join("channels/matrix.json")).unwrap();

    // A refused sender gets one clear reply, however often they write.
    send(&hs, &stranger_token, &room, "who are you?", "s1");
    let m = wait_bot(&hs, &me_token, &room, &bot, 2);
    assert!(
        m[1].contains(&stranger) && m[1].contains("allow_from"),
        "{}",
        m[1]
    );
    send(&hs, &stranger_token, &room, "hello??", "s2");

    // A 10,000-character answer arrives in three messages of at most 4,000.
    send(&hs, &me_token, &room, "tell me everything", "t2");
    let m = wait_bot(&hs, &me_token, &room, &bot, 5);
    let parts = &m[2..5];
    assert!(
        parts.iter().all(|p| p.chars().count() <= 4000),
        "{:?}",
        parts.iter().map(|p| p.len()).collect::<Vec<_>>()
    );
    assert_eq!(words(&parts.join(" ")), words(&long));

    // Round trips: message sent → answer visible; minus the LLM's own time.
    let mut totals = Vec::new();
    let mut server_side = Vec::new();
    for i in 0..rounds {
        let before = bot_messages(&hs, &me_token, &room, &bot).len();
        let t = send(
            &hs,
            &me_token,
            &room,
            &format!("ping {i}"),
            &format!("p{i}"),
        );
        let m = wait_bot(&hs, &me_token, &room, &bot, before + 1);
        totals.push(t.elapsed());
        assert_eq!(m[before], format!("pong {i}"));
        let server = ts_of(&hs, &me_token, &room, &format!("pong {i}"))
            - ts_of(&hs, &me_token, &room, &format!("ping {i}"));
        server_side.push(server);
    }
    totals.sort();
    server_side.sort();
    // Server-side round trip: from Synapse storing the user's event to Synapse
    // storing the answer (its clock on both ends): Synapse waking the /sync long
    // poll, claw (typing, the turn through the bus, the scripted LLM's ~1 ms
    // answer, splitting, the send) — without the test's polling.
    // claw's part, from its own log: message handed to the chat's queue →
    // typing → turn over the bus (LLM included: the scripted server answers in
    // ~1 ms) → answer sent and acknowledged by Synapse.
    let mut claw_ms: Vec<u64> = gw
        .log()
        .lines()
        .filter(|l| l.contains("matrix: answered in") && l.contains("(1 message)"))
        .filter_map(|l| l.rsplit(" in ").next()?.strip_suffix(" ms")?.parse().ok())
        .collect();
    claw_ms.sort();
    assert!(claw_ms.len() >= rounds, "{}", gw.log());
    eprintln!(
        "matrix round trip: claw's part p50 {} ms (max {} ms); server-side p50 {} ms (max {} ms); seen by the test p50 {:?} (polling every 50 ms)",
        claw_ms[claw_ms.len() / 2],
        claw_ms[claw_ms.len() - 1],
        server_side[server_side.len() / 2],
        server_side[server_side.len() - 1],
        totals[totals.len() / 2],
    );
    let answered = bot_messages(&hs, &me_token, &room, &bot).len();

    // A cron job (one-shot, due at once for the running gateway) delivers into the room.
    let out = crate::gateway::claw(ws, None)
        .args([
            "cron",
            "add",
            "--at",
            "2026-11-05T12:00:02Z",
            "-m",
            "Remind me to water the plants",
            "--session",
        ])
        .arg(format!("matrix:{room}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = wait_bot(&hs, &me_token, &room, &bot, answered + 1);
    assert_eq!(m[answered], "Reminder: water the plants.");
    gw.stop();

    // Rewind the saved `since` token: Synapse delivers the same events again;
    // none is answered twice.
    let mut state: Value = serde_json::from_slice(&rewind).unwrap();
    let now: Value = serde_json::from_slice(
        &std::fs::read(claw_testkit::state_dir(ws).join("channels/matrix.json")).unwrap(),
    )
    .unwrap();
    state["seen"] = now["seen"].clone();
    state["refused"] = now["refused"].clone();
    state["chats"] = now["chats"].clone();
    std::fs::write(
        claw_testkit::state_dir(ws).join("channels/matrix.json"),
        state.to_string(),
    )
    .unwrap();
    let before = bot_messages(&hs, &me_token, &room, &bot).len();
    let gw = Gw::start(ws, &llm.url(), &env);
    gw.wait_log("already handled", Duration::from_secs(60));
    send(&hs, &me_token, &room, "still there?", "t3");
    let m = wait_bot(&hs, &me_token, &room, &bot, before + 1);
    assert_eq!(m[before], "after restart");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        bot_messages(&hs, &me_token, &room, &bot).len(),
        before + 1,
        "nothing answered twice"
    );
    assert_eq!(llm.requests().len(), 2 + rounds + 2);
    gw.stop();
}

#[test]
fn telegram_message_tool_reaches_allowed_chats_only() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let token = "999:tool-token";
    let tg = FakeTelegram::start(token);
    std::fs::write(
        ws.join("config.json"),
        serde_json::to_vec(&json!({
            "agent": {"confirm_side_effects": false},
            "channels": {"telegram": {"token_env": "CLAW_TG_TOKEN", "allow_from": ["42"], "base_url": tg.url()}}
        }))
        .unwrap(),
    )
    .unwrap();
    let llm = ScriptedServer::start([
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
    ]);
    let gw = Gw::start(ws, &llm.url(), &[("CLAW_TG_TOKEN", token)]);
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
    gw.stop();
}

#[test]
fn telegram_errors_are_retried_with_backoff_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let tg = FakeTelegram::start("1:right");
    write_config(
        ws,
        json!({"telegram": {"token_env": "CLAW_TG_TOKEN", "allow_from": ["42"], "base_url": tg.url()}}),
    );
    let llm = ScriptedServer::start([]);
    let mut gw = Gw::start(ws, &llm.url(), &[("CLAW_TG_TOKEN", "1:wrong-secret")]);
    gw.wait_log("retrying in 1 s", Duration::from_secs(20));
    gw.wait_log("retrying in 2 s", Duration::from_secs(20));
    assert!(gw.0.try_wait().is_none(), "still running");
    assert!(gw.log().contains("Unauthorized"), "{}", gw.log());
    assert!(
        !gw.log().contains("wrong-secret"),
        "the token is never logged"
    );
    gw.stop();

    // Without the token variable the gateway refuses to start, naming it.
    let out = crate::gateway::claw(ws, Some(&llm.url()))
        .args(["gateway", "--port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CLAW_TG_TOKEN"), "{err}");
}

/// `/stop` typed in a chat is not queued behind the turn it stops: the chat's
/// running turn is cancelled at once and the chat is told so.
#[test]
fn telegram_stop_cancels_the_running_turn_from_the_chat() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let token = "555:stop-token";
    let tg = FakeTelegram::start(token);
    write_config(
        ws,
        json!({"telegram": {"token_env": "CLAW_TG_TOKEN", "allow_from": ["@ann"], "base_url": tg.url()}}),
    );
    // The first answer would take 20 s to start.
    let mut slow = vec![Step::delay_ms(20_000)];
    slow.extend(openai::text_steps(&["far too late"]));
    let llm = ScriptedServer::start([Reply::sse(slow), openai::text(&["after the stop"])]);
    let gw = Gw::start(ws, &llm.url(), &[("CLAW_TG_TOKEN", token)]);

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
    gw.stop();
}

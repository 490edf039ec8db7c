//! Matrix against a real Synapse (`claw_testkit::synapse`): register bot and
//! users, invite, an allowed and a refused sender, a 10,000-character answer
//! split, a delivery into the room, a redelivered event (the saved `since`
//! token rewound) answered once, and the round-trip overhead (claw's part, p50)
//! printed.

use crate::common::{Running, Script, long_answer, words};
use claw_testkit::synapse::Synapse;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

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
    let state_dir = dir.path();
    let section = json!({"matrix": {"homeserver": hs.base_url, "user_id": bot,
        "access_token_env": "CLAW_MATRIX_TOKEN", "allow_from": [me], "max_message_chars": 4000}});
    let long = long_answer(10_000);
    let rounds = 10;
    let mut answers = vec!["Hello from claw.".to_string(), long.clone()];
    for i in 0..rounds {
        answers.push(format!("pong {i}"));
    }
    answers.push("after restart".to_string());
    let script = Script::new(answers);
    let env = [("CLAW_MATRIX_TOKEN", bot_token.as_str())];
    let ch = Running::start(&section, state_dir, &env, script.clone());
    ch.wait_log("history skipped", Duration::from_secs(30));

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
    ch.wait_log("joined", Duration::from_secs(60));
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
    let rewind = std::fs::read(state_dir.join("channels/matrix.json")).unwrap();

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

    // Round trips: message sent → answer visible.
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
    // poll, claw (typing, the scripted turn, splitting, the send) — without the
    // test's polling.
    // claw's part, from its own log: message handed to the chat's queue →
    // typing → turn (scripted: answered at once) → answer sent and acknowledged
    // by Synapse.
    let mut claw_ms: Vec<u64> = ch
        .log()
        .lines()
        .filter(|l| l.contains("matrix: answered in") && l.contains("(1 message)"))
        .filter_map(|l| l.rsplit(" in ").next()?.strip_suffix(" ms")?.parse().ok())
        .collect();
    claw_ms.sort();
    assert!(claw_ms.len() >= rounds, "{}", ch.log());
    eprintln!(
        "matrix round trip: claw's part p50 {} ms (max {} ms); server-side p50 {} ms (max {} ms); seen by the test p50 {:?} (polling every 50 ms)",
        claw_ms[claw_ms.len() / 2],
        claw_ms[claw_ms.len() - 1],
        server_side[server_side.len() / 2],
        server_side[server_side.len() - 1],
        totals[totals.len() / 2],
    );
    let answered = bot_messages(&hs, &me_token, &room, &bot).len();

    // A delivery (what the gateway does with a cron job's answer) to the room's
    // session reaches the room.
    let sent = ch
        .block_on(
            ch.channels
                .deliver(&format!("matrix:{room}"), "Reminder: water the plants."),
        )
        .unwrap();
    assert_eq!(sent, Some(1));
    let m = wait_bot(&hs, &me_token, &room, &bot, answered + 1);
    assert_eq!(m[answered], "Reminder: water the plants.");
    ch.stop();

    // Rewind the saved `since` token: Synapse delivers the same events again;
    // none is answered twice.
    let mut state: Value = serde_json::from_slice(&rewind).unwrap();
    let now: Value =
        serde_json::from_slice(&std::fs::read(state_dir.join("channels/matrix.json")).unwrap())
            .unwrap();
    state["seen"] = now["seen"].clone();
    state["refused"] = now["refused"].clone();
    state["chats"] = now["chats"].clone();
    std::fs::write(state_dir.join("channels/matrix.json"), state.to_string()).unwrap();
    let before = bot_messages(&hs, &me_token, &room, &bot).len();
    let ch = Running::start(&section, state_dir, &env, script.clone());
    ch.wait_log("already handled", Duration::from_secs(60));
    send(&hs, &me_token, &room, "still there?", "t3");
    let m = wait_bot(&hs, &me_token, &room, &bot, before + 1);
    assert_eq!(m[before], "after restart");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        bot_messages(&hs, &me_token, &room, &bot).len(),
        before + 1,
        "nothing answered twice"
    );
    assert_eq!(
        script.turns().len(),
        2 + rounds + 1,
        "one turn per allowed message"
    );
    ch.stop();
}

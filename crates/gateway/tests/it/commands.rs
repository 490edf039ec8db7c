//! Chat commands through the gateway, in-process against the echo LLM: the
//! session worker serves the command table (`claw_agent::commands`) for every
//! surface — `/help`, `/agents`, an unknown command, `/remember`, `/compact` and
//! `/new` answer as commands and are never sent to the model as messages (the
//! LLM's requests and the transcript show it), while a message that merely starts
//! with a path is still a message.

use crate::client_support::post_chat;
use crate::common::{echo_gateway, pairs, transcript_path};
use claw_testkit::echo_llm::answer_for;
use std::time::Duration;

#[test]
fn commands_are_served_by_the_session_not_sent_to_the_model() {
    let (dir, llm, gw) = echo_gateway(Duration::ZERO, Duration::ZERO, 1);
    let ws = dir.path();
    let c = gw.client();
    let key = "web:commands";
    let answer = |text: &str| {
        let v = post_chat(&c, key, text);
        assert_eq!(v["claw"]["end"], "answered", "{text}: {v}");
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };

    assert_eq!(answer("hello"), answer_for("hello"));
    let help = answer("/help");
    for cmd in ["/remember", "/compact", "/new", "/stop", "/agents", "/help"] {
        assert!(help.contains(cmd), "{help}");
    }
    assert_eq!(answer("/agents"), "no sub-agents in this session");
    assert_eq!(answer("/bogus"), "unknown command /bogus; /help lists them");
    // Not a command: one word only.
    assert_eq!(answer("/etc/hosts please"), answer_for("/etc/hosts please"));
    let remembered = answer("/remember");
    assert!(
        !remembered.is_empty() && !remembered.starts_with("echo:"),
        "{remembered}"
    );
    let compacted = answer("/compact");
    assert!(!compacted.starts_with("echo:"), "{compacted}");

    let inputs: Vec<String> = llm.served().into_iter().map(|s| s.input).collect();
    for cmd in ["/help", "/agents", "/bogus", "/remember", "/compact"] {
        assert!(
            !inputs.iter().any(|i| i == cmd),
            "{cmd} reached the model: {inputs:?}"
        );
    }
    let said: Vec<String> = pairs(ws, key)
        .into_iter()
        .filter(|(role, _)| role == "user")
        .map(|(_, text)| text)
        .collect();
    assert_eq!(said, ["hello", "/etc/hosts please"]);

    // `/new`: the transcript is kept aside and the session starts empty.
    let new = answer("/new");
    assert!(new.starts_with("new session"), "{new}");
    assert!(!transcript_path(ws, key).exists() || pairs(ws, key).is_empty());
    assert_eq!(answer("again"), answer_for("again"));
    assert_eq!(
        pairs(ws, key),
        [
            ("user".to_string(), "again".to_string()),
            ("assistant".to_string(), answer_for("again")),
        ]
    );
}

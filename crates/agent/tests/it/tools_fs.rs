//! File tools and registry dispatch against real temp directories: the jail
//! (`..` and a symlink pointing outside), write/edit/read round trips, and bad
//! calls from the model turned into error results.

use std::path::Path;

use claw_agent::message::ToolCall;
use claw_agent::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry, render_for_model};

fn call(name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

/// `edit_file` of notes/deep/new/todo.md: `old` becomes `new`.
async fn edit_todo(reg: &ToolRegistry, old: &str, new: &str) -> Result<ToolOutput, ToolError> {
    reg.dispatch(&call(
        "edit_file",
        serde_json::json!({"path": "notes/deep/new/todo.md", "old_text": old, "new_text": new}),
    ))
    .await
}

fn jailed(ws: &Path) -> ToolRegistry {
    let mut ctx = ToolContext::new(ws);
    ctx.jail = true;
    ctx.confirm_side_effects = true;
    ToolRegistry::new(ctx)
}

/// A workspace `ws/` next to an `outside/` directory holding a secret, and a
/// symlink `ws/escape -> ../outside`.
fn setup() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(ws.join("notes")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret\n").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("secret-link.txt")).unwrap();
    (dir, ws, outside)
}

#[tokio::test]
async fn jail_refuses_escapes_for_every_file_tool() {
    let (_dir, ws, outside) = setup();
    let reg = jailed(&ws);
    let attempts = [
        call(
            "read_file",
            serde_json::json!({"path": "escape/secret.txt"}),
        ),
        call("read_file", serde_json::json!({"path": "secret-link.txt"})),
        call(
            "read_file",
            serde_json::json!({"path": "../outside/secret.txt"}),
        ),
        call(
            "read_file",
            serde_json::json!({"path": outside.join("secret.txt")}),
        ),
        call("list_dir", serde_json::json!({"path": "escape"})),
        call("list_dir", serde_json::json!({"path": ".."})),
        call(
            "write_file",
            serde_json::json!({"path": "escape/new.txt", "content": "x"}),
        ),
        call(
            "write_file",
            serde_json::json!({"path": "../outside/new.txt", "content": "x"}),
        ),
        call(
            "write_file",
            serde_json::json!({"path": "notes/../../outside/new.txt", "content": "x"}),
        ),
        call(
            "edit_file",
            serde_json::json!({"path": "escape/secret.txt", "old_text": "top", "new_text": "no"}),
        ),
    ];
    for c in &attempts {
        let result = reg.dispatch(c).await;
        assert!(
            matches!(result, Err(ToolError::OutsideWorkspace { .. })),
            "{} {} -> {result:?}",
            c.name,
            c.arguments
        );
        let (text, is_error) = render_for_model(&result);
        assert!(is_error);
        assert!(text.contains("outside the workspace"), "{text}");
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "top secret\n"
    );
    assert!(!outside.join("new.txt").exists());

    // Without the jail the symlink is followed.
    let free = ToolRegistry::new(ToolContext::new(&ws));
    let out = free
        .dispatch(&call(
            "read_file",
            serde_json::json!({"path": "escape/secret.txt"}),
        ))
        .await
        .unwrap();
    assert!(out.render().contains("top secret"));
}

#[tokio::test]
async fn write_edit_read_round_trip_inside_the_jail() {
    let (_dir, ws, _) = setup();
    let reg = jailed(&ws);
    let out = reg
        .dispatch(&call(
            "write_file",
            serde_json::json!({"path": "notes/deep/new/todo.md", "content": "# Todo\n- a\n- b\n- a\n"}),
        ))
        .await
        .unwrap();
    assert!(
        matches!(
            out,
            ToolOutput::FileWritten {
                created: true,
                bytes: 19,
                ..
            }
        ),
        "{out:?}"
    );
    let file = ws.join("notes/deep/new/todo.md");

    // Ambiguous: refused, untouched.
    let err = edit_todo(&reg, "- a", "- c").await.unwrap_err();
    assert!(err.render().contains("occurs 2 times"), "{}", err.render());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "# Todo\n- a\n- b\n- a\n"
    );

    // No match: the closest line is shown, untouched.
    let err = edit_todo(&reg, "# TODO", "x").await.unwrap_err();
    let ToolError::EditNoMatch {
        closest: Some(m), ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(m.text, "# Todo");
    assert_eq!(m.start_line, 1);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "# Todo\n- a\n- b\n- a\n"
    );

    // Unique: applied.
    edit_todo(&reg, "- b\n", "- B\n- C\n").await.unwrap();
    let out = reg
        .dispatch(&call(
            "read_file",
            serde_json::json!({"path": "notes/deep/new/todo.md", "start_line": 2, "max_lines": 2}),
        ))
        .await
        .unwrap();
    assert_eq!(
        out.render(),
        "notes/deep/new/todo.md (lines 2-3 of 5)\n- a\n- B\n[2 more lines; continue with start_line=4]"
    );
    let listing = reg
        .dispatch(&call("list_dir", serde_json::json!({})))
        .await
        .unwrap()
        .render();
    assert!(listing.contains("notes/"), "{listing}");
    assert!(listing.contains("escape@"), "{listing}");
}

#[tokio::test]
async fn bad_calls_become_error_results() {
    let (_dir, ws, _) = setup();
    let reg = jailed(&ws);
    let cases = [
        (
            call("no_such_tool", serde_json::json!({})),
            "unknown tool `no_such_tool`",
        ),
        (
            ToolCall {
                id: "x".into(),
                name: "read_file".into(),
                arguments: "{\"path\": \"a.txt\"".into(),
            },
            "not valid JSON",
        ),
        (
            call("read_file", serde_json::json!({"file": "a.txt"})),
            "invalid arguments for `read_file`",
        ),
        (
            call("read_file", serde_json::json!({"path": 7})),
            "invalid arguments for `read_file`",
        ),
        (
            call("write_file", serde_json::json!({"path": "a.txt"})),
            "missing field `content`",
        ),
        (
            call("exec", serde_json::json!({"command": ""})),
            "must not be empty",
        ),
        (
            call("read_file", serde_json::json!({"path": "nope.txt"})),
            "does not exist",
        ),
    ];
    for (c, expected) in cases {
        let (text, is_error) = render_for_model(&reg.dispatch(&c).await);
        assert!(is_error, "{c:?}");
        assert!(text.contains(expected), "{c:?}: {text}");
    }
    let (text, _) = render_for_model(
        &reg.dispatch(&call("web_search", serde_json::json!({"query": "x"})))
            .await,
    );
    assert!(text.contains("unknown tool `web_search`"), "{text}");
}

#[test]
fn policy_and_specs() {
    let (_dir, ws, _) = setup();
    let reg = jailed(&ws);
    for t in ["write_file", "edit_file", "exec"] {
        assert!(reg.needs_confirmation(t), "{t}");
        assert!(!reg.is_read_only(t));
    }
    for t in ["read_file", "list_dir", "web_fetch"] {
        assert!(!reg.needs_confirmation(t), "{t}");
        assert!(reg.is_read_only(t));
    }
    let names: Vec<String> = reg.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "exec",
            "web_fetch"
        ]
    );
    let free = ToolRegistry::new(ToolContext::new(&ws));
    assert!(!free.needs_confirmation("exec"));
}

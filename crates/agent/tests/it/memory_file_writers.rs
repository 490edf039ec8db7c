//! MEMORY.md's writers never lose each other's update: `/remember` reads the
//! file for its model call, and merges its facts into the file as it is when
//! it writes, under the memory-file lock every writer takes (the scheduled
//! consolidation, MCP `memory_append`).

use claw_agent::core::TurnEnd;
use claw_agent::driver::Driver;
use claw_agent::provider::ProviderChain;
use claw_agent::tools::{ToolContext, ToolRegistry};
use claw_memory_api::WriterLock;
use claw_memory_api::lock::MEMORY_FILE_LOCK;
use claw_testkit::scripted_server::{ScriptedServer, openai};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct QuietUi;

impl claw_agent::driver::Ui for QuietUi {
    fn text(&self, _delta: &str) {}
    fn end_answer(&self) {}
    fn status(&self, _line: &str) {}
    fn confirm(&self, _question: &str) -> bool {
        false
    }
}

/// A driver in `ws` after one turn where the user said "we ship on
/// Tuesdays"; the scripted model then distils that fact for `/remember`.
async fn said_we_ship_on_tuesdays(
    ws: &std::path::Path,
) -> (ScriptedServer, Driver<ProviderChain, ToolRegistry>) {
    let server = ScriptedServer::start([
        openai::text(&["Noted."]),
        openai::text(&["## Decisions\n- We ship on Tuesdays.\n"]),
    ]);
    let mut driver = crate::common::open_driver(
        ws,
        "test:memory-file",
        &server,
        ToolContext::new(ws),
        Arc::new(QuietUi),
    )
    .await;
    driver
        .run_turn(
            "From now on we ship on Tuesdays.",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    (server, driver)
}

#[tokio::test]
async fn remember_keeps_what_another_writer_wrote_during_its_model_call() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(
        ws.join("MEMORY.md"),
        "# Memory\n\n## People\n- Ada runs payments.\n",
    )
    .unwrap();
    let (server, mut driver) = said_we_ship_on_tuesdays(ws).await;
    let cancel = CancellationToken::new();

    // Another writer (a scheduled consolidation) holds MEMORY.md's lock
    // while `/remember` runs; it adds a fact once the model has been asked.
    let state = crate::common::driver_options(ws, "x").state_dir;
    let lock = WriterLock::acquire_named(
        &state,
        MEMORY_FILE_LOCK,
        "MEMORY.md",
        "test",
        Duration::ZERO,
    )
    .unwrap();
    let other = async {
        while server.requests().len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The driver now waits for the lock to write what it merged.
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::fs::write(
            ws.join("MEMORY.md"),
            "# Memory\n\n## People\n- Ada runs payments.\n- Bo joined the payments team.\n",
        )
        .unwrap();
        drop(lock);
    };
    let (outcome, ()) = tokio::join!(driver.remember(&cancel), other);
    let outcome = outcome.unwrap();
    assert_eq!(
        outcome.end,
        TurnEnd::Done("MEMORY.md: remembered 1 new fact(s)".into())
    );

    // The model was asked with the file as it was before the other write …
    let ask = server.requests()[1].raw_body.clone();
    assert!(
        ask.contains("Ada runs payments") && !ask.contains("Bo joined"),
        "{ask}"
    );
    // … and both the other writer's fact and the remembered one are kept.
    let md = std::fs::read_to_string(ws.join("MEMORY.md")).unwrap();
    assert!(md.contains("- Bo joined the payments team."), "{md}");
    assert!(md.contains("- We ship on Tuesdays."), "{md}");
    assert!(md.contains("- Ada runs payments."), "{md}");
}

#[tokio::test]
async fn remember_never_reads_memory_md_through_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "root:SECRET-HASH:19000:0:99999:7:::\n").unwrap();
    std::os::unix::fs::symlink(&secret, ws.join("MEMORY.md")).unwrap();
    let (server, mut driver) = said_we_ship_on_tuesdays(ws).await;
    let cancel = CancellationToken::new();
    let outcome = driver.remember(&cancel).await.unwrap();
    let TurnEnd::Done(said) = &outcome.end else {
        panic!("{:?}", outcome.end)
    };
    assert!(said.starts_with("MEMORY.md not updated"), "{said}");
    assert!(said.contains("symbolic link"), "{said}");
    // The linked file reached no model, and was not written.
    for r in server.requests() {
        assert!(!r.raw_body.clone().contains("SECRET-HASH"));
    }
    assert_eq!(server.requests().len(), 1, "no consolidation call");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "root:SECRET-HASH:19000:0:99999:7:::\n"
    );
}

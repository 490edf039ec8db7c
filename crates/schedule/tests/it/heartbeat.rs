//! The heartbeat on tokio's paused clock: no HEARTBEAT.md or nothing actionable
//! → skipped without a fire (the model is never called); an actionable line → a
//! fire whose prompt asks for HEARTBEAT_OK; a running heartbeat turn → the next
//! tick skipped; outside the active hours → skipped; `HEARTBEAT_OK` answers are
//! recognised for suppression.

use crate::support::t;
use chrono::{DateTime, TimeDelta, Utc};
use claw_schedule::heartbeat::{ActiveHoursConfig, HEARTBEAT_SESSION};
use claw_schedule::{
    Clock, Event, Fire, FireKind, Heartbeat, HeartbeatConfig, SkipReason, Zone, is_heartbeat_ok,
};
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

struct Beat {
    fires: mpsc::Receiver<Fire>,
    events: mpsc::UnboundedReceiver<Event>,
    shutdown: CancellationToken,
}

fn start(ws: &Path, config: HeartbeatConfig, at: DateTime<Utc>) -> Beat {
    let settings = config.resolve(Zone::Utc).unwrap();
    let (tx, fires) = mpsc::channel(4);
    let (etx, events) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let hb = Heartbeat::new(ws, settings, Zone::Utc, Clock::tokio_at(at)).events(etx);
    tokio::spawn(hb.run(tx, shutdown.clone()));
    Beat {
        fires,
        events,
        shutdown,
    }
}

impl Beat {
    /// The next heartbeat event (skipped or fired), waiting in simulated time.
    async fn next_event(&mut self) -> Event {
        tokio::time::timeout(Duration::from_secs(7200), self.events.recv())
            .await
            .expect("a tick within two hours")
            .unwrap()
    }
}

async fn write(path: std::path::PathBuf, text: &'static str) {
    tokio::task::spawn_blocking(move || std::fs::write(path, text).unwrap())
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn skips_without_the_model_until_something_is_actionable() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_path_buf();
    let t0 = t("2026-11-05T12:00:00Z");
    let mut beat = start(&ws, HeartbeatConfig::default(), t0);

    // Tick 1 (+30 min): no HEARTBEAT.md.
    assert_eq!(
        beat.next_event().await,
        Event::HeartbeatSkipped {
            at: t0 + TimeDelta::minutes(30),
            reason: SkipReason::Missing
        }
    );
    // Tick 2: headings, empty checkboxes, comments only.
    write(
        ws.join("HEARTBEAT.md"),
        "# Heartbeat\n\n## Every morning\n- [ ]\n<!-- e.g. check the build -->\n",
    )
    .await;
    assert_eq!(
        beat.next_event().await,
        Event::HeartbeatSkipped {
            at: t0 + TimeDelta::minutes(60),
            reason: SkipReason::NothingActionable
        }
    );
    assert!(beat.fires.try_recv().is_err(), "no turn was requested");

    // Tick 3: an actionable line → one fire.
    write(
        ws.join("HEARTBEAT.md"),
        "# Heartbeat\n- [ ] If the passport renewal letter arrived, remind me to book the appointment\n",
    )
    .await;
    assert_eq!(
        beat.next_event().await,
        Event::HeartbeatFired {
            at: t0 + TimeDelta::minutes(90)
        }
    );
    let fire = beat.fires.recv().await.unwrap();
    assert_eq!(fire.kind, FireKind::Heartbeat);
    assert_eq!(fire.session, HEARTBEAT_SESSION);
    assert_eq!(fire.deliver_to, None);
    assert!(
        fire.message.contains("reply exactly HEARTBEAT_OK"),
        "{}",
        fire.message
    );
    assert!(
        fire.message.contains("passport renewal letter"),
        "{}",
        fire.message
    );
    assert!(
        fire.message.contains("2026-11-05 13:30 UTC"),
        "{}",
        fire.message
    );

    // Tick 4 while that turn still runs: skipped as busy; after it ends, fires again.
    assert_eq!(
        beat.next_event().await,
        Event::HeartbeatSkipped {
            at: t0 + TimeDelta::minutes(120),
            reason: SkipReason::Busy
        }
    );
    drop(fire);
    assert_eq!(
        beat.next_event().await,
        Event::HeartbeatFired {
            at: t0 + TimeDelta::minutes(150)
        }
    );
    beat.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn honours_active_hours_and_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_path_buf();
    write(ws.join("HEARTBEAT.md"), "Check the oven timer\n").await;
    let config = HeartbeatConfig {
        enabled: true,
        interval_minutes: 60,
        active_hours: Some(ActiveHoursConfig {
            start: "08:00".into(),
            end: "22:00".into(),
            tz: Some("Europe/Berlin".into()),
        }),
    };
    // 19:30 UTC = 20:30 Berlin: ticks at 21:30 Berlin (in), 22:30 and 23:30 (out).
    let t0 = t("2026-11-05T19:30:00Z");
    let mut beat = start(&ws, config, t0);
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(beat.next_event().await);
    }
    if let Some(f) = beat.fires.recv().await {
        drop(f);
    }
    assert_eq!(
        got,
        vec![
            Event::HeartbeatFired {
                at: t("2026-11-05T20:30:00Z")
            },
            Event::HeartbeatSkipped {
                at: t("2026-11-05T21:30:00Z"),
                reason: SkipReason::OutsideActiveHours
            },
            Event::HeartbeatSkipped {
                at: t("2026-11-05T22:30:00Z"),
                reason: SkipReason::OutsideActiveHours
            },
        ]
    );
    beat.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn disabled_heartbeat_never_ticks() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path().join("HEARTBEAT.md"), "Check the oven timer\n").await;
    let config = HeartbeatConfig {
        enabled: false,
        ..HeartbeatConfig::default()
    };
    let mut beat = start(dir.path(), config, t("2026-11-05T12:00:00Z"));
    let got = tokio::time::timeout(Duration::from_secs(86_400), beat.events.recv()).await;
    assert!(matches!(got, Ok(None)), "{got:?}");
}

#[tokio::test(start_paused = true)]
async fn heartbeat_ok_is_not_delivered_and_other_answers_go_to_the_latest_session() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path().join("HEARTBEAT.md"), "Check the oven timer\n").await;
    let settings = HeartbeatConfig::default().resolve(Zone::Utc).unwrap();
    let hb = Heartbeat::new(
        dir.path(),
        settings,
        Zone::Utc,
        Clock::tokio_at(t("2026-11-05T12:00:00Z")),
    );
    let fire = hb.tick(t("2026-11-05T12:30:00Z")).await.unwrap();
    let latest = Some("telegram:42");
    assert_eq!(fire.deliver_target("HEARTBEAT_OK", latest), None);
    assert_eq!(fire.deliver_target("**HEARTBEAT_OK**", latest), None);
    assert_eq!(
        fire.deliver_target("The oven timer went off ten minutes ago.", latest),
        Some("telegram:42".to_string())
    );
    assert_eq!(fire.deliver_target("The oven timer went off.", None), None);
    // While that fire is alive, the next tick is busy.
    assert_eq!(
        hb.tick(t("2026-11-05T13:00:00Z")).await.unwrap_err(),
        SkipReason::Busy
    );
    drop(fire);
    assert!(hb.tick(t("2026-11-05T13:30:00Z")).await.is_ok());
}

#[test]
fn heartbeat_ok_answers_are_suppressed_and_others_delivered() {
    // What a gateway does with the answers of heartbeat turns.
    let answers = [
        ("HEARTBEAT_OK", false),
        ("**HEARTBEAT_OK**\n", false),
        ("HEARTBEAT_OK.", false),
        (
            "The passport letter arrived yesterday: book the appointment.",
            true,
        ),
        ("HEARTBEAT_OK\n\nActually, the oven timer went off.", true),
    ];
    let delivered: Vec<bool> = answers.iter().map(|(a, _)| !is_heartbeat_ok(a)).collect();
    let expected: Vec<bool> = answers.iter().map(|(_, d)| *d).collect();
    assert_eq!(delivered, expected);
}

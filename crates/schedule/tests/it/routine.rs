//! claw's own scheduled work (the daily memory consolidation) on tokio's paused
//! clock: it fires at each occurrence of its schedule in the user's zone, a run
//! missed since the last one fires once at start-up (a routine that never ran
//! waits for its first occurrence), and a run still going makes the next one
//! skip.

use crate::support::t;
use chrono::{DateTime, Utc};
use claw_schedule::{Clock, Event, Fire, FireKind, Routine, Schedule, Zone};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn daily_at_3(zone: Zone) -> Schedule {
    Schedule::Cron {
        cron: "0 3 * * *".into(),
        tz: zone,
    }
}

fn start(
    schedule: Schedule,
    at: DateTime<Utc>,
    last_run: Option<DateTime<Utc>>,
) -> (
    mpsc::Receiver<Fire>,
    mpsc::UnboundedReceiver<Event>,
    CancellationToken,
) {
    let (tx, fires) = mpsc::channel(4);
    let (etx, events) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let r = Routine::new(
        FireKind::Consolidation,
        "memory-consolidation",
        schedule,
        Clock::tokio_at(at),
        last_run,
    )
    .poll_interval(Duration::from_secs(60))
    .events(etx);
    tokio::spawn(r.run(tx, stop.clone()));
    (fires, events, stop)
}

async fn next_fire(fires: &mut mpsc::Receiver<Fire>) -> Fire {
    tokio::time::timeout(Duration::from_secs(3 * 24 * 3600), fires.recv())
        .await
        .expect("a fire within three days")
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn fires_daily_at_its_time_in_the_users_zone() {
    let berlin = Zone::parse("Europe/Berlin").unwrap();
    // 12:00 UTC; 03:00 in Berlin (CET) is 02:00 UTC.
    let (mut fires, _events, stop) = start(daily_at_3(berlin), t("2026-11-05T12:00:00Z"), None);
    let f = next_fire(&mut fires).await;
    assert_eq!(f.kind, FireKind::Consolidation);
    assert_eq!(f.job_id, "memory-consolidation");
    assert!(!f.catch_up);
    assert_eq!(f.scheduled_for, t("2026-11-06T02:00:00Z"));
    assert!(f.fired_at >= f.scheduled_for);
    assert!(f.fired_at - f.scheduled_for < chrono::TimeDelta::seconds(61));
    assert_eq!(f.deliver_target("anything", Some("cli:default")), None);
    f.finish();
    let f = next_fire(&mut fires).await;
    assert_eq!(f.scheduled_for, t("2026-11-07T02:00:00Z"));
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_run_missed_since_the_last_one_fires_once_at_start_up() {
    let now = t("2026-11-05T12:00:00Z");
    // Last ran two days ago: the runs of the 4th and the 5th were missed.
    let (mut fires, _events, stop) =
        start(daily_at_3(Zone::Utc), now, Some(t("2026-11-03T03:00:05Z")));
    let f = next_fire(&mut fires).await;
    assert!(f.catch_up);
    assert_eq!(f.scheduled_for, t("2026-11-04T03:00:00Z"));
    assert_eq!(f.fired_at, now);
    f.finish();
    // Then the next occurrence, not a replay of the 5th.
    let f = next_fire(&mut fires).await;
    assert!(!f.catch_up);
    assert_eq!(f.scheduled_for, t("2026-11-06T03:00:00Z"));
    stop.cancel();

    // Ran this morning: nothing to catch up.
    let (mut fires, _e, stop) = start(daily_at_3(Zone::Utc), now, Some(t("2026-11-05T03:00:01Z")));
    let f = next_fire(&mut fires).await;
    assert!(!f.catch_up);
    assert_eq!(f.scheduled_for, t("2026-11-06T03:00:00Z"));
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_run_still_going_makes_the_next_one_skip() {
    let (mut fires, mut events, stop) =
        start(daily_at_3(Zone::Utc), t("2026-11-05T12:00:00Z"), None);
    let first = next_fire(&mut fires).await;
    // Held past the next occurrence: that one is skipped, reported.
    let skipped = loop {
        match events.recv().await.unwrap() {
            Event::SkippedOverlap { scheduled_for, .. } => break scheduled_for,
            Event::Fired { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(skipped, t("2026-11-07T03:00:00Z"));
    drop(first);
    let f = next_fire(&mut fires).await;
    assert_eq!(f.scheduled_for, t("2026-11-08T03:00:00Z"));
    stop.cancel();
}

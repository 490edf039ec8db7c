//! The cron scheduler on tokio's paused clock: at / every / cron (with a time
//! zone) fire at their instants, state survives a restart, a missed run is caught
//! up once, an overlapping run is skipped, and edits of the jobs file reach a
//! running scheduler.

use crate::support::{Running, on_store, t};
use chrono::TimeDelta;
use claw_schedule::{Event, FireKind, JobStore, NewJob, Schedule, Zone};
use std::time::Duration;

const SEC: Duration = Duration::from_secs(1);

fn job(schedule: Schedule, message: &str) -> NewJob {
    NewJob {
        schedule,
        message: message.into(),
        deliver_to: Some("cli:default".into()),
    }
}

#[tokio::test(start_paused = true)]
async fn every_fires_on_its_interval_and_updates_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::in_state_dir(dir.path());
    let t0 = t("2026-11-05T12:00:00Z");
    let added = on_store(&store, move |s| {
        s.add(job(Schedule::Every { every_secs: 30 }, "stretch"), t0)
            .unwrap()
    })
    .await;
    let mut run = Running::start(&store, t0, SEC);
    for k in 1..=3 {
        let fire = run
            .next_fire(Duration::from_secs(31))
            .await
            .expect("a fire");
        let due = t0 + TimeDelta::seconds(30 * k);
        assert_eq!(fire.kind, FireKind::Cron);
        assert_eq!(fire.job_id, added.id);
        assert_eq!(fire.session, format!("cron:{}", added.id));
        assert_eq!(fire.message, "stretch");
        assert_eq!(fire.deliver_to.as_deref(), Some("cli:default"));
        assert_eq!(fire.scheduled_for, due);
        assert_eq!(fire.fired_at, due, "fired exactly on time");
        assert_eq!(run.clock.now(), due);
        assert!(!fire.catch_up);
        // Delivered to the session that created it, whatever was active last.
        assert_eq!(
            fire.deliver_target("HEARTBEAT_OK", Some("other")),
            Some("cli:default".to_string())
        );
        fire.finish();
    }
    let stored = on_store(&store, |s| s.load().unwrap()).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].runs, 3);
    assert_eq!(stored[0].last_run, Some(t0 + TimeDelta::seconds(90)));
    assert_eq!(stored[0].next_run, Some(t0 + TimeDelta::seconds(120)));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn at_fires_once_and_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::in_state_dir(dir.path());
    let t0 = t("2026-11-05T12:00:00Z");
    let at = t0 + TimeDelta::seconds(90);
    let added = on_store(&store, move |s| {
        s.add(job(Schedule::At { at }, "call the dentist"), t0)
            .unwrap()
    })
    .await;
    let mut run = Running::start(&store, t0, SEC);
    let fire = run
        .next_fire(Duration::from_secs(100))
        .await
        .expect("fires");
    assert_eq!(fire.fired_at, at);
    assert_eq!(fire.job_id, added.id);
    drop(fire);
    assert!(run.next_fire(Duration::from_secs(3600)).await.is_none());
    assert!(on_store(&store, |s| s.load().unwrap()).await.is_empty());
    let events = run.drain_events();
    assert!(
        events.contains(&Event::Removed {
            job_id: added.id.clone()
        }),
        "{events:?}"
    );
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cron_fires_at_the_next_match_in_its_time_zone() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::in_state_dir(dir.path());
    // Friday 2026-11-27 10:00 UTC.
    let t0 = t("2026-11-27T10:00:00Z");
    let berlin = Zone::parse("Europe/Berlin").unwrap();
    let ny = Zone::parse("America/New_York").unwrap();
    on_store(&store, move |s| {
        s.add(
            job(
                Schedule::Cron {
                    cron: "0 9 * * 1-5".into(),
                    tz: berlin,
                },
                "berlin standup",
            ),
            t0,
        )
        .unwrap();
        s.add(
            job(
                Schedule::Cron {
                    cron: "0 9 * * 1-5".into(),
                    tz: ny,
                },
                "new york standup",
            ),
            t0,
        )
        .unwrap();
    })
    .await;
    let mut run = Running::start(&store, t0, Duration::from_secs(60));
    let mut seen = Vec::new();
    while let Some(fire) = run.next_fire(Duration::from_secs(4 * 86_400)).await {
        seen.push((fire.message.clone(), fire.fired_at));
        if seen.len() == 3 {
            break;
        }
    }
    assert_eq!(
        seen,
        vec![
            // 09:00 EST = 14:00 UTC the same Friday.
            ("new york standup".to_string(), t("2026-11-27T14:00:00Z")),
            // Weekend skipped: Monday 09:00 CET = 08:00 UTC.
            ("berlin standup".to_string(), t("2026-11-30T08:00:00Z")),
            ("new york standup".to_string(), t("2026-11-30T14:00:00Z")),
        ]
    );
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::in_state_dir(dir.path());
    let t0 = t("2026-11-05T12:00:00Z");
    on_store(&store, move |s| {
        s.add(job(Schedule::Every { every_secs: 600 }, "tea"), t0)
            .unwrap()
    })
    .await;
    let mut run = Running::start(&store, t0, SEC);
    let fire = run.next_fire(Duration::from_secs(601)).await.unwrap();
    assert_eq!(fire.fired_at, t0 + TimeDelta::seconds(600));
    drop(fire);
    run.stop().await;

    // A new process 5 minutes later: nothing is due until the recorded next run.
    let restart = t0 + TimeDelta::seconds(900);
    let mut run = Running::start(&store, restart, SEC);
    let fire = run.next_fire(Duration::from_secs(400)).await.unwrap();
    assert_eq!(fire.scheduled_for, t0 + TimeDelta::seconds(1200));
    assert_eq!(fire.fired_at, t0 + TimeDelta::seconds(1200));
    assert!(!fire.catch_up);
    drop(fire);
    let stored = on_store(&store, |s| s.load().unwrap()).await;
    assert_eq!(stored[0].runs, 2);
    assert_eq!(stored[0].last_run, Some(t0 + TimeDelta::seconds(1200)));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_missed_run_is_caught_up_once_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::in_state_dir(dir.path());
    let t0 = t("2026-11-05T12:00:00Z");
    let at = t0 + TimeDelta::seconds(10);
    on_store(&store, move |s| {
        s.add(job(Schedule::Every { every_secs: 60 }, "every minute"), t0)
            .unwrap();
        s.add(job(Schedule::At { at }, "one shot"), t0).unwrap();
    })
    .await;
    // The gateway was down for an hour: 60 minute-runs and the one-shot were missed.
    let start = t0 + TimeDelta::seconds(3600);
    let mut run = Running::start(&store, start, SEC);
    let mut first = Vec::new();
    for _ in 0..2 {
        let f = run.next_fire(SEC).await.expect("caught up at once");
        assert_eq!(f.fired_at, start);
        assert!(f.catch_up, "{f:?}");
        first.push((f.message.clone(), f.scheduled_for));
    }
    first.sort();
    assert_eq!(
        first,
        vec![
            ("every minute".to_string(), t0 + TimeDelta::seconds(60)),
            ("one shot".to_string(), at),
        ]
    );
    // Then back on the minute's phase, once per minute: no replay of the missed runs.
    let f = run.next_fire(Duration::from_secs(61)).await.unwrap();
    assert_eq!(f.message, "every minute");
    assert_eq!(f.scheduled_for, t0 + TimeDelta::seconds(3660));
    assert!(!f.catch_up);
    drop(f);
    let stored = on_store(&store, |s| s.load().unwrap()).await;
    assert_eq!(stored.len(), 1, "the one-shot is gone");
    assert_eq!(stored[0].runs, 2);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_overlapping_run_is_skipped_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::in_state_dir(dir.path());
    let t0 = t("2026-11-05T12:00:00Z");
    let added = on_store(&store, move |s| {
        s.add(job(Schedule::Every { every_secs: 2 }, "slow job"), t0)
            .unwrap()
    })
    .await;
    let mut run = Running::start(&store, t0, SEC);
    let first = run.next_fire(Duration::from_secs(3)).await.unwrap();
    assert_eq!(first.fired_at, t0 + TimeDelta::seconds(2));
    // The turn takes 5 s: the runs due at +4 and +6 are skipped.
    assert!(
        run.next_fire(Duration::from_millis(4500)).await.is_none(),
        "nothing fires while the previous run is going"
    );
    assert_eq!(run.clock.now(), t0 + TimeDelta::milliseconds(6500));
    drop(first);
    let next = run.next_fire(Duration::from_secs(3)).await.unwrap();
    assert_eq!(next.fired_at, t0 + TimeDelta::seconds(8));
    let skipped: Vec<_> = run
        .drain_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::SkippedOverlap {
                job_id,
                scheduled_for,
            } => Some((job_id, scheduled_for)),
            _ => None,
        })
        .collect();
    assert_eq!(
        skipped,
        vec![
            (added.id.clone(), t0 + TimeDelta::seconds(4)),
            (added.id.clone(), t0 + TimeDelta::seconds(6)),
        ]
    );
    let stored = on_store(&store, |s| s.load().unwrap()).await;
    assert_eq!(stored[0].runs, 2, "skipped runs are not counted");
    drop(next);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn edits_of_the_jobs_file_reach_a_running_scheduler() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::in_state_dir(dir.path());
    let t0 = t("2026-11-05T12:00:00Z");
    let doomed = on_store(&store, move |s| {
        s.add(
            job(Schedule::Every { every_secs: 20 }, "removed before it runs"),
            t0,
        )
        .unwrap()
    })
    .await;
    let mut run = Running::start(&store, t0, SEC);
    assert!(run.next_fire(Duration::from_secs(5)).await.is_none());

    // `claw cron remove` and `claw cron add` while it runs (at +5 s).
    let now = run.clock.now();
    assert_eq!(now, t0 + TimeDelta::seconds(5));
    let added = on_store(&store, move |s| {
        s.remove(&doomed.id).unwrap().unwrap();
        s.add(job(Schedule::Every { every_secs: 3 }, "added live"), now)
            .unwrap()
    })
    .await;
    let f = run
        .next_fire(Duration::from_secs(4))
        .await
        .expect("picked up");
    assert_eq!(f.job_id, added.id);
    assert_eq!(f.fired_at, now + TimeDelta::seconds(3));
    drop(f);

    // A hand edit: the whole file replaced by a job without next_run.
    let path = store.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        std::fs::write(
            &path,
            r#"{"version": 1, "jobs": [{"id": "byhand01", "kind": "every", "every_secs": 7,
                "message": "hand-written", "created_at": "2026-11-05T12:00:00Z"}]}"#,
        )
        .unwrap()
    })
    .await
    .unwrap();
    let edited_at = run.clock.now();
    let f = run
        .next_fire(Duration::from_secs(10))
        .await
        .expect("hand edit");
    assert_eq!(f.job_id, "byhand01");
    assert_eq!(f.message, "hand-written");
    // Seen within one poll (1 s), first run one interval later.
    assert!(
        f.fired_at > edited_at + TimeDelta::seconds(6)
            && f.fired_at <= edited_at + TimeDelta::seconds(8),
        "{} vs {edited_at}",
        f.fired_at
    );
    drop(f);

    // A broken edit keeps the jobs loaded before and is reported.
    let path = store.path().to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::write(&path, "{oops").unwrap())
        .await
        .unwrap();
    let f = run
        .next_fire(Duration::from_secs(8))
        .await
        .expect("still runs");
    assert_eq!(f.job_id, "byhand01");
    drop(f);
    let events = run.drain_events();
    assert!(
        events.iter().any(
            |e| matches!(e, Event::Error { message } if message.contains("not a valid jobs file"))
        ),
        "{events:?}"
    );
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_promptly_and_a_dropped_receiver_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::in_state_dir(dir.path());
    let t0 = t("2026-11-05T12:00:00Z");
    let run = Running::start(&store, t0, Duration::from_secs(3600));
    tokio::time::sleep(SEC).await;
    run.stop().await;

    on_store(&store, move |s| {
        s.add(job(Schedule::Every { every_secs: 1 }, "x"), t0)
            .unwrap()
    })
    .await;
    let Running { fires, task, .. } = Running::start(&store, t0, SEC);
    drop(fires);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("ends when no one listens")
        .unwrap();
}

/// The production path: the wall clock and real sleeps (bounded waits; no pause).
#[tokio::test]
async fn wall_clock_scheduler_fires_and_sees_removal() {
    use claw_schedule::{Clock, Scheduler};
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::in_state_dir(dir.path());
    let (tx, mut fires) = tokio::sync::mpsc::channel(16);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(
        Scheduler::new(store.path(), Clock::system())
            .poll_interval(Duration::from_millis(200))
            .start(tx, shutdown.clone()),
    );
    let added = on_store(&store, |s| {
        s.add(
            job(Schedule::Every { every_secs: 1 }, "tick"),
            chrono::Utc::now(),
        )
        .unwrap()
    })
    .await;
    for _ in 0..2 {
        let f = tokio::time::timeout(Duration::from_secs(10), fires.recv())
            .await
            .expect("fires on the wall clock")
            .unwrap();
        assert_eq!(f.job_id, added.id);
        let late = chrono::Utc::now() - f.scheduled_for;
        assert!(late < TimeDelta::seconds(5), "fired {late} late");
    }
    on_store(&store, move |s| s.remove(&added.id).unwrap().unwrap()).await;
    // Whatever was sent before the removal, nothing comes after the next poll.
    tokio::time::sleep(Duration::from_millis(600)).await;
    while fires.try_recv().is_ok() {}
    assert!(
        tokio::time::timeout(Duration::from_millis(2500), fires.recv())
            .await
            .is_err(),
        "a removed job does not fire"
    );
    shutdown.cancel();
    task.await.unwrap();
}

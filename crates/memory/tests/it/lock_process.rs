//! The writer lock across real processes: a second process is refused with the
//! holder's pid and command, and the lock dies with its holder (kill -9).

use claw_memory::lock::{LockError, WriterLock};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "CLAW_TEST_LOCK_CHILD_DIR";

/// Run in a child copy of this test binary: take the lock, say so, then hold it
/// until killed.
#[test]
fn child_holder() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return; // only meaningful as the child of `lock_dies_with_its_process`
    };
    let _lock = WriterLock::acquire(dir.as_ref(), "child holder", Duration::ZERO).unwrap();
    println!("\nLOCKED {}", std::process::id());
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Kills the child if an assertion fails before the test does.
struct KillOnDrop(std::process::Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn lock_dies_with_its_process() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_process::child_holder",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    let pid = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
        // The harness prints "test child_holder ... " on the same line.
        if let Some(i) = line.find("LOCKED ") {
            break line[i + 7..].trim().parse::<u32>().unwrap();
        }
    };
    assert_eq!(pid, child.0.id());

    let err = WriterLock::acquire(dir.path(), "parent", Duration::from_millis(300)).unwrap_err();
    match err {
        LockError::Held {
            pid: holder, what, ..
        } => {
            assert_eq!(holder, pid);
            assert_eq!(what, "child holder");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(WriterLock::holder(dir.path()).unwrap().unwrap().pid, pid);

    // kill -9: no cleanup runs, yet the lock is free as soon as the process is gone.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let start = Instant::now();
    let lock = WriterLock::acquire(dir.path(), "parent", Duration::from_secs(10)).unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(
        WriterLock::holder(dir.path()).unwrap().unwrap().what,
        "parent"
    );
    drop(lock);
}

//! "Now" for the scheduler, as a value.
//!
//! Production uses the wall clock (optionally shifted, the way `CLAW_NOW` shifts
//! the rest of claw). Tests use [`Clock::tokio_at`]: a wall-clock origin that
//! advances with tokio's clock, so `tokio::time::pause()` and auto-advance move
//! the scheduler's "now" and its sleeps together, deterministically.

use chrono::{DateTime, TimeDelta, Utc};

/// A source of the current time for the scheduler and the heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The system clock plus a fixed offset (zero for the plain system clock).
    Wall(TimeDelta),
    /// `origin` at the tokio instant `started`, advancing with tokio's clock
    /// (which `tokio::time::pause()` controls).
    Tokio {
        origin: DateTime<Utc>,
        started: tokio::time::Instant,
    },
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::Wall(TimeDelta::zero())
    }

    /// The system clock shifted by `offset` (claw's `CLAW_NOW`).
    pub fn shifted(offset: TimeDelta) -> Clock {
        Clock::Wall(offset)
    }

    /// A wall clock that reads `at` now and advances in real time.
    pub fn starting_at(at: DateTime<Utc>) -> Clock {
        Clock::Wall(at - Utc::now())
    }

    /// A clock that reads `at` now and advances with tokio's clock. Call it
    /// inside a runtime (tests: after `tokio::time::pause()`).
    pub fn tokio_at(at: DateTime<Utc>) -> Clock {
        Clock::Tokio {
            origin: at,
            started: tokio::time::Instant::now(),
        }
    }

    /// The current instant.
    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::Wall(offset) => Utc::now() + *offset,
            Clock::Tokio { origin, started } => {
                let elapsed = tokio::time::Instant::now().saturating_duration_since(*started);
                *origin + TimeDelta::from_std(elapsed).unwrap_or(TimeDelta::MAX)
            }
        }
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let at = DateTime::parse_from_rfc3339("2026-11-05T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let c = Clock::tokio_at(at);
        assert_eq!(c.now(), at);
        tokio::time::sleep(std::time::Duration::from_secs(90)).await;
        assert_eq!(c.now(), at + TimeDelta::seconds(90));
    }

    #[test]
    fn shifted_clock_starts_at_the_instant() {
        let at = DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let c = Clock::starting_at(at);
        assert!((c.now() - at).num_seconds().abs() <= 1);
        assert!((Clock::system().now() - Utc::now()).num_seconds().abs() <= 1);
    }
}

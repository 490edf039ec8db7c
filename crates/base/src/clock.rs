//! claw's notion of "now", passed down as a value: the one place that reads the
//! wall clock.
//!
//! Library code never reads the wall clock for anything a result depends on
//! (temporal decay, the daily note's date, message timestamps, when a job is
//! due): it asks the [`Clock`] it was handed. The binary builds the clock once,
//! at the edge: the system clock, or — for tests and reproducible runs only — the
//! system clock shifted so that the process starts at the instant given in
//! `CLAW_NOW` ([`Clock::parse_start`]). Tests of tokio code use
//! [`Clock::tokio_at`] (feature `tokio`): a wall-clock origin that advances with
//! tokio's clock, so `tokio::time::pause()` and auto-advance move "now" and the
//! sleeps together, deterministically.
//!
//! What must be the machine's own time whatever `CLAW_NOW` says (comparing with
//! a file's ctime, an HTTP `Retry-After` date, a nonce) reads [`Clock::System`].

use chrono::{DateTime, FixedOffset, NaiveDate, Offset, TimeDelta, Utc};
use std::time::SystemTime;

/// A source of the current time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    /// The system clock.
    #[default]
    System,
    /// The system clock plus a fixed offset (a pinned start instant that still advances).
    Shifted(TimeDelta),
    /// `origin` at the tokio instant `started`, advancing with tokio's clock
    /// (which `tokio::time::pause()` controls). Tests only.
    #[cfg(feature = "tokio")]
    Tokio {
        /// The instant the clock read when it was made.
        origin: DateTime<Utc>,
        /// tokio's instant when it was made.
        started: tokio::time::Instant,
    },
}

/// Why a start instant (`CLAW_NOW`) did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    /// `@` followed by something other than an integer.
    #[error("`{value}` is not @<unix seconds>")]
    NotUnixSeconds {
        /// The value given.
        value: String,
    },
    /// A valid form, but not a representable instant.
    #[error("`{value}` is out of range")]
    OutOfRange {
        /// The value given.
        value: String,
    },
    /// None of the accepted forms.
    #[error("`{value}` is not an RFC 3339 time, a YYYY-MM-DD date or @<unix seconds>")]
    Unrecognised {
        /// The value given.
        value: String,
    },
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::System
    }

    /// The system clock shifted by `offset` (claw's `CLAW_NOW`).
    pub fn shifted(offset: TimeDelta) -> Clock {
        if offset.is_zero() {
            Clock::System
        } else {
            Clock::Shifted(offset)
        }
    }

    /// A clock that reads `at` now and advances in real time from here.
    pub fn starting_at(at: DateTime<Utc>) -> Clock {
        Clock::Shifted(at - Utc::now())
    }

    /// A clock that reads `at` now and advances with tokio's clock. Call it
    /// inside a runtime (tests: after `tokio::time::pause()`).
    #[cfg(feature = "tokio")]
    pub fn tokio_at(at: DateTime<Utc>) -> Clock {
        Clock::Tokio {
            origin: at,
            started: tokio::time::Instant::now(),
        }
    }

    /// Parse a `CLAW_NOW` value: RFC 3339 (`2026-11-05T12:00:00Z`), a date
    /// (`2026-11-05`, noon UTC) or Unix seconds (`@1793880000`).
    pub fn parse_start(value: &str) -> Result<Clock, ClockError> {
        let v = value.trim();
        let out_of_range = || ClockError::OutOfRange {
            value: value.to_string(),
        };
        let at = if let Some(secs) = v.strip_prefix('@') {
            let secs: i64 = secs.parse().map_err(|_| ClockError::NotUnixSeconds {
                value: value.to_string(),
            })?;
            DateTime::from_timestamp(secs, 0).ok_or_else(out_of_range)?
        } else if let Ok(t) = DateTime::parse_from_rfc3339(v) {
            t.with_timezone(&Utc)
        } else if let Ok(d) = NaiveDate::parse_from_str(v, "%Y-%m-%d") {
            d.and_hms_opt(12, 0, 0).ok_or_else(out_of_range)?.and_utc()
        } else {
            return Err(ClockError::Unrecognised {
                value: value.to_string(),
            });
        };
        Ok(Clock::starting_at(at))
    }

    /// The current instant.
    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::System => Utc::now(),
            Clock::Shifted(d) => Utc::now() + *d,
            #[cfg(feature = "tokio")]
            Clock::Tokio { origin, started } => {
                let elapsed = tokio::time::Instant::now().saturating_duration_since(*started);
                *origin + TimeDelta::from_std(elapsed).unwrap_or(TimeDelta::MAX)
            }
        }
    }

    /// The current instant in Unix seconds.
    pub fn now_unix(&self) -> i64 {
        self.now().timestamp()
    }

    /// The current instant as a [`SystemTime`] (to compare with file times).
    pub fn system_time(&self) -> SystemTime {
        self.now().into()
    }

    /// The offset of the machine's local time zone (`TZ`, else `/etc/localtime`)
    /// at the current instant.
    pub fn local_offset(&self) -> FixedOffset {
        self.now().with_timezone(&chrono::Local).offset().fix()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_spellings() {
        let c = Clock::parse_start("2026-11-05T12:00:00Z").unwrap();
        assert!((c.now_unix() - 1_793_880_000).abs() <= 2, "{}", c.now());
        let c = Clock::parse_start("2026-11-05").unwrap();
        assert!((c.now_unix() - 1_793_880_000).abs() <= 2);
        let c = Clock::parse_start("@1793880000").unwrap();
        assert!((c.now_unix() - 1_793_880_000).abs() <= 2);
        assert!(matches!(
            Clock::parse_start("tomorrow"),
            Err(ClockError::Unrecognised { .. })
        ));
        assert_eq!(
            Clock::parse_start("@x").unwrap_err().to_string(),
            "`@x` is not @<unix seconds>"
        );
    }

    #[test]
    fn system_clock_is_the_wall_clock() {
        assert!((Clock::System.now_unix() - Utc::now().timestamp()).abs() <= 1);
        assert_eq!(Clock::default(), Clock::System);
        assert_eq!(Clock::system(), Clock::System);
        assert_eq!(Clock::shifted(TimeDelta::zero()), Clock::System);
        let st = Clock::System.system_time();
        let diff = SystemTime::now()
            .duration_since(st)
            .unwrap_or_default()
            .as_secs();
        assert!(diff <= 1);
    }

    #[test]
    fn shifted_clock_starts_at_the_instant() {
        let at = DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let c = Clock::starting_at(at);
        assert!((c.now() - at).num_seconds().abs() <= 1);
    }

    #[cfg(feature = "tokio")]
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
}

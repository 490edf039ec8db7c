//! The engine's notion of "now", passed down as a value.
//!
//! Library code never reads the wall clock for anything a result depends on
//! (temporal decay, the daily note's date, message timestamps): it asks the
//! [`Clock`] it was handed. The binary builds the clock once, at the edge: the
//! system clock, or — for tests and reproducible runs only — the system clock
//! shifted so that the process starts at the instant given in `CLAW_NOW`.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

/// A source of the current time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    /// The system clock.
    #[default]
    System,
    /// The system clock plus a fixed offset (a pinned start instant that still advances).
    Shifted(TimeDelta),
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
    /// A clock that reads `at` now and advances in real time from here.
    pub fn starting_at(at: DateTime<Utc>) -> Clock {
        Clock::Shifted(at - Utc::now())
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
        }
    }

    /// The current instant in Unix seconds.
    pub fn now_unix(&self) -> i64 {
        self.now().timestamp()
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
    }
}

//! Pure schedule specifications: the three kinds of job ([`Schedule`]: `at`, `every`,
//! 5-field `cron` with a time zone), their parsers (`2s` / `15m` / `1h30m` / `1d`
//! intervals, `2026-12-01T09:00` local times, cron expressions through `croner`),
//! time zones ([`Zone`]: IANA names, fixed offsets, UTC) and the next-run arithmetic.
//!
//! No I/O and no clock: every function takes "now" as an argument.
//!
//! Catch-up rule (the one place it is decided): a run that fell due while nothing
//! was running is fired ONCE, and the next run is the first occurrence strictly
//! after "now" — `every` keeps its phase (`due + k × interval`), `cron` takes the
//! expression's next match, `at` has none (the job is removed after its run).

use chrono::{
    DateTime, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeDelta,
    TimeZone, Utc,
};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The shortest `every` interval.
pub const MIN_INTERVAL_SECS: u64 = 1;

/// Why a schedule could not be parsed or has no next run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("`{input}` is not an interval: {reason} (e.g. 30s, 15m, 1h, 1d, 1h30m)")]
    BadInterval { input: String, reason: String },
    #[error("the interval `{input}` is shorter than one second")]
    IntervalTooShort { input: String },
    #[error(
        "`{input}` is not a time: use YYYY-MM-DDTHH:MM[:SS] (in the job's time zone) or RFC 3339 with an offset"
    )]
    BadTime { input: String },
    #[error("{at} is in the past (now is {now})")]
    InPast { at: String, now: String },
    #[error("`{input}` does not exist in {zone} (a daylight-saving gap)")]
    NonexistentLocalTime { input: String, zone: String },
    #[error(
        "`{expr}` is not a 5-field cron expression (minute hour day-of-month month day-of-week): {message}"
    )]
    BadCron { expr: String, message: String },
    #[error("`{expr}` never matches again")]
    NoNextOccurrence { expr: String },
    #[error(
        "`{input}` is not a time zone: use an IANA name (Europe/Berlin), UTC or an offset (+02:00)"
    )]
    BadZone { input: String },
    #[error("say when: one of every (an interval), at (a time) or cron (an expression)")]
    NoKind,
    #[error("give only one of every, at and cron (got {given})")]
    TwoKinds { given: String },
}

/// A time zone: an IANA zone (daylight saving included), a fixed offset, or UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    Utc,
    Named(chrono_tz::Tz),
    Fixed(FixedOffset),
}

impl Zone {
    /// Parses `UTC`/`Z`, an IANA name (`Europe/Berlin`) or an offset (`+02:00`,
    /// `-0530`, `UTC+02:00`, `GMT+2`). claw's one time-zone parser: `agent.timezone`,
    /// `$TZ`, the heartbeat's and the cron jobs' zones all go through it.
    pub fn parse(input: &str) -> Result<Zone, SpecError> {
        let s = input.trim();
        let bad = || SpecError::BadZone {
            input: input.to_string(),
        };
        if s.eq_ignore_ascii_case("utc") || s == "Z" || s.eq_ignore_ascii_case("gmt") {
            return Ok(Zone::Utc);
        }
        let offset = ["UTC", "utc", "GMT", "gmt"]
            .iter()
            .find_map(|p| s.strip_prefix(p))
            .unwrap_or(s);
        if offset.starts_with('+') || offset.starts_with('-') {
            return parse_offset(offset).map(Zone::Fixed).ok_or_else(bad);
        }
        chrono_tz::Tz::from_str(s)
            .map(Zone::Named)
            .map_err(|_| bad())
    }

    /// The zone's name as it is stored: `UTC`, `Europe/Berlin`, `+02:00`.
    pub fn name(&self) -> String {
        match self {
            Zone::Utc => "UTC".into(),
            Zone::Named(tz) => tz.name().into(),
            Zone::Fixed(off) => off.to_string(),
        }
    }

    /// `t` as a local time in this zone (with the offset in force then).
    pub fn local(&self, t: DateTime<Utc>) -> DateTime<FixedOffset> {
        match self {
            Zone::Utc => t.fixed_offset(),
            Zone::Named(tz) => {
                let l = t.with_timezone(tz);
                l.with_timezone(&l.offset().fix())
            }
            Zone::Fixed(off) => t.with_timezone(off),
        }
    }

    /// The offset in force in this zone at `t`.
    pub fn offset_at(&self, t: DateTime<Utc>) -> FixedOffset {
        *self.local(t).offset()
    }

    /// The instant of a local wall-clock time in this zone. An ambiguous time (the
    /// hour repeated when daylight saving ends) is its first occurrence; a time in
    /// the gap when it starts is an error.
    pub fn resolve(&self, naive: NaiveDateTime) -> Result<DateTime<Utc>, SpecError> {
        let r = match self {
            Zone::Utc => LocalResult::Single(naive.and_utc()),
            Zone::Named(tz) => tz
                .from_local_datetime(&naive)
                .map(|t| t.with_timezone(&Utc)),
            Zone::Fixed(off) => off
                .from_local_datetime(&naive)
                .map(|t| t.with_timezone(&Utc)),
        };
        match r {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Ok(t),
            LocalResult::None => Err(SpecError::NonexistentLocalTime {
                input: naive.format("%Y-%m-%dT%H:%M").to_string(),
                zone: self.name(),
            }),
        }
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl Serialize for Zone {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for Zone {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Zone, D::Error> {
        let s = String::deserialize(d)?;
        Zone::parse(&s).map_err(serde::de::Error::custom)
    }
}

fn parse_offset(s: &str) -> Option<FixedOffset> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) => (h, m),
        None if rest.len() == 4 => rest.split_at(2),
        None => (rest, "0"),
    };
    let h: i32 = h.parse().ok()?;
    let m: i32 = m.parse().ok()?;
    if !(0..=23).contains(&h) || !(0..=59).contains(&m) {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

/// Parses an interval: one or more `<number><unit>` parts, units `s`, `m`, `h`,
/// `d` (`2s`, `15m`, `1h30m`, `1d`); at least one second.
pub fn parse_every(input: &str) -> Result<u64, SpecError> {
    let s = input.trim().to_ascii_lowercase();
    let bad = |reason: &str| SpecError::BadInterval {
        input: input.to_string(),
        reason: reason.to_string(),
    };
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            ' ' if digits.is_empty() => continue,
            _ => return Err(bad(&format!("unknown unit `{c}`"))),
        };
        if digits.is_empty() {
            return Err(bad(&format!("`{c}` has no number before it")));
        }
        let n: u64 = digits.parse().map_err(|_| bad("the number is too large"))?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| bad("the interval is too large"))?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(bad("the last number has no unit (s, m, h or d)"));
    }
    if total > 366 * 86_400 * 100 {
        return Err(bad("the interval is too large"));
    }
    if total < MIN_INTERVAL_SECS {
        return Err(SpecError::IntervalTooShort {
            input: input.to_string(),
        });
    }
    Ok(total)
}

/// An interval as the shortest spelling [`parse_every`] reads back (`90` → `1m30s`).
pub fn format_every(secs: u64) -> String {
    let mut out = String::new();
    let mut rest = secs;
    for (unit, name) in [(86_400, 'd'), (3600, 'h'), (60, 'm'), (1, 's')] {
        if rest >= unit {
            out.push_str(&format!("{}{name}", rest / unit));
            rest %= unit;
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

/// Parses a one-shot time: RFC 3339 with an offset (`2026-12-01T09:00:00+01:00`) is
/// that instant; a local time without offset (`2026-12-01T09:00`, `2026-12-01 09:00`,
/// seconds optional, or a date alone meaning 09:00) is read in `zone`.
pub fn parse_at(input: &str, zone: &Zone) -> Result<DateTime<Utc>, SpecError> {
    let s = input.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(n) = NaiveDateTime::parse_from_str(s, f) {
            return zone.resolve(n);
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        let nine = NaiveTime::from_hms_opt(9, 0, 0).ok_or_else(|| SpecError::BadTime {
            input: input.to_string(),
        })?;
        return zone.resolve(d.and_time(nine));
    }
    Err(SpecError::BadTime {
        input: input.to_string(),
    })
}

/// A parsed 5-field cron expression (minute hour day-of-month month day-of-week;
/// ranges, lists, steps, names like `MON-FRI`, and `@daily`-style nicknames).
#[derive(Debug, Clone)]
pub struct CronExpr {
    expr: String,
    cron: croner::Cron,
}

impl CronExpr {
    pub fn parse(expr: &str) -> Result<CronExpr, SpecError> {
        let trimmed = expr.trim();
        let bad = |message: String| SpecError::BadCron {
            expr: expr.to_string(),
            message,
        };
        if !trimmed.starts_with('@') {
            let fields = trimmed.split_whitespace().count();
            if fields != 5 {
                return Err(bad(format!("it has {fields} fields")));
            }
        }
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(trimmed)
            .map_err(|e| bad(e.to_string()))?;
        Ok(CronExpr {
            expr: trimmed.to_string(),
            cron,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.expr
    }

    /// The first match strictly after `after`, evaluated in `zone`.
    pub fn next_after(
        &self,
        after: DateTime<Utc>,
        zone: &Zone,
    ) -> Result<DateTime<Utc>, SpecError> {
        let none = |_| SpecError::NoNextOccurrence {
            expr: self.expr.clone(),
        };
        match zone {
            Zone::Utc => self.cron.find_next_occurrence(&after, false).map_err(none),
            Zone::Named(tz) => self
                .cron
                .find_next_occurrence(&after.with_timezone(tz), false)
                .map(|t| t.with_timezone(&Utc))
                .map_err(none),
            Zone::Fixed(off) => self
                .cron
                .find_next_occurrence(&after.with_timezone(off), false)
                .map(|t| t.with_timezone(&Utc))
                .map_err(none),
        }
    }
}

/// When a job runs. Serialised with a `kind` tag: `{"kind":"at","at":…}`,
/// `{"kind":"every","every_secs":30}`, `{"kind":"cron","cron":"0 9 * * 1-5","tz":"Europe/Berlin"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Schedule {
    /// Once, at an instant; the job is removed after it runs.
    At { at: DateTime<Utc> },
    /// Every `every_secs` seconds (≥ 1), the first run one interval after creation.
    Every { every_secs: u64 },
    /// A 5-field cron expression evaluated in `tz`.
    Cron { cron: String, tz: Zone },
}

impl Schedule {
    /// `at`, `every` or `cron`.
    pub fn kind(&self) -> &'static str {
        match self {
            Schedule::At { .. } => "at",
            Schedule::Every { .. } => "every",
            Schedule::Cron { .. } => "cron",
        }
    }

    /// The spec as a user would type it: `2026-12-01T08:00:00+00:00`, `30s`, `0 9 * * 1-5`.
    pub fn spec(&self) -> String {
        match self {
            Schedule::At { at } => at.to_rfc3339(),
            Schedule::Every { every_secs } => format_every(*every_secs),
            Schedule::Cron { cron, .. } => cron.clone(),
        }
    }

    /// Checks the schedule (interval ≥ 1 s, a valid expression with a next match).
    pub fn validate(&self) -> Result<(), SpecError> {
        match self {
            Schedule::At { .. } => Ok(()),
            Schedule::Every { every_secs } if *every_secs < MIN_INTERVAL_SECS => {
                Err(SpecError::IntervalTooShort {
                    input: format!("{every_secs}s"),
                })
            }
            Schedule::Every { .. } => Ok(()),
            Schedule::Cron { cron, .. } => CronExpr::parse(cron).map(|_| ()),
        }
    }

    /// The first run of a job created at `now`: `at` must lie in the future.
    pub fn first_run(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>, SpecError> {
        match self {
            Schedule::At { at } if *at <= now => Err(SpecError::InPast {
                at: at.to_rfc3339(),
                now: now.to_rfc3339(),
            }),
            _ => self.first_run_lenient(now),
        }
    }

    /// The first run of a job that has none recorded (written by hand, say): like
    /// [`Schedule::first_run`], but an `at` in the past is due at once.
    pub fn first_run_lenient(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>, SpecError> {
        match self {
            Schedule::At { at } => Ok(*at),
            Schedule::Every { every_secs } => Ok(now + secs(*every_secs)),
            Schedule::Cron { cron, tz } => CronExpr::parse(cron)?.next_after(now, tz),
        }
    }

    /// The run after one that was due at `due` and fired at `now` (`None` for `at`).
    /// Missed occurrences between `due` and `now` are skipped, not replayed.
    pub fn next_after(
        &self,
        due: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, SpecError> {
        match self {
            Schedule::At { .. } => Ok(None),
            Schedule::Every { every_secs } => {
                let step = (*every_secs).max(MIN_INTERVAL_SECS) as i64;
                let behind = (now - due).num_seconds().max(0);
                let k = behind / step + 1;
                Ok(Some(due + TimeDelta::seconds(k * step)))
            }
            Schedule::Cron { cron, tz } => CronExpr::parse(cron)?
                .next_after(now.max(due), tz)
                .map(Some),
        }
    }
}

/// A schedule from the user's words: exactly one of `every` (an interval), `at`
/// (a time, read in `tz` or else `default_zone` when it has no offset) and `cron`
/// (an expression evaluated in `tz`, or else `default_zone`).
pub fn schedule_from_parts(
    every: Option<&str>,
    at: Option<&str>,
    cron: Option<&str>,
    tz: Option<&str>,
    default_zone: Zone,
) -> Result<Schedule, SpecError> {
    let given: Vec<&str> = [("every", every), ("at", at), ("cron", cron)]
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(n, _)| *n)
        .collect();
    if given.len() > 1 {
        return Err(SpecError::TwoKinds {
            given: given.join(" and "),
        });
    }
    let zone = match tz {
        Some(tz) => Zone::parse(tz)?,
        None => default_zone,
    };
    match (every, at, cron) {
        (Some(e), _, _) => Ok(Schedule::Every {
            every_secs: parse_every(e)?,
        }),
        (_, Some(a), _) => Ok(Schedule::At {
            at: parse_at(a, &zone)?,
        }),
        (_, _, Some(c)) => Ok(Schedule::Cron {
            cron: CronExpr::parse(c)?.as_str().to_string(),
            tz: zone,
        }),
        _ => Err(SpecError::NoKind),
    }
}

fn secs(n: u64) -> TimeDelta {
    TimeDelta::seconds(i64::try_from(n).unwrap_or(i64::MAX / 1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn intervals_parse_and_format_back() {
        assert_eq!(parse_every("2s").unwrap(), 2);
        assert_eq!(parse_every("15m").unwrap(), 900);
        assert_eq!(parse_every("1h").unwrap(), 3600);
        assert_eq!(parse_every("1d").unwrap(), 86_400);
        assert_eq!(parse_every("1h30m").unwrap(), 5400);
        assert_eq!(parse_every(" 1H 30M ").unwrap(), 5400);
        for bad in [
            "",
            "0s",
            "5",
            "s",
            "3w",
            "1.5h",
            "-1s",
            "99999999999999999999s",
        ] {
            assert!(parse_every(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(
            parse_every("0s"),
            Err(SpecError::IntervalTooShort { .. })
        ));
        for n in [1, 59, 60, 90, 3600, 5400, 86_400, 90_061] {
            assert_eq!(parse_every(&format_every(n)).unwrap(), n, "{n}");
        }
        assert_eq!(format_every(5400), "1h30m");
    }

    #[test]
    fn zones_parse_names_offsets_and_utc() {
        assert_eq!(Zone::parse("UTC").unwrap(), Zone::Utc);
        assert_eq!(
            Zone::parse("Europe/Berlin").unwrap().name(),
            "Europe/Berlin"
        );
        assert_eq!(Zone::parse("+02:00").unwrap().name(), "+02:00");
        assert_eq!(Zone::parse("UTC-0530").unwrap().name(), "-05:30");
        assert_eq!(Zone::parse("+5").unwrap().name(), "+05:00");
        assert_eq!(Zone::parse("GMT+02:00").unwrap().name(), "+02:00");
        let t = DateTime::parse_from_rfc3339("2026-07-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let summer = Zone::parse("Europe/Berlin").unwrap().offset_at(t);
        assert_eq!(summer, FixedOffset::east_opt(7200).unwrap());
        for bad in ["Mars/Olympus", "+25:00", "", "+ab"] {
            assert!(Zone::parse(bad).is_err(), "{bad:?}");
        }
        let z: Zone = serde_json::from_str("\"Europe/Berlin\"").unwrap();
        assert_eq!(serde_json::to_string(&z).unwrap(), "\"Europe/Berlin\"");
    }

    #[test]
    fn at_times_are_read_in_the_zone() {
        let berlin = Zone::parse("Europe/Berlin").unwrap();
        // December: CET, +01:00.
        assert_eq!(
            parse_at("2026-12-01T09:00", &berlin).unwrap(),
            utc("2026-12-01T08:00:00Z")
        );
        // July: CEST, +02:00.
        assert_eq!(
            parse_at("2026-07-01 09:00:30", &berlin).unwrap(),
            utc("2026-07-01T07:00:30Z")
        );
        assert_eq!(
            parse_at("2026-12-01T09:00:00-05:00", &berlin).unwrap(),
            utc("2026-12-01T14:00:00Z")
        );
        assert_eq!(
            parse_at("2026-12-01", &Zone::Utc).unwrap(),
            utc("2026-12-01T09:00:00Z")
        );
        // 02:30 on the last Sunday of March does not exist in Berlin.
        assert!(matches!(
            parse_at("2026-03-29T02:30", &berlin),
            Err(SpecError::NonexistentLocalTime { .. })
        ));
        assert!(matches!(
            parse_at("tomorrow at 9", &berlin),
            Err(SpecError::BadTime { .. })
        ));
    }

    #[test]
    fn cron_needs_five_fields_and_follows_the_zone() {
        assert!(CronExpr::parse("0 9 * * 1-5").is_ok());
        assert!(CronExpr::parse("@daily").is_ok());
        for bad in ["0 0 9 * * 1-5", "9 * *", "61 * * * *", "x y z w v"] {
            assert!(
                matches!(CronExpr::parse(bad), Err(SpecError::BadCron { .. })),
                "{bad}"
            );
        }
        let e = CronExpr::parse("0 9 * * 1-5").unwrap();
        // Friday 2026-11-27 10:00 UTC → next weekday 09:00 is Monday 11-30.
        let after = utc("2026-11-27T10:00:00Z");
        assert_eq!(
            e.next_after(after, &Zone::Utc).unwrap(),
            utc("2026-11-30T09:00:00Z")
        );
        let berlin = Zone::parse("Europe/Berlin").unwrap();
        assert_eq!(
            e.next_after(after, &berlin).unwrap(),
            utc("2026-11-30T08:00:00Z")
        );
        let ny = Zone::parse("America/New_York").unwrap();
        assert_eq!(
            e.next_after(after, &ny).unwrap(),
            utc("2026-11-27T14:00:00Z")
        );
    }

    #[test]
    fn cron_keeps_local_time_across_daylight_saving() {
        let e = CronExpr::parse("0 9 * * *").unwrap();
        let berlin = Zone::parse("Europe/Berlin").unwrap();
        // Saturday 09:00 CEST (+02:00) → Sunday 09:00 CET (+01:00): 25 hours later.
        let sat = utc("2026-10-24T07:00:00Z");
        let sun = e.next_after(sat, &berlin).unwrap();
        assert_eq!(sun, utc("2026-10-25T08:00:00Z"));
        // Spring forward: 02:30 does not exist on 2026-03-29; the job is not lost.
        let e = CronExpr::parse("30 2 * * *").unwrap();
        let next = e.next_after(utc("2026-03-28T02:00:00Z"), &berlin).unwrap();
        assert!(
            next > utc("2026-03-28T02:00:00Z") && next <= utc("2026-03-30T00:30:00Z"),
            "{next}"
        );
    }

    #[test]
    fn next_runs_skip_missed_occurrences() {
        let every = Schedule::Every { every_secs: 30 };
        let due = utc("2026-11-05T12:00:00Z");
        // On time: the next one interval later.
        assert_eq!(
            every.next_after(due, due).unwrap(),
            Some(utc("2026-11-05T12:00:30Z"))
        );
        // Ten minutes late: one run now, the next on the original phase.
        assert_eq!(
            every.next_after(due, utc("2026-11-05T12:10:05Z")).unwrap(),
            Some(utc("2026-11-05T12:10:30Z"))
        );
        let cron = Schedule::Cron {
            cron: "0 * * * *".into(),
            tz: Zone::Utc,
        };
        assert_eq!(
            cron.next_after(due, utc("2026-11-05T15:20:00Z")).unwrap(),
            Some(utc("2026-11-05T16:00:00Z"))
        );
        let at = Schedule::At { at: due };
        assert_eq!(at.next_after(due, due).unwrap(), None);
        assert!(matches!(
            at.first_run(utc("2026-11-05T12:00:01Z")),
            Err(SpecError::InPast { .. })
        ));
        assert_eq!(
            at.first_run_lenient(utc("2026-11-06T00:00:00Z")).unwrap(),
            due
        );
    }

    #[test]
    fn parts_need_exactly_one_kind() {
        let berlin = Zone::parse("Europe/Berlin").unwrap();
        assert_eq!(
            schedule_from_parts(Some("15m"), None, None, None, Zone::Utc).unwrap(),
            Schedule::Every { every_secs: 900 }
        );
        assert_eq!(
            schedule_from_parts(None, Some("2026-12-01T09:00"), None, None, berlin).unwrap(),
            Schedule::At {
                at: utc("2026-12-01T08:00:00Z")
            }
        );
        assert_eq!(
            schedule_from_parts(None, None, Some("0 9 * * 1-5"), Some("UTC"), berlin).unwrap(),
            Schedule::Cron {
                cron: "0 9 * * 1-5".into(),
                tz: Zone::Utc
            }
        );
        assert_eq!(
            schedule_from_parts(None, None, None, None, Zone::Utc),
            Err(SpecError::NoKind)
        );
        assert!(matches!(
            schedule_from_parts(Some("1m"), None, Some("* * * * *"), None, Zone::Utc),
            Err(SpecError::TwoKinds { .. })
        ));
        assert!(matches!(
            schedule_from_parts(
                None,
                None,
                Some("* * * * *"),
                Some("Nowhere/City"),
                Zone::Utc
            ),
            Err(SpecError::BadZone { .. })
        ));
    }

    #[test]
    fn schedules_serialise_with_a_kind_tag() {
        let s = Schedule::Cron {
            cron: "0 9 * * 1-5".into(),
            tz: Zone::parse("Europe/Berlin").unwrap(),
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "cron", "cron": "0 9 * * 1-5", "tz": "Europe/Berlin"})
        );
        assert_eq!(serde_json::from_value::<Schedule>(v).unwrap(), s);
        let v = serde_json::to_value(Schedule::Every { every_secs: 30 }).unwrap();
        assert_eq!(v, serde_json::json!({"kind": "every", "every_secs": 30}));
    }
}

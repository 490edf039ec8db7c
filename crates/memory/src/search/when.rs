//! Time in a query: a date or a relative time ("on May 4th", "last week", "in the
//! spring", "a few days ago", "3 weeks ago", "yesterday", "on Tuesday", "in March",
//! "2026-05-04") becomes a window of days, judged against the search's clock in the
//! user's time zone. Chunks dated inside the window rank first (`score::rank_fused`);
//! a query without one is searched as before. English only. Pure: the caller
//! passes today's date.
//!
//! Invariant: a phrase names a window only when it is about time as a whole ("may"
//! alone is a verb, "4th" alone is no date, "spring" without "in the"/"last"/"this"
//! may be a coil); every window ends no later than today.
#![warn(missing_docs)]

use crate::config::DayZone;
use chrono::{Datelike, Duration, NaiveDate, Weekday};

/// Days from `from` to `to`, both included, and the words that named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DateWindow {
    /// First day.
    pub from: NaiveDate,
    /// Last day (included).
    pub to: NaiveDate,
    /// The query's words that named it (lower-cased).
    pub phrase: String,
}

impl DateWindow {
    /// `[start, end)` in unix seconds, for a time zone `offset_secs` east of UTC.
    pub fn unix_range(&self, offset_secs: i32) -> (i64, i64) {
        let at = |d: NaiveDate| {
            d.and_hms_opt(0, 0, 0)
                .map_or(0, |t| t.and_utc().timestamp() - i64::from(offset_secs))
        };
        (at(self.from), at(self.to + Duration::days(1)))
    }

    /// Whether a chunk's `note_time` falls inside, for a user `offset_secs`
    /// east of UTC. A `note_time` at exactly 00:00 UTC is a date without a time
    /// (a dated note's file name, `memory/2026-05-04.md`): it is judged by its
    /// calendar date, so west of UTC "yesterday" is yesterday's note and not
    /// today's. Any other time (a transcript turn) is judged in the user's zone.
    pub fn holds(&self, t: i64, offset_secs: i32) -> bool {
        if t.rem_euclid(86_400) == 0 {
            self.contains(t, 0)
        } else {
            self.contains(t, offset_secs)
        }
    }

    /// The `[start, end)` that covers every `note_time` [`DateWindow::holds`]
    /// may accept: the zone's range and the calendar dates' together.
    pub fn span(&self, offset_secs: i32) -> (i64, i64) {
        let (a, b) = self.unix_range(offset_secs);
        let (c, d) = self.unix_range(0);
        (a.min(c), b.max(d))
    }

    /// Whether unix time `t` falls inside, for a time zone `offset_secs` east of UTC.
    pub fn contains(&self, t: i64, offset_secs: i32) -> bool {
        let (a, b) = self.unix_range(offset_secs);
        (a..b).contains(&t)
    }

    /// [`DateWindow::unix_range`] in `zone`, each day bound with the offset in
    /// force then (a window across a daylight-saving change is 23 or 25 hours
    /// longer or shorter, not shifted).
    pub fn unix_range_in(&self, zone: &DayZone) -> (i64, i64) {
        (
            zone.day_start(self.from),
            zone.day_start(self.to + Duration::days(1)),
        )
    }

    /// [`DateWindow::holds`] in `zone`: a date without a time by its calendar
    /// date, any other time by `zone`'s day then.
    pub fn holds_in(&self, t: i64, zone: &DayZone) -> bool {
        if t.rem_euclid(86_400) == 0 {
            self.contains(t, 0)
        } else {
            let (a, b) = self.unix_range_in(zone);
            (a..b).contains(&t)
        }
    }

    /// [`DateWindow::span`] in `zone`.
    pub fn span_in(&self, zone: &DayZone) -> (i64, i64) {
        let (a, b) = self.unix_range_in(zone);
        let (c, d) = self.unix_range(0);
        (a.min(c), b.max(d))
    }
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

const WEEKDAYS: [(&str, Weekday); 7] = [
    ("monday", Weekday::Mon),
    ("tuesday", Weekday::Tue),
    ("wednesday", Weekday::Wed),
    ("thursday", Weekday::Thu),
    ("friday", Weekday::Fri),
    ("saturday", Weekday::Sat),
    ("sunday", Weekday::Sun),
];

/// A month name or its abbreviation (`sep`, `sept`), 1-based. Alone, a month
/// name is no date ("may" is a verb, "march" too): the caller needs a day number
/// beside it, or `in`/`of`/`last`/… before it, or a year after it.
fn month(w: &str) -> Option<u32> {
    let w = w.trim_end_matches('.');
    if w == "sept" {
        return Some(9);
    }
    MONTHS
        .iter()
        .position(|m| *m == w || (w.len() == 3 && m.starts_with(w)))
        .map(|i| i as u32 + 1)
}

/// A day of the month: `4`, `4th`, `21st`, `2nd`, `23rd` (1..=31).
fn day_of_month(w: &str) -> Option<u32> {
    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &w[digits.len()..];
    if !matches!(suffix, "" | "st" | "nd" | "rd" | "th") || digits.is_empty() || digits.len() > 2 {
        return None;
    }
    let d: u32 = digits.parse().ok()?;
    (1..=31).contains(&d).then_some(d)
}

fn year(w: &str) -> Option<i32> {
    (w.len() == 4 && w.bytes().all(|b| b.is_ascii_digit()))
        .then(|| w.parse().ok())
        .flatten()
        .filter(|y| (1900..=2200).contains(y))
}

/// A number word or digits (`a`, `one` … `twelve`, `couple`, `few`, `several`)
/// as the range of counts it means.
fn count(w: &str) -> Option<(i64, i64)> {
    Some(match w {
        "a" | "an" | "one" | "1" => (1, 1),
        "couple" => (2, 3),
        "few" => (2, 5),
        "several" => (3, 7),
        "two" => (2, 2),
        "three" => (3, 3),
        "four" => (4, 4),
        "five" => (5, 5),
        "six" => (6, 6),
        "seven" => (7, 7),
        "eight" => (8, 8),
        "nine" => (9, 9),
        "ten" => (10, 10),
        "eleven" => (11, 11),
        "twelve" => (12, 12),
        _ => {
            let n: i64 = w.parse().ok()?;
            if !(1..=400).contains(&n) {
                return None;
            }
            (n, n)
        }
    })
}

/// The most recent date with this month and day that is not after `today` (a year
/// back otherwise); `None` for impossible dates (31 April).
fn recent_date(m: u32, d: u32, today: NaiveDate) -> Option<NaiveDate> {
    let this = NaiveDate::from_ymd_opt(today.year(), m, d);
    match this {
        Some(x) if x <= today => Some(x),
        _ => NaiveDate::from_ymd_opt(today.year() - 1, m, d),
    }
}

fn month_span(y: i32, m: u32) -> Option<(NaiveDate, NaiveDate)> {
    let first = NaiveDate::from_ymd_opt(y, m, 1)?;
    let next = if m == 12 {
        NaiveDate::from_ymd_opt(y + 1, 1, 1)?
    } else {
        NaiveDate::from_ymd_opt(y, m + 1, 1)?
    };
    Some((first, next - Duration::days(1)))
}

/// The most recent month `m` that has begun by `today` (this year's if it has).
fn recent_month(m: u32, today: NaiveDate) -> Option<(NaiveDate, NaiveDate)> {
    let y = if m <= today.month() {
        today.year()
    } else {
        today.year() - 1
    };
    month_span(y, m)
}

/// A season (northern hemisphere, meteorological): its months.
fn season(w: &str) -> Option<(u32, u32)> {
    Some(match w {
        "spring" => (3, 5),
        "summer" => (6, 8),
        "autumn" | "fall" => (9, 11),
        "winter" => (12, 2),
        _ => return None,
    })
}

/// The most recent season that has begun by `today` (`last`: the one before).
fn recent_season(
    first: u32,
    last: u32,
    today: NaiveDate,
    previous: bool,
) -> Option<(NaiveDate, NaiveDate)> {
    // Start year of the season containing or most recently before today.
    let mut y = today.year();
    let starts = |y: i32| NaiveDate::from_ymd_opt(y, first, 1);
    while starts(y)? > today {
        y -= 1;
    }
    if previous {
        y -= 1;
    }
    let start = starts(y)?;
    let end_year = if last < first { y + 1 } else { y };
    let (_, end) = month_span(end_year, last)?;
    Some((start, end))
}

fn clamp(from: NaiveDate, to: NaiveDate, today: NaiveDate) -> Option<(NaiveDate, NaiveDate)> {
    let to = to.min(today);
    (from <= to).then_some((from, to))
}

/// The query's words: lower-cased runs of letters and digits, with `-` kept
/// inside ISO dates.
fn words(query: &str) -> Vec<String> {
    query
        .split(|c: char| !(c.is_alphanumeric() || c == '-'))
        .flat_map(|w| {
            let iso = w.len() == 10 && NaiveDate::parse_from_str(w, "%Y-%m-%d").is_ok();
            if iso {
                vec![w.to_string()]
            } else {
                w.split('-').map(str::to_string).collect()
            }
        })
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
        .collect()
}

/// The first time phrase of `query`, as a window of days ending no later than
/// `today` (the user's date now); `None` when it names no time.
pub fn date_window(query: &str, today: NaiveDate) -> Option<DateWindow> {
    let w = words(query);
    let at = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    let phrase = |a: usize, b: usize| w[a..b.min(w.len())].join(" ");
    let day = |d: NaiveDate| (d, d);
    for i in 0..w.len() {
        let word = at(i);
        let hit: Option<((NaiveDate, NaiveDate), usize)> = (|| {
            // ISO date.
            if let Ok(d) = NaiveDate::parse_from_str(word, "%Y-%m-%d") {
                return Some((day(d), i + 1));
            }
            // Month day [year]: "May 4th", "May 4, 2023"; a month: "in March", "May 2021".
            if let Some(m) = month(word) {
                if let Some(d) = day_of_month(at(i + 1)) {
                    let y = year(at(i + 2));
                    let date = match y {
                        Some(y) => NaiveDate::from_ymd_opt(y, m, d),
                        None => recent_date(m, d, today),
                    }?;
                    return Some((day(date), if y.is_some() { i + 3 } else { i + 2 }));
                }
                if let Some(y) = year(at(i + 1)) {
                    return Some((month_span(y, m)?, i + 2));
                }
                let prev = if i > 0 { at(i - 1) } else { "" };
                if matches!(
                    prev,
                    "in" | "of" | "during" | "since" | "early" | "late" | "mid"
                ) {
                    return Some((recent_month(m, today)?, i + 1));
                }
            }
            // Day month [year]: "4 May", "the 4th of May".
            if let Some(d) = day_of_month(word) {
                let mi = if at(i + 1) == "of" { i + 2 } else { i + 1 };
                if let Some(m) = month(at(mi)) {
                    let date = match year(at(mi + 1)) {
                        Some(y) => NaiveDate::from_ymd_opt(y, m, d),
                        None => recent_date(m, d, today),
                    }?;
                    let end = if year(at(mi + 1)).is_some() {
                        mi + 2
                    } else {
                        mi + 1
                    };
                    return Some((day(date), end));
                }
            }
            match word {
                "today" | "tonight" => return Some((day(today), i + 1)),
                "yesterday" => return Some((day(today - Duration::days(1)), i + 1)),
                _ => {}
            }
            // "this morning", "this week", "this month", "this year", "this spring".
            if word == "this" || word == "last" || word == "past" || word == "previous" {
                let last = word != "this";
                let next = at(i + 1);
                match next {
                    "morning" | "afternoon" | "evening" if !last => {
                        return Some((day(today), i + 2));
                    }
                    "night" if last => {
                        return Some(((today - Duration::days(1), today), i + 2));
                    }
                    "week" => {
                        let monday = today
                            - Duration::days(i64::from(today.weekday().num_days_from_monday()));
                        return if last {
                            Some((
                                (monday - Duration::days(7), monday - Duration::days(1)),
                                i + 2,
                            ))
                        } else {
                            Some(((monday, today), i + 2))
                        };
                    }
                    "weekend" => {
                        // The most recent Saturday–Sunday that has begun.
                        let back = (today.weekday().num_days_from_monday() + 7 - 5) % 7;
                        let sat = today - Duration::days(i64::from(back));
                        let sat = if last && back <= 1 {
                            sat - Duration::days(7)
                        } else {
                            sat
                        };
                        return clamp(sat, sat + Duration::days(1), today).map(|r| (r, i + 2));
                    }
                    "month" => {
                        let (a, b) = month_span(today.year(), today.month())?;
                        return if last {
                            let prev = a - Duration::days(1);
                            Some((month_span(prev.year(), prev.month())?, i + 2))
                        } else {
                            clamp(a, b, today).map(|r| (r, i + 2))
                        };
                    }
                    "year" => {
                        let y = if last { today.year() - 1 } else { today.year() };
                        let a = NaiveDate::from_ymd_opt(y, 1, 1)?;
                        let b = NaiveDate::from_ymd_opt(y, 12, 31)?;
                        return clamp(a, b, today).map(|r| (r, i + 2));
                    }
                    _ => {}
                }
                if let Some((f, l)) = season(next) {
                    let (a, b) = recent_season(
                        f,
                        l,
                        today,
                        last && {
                            // "last spring" while it is spring: the one before.
                            let (a, b) = recent_season(f, l, today, false)?;
                            (a..=b).contains(&today)
                        },
                    )?;
                    return clamp(a, b, today).map(|r| (r, i + 2));
                }
                if let Some(&(_, wd)) = WEEKDAYS.iter().find(|(n, _)| *n == next) {
                    let back = (today.weekday().num_days_from_monday() + 7
                        - wd.num_days_from_monday())
                        % 7;
                    let back = if back == 0 { 7 } else { back };
                    return Some((day(today - Duration::days(i64::from(back))), i + 2));
                }
                if let Some(m) = month(next) {
                    let (a, b) = recent_month(m, today)?;
                    let (a, b) = if last && (a..=b).contains(&today) {
                        month_span(a.year() - 1, m)?
                    } else {
                        (a, b)
                    };
                    return clamp(a, b, today).map(|r| (r, i + 2));
                }
            }
            // "in the spring", "in spring", "over the summer", "during the winter".
            if matches!(word, "in" | "over" | "during") {
                let j = if at(i + 1) == "the" { i + 2 } else { i + 1 };
                if let Some((f, l)) = season(at(j)) {
                    let (a, b) = recent_season(f, l, today, false)?;
                    return clamp(a, b, today).map(|r| (r, j + 1));
                }
            }
            // "on Tuesday": the most recent Tuesday up to today.
            if let Some(&(_, wd)) = WEEKDAYS.iter().find(|(n, _)| *n == word) {
                let back =
                    (today.weekday().num_days_from_monday() + 7 - wd.num_days_from_monday()) % 7;
                return Some((day(today - Duration::days(i64::from(back))), i + 1));
            }
            // "N days / weeks / months / years ago", "a few days ago".
            if let Some((lo, hi)) = count(word) {
                let unit = at(i + 1);
                let (unit, ago_at) = if unit == "of" {
                    (at(i + 2), i + 3) // "a couple of days ago"
                } else {
                    (unit, i + 2)
                };
                if at(ago_at) == "ago" {
                    let days = match unit.trim_end_matches('s') {
                        "day" => 1,
                        "week" => 7,
                        "month" => 30,
                        "year" => 365,
                        _ => return None,
                    };
                    // An exact count is a little fuzzy, a vague one more so.
                    let slack = if lo == hi { (days / 7).max(1) } else { 0 };
                    let from = today - Duration::days(hi * days + slack);
                    let to = today - Duration::days((lo * days - slack).max(0));
                    return clamp(from, to, today).map(|r| (r, ago_at + 1));
                }
            }
            None
        })();
        if let Some(((from, to), end)) = hit {
            if from > today {
                continue;
            }
            return Some(DateWindow {
                from,
                to: to.min(today),
                phrase: phrase(i, end),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {

    /// West of UTC, a dated note's file-name date is its day (not the zone's
    /// day its 00:00 UTC falls in), while a transcript turn is judged by the
    /// user's clock. Control: the zone's range alone would take tomorrow's
    /// note for yesterday's.
    #[test]
    fn days_across_a_daylight_saving_change_use_the_offset_in_force() {
        // New York springs forward on 2026-03-08: that day is 23 hours long,
        // from 05:00 UTC (EST) to 04:00 UTC the next day (EDT).
        let ny = DayZone::Named(chrono_tz::America::New_York);
        let w = DateWindow {
            from: d("2026-03-08"),
            to: d("2026-03-08"),
            phrase: "on march 8th".into(),
        };
        assert_eq!(w.unix_range_in(&ny), (1_772_946_000, 1_773_028_800));
        // 00:30 EDT on the 9th is the next day; the old rule (one offset, EST,
        // for every time) took it for the 8th.
        let next_day = 1_773_030_600;
        assert!(!w.holds_in(next_day, &ny));
        assert!(w.holds(next_day, -5 * 3600));
        assert!(w.holds_in(1_773_028_799, &ny));
        // A date without a time is still its calendar date.
        assert!(w.holds_in(1_772_928_000, &ny));
        // Today is the zone's date now.
        assert_eq!(ny.date_at(next_day), d("2026-03-09"));
    }

    #[test]
    fn dated_notes_are_judged_by_their_date_and_turns_in_the_users_zone() {
        let day = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        let w = DateWindow {
            from: day("2026-05-04"),
            to: day("2026-05-04"),
            phrase: "yesterday".into(),
        };
        let new_york = -5 * 3600;
        let midnight = |s: &str| day(s).and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp();
        let (may4, may5) = (midnight("2026-05-04"), midnight("2026-05-05"));
        assert!(w.holds(may4, new_york));
        assert!(!w.holds(may5, new_york));
        // 23:00 on May 4th in New York is 04:00 UTC on May 5th: inside.
        assert!(w.holds(may5 + 4 * 3600, new_york));
        // 01:00 on May 5th in New York: outside.
        assert!(!w.holds(may5 + 6 * 3600, new_york));
        // 22:00 on May 3rd in New York (03:00 UTC May 4th): outside.
        assert!(!w.holds(may4 + 3 * 3600, new_york));
        // The control: the zone's range alone gets the notes wrong.
        assert!(!w.contains(may4, new_york) && w.contains(may5, new_york));
        let (a, b) = w.span(new_york);
        assert!(a <= may4 && may5 + 4 * 3600 < b);
        // East of UTC too: Tokyo's May 4th note is May 4th's.
        assert!(w.holds(may4, 9 * 3600) && !w.holds(may5, 9 * 3600));
    }

    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    /// (from, to) of the window, as strings.
    fn win(q: &str, today: &str) -> Option<(String, String)> {
        date_window(q, d(today)).map(|w| (w.from.to_string(), w.to.to_string()))
    }

    fn is(q: &str, today: &str, from: &str, to: &str) {
        assert_eq!(
            win(q, today),
            Some((from.to_string(), to.to_string())),
            "{q} (today {today})"
        );
    }

    #[test]
    fn named_days() {
        // 2023-05-07 is a Sunday.
        let t = "2023-05-07";
        is(
            "On May 4th, I shared some problems. What were they?",
            t,
            "2023-05-04",
            "2023-05-04",
        );
        is(
            "what did we talk about on April 27th?",
            t,
            "2023-04-27",
            "2023-04-27",
        );
        is(
            "I mentioned on May 2nd that I went to the museum",
            t,
            "2023-05-02",
            "2023-05-02",
        );
        is("the 4th of May", t, "2023-05-04", "2023-05-04");
        is("on 4 May", t, "2023-05-04", "2023-05-04");
        is("on May 4, 2022 we met", t, "2022-05-04", "2022-05-04");
        is("notes from 2023-05-01", t, "2023-05-01", "2023-05-01");
        // A day later in the year than today: last year's.
        is(
            "what did I buy on December 24th",
            t,
            "2022-12-24",
            "2022-12-24",
        );
        is("Sept 3rd", t, "2022-09-03", "2022-09-03");
    }

    #[test]
    fn relative_days_and_weeks() {
        let t = "2023-05-07"; // Sunday
        is("what did I do yesterday", t, "2023-05-06", "2023-05-06");
        is("today's plan", t, "2023-05-07", "2023-05-07");
        is(
            "A few days ago I mentioned a park",
            t,
            "2023-05-02",
            "2023-05-05",
        );
        is("a couple of days ago", t, "2023-05-04", "2023-05-05");
        is("3 days ago", t, "2023-05-03", "2023-05-05");
        is("two weeks ago", t, "2023-04-22", "2023-04-24");
        is(
            "what paperwork did I sort out last week?",
            t,
            "2023-04-24",
            "2023-04-30",
        );
        is("this week", t, "2023-05-01", "2023-05-07");
        is("on Tuesday", t, "2023-05-02", "2023-05-02");
        is("last Sunday", t, "2023-04-30", "2023-04-30");
        is("last night", t, "2023-05-06", "2023-05-07");
        is("last weekend", t, "2023-04-29", "2023-04-30");
    }

    #[test]
    fn months_years_and_seasons() {
        let t = "2023-05-07";
        is(
            "what goal did I set in January?",
            t,
            "2023-01-01",
            "2023-01-31",
        );
        is("in May", t, "2023-05-01", "2023-05-07");
        is("in June", t, "2022-06-01", "2022-06-30");
        is("last month", t, "2023-04-01", "2023-04-30");
        is("this month", t, "2023-05-01", "2023-05-07");
        is("last year", t, "2022-01-01", "2022-12-31");
        is("in the spring", t, "2023-03-01", "2023-05-07");
        is("last summer", t, "2022-06-01", "2022-08-31");
        is("over the winter", t, "2022-12-01", "2023-02-28");
        is("in March 2021", t, "2021-03-01", "2021-03-31");
    }

    #[test]
    fn no_time_no_window() {
        let t = "2023-05-07";
        for q in [
            "what painters did you recommend to me?",
            "may I ask what you think?",
            "you may remember the recipe",
            "the 4th question",
            "spring cleaning tips",
            "a few ideas for dinner",
            "what did I buy for 20 euros",
            "march of the penguins",
            "ZX-4471 deploy",
            "",
        ] {
            assert_eq!(win(q, t), None, "{q}");
        }
    }

    #[test]
    fn windows_never_end_after_today_and_convert_to_unix_days() {
        let w = date_window("this year", d("2023-05-07")).unwrap();
        assert_eq!(w.to, d("2023-05-07"));
        assert_eq!(w.phrase, "this year");
        let w = date_window("on May 4th", d("2023-05-07")).unwrap();
        let (a, b) = w.unix_range(0);
        assert_eq!(b - a, 86_400);
        assert_eq!(
            a,
            d("2023-05-04")
                .and_hms_opt(0, 0, 0)
                .unwrap()
                .and_utc()
                .timestamp()
        );
        // Two hours east of UTC: the day starts two hours earlier in UTC.
        assert_eq!(w.unix_range(7200).0, a - 7200);
        assert!(w.contains(a + 3600, 0) && !w.contains(b, 0));
    }
}

//! Dates that drive temporal decay: `memory/YYYY-MM-DD.md` and `YYYY-MM-DD-*.md`
//! file names. Pure.

use chrono::NaiveDate;

/// The date in a dated note's file name (`2026-11-02.md`, `2026-11-02-standup.md`),
/// as unix seconds at 00:00 UTC; `None` for evergreen files (MEMORY.md, undated names)
/// and for malformed dates (`2026-13-45.md`).
pub fn note_time_from_path(path: &str) -> Option<i64> {
    let name = path.rsplit('/').next()?;
    let stem = name
        .strip_suffix(".md")
        .or_else(|| name.strip_suffix(".markdown"))?;
    if stem.len() < 10 || !stem.is_char_boundary(10) {
        return None;
    }
    let (date, rest) = stem.split_at(10);
    if !(rest.is_empty() || rest.starts_with('-') || rest.starts_with('_') || rest.starts_with(' '))
    {
        return None;
    }
    let b = date.as_bytes();
    if !(b[4] == b'-' && b[7] == b'-') {
        return None;
    }
    let d = NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
    Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_and_evergreen() {
        assert_eq!(
            note_time_from_path("memory/2026-11-02.md"),
            Some(1_793_577_600)
        );
        assert!(note_time_from_path("memory/2026-11-02-standup.md").is_some());
        assert!(note_time_from_path("journal/2020-01-01.markdown").is_some());
        assert_eq!(note_time_from_path("MEMORY.md"), None);
        assert_eq!(note_time_from_path("memory/projects.md"), None);
        assert_eq!(note_time_from_path("memory/2026-13-45.md"), None);
        assert_eq!(note_time_from_path("memory/2026-11-021.md"), None);
        assert_eq!(note_time_from_path("memory/20261102.md"), None);
        assert_eq!(note_time_from_path("memory/日本語の日記.md"), None);
    }
}

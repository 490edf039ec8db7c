//! Output plumbing shared by commands: the text/JSON choice, exit codes, and
//! terminal detection for progress bars.

use serde::Serialize;
use std::io::{IsTerminal, Write};

/// Process exit status, like ripgrep: 0 found/ok, 1 nothing found, 2 error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    NoMatch,
    Error,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::NoMatch => 1,
            Exit::Error => 2,
        }
    }
}

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

impl Output {
    pub fn from_flag(json: bool) -> Output {
        if json { Output::Json } else { Output::Text }
    }
}

/// Print one JSON document on stdout.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Whether progress bars should be drawn (stderr is a terminal and output is text).
pub fn show_progress(output: Output) -> bool {
    output == Output::Text && std::io::stderr().is_terminal()
}

/// clap value parser for a finite number (`NaN`, `inf` are refused).
pub fn finite_f64(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(format!("`{s}` is not a finite number")),
        Err(e) => Err(format!("`{s}`: {e}")),
    }
}

/// Neutralise terminal control sequences in text bound for a terminal: every C0
/// control except `\n` and `\t` (ESC, BEL, `\r`, …), DEL, the C1 controls
/// (U+0080–U+009F, e.g. the 8-bit CSI) and the bidi overrides are replaced by a
/// visible `\x1b` / `\u{202e}` escape, so note text and file names can neither
/// clear the screen, recolour it, write the clipboard (OSC 52) nor reorder a line.
/// JSON output never goes through this (serde escapes controls itself).
pub fn sanitize(s: &str) -> std::borrow::Cow<'_, str> {
    fn hostile(c: char) -> bool {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !s.chars().any(hostile) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !hostile(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// [`sanitize`] for a path.
pub fn sanitize_path(p: &std::path::Path) -> String {
    sanitize(&p.display().to_string()).into_owned()
}

/// One line for `claw memory status`: whether a watcher keeps the index fresh.
pub fn describe_watcher(
    status: Option<&claw_memory_api::watch::WatcherStatus>,
    now: i64,
) -> String {
    let ago = |t: Option<i64>| match t {
        Some(t) => format!("{}s ago", (now - t).max(0)),
        None => "never".to_string(),
    };
    match status {
        None => "no watcher running (run `claw memory watch` to keep the index fresh)".into(),
        Some(s) if s.alive => format!(
            "watching (pid {}), last event {}, last sync {}, {} pending",
            s.row.pid,
            ago(s.row.last_event),
            ago(s.row.last_sync),
            s.row.pending
        ),
        Some(s) => format!(
            "NOT RUNNING: watcher pid {} stopped answering (last heartbeat {}); the index may be behind the disk",
            s.row.pid,
            ago(Some(s.row.heartbeat))
        ),
    }
}

/// The command that registers `u` again, as the user would type it.
pub fn register_command(u: &claw_memory_api::state::UntrustedSource) -> String {
    let mut cmd = format!(
        "claw memory add {} --name {}",
        shell_quote(&u.root.display().to_string()),
        shell_quote(&u.name)
    );
    if u.follow_symlinks_outside {
        cmd.push_str(" --follow-symlinks-outside");
    }
    cmd
}

/// `s` as one shell word: as it is when it is plain, else single-quoted.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:,@%=".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::{finite_f64, register_command, sanitize};
    use claw_memory_api::state::UntrustedSource;

    #[test]
    fn only_finite_numbers_parse() {
        assert_eq!(finite_f64("0.5"), Ok(0.5));
        assert_eq!(finite_f64("-1"), Ok(-1.0));
        for bad in ["NaN", "nan", "inf", "-inf", "infinity", "x"] {
            assert!(finite_f64(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn controls_are_made_visible_newlines_and_tabs_kept() {
        assert_eq!(sanitize("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(sanitize("a\x1b]52;c;aGk=\x07b"), "a\\x1b]52;c;aGk=\\x07b");
        assert_eq!(
            sanitize("\x1b[2J\x1b[31mred\r"),
            "\\x1b[2J\\x1b[31mred\\x0d"
        );
        assert_eq!(sanitize("c1\u{9b}2J del\u{7f}"), "c1\\x9b2J del\\x7f");
        assert_eq!(sanitize("rtl\u{202e}txt"), "rtl\\u{202e}txt");
        assert_eq!(sanitize("日本語 ok"), "日本語 ok");
    }

    #[test]
    fn the_register_command_quotes_what_a_shell_would_split() {
        let u = UntrustedSource {
            name: "pw".into(),
            root: "/home/me/My Notes/it's".into(),
            follow_symlinks_outside: true,
            reason: String::new(),
            found_in: Default::default(),
        };
        assert_eq!(
            register_command(&u),
            r"claw memory add '/home/me/My Notes/it'\''s' --name pw --follow-symlinks-outside"
        );
        let u = UntrustedSource {
            root: "/srv/notes".into(),
            follow_symlinks_outside: false,
            ..u
        };
        assert_eq!(register_command(&u), "claw memory add /srv/notes --name pw");
    }
}

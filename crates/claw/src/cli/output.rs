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

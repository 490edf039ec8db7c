//! The one table of chat commands (`/remember`, `/compact`, `/new`, `/stop`,
//! `/agents`, `/help`, `/exit`): the local REPL, the REPL through a gateway, the
//! gateway's session workers (WebChat, the HTTP API, chat channels) all parse a
//! line with [`parse`] and show [`help`], so a command means the same everywhere.
//!
//! A line is a command only when it is one word starting with `/` (so a message
//! like `/etc/hosts has what?` still reaches the model); bare `exit` and `quit`
//! end a REPL ([`Surface::Repl`]) and are messages elsewhere.

/// A chat command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Distil this conversation's durable facts into MEMORY.md now.
    Remember,
    /// Compact the conversation now (memory flush, MEMORY.md, summary).
    Compact,
    /// Start a fresh session (the old transcript is kept).
    New,
    /// Cancel the running turn and the session's sub-agents.
    Stop,
    /// List the session's sub-agents.
    Agents,
    /// The command list.
    Help,
    /// Leave the REPL.
    Exit,
}

/// Where a line was typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// A terminal REPL (local or through a gateway): bare `exit`/`quit` leave.
    Repl,
    /// WebChat, the HTTP API, a chat channel.
    Chat,
}

/// One row of the table.
pub struct Entry {
    pub command: Command,
    /// The name, with its slash.
    pub name: &'static str,
    /// Other spellings (with their slash).
    pub aliases: &'static [&'static str],
    /// One line of help.
    pub help: &'static str,
}

/// The commands, in the order `/help` lists them.
pub const COMMANDS: &[Entry] = &[
    Entry {
        command: Command::Remember,
        name: "/remember",
        aliases: &[],
        help: "distil durable facts of this conversation into MEMORY.md now",
    },
    Entry {
        command: Command::Compact,
        name: "/compact",
        aliases: &[],
        help: "compact the conversation now (memory flush, MEMORY.md, summary)",
    },
    Entry {
        command: Command::New,
        name: "/new",
        aliases: &[],
        help: "start a fresh session (the old transcript is kept, renamed)",
    },
    Entry {
        command: Command::Stop,
        name: "/stop",
        aliases: &[],
        help: "cancel the running turn and its sub-agents (or press Ctrl-C)",
    },
    Entry {
        command: Command::Agents,
        name: "/agents",
        aliases: &[],
        help: "list this session's sub-agents with their state",
    },
    Entry {
        command: Command::Exit,
        name: "/exit",
        aliases: &["/quit"],
        help: "quit (or exit, quit, Ctrl-D)",
    },
    Entry {
        command: Command::Help,
        name: "/help",
        aliases: &[],
        help: "this help",
    },
];

/// What a line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Nothing but whitespace.
    Empty,
    Command(Command),
    /// One `/word` that is no command (say so; never sent to the model).
    Unknown(String),
    /// A message for the model.
    Message,
}

/// Parse a typed line.
pub fn parse(line: &str, surface: Surface) -> Line {
    let text = line.trim();
    if text.is_empty() {
        return Line::Empty;
    }
    if surface == Surface::Repl && matches!(text, "exit" | "quit") {
        return Line::Command(Command::Exit);
    }
    if !text.starts_with('/') || text.contains(char::is_whitespace) {
        return Line::Message;
    }
    match COMMANDS
        .iter()
        .find(|e| e.name == text || e.aliases.contains(&text))
    {
        Some(e) => Line::Command(e.command),
        None => Line::Unknown(text.to_string()),
    }
}

/// The `/help` text.
pub fn help() -> String {
    let mut out = String::from("commands:");
    for e in COMMANDS {
        out.push_str(&format!("\n  {:<10} {}", e.name, e.help));
    }
    out
}

/// What an unknown command gets.
pub fn unknown(cmd: &str) -> String {
    format!("unknown command {cmd}; /help lists them")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_the_same_everywhere_but_bare_exit() {
        assert_eq!(
            parse(" /remember ", Surface::Chat),
            Line::Command(Command::Remember)
        );
        assert_eq!(parse("/quit", Surface::Chat), Line::Command(Command::Exit));
        assert_eq!(parse("quit", Surface::Repl), Line::Command(Command::Exit));
        assert_eq!(parse("exit", Surface::Chat), Line::Message);
        assert_eq!(parse("/nope", Surface::Repl), Line::Unknown("/nope".into()));
        assert_eq!(parse("/etc/hosts has what?", Surface::Repl), Line::Message);
        assert_eq!(parse("  ", Surface::Chat), Line::Empty);
        assert_eq!(parse("hello", Surface::Repl), Line::Message);
    }

    #[test]
    fn help_lists_every_command() {
        let h = help();
        for e in COMMANDS {
            assert!(h.contains(e.name) && h.contains(e.help), "{h}");
            assert_eq!(parse(e.name, Surface::Chat), Line::Command(e.command));
        }
        assert!(h.starts_with("commands:\n  /remember  distil"), "{h}");
    }
}

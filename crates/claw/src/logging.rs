//! The process's one `tracing` subscriber, installed by `main`.
//!
//! Every crate logs through `tracing`; this is where it goes: stderr, at the
//! level `RUST_LOG` asks for (read by `config`, like every variable), else
//! `warn` — plus the gateway's own lines (`info` on target `claw_gateway`)
//! under `claw gateway`. Colours only when stderr is a terminal. The text
//! format keeps the gateway's old timestamps (`2026-05-01T10:00:00.123Z`);
//! `claw gateway --log-format json` writes one JSON object a line instead.

use claw_base::Clock;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// How log lines are written (`claw gateway --log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `<time> <LEVEL> <target>: <message>`, one line each.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `message` and the
    /// event's fields.
    Json,
}

/// Where a subscriber's filter comes from when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "warn";
/// The gateway's default: its own lines too.
const GATEWAY_FILTER: &str = "warn,claw_gateway=info";

/// Timestamps read from claw's clock, in the gateway's old format.
struct ClockTime;

impl FormatTime for ClockTime {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        write!(
            w,
            "{}",
            Clock::System.now().format("%Y-%m-%dT%H:%M:%S%.3fZ")
        )
    }
}

/// Install the subscriber. `rust_log` is `RUST_LOG`'s value; `gateway` says the
/// command is `claw gateway` (whose lines are logged at `info`). A second call
/// (tests) leaves the first subscriber in place.
pub fn install(rust_log: Option<&str>, gateway: bool, format: LogFormat) {
    let default = if gateway {
        GATEWAY_FILTER
    } else {
        DEFAULT_FILTER
    };
    let filter = EnvFilter::builder().parse_lossy(rust_log.unwrap_or(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_timer(ClockTime);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

//! What several of the driver tests build the same way.

use chrono::FixedOffset;
use claw_agent::driver::DriverOptions;
use std::path::Path;

/// Driver options for a turn in `ws`, session `session_key`: UTC, 30
/// iterations, 512 tokens, a 32,000-token window.
pub fn driver_options(ws: &Path, session_key: &str) -> DriverOptions {
    DriverOptions {
        workspace: ws.to_path_buf(),
        sessions_dir: ws.join("sessions"),
        session_key: session_key.into(),
        secrets: vec![],
        max_iterations: 30,
        max_tokens: 512,
        context_window: 32_000,
        utc_offset: FixedOffset::east_opt(0).unwrap(),
        timezone: "UTC".into(),
        os: "test".into(),
        clock: Default::default(),
        memory_max_bytes: claw_agent::consolidate::DEFAULT_MAX_BYTES,
    }
}

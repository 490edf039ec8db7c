//! Progress of long work (`claw memory index`) for people and machines: a bar
//! with a smoothed rate and an ETA on a terminal, a plain line every few
//! seconds off it (a log, CI, `nohup`), one JSON object per update with
//! `--progress json`, or nothing. The rate is an exponentially weighted
//! average over one-second windows, so it does not jump with each file's
//! size; the ETA is what remains at that rate. [`Meter`] is the pure part (it
//! is given the time), the rest renders it to stderr.

use super::output::{Output, show_progress};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// `--progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar on a terminal, a line every few seconds off it; nothing with `--json`.
    Auto,
    /// The bar (on a terminal only).
    Bar,
    /// A line every few seconds on stderr.
    Lines,
    /// One JSON object per second on stderr.
    Json,
    /// Nothing.
    None,
}

/// Weight of the newest window in the smoothed rate.
const ALPHA: f64 = 0.3;
/// Shortest window the rate is measured over.
const WINDOW: Duration = Duration::from_secs(1);
/// A plain line at most this often.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// Where the work stands, as rendered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    /// What is being done (`indexing`).
    pub phase: &'static str,
    pub done: u64,
    pub total: u64,
    /// Smoothed items per second (None until the first window closed).
    pub rate: Option<f64>,
    /// Seconds left at that rate.
    pub eta_secs: Option<u64>,
    pub elapsed_secs: u64,
}

/// The smoothed rate and the ETA of `done` out of `total`; times are given.
#[derive(Debug, Clone)]
pub struct Meter {
    start: Instant,
    total: u64,
    done: u64,
    window_start: (Instant, u64),
    rate: Option<f64>,
}

impl Meter {
    pub fn new(start: Instant) -> Meter {
        Meter {
            start,
            total: 0,
            done: 0,
            window_start: (start, 0),
            rate: None,
        }
    }

    pub fn set_total(&mut self, total: u64) {
        self.total = total;
    }

    /// `done` items at `now`; the rate moves once per closed window.
    pub fn update(&mut self, done: u64, now: Instant) {
        self.done = done;
        let (t0, d0) = self.window_start;
        let dt = now.saturating_duration_since(t0);
        if dt >= WINDOW {
            let inst = done.saturating_sub(d0) as f64 / dt.as_secs_f64();
            self.rate = Some(match self.rate {
                None => inst,
                Some(r) => ALPHA * inst + (1.0 - ALPHA) * r,
            });
            self.window_start = (now, done);
        }
    }

    pub fn snapshot(&self, phase: &'static str, now: Instant) -> Snapshot {
        let left = self.total.saturating_sub(self.done);
        Snapshot {
            phase,
            done: self.done,
            total: self.total,
            rate: self.rate.map(|r| (r * 10.0).round() / 10.0),
            eta_secs: self
                .rate
                .filter(|r| *r > 0.0)
                .map(|r| (left as f64 / r).ceil() as u64),
            elapsed_secs: now.saturating_duration_since(self.start).as_secs(),
        }
    }
}

/// `2h05m`, `3m07s`, `12s`.
pub fn human_duration(secs: u64) -> String {
    match secs {
        s if s >= 3600 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// One plain progress line (`lines` mode).
pub fn line(s: &Snapshot, unit: &str, extra: &str) -> String {
    let pct = (s.done * 100)
        .checked_div(s.total)
        .map(|p| format!(" ({p}%)"))
        .unwrap_or_default();
    let rate = s
        .rate
        .map(|r| format!(", {r:.1} {unit}/s"))
        .unwrap_or_default();
    let eta = s
        .eta_secs
        .map(|e| format!(", ETA {}", human_duration(e)))
        .unwrap_or_default();
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    };
    format!(
        "{}: {}/{} {unit}{pct}{rate}{eta}{extra}",
        s.phase, s.done, s.total
    )
}

enum Sink {
    Bar(indicatif::ProgressBar),
    Lines { last: Option<Instant> },
    Json { last: Option<Instant> },
    None,
}

/// Renders a [`Meter`] to stderr in the chosen mode.
pub struct Reporter {
    phase: &'static str,
    unit: &'static str,
    meter: Meter,
    sink: Sink,
}

impl Reporter {
    /// `mode` for a command whose result goes out as `output`.
    pub fn new(
        mode: ProgressMode,
        output: Output,
        phase: &'static str,
        unit: &'static str,
    ) -> Self {
        let tty = std::io::stderr().is_terminal();
        let sink = match mode {
            ProgressMode::Auto if output == Output::Json => Sink::None,
            ProgressMode::Auto if show_progress(output) => Sink::Bar(bar()),
            ProgressMode::Auto => Sink::Lines { last: None },
            ProgressMode::Bar if tty => Sink::Bar(bar()),
            ProgressMode::Bar | ProgressMode::None => Sink::None,
            ProgressMode::Lines => Sink::Lines { last: None },
            ProgressMode::Json => Sink::Json { last: None },
        };
        Reporter {
            phase,
            unit,
            meter: Meter::new(Instant::now()),
            sink,
        }
    }

    pub fn set_total(&mut self, total: u64) {
        self.meter.set_total(total);
        if let Sink::Bar(b) = &self.sink {
            b.set_length(total);
        }
    }

    /// `done` items so far; `extra` is shown after the rate (`120 chunks`).
    pub fn update(&mut self, done: u64, extra: &str) {
        let now = Instant::now();
        self.meter.update(done, now);
        let snap = || self.meter.snapshot(self.phase, now);
        let due = |last: &mut Option<Instant>, every: Duration| {
            let first_after = |t: Instant| now.saturating_duration_since(t) >= every;
            let go = match *last {
                None => first_after(self.meter.start),
                Some(t) => first_after(t),
            };
            if go {
                *last = Some(now);
            }
            go
        };
        match &mut self.sink {
            Sink::Bar(b) => {
                let s = snap();
                b.set_position(done);
                let rate = s
                    .rate
                    .map(|r| format!("{r:.1} {}/s", self.unit))
                    .unwrap_or_default();
                let eta = s
                    .eta_secs
                    .map(|e| format!(", ETA {}", human_duration(e)))
                    .unwrap_or_default();
                b.set_message(format!("{rate}{eta} {extra}"));
            }
            Sink::Lines { last } => {
                if due(last, LINE_EVERY) {
                    let l = line(&snap(), self.unit, extra);
                    let _ = writeln!(std::io::stderr().lock(), "{}", super::output::sanitize(&l));
                }
            }
            Sink::Json { last } => {
                if due(last, WINDOW)
                    && let Ok(j) = serde_json::to_string(&snap())
                {
                    let _ = writeln!(std::io::stderr().lock(), "{j}");
                }
            }
            Sink::None => {}
        }
    }

    /// Clear the bar; a final JSON object says the work is done.
    pub fn finish(&mut self) {
        let now = Instant::now();
        match &self.sink {
            Sink::Bar(b) => b.finish_and_clear(),
            Sink::Json { .. } => {
                let mut s = self.meter.snapshot(self.phase, now);
                s.eta_secs = Some(0);
                if let Ok(j) = serde_json::to_string(&s) {
                    let _ = writeln!(std::io::stderr().lock(), "{j}");
                }
            }
            Sink::Lines { .. } | Sink::None => {}
        }
    }
}

fn bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} indexing [{bar:30}] {pos}/{len} files {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// An index run's progress ([`claw_memory_api::Progress`]) on a [`Reporter`]:
/// files done of those to read, with the chunks written and embedded so far.
/// Shared by `claw memory index` and the vector catch-up of `claw memory watch`.
pub struct IndexProgress {
    reporter: std::sync::Mutex<Reporter>,
    /// Files, chunks written, chunks embedded.
    totals: [std::sync::atomic::AtomicU64; 3],
}

impl IndexProgress {
    pub fn new(reporter: Reporter) -> IndexProgress {
        IndexProgress {
            reporter: std::sync::Mutex::new(reporter),
            totals: [(); 3].map(|()| std::sync::atomic::AtomicU64::new(0)),
        }
    }

    /// One step of the run (the indexer's progress callback).
    pub fn on(&self, p: claw_memory_api::Progress) {
        match p {
            claw_memory_api::Progress::Planned { to_read, .. } => {
                if let Ok(mut r) = self.reporter.lock() {
                    r.set_total(to_read as u64);
                }
            }
            claw_memory_api::Progress::File { chunks, embedded } => {
                let add = |i: usize, n: u64| {
                    self.totals[i].fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n
                };
                let (done, chunks, embedded) =
                    (add(0, 1), add(1, chunks as u64), add(2, embedded as u64));
                if let Ok(mut r) = self.reporter.lock() {
                    r.update(done, &format!("{chunks} chunks, {embedded} embedded"));
                }
            }
        }
    }

    /// The run ended: clear the bar (a last JSON object says so).
    pub fn finish(&self) {
        if let Ok(mut r) = self.reporter.lock() {
            r.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_smoothed_and_the_eta_follows_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut m = Meter::new(t0);
        m.set_total(1000);
        m.update(5, at(500));
        assert_eq!(
            m.snapshot("indexing", at(500)).rate,
            None,
            "no window closed yet"
        );
        m.update(100, at(1000));
        let s = m.snapshot("indexing", at(1000));
        assert_eq!((s.rate, s.eta_secs), (Some(100.0), Some(9)));
        // A burst (a run of tiny files) moves the rate by ALPHA only.
        m.update(600, at(2000));
        let s = m.snapshot("indexing", at(2000));
        assert_eq!(s.rate, Some(220.0), "0.3 × 500 + 0.7 × 100");
        assert_eq!(s.eta_secs, Some(2));
        // A stall: the rate decays instead of dropping to zero at once.
        m.update(600, at(3000));
        let s = m.snapshot("indexing", at(3000));
        assert_eq!(s.rate, Some(154.0));
        assert_eq!(s.elapsed_secs, 3);
        // Within a window nothing moves.
        m.update(610, at(3500));
        assert_eq!(m.snapshot("indexing", at(3500)).rate, Some(154.0));
    }

    #[test]
    fn lines_read_well() {
        let s = Snapshot {
            phase: "indexing",
            done: 1200,
            total: 7772,
            rate: Some(40.2),
            eta_secs: Some(164),
            elapsed_secs: 30,
        };
        assert_eq!(
            line(&s, "files", "3100 chunks"),
            "indexing: 1200/7772 files (15%), 40.2 files/s, ETA 2m44s, 3100 chunks"
        );
        let early = Snapshot {
            rate: None,
            eta_secs: None,
            total: 0,
            ..s
        };
        assert_eq!(line(&early, "files", ""), "indexing: 1200/0 files");
        assert_eq!(human_duration(7500), "2h05m");
        assert_eq!(human_duration(12), "12s");
    }
}

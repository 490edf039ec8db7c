//! Tool-loop breaker: watches the last [`WINDOW`] tool calls of a turn and detects
//! a model stuck in a loop — the same call repeated, two calls ping-ponging
//! (A,B,A,B…), or polling without progress (the same tool returning the same
//! result again and again). Escalates: a warning at [`WARN_AT`], a firm stop
//! instruction at [`STOP_AT`], ending the turn at [`BREAK_AT`]. Pure.
//!
//! Invariant: each escalation level is reported once per turn (no repeated nagging);
//! the level never goes down within a turn.

use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Sliding window of calls considered.
pub const WINDOW: usize = 30;
/// Pattern count at which a warning is injected.
pub const WARN_AT: usize = 10;
/// Pattern count at which a firm stop instruction is injected.
pub const STOP_AT: usize = 20;
/// Pattern count at which the turn is ended.
pub const BREAK_AT: usize = 30;

/// Which loop shape was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopKind {
    /// The same tool with the same arguments, again.
    Repeat,
    /// Two calls alternating: A, B, A, B, …
    PingPong,
    /// The same tool keeps returning the same result.
    NoProgress,
}

/// What the agent should do after a call was observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to say.
    Ok,
    /// Append this warning to the tool result the model will read.
    Warn(String),
    /// Append this firm instruction to stop calling tools.
    Stop(String),
    /// End the turn now; the text says why.
    Break(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Observed {
    tool: u64,
    call: u64,
    result: u64,
}

/// The breaker state of one turn.
#[derive(Debug, Clone, Default)]
pub struct Breaker {
    window: VecDeque<Observed>,
    /// 0 none, 1 warned, 2 stop sent, 3 broken.
    level: u8,
}

fn hash_of(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// Arguments compared by meaning when they are JSON (key order and whitespace ignored).
fn canonical_args(args: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(args) {
        Ok(v) => v.to_string(),
        Err(_) => args.trim().to_string(),
    }
}

impl Breaker {
    pub fn new() -> Breaker {
        Breaker::default()
    }

    /// Forget everything (a new user turn).
    pub fn reset(&mut self) {
        *self = Breaker::default();
    }

    /// Record one finished call (its tool, raw arguments and rendered result) and
    /// return what to do.
    pub fn observe(&mut self, tool: &str, arguments: &str, result: &str) -> Verdict {
        let args = canonical_args(arguments);
        let obs = Observed {
            tool: hash_of(&[tool]),
            call: hash_of(&[tool, &args]),
            result: hash_of(&[result]),
        };
        if self.window.len() == WINDOW {
            self.window.pop_front();
        }
        self.window.push_back(obs);
        let Some((kind, count)) = self.worst() else {
            return Verdict::Ok;
        };
        let new_level = match count {
            c if c >= BREAK_AT => 3,
            c if c >= STOP_AT => 2,
            c if c >= WARN_AT => 1,
            _ => 0,
        };
        if new_level <= self.level {
            return Verdict::Ok;
        }
        self.level = new_level;
        let what = describe(kind, tool, count);
        match new_level {
            1 => Verdict::Warn(format!(
                "[loop guard] Warning: {what}. This looks like a loop. Change your approach, \
                 or answer the user with what you have."
            )),
            2 => Verdict::Stop(format!(
                "[loop guard] STOP: {what}. Do not call any more tools for this request. \
                 Answer the user now with what you know, and say what is blocking you."
            )),
            _ => Verdict::Break(format!("stopped a tool loop: {what}; the turn was ended")),
        }
    }

    /// The most severe pattern in the window, as (kind, count).
    fn worst(&self) -> Option<(LoopKind, usize)> {
        let last = *self.window.back()?;
        let repeat = self.window.iter().filter(|o| o.call == last.call).count();
        let no_progress = self
            .window
            .iter()
            .rev()
            .take_while(|o| o.tool == last.tool && o.result == last.result)
            .count();
        let ping_pong = self.ping_pong_len();
        // On ties, the most specific description wins.
        [
            (LoopKind::NoProgress, no_progress),
            (LoopKind::PingPong, ping_pong),
            (LoopKind::Repeat, repeat),
        ]
        .into_iter()
        .max_by_key(|(_, c)| *c)
        .filter(|(_, c)| *c >= 2)
    }

    /// Length of the trailing run alternating between exactly two different calls.
    fn ping_pong_len(&self) -> usize {
        let calls: Vec<u64> = self.window.iter().rev().map(|o| o.call).collect();
        if calls.len() < 2 || calls[0] == calls[1] {
            return 0;
        }
        let (a, b) = (calls[0], calls[1]);
        calls
            .iter()
            .enumerate()
            .take_while(|(i, c)| **c == if i % 2 == 0 { a } else { b })
            .count()
    }
}

fn describe(kind: LoopKind, tool: &str, count: usize) -> String {
    match kind {
        LoopKind::Repeat => {
            format!("`{tool}` was called {count} times with the same arguments")
        }
        LoopKind::PingPong => format!("the last {count} tool calls alternate between two calls"),
        LoopKind::NoProgress => {
            format!("`{tool}` returned the same result {count} times in a row (no progress)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(b: &mut Breaker, calls: &[(&str, &str, &str)]) -> Vec<Verdict> {
        calls
            .iter()
            .map(|(t, a, r)| b.observe(t, a, r))
            .filter(|v| *v != Verdict::Ok)
            .collect()
    }

    #[test]
    fn varied_calls_never_trip() {
        let mut b = Breaker::new();
        for i in 0..100 {
            let args = format!(r#"{{"path":"f{i}.md"}}"#);
            let res = format!("content {i}");
            assert_eq!(b.observe("read_file", &args, &res), Verdict::Ok, "call {i}");
        }
    }

    #[test]
    fn same_call_escalates_warn_stop_break_once_each() {
        let mut b = Breaker::new();
        let mut seen = Vec::new();
        for i in 1..=30 {
            // Results differ so only the repeat detector fires.
            let v = b.observe("exec", r#"{"command":"ls"}"#, &format!("out {i}"));
            if v != Verdict::Ok {
                seen.push((i, v));
            }
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(seen[0].0, WARN_AT);
        assert!(matches!(&seen[0].1, Verdict::Warn(m) if m.contains("same arguments")));
        assert_eq!(seen[1].0, STOP_AT);
        assert!(matches!(&seen[1].1, Verdict::Stop(m) if m.contains("Do not call")));
        assert_eq!(seen[2].0, BREAK_AT);
        assert!(matches!(seen[2].1, Verdict::Break(_)));
    }

    #[test]
    fn argument_key_order_does_not_hide_a_repeat() {
        let mut b = Breaker::new();
        let mut out = Vec::new();
        for i in 0..10 {
            let args = if i % 2 == 0 {
                r#"{"a":1,"b":2}"#
            } else {
                r#"{ "b": 2, "a": 1 }"#
            };
            out.push(b.observe("t", args, &format!("{i}")));
        }
        assert!(matches!(out[9], Verdict::Warn(_)), "{out:?}");
    }

    #[test]
    fn ping_pong_is_detected() {
        let mut b = Breaker::new();
        let mut calls = Vec::new();
        for i in 0..10 {
            if i % 2 == 0 {
                calls.push(("read_file", r#"{"path":"a"}"#, "A"));
            } else {
                calls.push(("list_dir", r#"{"path":"."}"#, "B"));
            }
        }
        let v = run(&mut b, &calls);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            matches!(&v[0], Verdict::Warn(m) if m.contains("alternate")),
            "{v:?}"
        );
    }

    #[test]
    fn polling_without_progress_with_varying_args() {
        let mut b = Breaker::new();
        let mut v = Vec::new();
        for i in 0..10 {
            let args = format!(r#"{{"command":"sleep {i}; cat status"}}"#);
            v.push(b.observe("exec", &args, "pending"));
        }
        assert!(
            matches!(&v[9], Verdict::Warn(m) if m.contains("no progress")),
            "{v:?}"
        );
    }

    #[test]
    fn polling_with_progress_does_not_trip() {
        let mut b = Breaker::new();
        for i in 0..25 {
            let args = format!(r#"{{"command":"sleep {i}; cat status"}}"#);
            assert_eq!(b.observe("exec", &args, &format!("{i}% done")), Verdict::Ok);
        }
    }

    #[test]
    fn window_slides_old_repeats_out() {
        let mut b = Breaker::new();
        // 9 repeats, then 30 distinct calls push them out, then 9 more: never 10 in the window.
        for i in 0..9 {
            assert_eq!(b.observe("x", "{}", &i.to_string()), Verdict::Ok);
        }
        for i in 0..30 {
            assert_eq!(
                b.observe("y", &format!("[{i}]"), &i.to_string()),
                Verdict::Ok
            );
        }
        for i in 0..9 {
            assert_eq!(b.observe("x", "{}", &format!("z{i}")), Verdict::Ok);
        }
    }

    #[test]
    fn reset_starts_over() {
        let mut b = Breaker::new();
        for i in 0..10 {
            b.observe("x", "{}", &i.to_string());
        }
        b.reset();
        for i in 0..9 {
            assert_eq!(b.observe("x", "{}", &i.to_string()), Verdict::Ok);
        }
    }
}

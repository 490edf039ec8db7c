//! The channels as the gateway runs them, in-process: [`Running`] starts
//! [`Channels`] from a `channels` config section (tokens from the given
//! environment) on its own runtime, with a [`Script`]ed assistant answering the
//! turns and the channel log collected, and stops them as the gateway does.

use claw_channels::{ChannelsSection, ChatTurn, TurnRunner};
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The assistant: answers each turn with the next scripted answer, in order,
/// and records the turns it was given.
#[derive(Default)]
pub struct Script {
    answers: Mutex<VecDeque<String>>,
    turns: Mutex<Vec<ChatTurn>>,
}

impl Script {
    pub fn new<S: Into<String>>(answers: impl IntoIterator<Item = S>) -> Arc<Script> {
        Arc::new(Script {
            answers: Mutex::new(answers.into_iter().map(Into::into).collect()),
            turns: Mutex::default(),
        })
    }

    /// The turns run so far.
    pub fn turns(&self) -> Vec<ChatTurn> {
        self.turns.lock().unwrap().clone()
    }
}

impl TurnRunner for Script {
    fn run(&self, turn: ChatTurn) -> BoxFuture<'static, Result<String, String>> {
        self.turns.lock().unwrap().push(turn);
        let next = self.answers.lock().unwrap().pop_front();
        Box::pin(async move { next.ok_or_else(|| "the script has no more answers".to_string()) })
    }
}

/// Running channels; stopped (poll loops ended, state written) when dropped.
pub struct Running {
    rt: Option<tokio::runtime::Runtime>,
    pub channels: Arc<claw_channels::Channels>,
    stop: CancellationToken,
    log: Arc<Mutex<String>>,
}

impl Running {
    /// Start the channels of `section` (the config's `channels` object) with the
    /// state in `state_dir`, the tokens looked up in `env`.
    pub fn start(
        section: &Value,
        state_dir: &Path,
        env: &[(&str, &str)],
        runner: Arc<Script>,
    ) -> Running {
        let settings = resolve(section, env).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        let stop = CancellationToken::new();
        let channels = rt
            .block_on(async {
                claw_channels::Channels::start(
                    &settings,
                    state_dir,
                    runner,
                    Arc::new(move |line: String| {
                        let mut l = sink.lock().unwrap();
                        l.push_str(&line);
                        l.push('\n');
                    }),
                    stop.clone(),
                )
            })
            .unwrap();
        Running {
            rt: Some(rt),
            channels: Arc::new(channels),
            stop,
            log,
        }
    }

    /// Everything the channels logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Wait until the log contains `needle` (panics with the log after `limit`).
    pub fn wait_log(&self, needle: &str, limit: Duration) {
        claw_testkit::wait_log("the channel", || self.log(), needle, limit)
    }

    /// Run `f` on the channels' runtime.
    pub fn block_on<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.rt.as_ref().unwrap().block_on(f)
    }

    /// Stop the poll loops and wait until they have written their state.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(rt) = self.rt.take() {
            self.stop.cancel();
            let ch = self.channels.clone();
            rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(30), ch.stopped())
                    .await
                    .expect("the poll loops stop within 30 s")
            });
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.shutdown();
        }
    }
}

/// The `channels` section resolved with `env` as the environment.
pub fn resolve(
    section: &Value,
    env: &[(&str, &str)],
) -> Result<claw_channels::ChannelsSettings, claw_channels::ChannelError> {
    let section: ChannelsSection = serde_json::from_value(section.clone()).unwrap();
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    section.resolve(&env)
}

/// A long answer made of paragraphs of numbered words.
pub fn long_answer(chars: usize) -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < chars {
        s.push_str(&format!("word{i}"));
        i += 1;
        s.push_str(if i % 60 == 0 { "\n\n" } else { " " });
    }
    s.trim().to_string()
}

pub fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

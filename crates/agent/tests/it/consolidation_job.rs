//! The scheduled consolidation's job (`claw_agent::promote::Job`) in process,
//! over a real keyword-only memory and a model that answers from a script:
//! two runs that both asked the model before either wrote (forced by a
//! barrier) write each fact once — the second finds the material consolidated
//! under the writer lock — and a run bounded by `max_tokens` leaves what does
//! not fit for the next run.

use claw_agent::core::ModelFailure;
use claw_agent::driver::Model;
use claw_agent::message::{ChatRequest, ChatResponse, StreamDelta};
use claw_agent::promote::{ConsolidationConfig, Job};
use claw_memory_api::Memory;
use claw_memory_api::config::{EmbedProvider, MemoryConfig};
use claw_memory_api::consolidation::Outcome;
use claw_schedule::{Clock, Zone};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

/// Answers `reply` to every call, after `barrier` (when set) lets it.
struct Scripted {
    reply: String,
    barrier: Option<Arc<tokio::sync::Barrier>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl Model for Scripted {
    async fn complete(
        &self,
        req: &ChatRequest,
        _deltas: &UnboundedSender<StreamDelta>,
        _cancel: &CancellationToken,
    ) -> Result<ChatResponse, ModelFailure> {
        self.requests.lock().unwrap().push(req.clone());
        if let Some(b) = &self.barrier {
            b.wait().await;
        }
        Ok(ChatResponse {
            text: self.reply.clone(),
            ..Default::default()
        })
    }

    fn label(&self) -> String {
        "scripted".into()
    }
}

fn job(ws: &Path, model: Arc<Scripted>, config: &ConsolidationConfig, now: &str) -> Job<Scripted> {
    let mut mem = MemoryConfig::for_workspace(ws, EmbedProvider::None);
    mem.clock = Clock::parse_start(now).unwrap();
    let state_dir = mem.state_dir();
    let clock = mem.clock;
    Job {
        model,
        memory: Arc::new(Memory::open(mem).unwrap()),
        settings: config.resolve(Ok(()), Zone::Utc),
        workspace: ws.to_path_buf(),
        sessions_dir: ws.join("sessions"),
        state_dir,
        clock,
        memory_max_bytes: claw_agent::consolidate::DEFAULT_MAX_BYTES,
        reply_tokens: 1024,
        context_window: 32_000,
    }
}

fn notes() -> tempfile::TempDir {
    claw_testkit::workspace(&[
        ("MEMORY.md", "# Memory\n"),
        (
            "memory/2026-12-01.md",
            "# Monday\n\nAda now leads the payments team.\n\nGrace reviews every schema change from now on.\n",
        ),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_runs_that_both_asked_write_each_fact_once() {
    let dir = notes();
    let ws = dir.path();
    let model = Arc::new(Scripted {
        reply: "## People\n- Ada leads the payments team. [1]\n- Grace reviews every schema change. [2]\n".into(),
        barrier: Some(Arc::new(tokio::sync::Barrier::new(2))),
        requests: Mutex::new(Vec::new()),
    });
    let config = ConsolidationConfig::default();
    let a = job(ws, model.clone(), &config, "2026-12-02T03:00:00Z");
    let b = job(ws, model.clone(), &config, "2026-12-02T03:00:00Z");
    let cancel = CancellationToken::new();
    let (ra, rb) = tokio::join!(a.run(&cancel), b.run(&cancel));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(model.requests.lock().unwrap().len(), 2);
    let mut outcomes = [ra.outcome, rb.outcome];
    outcomes.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(outcomes, [Outcome::Changed, Outcome::Unchanged]);
    let second = if ra.outcome == Outcome::Unchanged {
        &ra
    } else {
        &rb
    };
    assert!(
        second
            .message
            .contains("another run consolidated this material meanwhile"),
        "{second:?}"
    );
    let md = std::fs::read_to_string(ws.join("MEMORY.md")).unwrap();
    assert_eq!(
        md,
        "# Memory\n\n## Consolidated on 2026-12-02\n- Ada leads the payments team. — from memory/2026-12-01.md#L3-L3\n- Grace reviews every schema change. — from memory/2026-12-01.md#L5-L5\n"
    );
    // A third run: nothing new, no model call.
    let c = job(ws, model.clone(), &config, "2026-12-02T04:00:00Z");
    let rc = c.run(&cancel).await.unwrap();
    assert_eq!(rc.outcome, Outcome::Unchanged);
    assert_eq!(model.requests.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_does_not_fit_the_token_bound_waits_for_the_next_run() {
    let long = "The archive of the quarterly planning meeting notes lives on the shared drive. "
        .repeat(12);
    let dir = claw_testkit::workspace(&[
        ("MEMORY.md", "# Memory\n"),
        (
            "memory/2026-12-01.md",
            &format!("# Monday\n\nAda now leads the payments team.\n\n{long}\n"),
        ),
    ]);
    let ws = dir.path();
    let model = Arc::new(Scripted {
        reply: "NO_REPLY".into(),
        barrier: None,
        requests: Mutex::new(Vec::new()),
    });
    // Room for the instructions, MEMORY.md, the reply and one short excerpt.
    let config = ConsolidationConfig {
        max_tokens: Some(700),
        ..Default::default()
    };
    let cancel = CancellationToken::new();
    let r = job(ws, model.clone(), &config, "2026-12-02T03:00:00Z")
        .run(&cancel)
        .await
        .unwrap();
    assert_eq!((r.candidates, r.sent), (2, 1), "{r:?}");
    assert!(r.tokens <= 700);
    let waiting: Vec<_> = r.items.iter().filter(|i| i.reason.is_some()).collect();
    assert_eq!(waiting.len(), 1, "{r:?}");
    assert!(
        waiting[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("over the token budget (700 per run)"),
        "{r:?}"
    );
    assert!(waiting[0].from.starts_with("memory/2026-12-01.md#L5"));
    // Days later the waiting block is still read (the window starts at its day),
    // and with a wider bound it is sent; the one sent before is not.
    let wide = ConsolidationConfig::default();
    let r = job(ws, model.clone(), &wide, "2026-12-04T03:00:00Z")
        .run(&cancel)
        .await
        .unwrap();
    assert_eq!(r.window.unwrap().from.to_string(), "2026-12-01");
    assert_eq!((r.candidates, r.sent), (1, 1), "{r:?}");
    let last = model.requests.lock().unwrap().last().unwrap().clone();
    let prompt = &last.messages[0].content;
    assert!(prompt.contains("quarterly planning"), "{prompt}");
    assert!(!prompt.contains("Ada now leads"), "{prompt}");
}

//! The failover chain: tries the profiles in order; retries 429 / 5xx / timeouts /
//! broken streams on the same profile with exponential backoff and jitter
//! (honouring `Retry-After`); on 401/403, on repeated failure, or on a
//! `Retry-After` longer than [`RetryPolicy::max_retry_after`] puts the profile in a
//! cooldown and moves to the next; bounds the total number of attempts; and
//! reports everything it tried when all fail. Context overflow and cancellation
//! end the call at once.
//!
//! Retry notices go out as [`StreamDelta::Retry`]. Text deltas of a failed attempt
//! were already sent: a UI should treat a `Retry` as "discard the partial answer".
//! If every profile is cooling down, they are tried anyway, soonest-expiring first
//! (a user asking again deserves an attempt, not a stale refusal).
//!
//! Invariant: sleeps only through the [`Sleeper`] (tests inject one) and always
//! races it against the cancellation token.

use claw_base::http::HttpOptions;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::http::Limits;
use super::{
    Api, AttemptError, AttemptRecord, ErrorClass, Profile, ProviderError, anthropic, openai,
};
use crate::message::{ChatRequest, ChatResponse, StreamDelta};

/// Retry, backoff and timeout parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts on one profile before it is put in cooldown (>= 1).
    pub max_attempts_per_profile: u32,
    /// Attempts over all profiles in one `complete` call (>= 1).
    pub max_total_attempts: u32,
    /// First backoff; doubles each retry.
    pub base_delay: Duration,
    /// Largest backoff.
    pub max_delay: Duration,
    /// Longest `Retry-After` waited for; a longer one moves to the next profile.
    pub max_retry_after: Duration,
    /// How long a failing profile is skipped.
    pub cooldown: Duration,
    /// Connection establishment limit.
    pub connect_timeout: Duration,
    /// Limit until the response headers arrive.
    pub response_timeout: Duration,
    /// Limit between two chunks of a streaming body.
    pub idle_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts_per_profile: 3,
            max_total_attempts: 8,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
            cooldown: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// Backoff before retry number `retry` (1 = first retry):
/// `min(max_delay, base * 2^(retry-1))`, scaled by `0.5 + 0.5 * jitter`
/// ("equal jitter"; `jitter` in `[0, 1]`).
pub fn backoff_delay(policy: &RetryPolicy, retry: u32, jitter: f64) -> Duration {
    let exp = retry.saturating_sub(1).min(30);
    let raw = policy
        .base_delay
        .saturating_mul(1u32 << exp)
        .min(policy.max_delay);
    raw.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// A `Retry-After` value: delay seconds (`"3"`, `"1.5"`) or an HTTP date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`, relative to `now`; a past date is zero).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let when: SystemTime = when.with_timezone(&chrono::Utc).into();
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// How the chain waits between attempts. Default: `tokio::time::sleep`.
pub type Sleeper = Arc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

fn tokio_sleeper() -> Sleeper {
    Arc::new(|d| Box::pin(tokio::time::sleep(d)))
}

/// Profiles in failover order, with their cooldown state. Share it (`Arc`) across
/// turns so cooldowns persist.
pub struct ProviderChain {
    profiles: Vec<Profile>,
    policy: RetryPolicy,
    client: reqwest::Client,
    cooldown_until: Mutex<Vec<Option<Instant>>>,
    sleeper: Sleeper,
}

impl std::fmt::Debug for ProviderChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderChain")
            .field("profiles", &self.profiles)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl ProviderChain {
    pub fn new(
        profiles: Vec<Profile>,
        policy: RetryPolicy,
    ) -> Result<ProviderChain, ProviderError> {
        if profiles.is_empty() {
            return Err(ProviderError::NoProfiles);
        }
        let client = claw_base::http::builder(&HttpOptions {
            connect_timeout: policy.connect_timeout,
            system_proxy: true,
            ..HttpOptions::default()
        })
        .build()
        .map_err(|e| ProviderError::Client(e.to_string()))?;
        Ok(ProviderChain {
            cooldown_until: Mutex::new(vec![None; profiles.len()]),
            profiles,
            policy,
            client,
            sleeper: tokio_sleeper(),
        })
    }

    /// Replace how backoff delays are waited (tests record them and return at once).
    pub fn with_sleeper(mut self, sleeper: Sleeper) -> ProviderChain {
        self.sleeper = sleeper;
        self
    }

    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Remaining cooldown of each profile (zero when usable).
    pub fn cooldowns(&self) -> Vec<Duration> {
        let now = Instant::now();
        self.lock()
            .iter()
            .map(|u| u.map_or(Duration::ZERO, |u| u.saturating_duration_since(now)))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Instant>>> {
        self.cooldown_until
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set_cooldown(&self, i: usize, d: Duration) {
        if let Some(slot) = self.lock().get_mut(i) {
            *slot = Some(Instant::now() + d);
        }
    }

    fn clear_cooldown(&self, i: usize) {
        if let Some(slot) = self.lock().get_mut(i) {
            *slot = None;
        }
    }

    /// Profiles to try, in order, and the cooling ones skipped (with time left).
    fn plan(&self) -> (Vec<usize>, Vec<(usize, Duration)>) {
        let now = Instant::now();
        let cd = self.lock();
        let mut ready = Vec::new();
        let mut cooling = Vec::new();
        for (i, until) in cd.iter().enumerate() {
            match until {
                Some(u) if *u > now => cooling.push((i, *u - now)),
                _ => ready.push(i),
            }
        }
        if ready.is_empty() {
            cooling.sort_by_key(|(_, left)| *left);
            return (cooling.into_iter().map(|(i, _)| i).collect(), Vec::new());
        }
        (ready, cooling)
    }

    /// One model call with retries and failover. Text and tool-call deltas of the
    /// answer (and retry notices) go to `deltas` as they happen.
    pub async fn complete(
        &self,
        req: &ChatRequest,
        deltas: &UnboundedSender<StreamDelta>,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        let p = &self.policy;
        let (order, skipped) = self.plan();
        let mut tried: Vec<AttemptRecord> = skipped
            .iter()
            .map(|(i, left)| AttemptRecord {
                profile: self.profiles[*i].label(),
                attempt: 0,
                error: AttemptError::CoolingDown(round(*left)),
            })
            .collect();
        let mut total = 0u32;
        let max_total = p.max_total_attempts.max(1);
        'profiles: for (pos, &i) in order.iter().enumerate() {
            let profile = &self.profiles[i];
            let has_next = pos + 1 < order.len();
            let mut attempt = 0u32;
            loop {
                if total >= max_total {
                    break 'profiles;
                }
                if cancel.is_cancelled() {
                    return Err(ProviderError::Cancelled);
                }
                attempt += 1;
                total += 1;
                let result = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => Err(AttemptError::Cancelled),
                    r = self.attempt(profile, req, deltas) => r,
                };
                let err = match result {
                    Ok(resp) => {
                        self.clear_cooldown(i);
                        return Ok(resp);
                    }
                    Err(e) => e,
                };
                let class = err.class();
                tracing::warn!(profile = %profile.label(), attempt, error = %err, "LLM attempt failed");
                if class == ErrorClass::Cancelled {
                    return Err(ProviderError::Cancelled);
                }
                if let AttemptError::ContextOverflow(message) = err {
                    return Err(ProviderError::ContextOverflow {
                        profile: profile.label(),
                        message,
                    });
                }
                let reason = format!("{}: {err}", profile.name);
                tried.push(AttemptRecord {
                    profile: profile.label(),
                    attempt,
                    error: err,
                });
                let out_of_attempts = total >= max_total;
                let next_profile = |why: &str| {
                    if has_next && !out_of_attempts {
                        let _ = deltas.send(StreamDelta::Retry {
                            attempt: total + 1,
                            reason: format!(
                                "{reason}; {why}, trying {}",
                                self.profiles[order[pos + 1]].name
                            ),
                        });
                    }
                };
                match class {
                    ErrorClass::Auth => {
                        self.set_cooldown(i, p.cooldown);
                        next_profile("credentials refused");
                        continue 'profiles;
                    }
                    ErrorClass::Fatal | ErrorClass::Cancelled | ErrorClass::ContextOverflow => {
                        next_profile("not retryable");
                        continue 'profiles;
                    }
                    ErrorClass::Retryable(retry_after) => {
                        if let Some(ra) = retry_after
                            && ra > p.max_retry_after
                        {
                            self.set_cooldown(i, ra);
                            next_profile(&format!("asked to wait {:?}", round(ra)));
                            continue 'profiles;
                        }
                        if attempt >= p.max_attempts_per_profile.max(1) {
                            self.set_cooldown(i, p.cooldown);
                            next_profile(&format!("failed {attempt} times"));
                            continue 'profiles;
                        }
                        if out_of_attempts {
                            break 'profiles;
                        }
                        let delay = retry_after
                            .unwrap_or_else(|| backoff_delay(p, attempt, rand::random::<f64>()));
                        let _ = deltas.send(StreamDelta::Retry {
                            attempt: total + 1,
                            reason: format!("{reason}; retrying in {:?}", round(delay)),
                        });
                        tokio::select! {
                            biased;
                            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                            _ = (self.sleeper)(delay) => {}
                        }
                    }
                }
            }
        }
        Err(ProviderError::AllFailed { attempts: tried })
    }

    async fn attempt(
        &self,
        profile: &Profile,
        req: &ChatRequest,
        deltas: &UnboundedSender<StreamDelta>,
    ) -> Result<ChatResponse, AttemptError> {
        let limits = Limits {
            response_timeout: self.policy.response_timeout,
            idle_timeout: self.policy.idle_timeout,
        };
        match profile.api {
            Api::OpenAi => openai::complete(&self.client, profile, req, limits, deltas).await,
            Api::Anthropic => anthropic::complete(&self.client, profile, req, limits, deltas).await,
        }
    }
}

/// Durations in messages: whole milliseconds.
fn round(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().min(u64::MAX as u128) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            ..Default::default()
        };
        assert_eq!(backoff_delay(&p, 1, 1.0), Duration::from_millis(100));
        assert_eq!(backoff_delay(&p, 2, 1.0), Duration::from_millis(200));
        assert_eq!(backoff_delay(&p, 3, 1.0), Duration::from_millis(400));
        assert_eq!(backoff_delay(&p, 5, 1.0), Duration::from_millis(1000));
        assert_eq!(backoff_delay(&p, 60, 1.0), Duration::from_millis(1000));
        assert_eq!(backoff_delay(&p, 2, 0.0), Duration::from_millis(100));
        assert_eq!(backoff_delay(&p, 2, 0.5), Duration::from_millis(150));
        assert_eq!(backoff_delay(&p, 0, 1.0), Duration::from_millis(100));
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_470); // 07:27:50 GMT
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after(" 1.5 ", now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
    }

    fn profile(name: &str) -> Profile {
        Profile {
            name: name.into(),
            api: Api::OpenAi,
            base_url: "http://127.0.0.1:9".into(),
            model: "m".into(),
            api_key: None,
            context_window: 1000,
        }
    }

    #[test]
    fn cooldown_ordering() {
        let c =
            ProviderChain::new(vec![profile("a"), profile("b")], RetryPolicy::default()).unwrap();
        assert_eq!(c.plan(), (vec![0, 1], vec![]));
        c.set_cooldown(0, Duration::from_secs(60));
        let (order, skipped) = c.plan();
        assert_eq!(order, vec![1]);
        assert_eq!(skipped[0].0, 0);
        c.set_cooldown(1, Duration::from_secs(30));
        assert_eq!(c.plan().0, vec![1, 0], "all cooling: soonest first");
        c.set_cooldown(1, Duration::ZERO); // expired
        assert_eq!(c.plan().0, vec![1]);
        assert_eq!(c.cooldowns()[1], Duration::ZERO);
    }
}

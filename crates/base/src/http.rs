//! The HTTP client setup, written once: every reqwest client claw builds (the
//! LLM providers, `web_search`, `web_fetch`'s guarded client, the channels)
//! starts from [`builder`].
//!
//! Shared: the `claw/<version>` user agent, the timeouts and the redirect
//! policy the caller names, and no proxy unless the caller asks for the
//! system's (`HTTPS_PROXY` and friends) — `web_fetch`, whose network guard
//! pins the addresses it checked, must never go through one.

use std::time::Duration;

/// The `User-Agent` of every request claw makes.
pub const USER_AGENT: &str = concat!("claw/", env!("CARGO_PKG_VERSION"));

/// What redirects a client follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// reqwest's default (up to 10).
    Default,
    /// Up to this many.
    Limited(usize),
    /// None: the caller sees the 3xx (and checks the next hop itself).
    None,
}

/// One client's settings; [`HttpOptions::default`] is a connect timeout of 10 s,
/// no overall timeout, default redirects, no proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time for a whole request (None: each request sets its own, or none).
    pub timeout: Option<Duration>,
    /// The redirect policy.
    pub redirects: Redirects,
    /// Use the system's proxy settings (the `*_PROXY` variables).
    pub system_proxy: bool,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            timeout: None,
            redirects: Redirects::Default,
            system_proxy: false,
        }
    }
}

/// A reqwest client builder with `opts` applied; the caller may add to it
/// (a DNS resolver) before `build()`.
pub fn builder(opts: &HttpOptions) -> reqwest::ClientBuilder {
    let mut b = reqwest::Client::builder()
        .connect_timeout(opts.connect_timeout)
        .user_agent(USER_AGENT);
    if let Some(t) = opts.timeout {
        b = b.timeout(t);
    }
    b = match opts.redirects {
        Redirects::Default => b,
        Redirects::Limited(n) => b.redirect(reqwest::redirect::Policy::limited(n)),
        Redirects::None => b.redirect(reqwest::redirect::Policy::none()),
    };
    if !opts.system_proxy {
        b = b.no_proxy();
    }
    b
}

/// A reqwest error and its causes as one line, without the URL (a Telegram URL
/// holds the bot token; any URL may hold a key in its query).
pub fn error_line(e: reqwest::Error) -> String {
    crate::error::chain(&e.without_url())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_with_every_policy() {
        for redirects in [Redirects::Default, Redirects::Limited(5), Redirects::None] {
            for system_proxy in [false, true] {
                let opts = HttpOptions {
                    timeout: Some(Duration::from_secs(1)),
                    redirects,
                    system_proxy,
                    ..HttpOptions::default()
                };
                assert!(builder(&opts).build().is_ok());
            }
        }
        assert!(USER_AGENT.starts_with("claw/"));
    }
}

//! The HTTP server's accept loop, in place of `axum::serve` (which sets no header
//! timeout and no connection limit): each accepted connection is served by hyper
//! as HTTP/1.1 with
//!
//! - a header read timeout (`gateway.header_read_timeout_seconds`, default 10): a
//!   connection that has not sent a complete request head in time is closed; the
//!   clock starts when the server begins waiting for a head, so it is also the idle
//!   limit of a keep-alive connection between requests. Bytes trickling in do not
//!   restart it. It never applies while a request is being handled or a response
//!   is being sent: chat streams (SSE) and `/mcp` streams last as long as they last;
//! - a cap on the connections one client address holds open
//!   (`gateway.max_connections_per_client`, default 64): one over it is answered
//!   `503` (best effort, without waiting for the client) and closed at once. A
//!   client's first refusal is logged, and how many were refused once its open
//!   connections fall back to half the cap; the totals are in `/v1/status`.
//!
//! Shutdown is the gateway's one stop token: stop accepting (the listening socket
//! is closed), ask every connection to finish gracefully (idle ones close now, a
//! running request or stream finishes first), and return once all are gone —
//! what `axum::serve(..).with_graceful_shutdown(..)` did. HTTP/2 is not offered
//! (hyper has no header timeout for it; claw's clients speak HTTP/1.1).

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Where log lines go.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// The limits of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    /// Time to send a complete request head; the idle limit between requests.
    pub header_read_timeout: Duration,
    /// Connections one client address may hold open.
    pub max_connections_per_client: usize,
}

/// Live connection counters (shown in `/v1/status`).
#[derive(Debug, Default)]
pub struct ConnStats {
    open: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    header_timeouts: AtomicU64,
}

impl ConnStats {
    /// `{"open", "accepted", "refused_over_cap", "header_timeouts"}`.
    pub fn json(&self) -> Value {
        json!({
            "open": self.open.load(Ordering::Relaxed),
            "accepted": self.accepted.load(Ordering::Relaxed),
            "refused_over_cap": self.refused.load(Ordering::Relaxed),
            "header_timeouts": self.header_timeouts.load(Ordering::Relaxed),
        })
    }
}

/// What a client over the cap is sent before the connection closes.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: application/json\r\nContent-Length: 133\r\nRetry-After: 1\r\nConnection: close\r\n\r\n\
{\"error\": {\"message\": \"too many open connections from this address\", \
\"type\": \"too_many_connections\", \"kind\": \"too_many_connections\"}}";

/// One client address's connections.
#[derive(Debug, Default)]
struct PerClient {
    open: usize,
    /// Refused since its first refusal was logged (Some: a refusal episode runs).
    refused: Option<u64>,
}

/// Open connections per client address.
struct Clients {
    cap: usize,
    by_addr: Mutex<HashMap<IpAddr, PerClient>>,
    stats: Arc<ConnStats>,
    log: Log,
}

/// A connection counted against its client's cap until dropped.
struct Slot {
    clients: Arc<Clients>,
    addr: IpAddr,
}

impl Clients {
    /// A slot for a new connection from `addr`, or None when it is over the cap
    /// (counted; logged when it starts an episode).
    fn admit(self: &Arc<Clients>, addr: IpAddr) -> Option<Slot> {
        let addr = addr.to_canonical();
        let mut map = self.by_addr.lock().unwrap_or_else(|p| p.into_inner());
        let c = map.entry(addr).or_default();
        if c.open >= self.cap {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            let first = c.refused.is_none();
            *c.refused.get_or_insert(0) += 1;
            drop(map);
            if first {
                (self.log)(&format!(
                    "client {addr} holds {} open connections (the cap, \
                     gateway.max_connections_per_client): refusing its new ones",
                    self.cap
                ));
            }
            return None;
        }
        c.open += 1;
        self.stats.open.fetch_add(1, Ordering::Relaxed);
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        Some(Slot {
            clients: self.clone(),
            addr,
        })
    }

    fn release(&self, addr: IpAddr) {
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
        let mut map = self.by_addr.lock().unwrap_or_else(|p| p.into_inner());
        let Some(c) = map.get_mut(&addr) else {
            return;
        };
        c.open = c.open.saturating_sub(1);
        // The episode ends once the client is well under the cap again, so a
        // client that hovers at the cap is not logged once per connection.
        let ended = if c.open <= self.cap / 2 {
            c.refused.take()
        } else {
            None
        };
        if c.open == 0 {
            map.remove(&addr);
        }
        drop(map);
        if let Some(n) = ended {
            (self.log)(&format!(
                "client {addr}: refused {n} connection(s) over the cap of {}",
                self.cap
            ));
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.clients.release(self.addr);
    }
}

/// Is this accept error about one connection only (accept again at once)?
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Serve `app` on `listener` until `stop` is cancelled and every connection has
/// finished.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    opts: ServeOptions,
    stats: Arc<ConnStats>,
    stop: CancellationToken,
    log: Log,
) {
    let clients = Arc::new(Clients {
        cap: opts.max_connections_per_client.max(1),
        by_addr: Mutex::new(HashMap::new()),
        stats: stats.clone(),
        log: log.clone(),
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_read_timeout);
    // Every connection task holds a receiver; `closed()` tells they are all gone.
    let (all_done, _) = tokio::sync::watch::channel(());
    loop {
        let (sock, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to close.
                    log(&format!("accept: {e}"));
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = stop.cancelled() => break,
                    }
                }
            },
            _ = stop.cancelled() => break,
        };
        let Some(slot) = clients.admit(peer.ip()) else {
            // Best effort: never wait for a client over the cap.
            let _ = sock.try_write(REFUSAL);
            drop(sock);
            continue;
        };
        let done = all_done.subscribe();
        let conn =
            builder.serve_connection(TokioIo::new(sock), TowerToHyperService::new(app.clone()));
        let (stop, stats) = (stop.clone(), stats.clone());
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.as_mut().await
                }
            };
            if let Err(e) = result
                && e.is_timeout()
            {
                stats.header_timeouts.fetch_add(1, Ordering::Relaxed);
            }
            drop(slot);
            drop(done);
        });
    }
    drop(listener);
    all_done.closed().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clients(cap: usize) -> (Arc<Clients>, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        let c = Arc::new(Clients {
            cap,
            by_addr: Mutex::new(HashMap::new()),
            stats: Arc::new(ConnStats::default()),
            log: Arc::new(move |s: &str| l.lock().unwrap().push(s.to_string())),
        });
        (c, lines)
    }

    #[test]
    fn the_refusal_is_a_complete_response() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["kind"], "too_many_connections");
    }

    #[test]
    fn the_cap_is_per_address_and_an_episode_is_logged_twice_at_most() {
        let (c, lines) = clients(4);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "::ffff:10.0.0.2".parse().unwrap();
        let mut slots: Vec<Slot> = (0..4).map(|_| c.admit(a).unwrap()).collect();
        for _ in 0..10 {
            assert!(c.admit(a).is_none());
        }
        // Another address has its own cap (an IPv4-mapped one is its IPv4 form).
        let other = c.admit(b).unwrap();
        assert_eq!(other.addr, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(lines.lock().unwrap().len(), 1);
        // Hovering at the cap: one closes, one more opens, more are refused.
        slots.pop();
        slots.push(c.admit(a).unwrap());
        assert!(c.admit(a).is_none());
        assert_eq!(lines.lock().unwrap().len(), 1);
        // Back to half the cap: the episode's count is logged once.
        slots.truncate(2);
        let l = lines.lock().unwrap().clone();
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(l[1].contains("refused 11 connection(s)"), "{l:?}");
        assert_eq!(c.stats.json()["refused_over_cap"], 11);
        assert_eq!(c.stats.json()["open"], 3);
        drop(slots);
        drop(other);
        assert!(c.by_addr.lock().unwrap().is_empty());
        assert_eq!(c.stats.json()["open"], 0);
    }
}

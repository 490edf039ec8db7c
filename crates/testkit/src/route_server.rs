//! A tiny routed HTTP/1.1 server for the SSRF tests: real TCP on a loopback
//! address, one std thread, `Connection: close`. Routes map a path to a reply
//! (a page or a redirect); every request's path is recorded, so a test can prove
//! that a server it must not reach was never reached.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a route answers.
#[derive(Debug, Clone)]
pub enum Route {
    /// 200 with an HTML page whose title and body are this text.
    Page(String),
    /// A redirect with this status and `Location`.
    Redirect(u16, String),
}

/// The running server; stops when dropped.
pub struct RouteServer {
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<String>>>,
    routes: Arc<Mutex<HashMap<String, Route>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RouteServer {
    /// Binds `bind` (e.g. `127.0.0.1:0`); `None` when that address cannot be bound.
    pub fn try_start(bind: &str) -> Option<RouteServer> {
        let listener = TcpListener::bind(bind).ok()?;
        let addr = listener.local_addr().ok()?;
        let hits = Arc::new(Mutex::new(Vec::new()));
        let routes: Arc<Mutex<HashMap<String, Route>>> = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, r, s) = (hits.clone(), routes.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(sock) = conn else { continue };
                serve(sock, &h, &r);
            }
        });
        Some(RouteServer {
            addr,
            hits,
            routes,
            stop,
            thread: Some(thread),
        })
    }

    /// Binds `bind` or panics.
    pub fn start(bind: &str) -> RouteServer {
        RouteServer::try_start(bind).unwrap_or_else(|| panic!("cannot bind {bind}"))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://<addr><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn route(&self, path: &str, route: Route) -> &RouteServer {
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_string(), route);
        self
    }

    /// Paths requested so far.
    pub fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for RouteServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut sock: TcpStream, hits: &Mutex<Vec<String>>, routes: &Mutex<HashMap<String, Route>>) {
    let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match sock.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let target = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("/")
        .to_string();
    hits.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(target.clone());
    let route = routes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&target)
        .cloned();
    let (status, extra, body) = match route {
        Some(Route::Page(text)) => (
            "200 OK".to_string(),
            String::new(),
            format!("<html><head><title>{text}</title></head><body><p>{text}</p></body></html>"),
        ),
        Some(Route::Redirect(code, location)) => (
            format!("{code} Redirect"),
            format!("Location: {location}\r\n"),
            String::new(),
        ),
        None => ("404 Not Found".to_string(), String::new(), String::new()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = sock.write_all(reply.as_bytes());
    let _ = sock.flush();
}

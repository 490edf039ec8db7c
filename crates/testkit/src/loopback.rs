//! The TCP server under the tests' fake peers ([`crate::scripted_server`],
//! [`crate::echo_llm`]): a free port on 127.0.0.1, its own thread and tokio
//! runtime (so it serves `#[tokio::test]`s of any flavour, paused clock included,
//! and plain `#[test]`s that run the `claw` binary), one task per connection.
//! Dropping it stops the accept loop and the runtime (connections still
//! streaming or sleeping are cancelled) and joins the thread.

use std::future::Future;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};

/// A running loopback server; stops when dropped.
pub struct Loopback {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Loopback {
    /// Bind a free port on 127.0.0.1 and hand every connection to `serve`, on a
    /// runtime of `threads` worker threads (1: all on the server's own thread).
    pub fn start<F, Fut>(threads: usize, serve: F) -> Loopback
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("local addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut builder = if threads > 1 {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(threads);
                b
            } else {
                tokio::runtime::Builder::new_current_thread()
            };
            let rt = builder.enable_all().build().expect("loopback runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("tokio listener");
                let accept = async {
                    loop {
                        let Ok((sock, _)) = listener.accept().await else {
                            continue;
                        };
                        tokio::spawn(serve(sock));
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = rx => {}
                }
            });
            // Dropping the runtime cancels connections still streaming or sleeping.
        });
        Loopback {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` (no `/v1`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

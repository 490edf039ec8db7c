//! The gateway's per-client connection cap, against a real `claw gateway`
//! process (`super::gateway::Gateway`) with a small `gateway.max_connections_per_client`
//! from the config file: a client address holding that many connections has
//! its next ones refused (503 or closed, logged once on the gateway's stderr)
//! while its open connections keep working. (The other hygiene tests run the
//! gateway in-process: `crates/gateway/tests/it/hygiene.rs`.)

use super::gateway::Gateway;
use claw_testkit::gateway_http::{request_on, wait_closed, write_gateway_config};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn connect(gw: &Gateway) -> TcpStream {
    TcpStream::connect(("127.0.0.1", gw.info.port)).unwrap()
}

#[test]
fn connections_over_the_per_client_cap_are_refused_and_open_ones_keep_working() {
    const CAP: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write_gateway_config(ws, &format!(r#"{{"max_connections_per_client": {CAP}}}"#));
    let gw = Gateway::start(ws, None);
    // One kept-alive connection that has been answered, and idle ones up to the cap.
    let mut kept = connect(&gw);
    assert_eq!(request_on(&mut kept, "GET", "/v1/status", &gw.token).0, 200);
    let mut idle: Vec<TcpStream> = (1..CAP).map(|_| connect(&gw)).collect();

    // Over the cap: answered 503 (when the client can still read it) and closed
    // at once, not left waiting for the header timeout.
    for i in 0..3 {
        let mut s = connect(&gw);
        let t = Instant::now();
        let (at, got) = wait_closed(&mut s, t + Duration::from_secs(5))
            .unwrap_or_else(|| panic!("connection {i} over the cap still open"));
        let got = String::from_utf8_lossy(&got);
        assert!(got.is_empty() || got.starts_with("HTTP/1.1 503 "), "{got}");
        println!(
            "over the cap: closed after {:.2?}, {}",
            at.duration_since(t),
            got.lines().next().unwrap_or("no answer read")
        );
    }
    // The open connections still work.
    let (status, body) = request_on(&mut kept, "GET", "/v1/status", &gw.token);
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["connections"]["refused_over_cap"], 3, "{v}");
    assert_eq!(v["connections"]["open"], CAP as u64, "{v}");
    idle[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 12];
    idle[0].read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");

    // One line for the episode so far, however many were refused.
    let log = gw.log();
    assert_eq!(log.matches("refusing its new ones").count(), 1, "{log}");

    // A closed connection frees its place (once the server has seen it close).
    drop(idle.pop());
    let t = Instant::now();
    loop {
        match gw.client().request("GET", "/healthz", None) {
            Ok(r) if r.status == 200 => break,
            other => assert!(
                t.elapsed() < Duration::from_secs(10),
                "no place freed: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Well under the cap again: the episode's count is logged once.
    drop(idle);
    gw.wait_log(
        &format!("connection(s) over the cap of {CAP}"),
        Duration::from_secs(10),
    );
}

//! A scripted Telegram Bot API server on 127.0.0.1 for channel tests. It speaks
//! the real JSON shapes of `getUpdates` (long poll honouring `offset` and
//! `timeout`), `sendMessage`, `sendChatAction` and `getMe`, checks the bot token in the
//! path, and rejects what Telegram rejects: text over 4,096 characters and
//! MarkdownV2 with an unescaped reserved character (`can't parse entities`).
//! Tests push user messages and read every call back.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct St {
    updates: Vec<Value>,
    next_update: i64,
    next_message: i64,
    calls: Vec<(String, Value)>,
    /// The next getUpdates also returns the last update below the offset.
    redeliver: bool,
    closed: bool,
    /// `sendMessage` to these chats answers only after the delay.
    slow_chats: Vec<(i64, Duration)>,
}

/// The running fake; stops accepting when dropped.
pub struct FakeTelegram {
    addr: std::net::SocketAddr,
    st: Arc<(Mutex<St>, Condvar)>,
}

const RESERVED: &str = "_*[]()~`>#+-=|{}.!";

/// Telegram's MarkdownV2 check: every reserved character escaped. Returns the
/// text as shown (escapes removed).
pub fn parse_markdown_v2(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n) => out.push(n),
                None => return Err("can't parse entities: trailing backslash".into()),
            }
        } else if RESERVED.contains(c) {
            return Err(format!(
                "Bad Request: can't parse entities: Character '{c}' is reserved and must be escaped with the preceding '\\'"
            ));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl FakeTelegram {
    /// Serve the bot whose token is `token`.
    pub fn start(token: &str) -> FakeTelegram {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let st = Arc::new((
            Mutex::new(St {
                next_update: 100,
                next_message: 1,
                ..St::default()
            }),
            Condvar::new(),
        ));
        let (s, token) = (st.clone(), token.to_string());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                if s.0.lock().unwrap().closed {
                    break;
                }
                let (s, token) = (s.clone(), token.clone());
                std::thread::spawn(move || serve(conn, &s, &token));
            }
        });
        FakeTelegram { addr, st }
    }

    /// The `base_url` to configure.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A user writes `text` in their private chat with the bot; returns the update id.
    pub fn push_text(&self, user_id: i64, username: Option<&str>, text: &str) -> i64 {
        let (m, cv) = &*self.st;
        let mut g = m.lock().unwrap();
        let id = g.next_update;
        g.next_update += 1;
        let mid = g.next_message;
        g.next_message += 1;
        let mut from = json!({"id": user_id, "is_bot": false, "first_name": "User"});
        if let Some(u) = username {
            from["username"] = json!(u);
        }
        g.updates.push(json!({"update_id": id, "message": {
            "message_id": mid, "date": 1_700_000_000, "text": text, "from": from,
            "chat": {"id": user_id, "type": "private", "first_name": "User"}}}));
        cv.notify_all();
        id
    }

    /// The next getUpdates also returns the newest update already confirmed
    /// (a redelivery).
    pub fn redeliver_next(&self) {
        self.st.0.lock().unwrap().redeliver = true;
    }

    /// Every `sendMessage` to `chat_id` answers only after `delay` (a chat whose
    /// sends stall); other chats are served at once.
    pub fn delay_sends_to(&self, chat_id: i64, delay: Duration) {
        self.st.0.lock().unwrap().slow_chats.push((chat_id, delay));
    }

    /// Every call so far: (method, JSON body).
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.st.0.lock().unwrap().calls.clone()
    }

    /// The `sendMessage` bodies so far.
    pub fn sent(&self) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|(m, _)| m == "sendMessage")
            .map(|(_, b)| b)
            .collect()
    }

    /// Wait until `n` messages were sent (panics after `timeout`).
    pub fn wait_sent(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.sent();
            if s.len() >= n {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {n} messages sent: {:?}",
                s.len(),
                self.calls()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        let (m, cv) = &*self.st;
        m.lock().unwrap().closed = true;
        cv.notify_all();
        let _ = TcpStream::connect(self.addr);
    }
}

fn respond(mut conn: TcpStream, status: u16, body: &Value) {
    let b = body.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
        b.len()
    );
}

fn serve(conn: TcpStream, st: &Arc<(Mutex<St>, Condvar)>, token: &str) {
    let mut r = BufReader::new(conn.try_clone().expect("clone"));
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; len];
    let _ = r.read_exact(&mut body);
    let body: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    let Some(method) = path.strip_prefix(&format!("/bot{token}/")) else {
        respond(
            conn,
            401,
            &json!({"ok": false, "error_code": 401, "description": "Unauthorized"}),
        );
        return;
    };
    let method = method.split('?').next().unwrap_or("").to_string();
    let (m, cv) = &**st;
    m.lock().unwrap().calls.push((method.clone(), body.clone()));
    match method.as_str() {
        "getUpdates" => {
            let offset = body["offset"].as_i64().unwrap_or(0);
            let wait = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0));
            let deadline = Instant::now() + wait;
            let mut g = m.lock().unwrap();
            loop {
                let redeliver = g.redeliver;
                let mut out: Vec<Value> = g
                    .updates
                    .iter()
                    .filter(|u| u["update_id"].as_i64().unwrap_or(0) >= offset)
                    .cloned()
                    .collect();
                if redeliver
                    && let Some(last) = g
                        .updates
                        .iter()
                        .rev()
                        .find(|u| u["update_id"].as_i64().unwrap_or(0) < offset)
                {
                    out.insert(0, last.clone());
                    g.redeliver = false;
                }
                let now = Instant::now();
                if !out.is_empty() || now >= deadline || g.closed {
                    drop(g);
                    respond(conn, 200, &json!({"ok": true, "result": out}));
                    return;
                }
                g = cv.wait_timeout(g, deadline - now).unwrap().0;
            }
        }
        "sendMessage" => {
            let delay = {
                let g = m.lock().unwrap();
                g.slow_chats
                    .iter()
                    .find(|(c, _)| {
                        body["chat_id"].as_i64() == Some(*c)
                            || body["chat_id"].as_str() == Some(&c.to_string())
                    })
                    .map(|(_, d)| *d)
            };
            if let Some(d) = delay {
                std::thread::sleep(d);
            }
            let text = body["text"].as_str().unwrap_or("");
            let shown = if body["parse_mode"] == "MarkdownV2" {
                match parse_markdown_v2(text) {
                    Ok(s) => s,
                    Err(e) => {
                        respond(
                            conn,
                            400,
                            &json!({"ok": false, "error_code": 400, "description": e}),
                        );
                        return;
                    }
                }
            } else {
                text.to_string()
            };
            if shown.encode_utf16().count() > 4096 || shown.is_empty() {
                respond(
                    conn,
                    400,
                    &json!({"ok": false, "error_code": 400, "description": "Bad Request: message is too long"}),
                );
                return;
            }
            let mid = {
                let mut g = m.lock().unwrap();
                g.next_message += 1;
                g.next_message
            };
            respond(
                conn,
                200,
                &json!({"ok": true, "result": {"message_id": mid, "date": 1_700_000_000,
                    "chat": {"id": body["chat_id"], "type": "private"}, "text": shown}}),
            );
        }
        "sendChatAction" => respond(conn, 200, &json!({"ok": true, "result": true})),
        "getMe" => respond(
            conn,
            200,
            &json!({"ok": true, "result": {"id": 7, "is_bot": true, "username": "claw_test_bot"}}),
        ),
        _ => respond(
            conn,
            404,
            &json!({"ok": false, "error_code": 404, "description": "Not Found"}),
        ),
    }
}

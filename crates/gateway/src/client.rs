//! The client side, for the CLI: find the running gateway of a workspace
//! (`gateway.json` with a live pid, plus the token) and talk to it over a small
//! blocking HTTP/1.1 client on loopback (no TLS stack, no runtime: a CLI call costs
//! a connect and a request). Chat answers are read as the SSE stream the API
//! sends and handed to the caller event by event.

use crate::discovery::{self, GatewayInfo};
use crate::token::{self, Token};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// Errors talking to the gateway.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the gateway at {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("talking to the gateway: {0}")]
    Io(#[from] std::io::Error),
    #[error("the gateway sent a malformed response: {0}")]
    Protocol(String),
    #[error("the gateway answered {status}: {message}")]
    Status { status: u16, message: String },
}

/// A response read whole.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The `error.message` of an error body, or the body as text.
    pub fn error_message(&self) -> String {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body).into_owned())
    }
}

/// One event of a streamed chat answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatEvent {
    Text(String),
    EndAnswer,
    Status(String),
    /// `claw.tool` of a chunk: `{"id", "name", "arguments", "status", "preview"}`.
    Tool(Value),
    /// An approval request (`"type": "approval_request"`): `{"id", "tool",
    /// "preview", "arguments", "reach", "always", "session", "timeout_seconds"}`;
    /// answer it with [`Client::answer_approval`] while the stream waits.
    Approval(Value),
    /// `claw.approval` of a chunk: `{"id", "decision"}` once a request ended.
    ApprovalResolved(Value),
    /// The last chunk: `end` (`answered`, `failed`…) and its message.
    End {
        end: String,
        message: Option<String>,
    },
}

/// A connection target plus the token.
#[derive(Debug, Clone)]
pub struct Client {
    pub info: GatewayInfo,
    addr: String,
    token: Token,
    /// Read timeout (chat turns can be long).
    pub timeout: Option<Duration>,
}

impl Client {
    /// A client for `info` with `token`.
    pub fn new(info: GatewayInfo, token: Token) -> Client {
        let base = info.base_url();
        let addr = base.trim_start_matches("http://").to_string();
        Client {
            info,
            addr,
            token,
            timeout: None,
        }
    }

    /// The running gateway of the workspace whose state dir is `state_dir`, if
    /// any: a live `gateway.json` for the same workspace and a token (`env_token`
    /// first, else the token file).
    pub fn discover(state_dir: &Path, workspace: &Path, env_token: Option<&str>) -> Option<Client> {
        let info = discovery::read_live(state_dir)?;
        let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => a == b,
        };
        if !same(&info.workspace, workspace) {
            return None;
        }
        let token = match env_token {
            Some(t) if !t.is_empty() => Token::new(t),
            _ => token::read(state_dir).ok()??,
        };
        Some(Client::new(info, token))
    }

    fn connect(&self) -> Result<TcpStream, ClientError> {
        let s = TcpStream::connect(&self.addr).map_err(|source| ClientError::Connect {
            addr: self.addr.clone(),
            source,
        })?;
        s.set_nodelay(true)?;
        s.set_read_timeout(self.timeout)?;
        Ok(s)
    }

    fn send(
        &self,
        s: &mut TcpStream,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        extra: &[(&str, &str)],
    ) -> Result<(), ClientError> {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n",
            self.addr,
            self.token.expose()
        );
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        if let Some(b) = body {
            bytes.extend_from_slice(b);
        }
        s.write_all(&bytes)?;
        Ok(())
    }

    /// One request, the whole response read.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<HttpResponse, ClientError> {
        self.request_with(method, path, body, &[])
    }

    /// One request with extra headers, the whole response read.
    pub fn request_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> Result<HttpResponse, ClientError> {
        let mut s = self.connect()?;
        self.send(&mut s, method, path, body, headers)?;
        let mut r = BufReader::new(s);
        let (status, headers) = read_head(&mut r)?;
        let mut body = Vec::new();
        let mut body_reader = BodyReader::new(&mut r, &headers)?;
        body_reader.read_to_end(&mut body)?;
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }

    /// `POST` a JSON value.
    pub fn post_json(&self, path: &str, v: &Value) -> Result<HttpResponse, ClientError> {
        let body = serde_json::to_vec(v).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.request("POST", path, Some(&body))
    }

    /// Answer approval request `id` with `decision` (`once`, `always`, `deny`).
    pub fn answer_approval(&self, id: &str, decision: &str) -> Result<(), ClientError> {
        let mut path = String::from("/v1/approvals/");
        for b in id.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                path.push(b as char);
            } else {
                path.push_str(&format!("%{b:02X}"));
            }
        }
        let r = self.post_json(&path, &serde_json::json!({ "decision": decision }))?;
        if r.status == 200 {
            Ok(())
        } else {
            Err(ClientError::Status {
                status: r.status,
                message: r.error_message(),
            })
        }
    }

    /// Send `message` to session `session` and stream the answer to `on_event`;
    /// returns the end event's `(end, message)`.
    pub fn chat(
        &self,
        session: &str,
        message: &str,
        yes: bool,
        channel: &str,
        mut on_event: impl FnMut(&ChatEvent),
    ) -> Result<(String, Option<String>), ClientError> {
        let body = serde_json::json!({
            "model": "claw",
            "stream": true,
            "messages": [{"role": "user", "content": message}],
            "claw": {"yes": yes, "channel": channel},
        });
        let body = serde_json::to_vec(&body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let mut s = self.connect()?;
        self.send(
            &mut s,
            "POST",
            "/v1/chat/completions",
            Some(&body),
            &[("X-Claw-Session", session), ("Accept", "text/event-stream")],
        )?;
        let mut r = BufReader::new(s);
        let (status, headers) = read_head(&mut r)?;
        let mut body_reader = BodyReader::new(&mut r, &headers)?;
        if status != 200 {
            let mut b = Vec::new();
            body_reader.read_to_end(&mut b)?;
            let resp = HttpResponse {
                status,
                headers,
                body: b,
            };
            return Err(ClientError::Status {
                status,
                message: resp.error_message(),
            });
        }
        let mut lines = BufReader::new(body_reader);
        let mut line = String::new();
        let mut end = None;
        loop {
            line.clear();
            if lines.read_line(&mut line)? == 0 {
                break;
            }
            let Some(data) = line.trim_end_matches(['\r', '\n']).strip_prefix("data: ") else {
                continue;
            };
            if data == "[DONE]" {
                break;
            }
            let v: Value =
                serde_json::from_str(data).map_err(|e| ClientError::Protocol(e.to_string()))?;
            for ev in chunk_events(&v) {
                if let ChatEvent::End { end: e, message } = &ev {
                    end = Some((e.clone(), message.clone()));
                }
                on_event(&ev);
            }
        }
        end.ok_or_else(|| ClientError::Protocol("the stream ended without a result".into()))
    }
}

/// The events one `chat.completion.chunk` carries.
pub fn chunk_events(v: &Value) -> Vec<ChatEvent> {
    let mut out = Vec::new();
    if v["type"].as_str() == Some("approval_request") {
        let mut a = v["claw"]["approval_request"].clone();
        if !a.is_object() {
            a = v.clone();
        }
        out.push(ChatEvent::Approval(a));
        return out;
    }
    if let Some(t) = v["choices"][0]["delta"]["content"].as_str()
        && !t.is_empty()
    {
        out.push(ChatEvent::Text(t.to_string()));
    }
    let c = &v["claw"];
    if c["end_answer"].as_bool() == Some(true) {
        out.push(ChatEvent::EndAnswer);
    }
    if let Some(s) = c["status"].as_str() {
        out.push(ChatEvent::Status(s.to_string()));
    }
    if c["tool"].is_object() {
        out.push(ChatEvent::Tool(c["tool"].clone()));
    }
    if c["approval"].is_object() {
        out.push(ChatEvent::ApprovalResolved(c["approval"].clone()));
    }
    if let Some(e) = c["end"].as_str() {
        out.push(ChatEvent::End {
            end: e.to_string(),
            message: c["message"].as_str().map(str::to_string),
        });
    }
    out
}

fn read_head<R: BufRead>(r: &mut R) -> Result<(u16, Vec<(String, String)>), ClientError> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| ClientError::Protocol(format!("status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(ClientError::Protocol("headers cut short".into()));
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    Ok((status, headers))
}

/// A body: chunked, sized, or until the connection closes.
enum BodyReader<'a, R: BufRead> {
    Chunked {
        r: &'a mut R,
        left: usize,
        done: bool,
    },
    Sized {
        r: &'a mut R,
        left: usize,
    },
    Eof(&'a mut R),
}

impl<'a, R: BufRead> BodyReader<'a, R> {
    fn new(r: &'a mut R, headers: &[(String, String)]) -> Result<Self, ClientError> {
        let h = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        if h("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            return Ok(BodyReader::Chunked {
                r,
                left: 0,
                done: false,
            });
        }
        match h("content-length") {
            Some(n) => Ok(BodyReader::Sized {
                r,
                left: n
                    .parse()
                    .map_err(|_| ClientError::Protocol(format!("content-length {n}")))?,
            }),
            None => Ok(BodyReader::Eof(r)),
        }
    }
}

impl<R: BufRead> Read for BodyReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            BodyReader::Eof(r) => r.read(buf),
            BodyReader::Sized { r, left } => {
                if *left == 0 {
                    return Ok(0);
                }
                let n = (*left).min(buf.len());
                let got = r.read(&mut buf[..n])?;
                *left -= got;
                Ok(got)
            }
            BodyReader::Chunked { r, left, done } => {
                if *done {
                    return Ok(0);
                }
                if *left == 0 {
                    let mut size = String::new();
                    r.read_line(&mut size)?;
                    let hex = size.trim().split(';').next().unwrap_or("");
                    let n = usize::from_str_radix(hex, 16).map_err(|_| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("chunk size {size:?}"),
                        )
                    })?;
                    if n == 0 {
                        *done = true;
                        return Ok(0);
                    }
                    *left = n;
                }
                let n = (*left).min(buf.len());
                let got = r.read(&mut buf[..n])?;
                if got == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                *left -= got;
                if *left == 0 {
                    let mut crlf = String::new();
                    r.read_line(&mut crlf)?;
                }
                Ok(got)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_decode() {
        let raw = b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
        let mut r = std::io::BufReader::new(&raw[..]);
        let headers = vec![("transfer-encoding".to_string(), "chunked".to_string())];
        let mut body = String::new();
        BodyReader::new(&mut r, &headers)
            .expect("reader")
            .read_to_string(&mut body)
            .expect("read");
        assert_eq!(body, "hello, world");
    }

    #[test]
    fn chunk_events_read_the_claw_field() {
        let v = serde_json::json!({"choices": [{"delta": {"content": "Hi"}}]});
        assert_eq!(chunk_events(&v), vec![ChatEvent::Text("Hi".into())]);
        let v = serde_json::json!({"choices": [{"delta": {}, "finish_reason": "stop"}],
            "claw": {"end": "answered", "message": null}});
        assert_eq!(
            chunk_events(&v),
            vec![ChatEvent::End {
                end: "answered".into(),
                message: None
            }]
        );
    }
}

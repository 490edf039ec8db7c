//! `claw mcp`'s stdio transport ([`LineTransport`]): newline-delimited JSON-RPC
//! framed by claw, handed to rmcp's service loop as parsed messages.
//!
//! rmcp's own `AsyncRwTransport` drops a line that is not JSON without a word
//! (by design: rust-sdk#938) and drops a line over its 16 MiB cap with only a
//! log line, so such a client waits for an answer that never comes. Here:
//! - a line that is not valid JSON is answered
//!   `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: …"}}`;
//! - valid JSON that is not a JSON-RPC message is answered `-32600` with the
//!   line's `id` (null when it has none usable); a notification (a string
//!   `method` and no `id`) is never answered, as JSON-RPC requires;
//! - a message over [`MAX_MESSAGE_BYTES`] is answered `-32600` as soon as it
//!   crosses the limit, and the rest of its line is read and discarded: the
//!   read buffer never holds more than the limit;
//! - empty lines are skipped, a UTF-8 BOM and a `\r` before the newline are
//!   accepted (as rmcp does), and a last line without a newline before EOF is
//!   still read.
//!
//! In every case the server reads on: only EOF or a read error ends it.
//!
//! Invariants:
//! - every byte written goes through one `FramedWrite` behind one mutex, a
//!   whole line per item: rmcp's replies and this transport's error replies
//!   never interleave inside a line (a write cancelled half-way leaves the rest
//!   of its line in the frame buffer, written before anything else);
//! - `receive` is cancel-safe (rmcp polls it inside a `select!`): the partial
//!   line, the discarding state and a pending error reply live in the struct,
//!   and nothing awaits between reading bytes and recording them.

use futures_util::SinkExt;
use rmcp::RoleServer;
use rmcp::model::ErrorCode;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::Mutex;
use tokio_util::bytes::Bytes;
use tokio_util::codec::{BytesCodec, FramedWrite};

/// Largest JSON-RPC message `claw mcp` reads (bytes, without the newline).
/// Every legitimate request is far smaller: `memory_append`'s text is capped
/// at 64 KiB, searches and reads take a few short arguments.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Read buffer size: a 20 MB line is discarded in 320 reads.
const READ_BUFFER: usize = 64 * 1024;
/// A line buffer grown by a big message is shrunk back to this.
const KEEP_LINE_CAPACITY: usize = 64 * 1024;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

type Writer<W> = Arc<Mutex<Option<FramedWrite<W, BytesCodec>>>>;

/// rmcp's server transport over a byte reader and writer (stdin, stdout).
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line read so far (without its newline once complete).
    line: Vec<u8>,
    /// Dropping the rest of an oversized line, up to its newline.
    discarding: bool,
    max_bytes: usize,
    /// An error reply still to be written before reading on.
    pending: Option<Pending>,
    write: Writer<W>,
}

enum Pending {
    /// Not handed to the frame buffer yet.
    Queue(Bytes),
    /// In the frame buffer; flush it.
    Flush,
}

/// One framing step's result.
enum Frame {
    /// A whole line is in `line`.
    Line,
    /// The line crossed the limit; it was dropped.
    TooLong,
    Eof,
    Io(io::Error),
}

/// What to do with a whole line.
enum Incoming {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    Skip,
    Reply(Bytes),
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        Self::with_limit(read, write, MAX_MESSAGE_BYTES)
    }

    /// A transport whose messages may be at most `max_bytes` long (tests).
    pub fn with_limit(read: R, write: W, max_bytes: usize) -> Self {
        LineTransport {
            read: BufReader::with_capacity(READ_BUFFER, read),
            line: Vec::new(),
            discarding: false,
            max_bytes,
            pending: None,
            write: Arc::new(Mutex::new(Some(FramedWrite::new(write, BytesCodec::new())))),
        }
    }

    /// Reads up to the end of the next line, never holding more than
    /// `max_bytes` of it.
    async fn next_frame(&mut self) -> Frame {
        loop {
            let (consumed, frame) = {
                let available = match self.read.fill_buf().await {
                    Ok(b) => b,
                    Err(e) => return Frame::Io(e),
                };
                if available.is_empty() {
                    // EOF: a last line without its newline is still a line.
                    return if self.discarding || self.line.is_empty() {
                        Frame::Eof
                    } else {
                        Frame::Line
                    };
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let content = newline.unwrap_or(available.len());
                let take = newline.map_or(available.len(), |i| i + 1);
                if self.discarding {
                    if newline.is_some() {
                        self.discarding = false;
                    }
                    (take, None)
                } else if self.line.len().saturating_add(content) > self.max_bytes {
                    self.line.clear();
                    self.discarding = newline.is_none();
                    (take, Some(Frame::TooLong))
                } else {
                    self.line.extend_from_slice(&available[..content]);
                    (take, newline.map(|_| Frame::Line))
                }
            };
            self.read.consume(consumed);
            if let Some(frame) = frame {
                return frame;
            }
        }
    }

    /// Writes the pending error reply, if any. `None`: the output is gone.
    async fn flush_pending(&mut self) -> Option<()> {
        let Some(pending) = self.pending.as_mut() else {
            return Some(());
        };
        let mut guard = self.write.lock().await;
        let out = guard.as_mut()?;
        if let Pending::Queue(line) = pending {
            out.feed(line.clone()).await.ok()?;
            *pending = Pending::Flush;
        }
        SinkExt::<Bytes>::flush(out).await.ok()?;
        self.pending = None;
        Some(())
    }
}

/// What a whole line (without its newline) asks for.
fn classify(line: &[u8]) -> Incoming {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Skip;
    }
    let parse_error = |e: &serde_json::Error| {
        error_line(
            &Value::Null,
            ErrorCode::PARSE_ERROR,
            &format!("Parse error: {e}; send one JSON-RPC message per line"),
        )
    };
    let e = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(m) => return Incoming::Message(Box::new(m)),
        Err(e) => e,
    };
    if matches!(
        e.classify(),
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof
    ) {
        tracing::debug!("answering a line that is not JSON: {e}");
        return Incoming::Reply(parse_error(&e));
    }
    // Valid JSON of the wrong shape.
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Incoming::Reply(parse_error(&e)),
    };
    let id = value.get("id");
    if id.is_none() && value.get("method").is_some_and(Value::is_string) {
        tracing::debug!("ignoring a notification that is not MCP: {e}");
        return Incoming::Skip;
    }
    let id = match id {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    };
    tracing::debug!("answering a line that is not a JSON-RPC message: {e}");
    Incoming::Reply(error_line(
        &id,
        ErrorCode::INVALID_REQUEST,
        &format!("Invalid request: {e}"),
    ))
}

/// `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}` and a newline.
fn error_line(id: &Value, code: ErrorCode, message: &str) -> Bytes {
    let message = Value::String(message.to_string());
    Bytes::from(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{},\"message\":{message}}}}}\n",
        code.0
    ))
}

/// The reply to a message over `max_bytes`.
fn too_long(max_bytes: usize) -> Bytes {
    error_line(
        &Value::Null,
        ErrorCode::INVALID_REQUEST,
        &format!(
            "Invalid request: the message is larger than the limit of {max_bytes} bytes ({} MiB) \
that claw mcp reads; it was discarded. Send smaller messages",
            max_bytes / (1024 * 1024)
        ),
    )
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        let write = self.write.clone();
        let line = serde_json::to_vec(&item).map(|mut v| {
            v.push(b'\n');
            Bytes::from(v)
        });
        async move {
            let line = line.map_err(io::Error::other)?;
            let mut guard = write.lock().await;
            match guard.as_mut() {
                Some(out) => out.send(line).await,
                None => Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the transport is closed",
                )),
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            self.flush_pending().await?;
            match self.next_frame().await {
                Frame::Line => {}
                Frame::TooLong => {
                    tracing::warn!(
                        limit = self.max_bytes,
                        "a message over the size limit was discarded"
                    );
                    self.pending = Some(Pending::Queue(too_long(self.max_bytes)));
                    continue;
                }
                Frame::Eof => return None,
                Frame::Io(e) => {
                    tracing::error!("reading the MCP stream failed: {e}");
                    return None;
                }
            }
            let incoming = classify(&self.line);
            self.line.clear();
            self.line.shrink_to(KEEP_LINE_CAPACITY);
            match incoming {
                Incoming::Message(m) => return Some(*m),
                Incoming::Skip => {}
                Incoming::Reply(reply) => self.pending = Some(Pending::Queue(reply)),
            }
        }
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, duplex};

    /// A transport over in-memory pipes: (transport, client writer, client reader).
    fn pair(
        max: usize,
    ) -> (
        LineTransport<tokio::io::DuplexStream, tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        BufReader<tokio::io::DuplexStream>,
    ) {
        let (client_w, server_r) = duplex(1 << 16);
        let (server_w, client_r) = duplex(1 << 16);
        (
            LineTransport::with_limit(server_r, server_w, max),
            client_w,
            BufReader::new(client_r),
        )
    }

    const PING: &str = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;

    async fn reply(r: &mut BufReader<tokio::io::DuplexStream>) -> Value {
        let mut s = String::new();
        r.read_line(&mut s).await.unwrap();
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s:?}"))
    }

    /// The message of the JSON-RPC error `e`, whose code must be `code`.
    fn error_message(e: &Value, code: i64) -> &str {
        assert_eq!(e["error"]["code"], code, "{e}");
        e["error"]["message"].as_str().unwrap()
    }

    fn is_ping(m: &RxJsonRpcMessage<RoleServer>) -> bool {
        serde_json::to_value(m).unwrap()["method"] == "ping"
    }

    #[tokio::test]
    async fn not_json_is_a_parse_error_and_reading_goes_on() {
        let (mut t, mut w, mut r) = pair(1024);
        let client = tokio::spawn(async move {
            w.write_all(b"{not json\n\n").await.unwrap();
            w.write_all(format!("\u{feff}{PING}\r\n").as_bytes())
                .await
                .unwrap();
            w
        });
        let m = t.receive().await.unwrap();
        assert!(is_ping(&m));
        let e = reply(&mut r).await;
        assert_eq!(e["jsonrpc"], "2.0");
        assert_eq!(e["id"], Value::Null);
        assert!(e.as_object().unwrap().contains_key("id"));
        assert!(error_message(&e, -32700).starts_with("Parse error"), "{e}");
        drop(client.await.unwrap());
        assert!(t.receive().await.is_none());
    }

    #[tokio::test]
    async fn wrong_shape_is_an_invalid_request_with_its_id_and_notifications_get_nothing() {
        let (mut t, mut w, mut r) = pair(1024);
        for line in [
            r#"{"jsonrpc":"2.0","id":"a","method":7}"#,
            // A notification (string method, no id) is never answered, whether
            // rmcp takes it (a custom notification) or not (bad params).
            r#"{"jsonrpc":"2.0","method":"lsp/whatever"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#,
            r#"[1,2]"#,
            r#"{"jsonrpc":"2.0","method":1}"#,
            PING,
            "nope",
        ] {
            w.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        }
        drop(w);
        let mut pinged = false;
        while let Some(m) = t.receive().await {
            pinged |= is_ping(&m);
        }
        assert!(pinged);
        let mut got = Vec::new();
        for _ in 0..4 {
            let e = reply(&mut r).await;
            got.push((e["id"].clone(), e["error"]["code"].as_i64().unwrap()));
        }
        assert_eq!(
            got,
            [
                (Value::from("a"), -32600),
                (Value::Null, -32600),
                (Value::Null, -32600),
                (Value::Null, -32700)
            ]
        );
    }

    #[tokio::test]
    async fn an_oversized_line_is_answered_and_discarded_up_to_its_newline() {
        let (mut t, mut w, mut r) = pair(100);
        let client = tokio::spawn(async move {
            // Just under the limit: read as usual (a ping padded with spaces).
            let pad = 100 - PING.len();
            w.write_all(format!("{PING}{}\n", " ".repeat(pad)).as_bytes())
                .await
                .unwrap();
            // Over it: 10,000 bytes in small writes, then a valid line.
            w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"")
                .await
                .unwrap();
            for _ in 0..100 {
                w.write_all(&[b'x'; 100]).await.unwrap();
            }
            w.write_all(b"\"}\n").await.unwrap();
            w.write_all(format!("{PING}\n").as_bytes()).await.unwrap();
            w
        });
        assert!(is_ping(&t.receive().await.unwrap()));
        assert!(is_ping(&t.receive().await.unwrap()));
        assert!(t.line.capacity() <= KEEP_LINE_CAPACITY);
        let e = reply(&mut r).await;
        assert_eq!(e["id"], Value::Null);
        assert!(error_message(&e, -32600).contains("100 bytes"), "{e}");
        drop(client.await.unwrap());
        assert!(t.receive().await.is_none());
    }

    #[tokio::test]
    async fn a_last_line_without_newline_is_read() {
        let (mut t, mut w, _r) = pair(1024);
        w.write_all(PING.as_bytes()).await.unwrap();
        drop(w);
        assert!(is_ping(&t.receive().await.unwrap()));
        assert!(t.receive().await.is_none());
    }

    #[tokio::test]
    async fn error_replies_and_sent_messages_are_whole_lines() {
        let (mut t, mut w, mut r) = pair(1024);
        let sender = {
            let mut sends = Vec::new();
            for i in 0..50 {
                let msg: TxJsonRpcMessage<RoleServer> = serde_json::from_value(serde_json::json!({
                    "jsonrpc": "2.0", "id": i, "result": {"text": "y".repeat(3000)}
                }))
                .unwrap();
                sends.push(t.send(msg));
            }
            tokio::spawn(async move {
                for s in sends {
                    s.await.unwrap();
                }
            })
        };
        let client = tokio::spawn(async move {
            for _ in 0..50 {
                w.write_all(b"nope\n").await.unwrap();
            }
            w
        });
        let reader = tokio::spawn(async move {
            let mut n = 0;
            for _ in 0..100 {
                let v = reply(&mut r).await;
                if v["error"]["code"] == -32700 {
                    n += 1;
                }
            }
            n
        });
        let w = client.await.unwrap();
        drop(w);
        assert!(t.receive().await.is_none());
        sender.await.unwrap();
        assert_eq!(reader.await.unwrap(), 50);
    }
}

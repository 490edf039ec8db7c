//! Server-Sent Events framing: turns the bytes of a `text/event-stream` body,
//! arriving in arbitrary network chunks, into whole events. Pure, no I/O.
//!
//! Behaviour (WHATWG "event stream interpretation", with two documented choices):
//! - lines end with `\r\n`, `\n` or `\r` (a `\r` at the end of a chunk waits for the
//!   next chunk to see whether a `\n` follows); a leading UTF-8 BOM is dropped;
//! - `data:` lines accumulate, joined by `\n`; `event:` sets the type; `id:` the id;
//!   a line starting with `:` is a comment; one space after the colon is removed;
//! - a line that is not a known field (`garbage`, `foo: bar`) is **skipped**, as the
//!   spec says — it never fails the stream. Data that is not the JSON a provider
//!   expects is the provider's business (see `openai.rs` / `anthropic.rs`);
//! - invalid UTF-8 is replaced with U+FFFD (spec);
//! - choice 1: an event still pending at end of stream (no final blank line) is
//!   delivered by [`SseParser::finish`], because some servers omit the last blank line;
//! - choice 2: a single line longer than [`MAX_LINE_BYTES`] is an error
//!   ([`SseError::LineTooLong`]) so a broken server cannot make us buffer forever.
//!
//! Invariant: never panics on any input.

/// Longest line accepted (16 MiB).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if any (`None` means the default type, "message").
    pub event: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub data: String,
    /// The last `id:` seen, if any.
    pub id: Option<String>,
}

/// Framing errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("event-stream line longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
}

/// Incremental parser: feed chunks, collect events.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// The previous chunk ended with `\r`: skip a `\n` at the start of the next one.
    skip_lf: bool,
    started: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    last_id: Option<String>,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feed one network chunk; returns the events it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        let mut chunk = chunk;
        if self.skip_lf && !chunk.is_empty() {
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
            self.skip_lf = false;
        }
        self.buf.extend_from_slice(chunk);
        if !self.started {
            if self.buf.len() < 3 && b"\xEF\xBB\xBF".starts_with(&self.buf) {
                return Ok(out); // may still be a BOM
            }
            if self.buf.starts_with(b"\xEF\xBB\xBF") {
                self.buf.drain(..3);
            }
            self.started = true;
        }
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            match self.buf[i] {
                b'\n' => {
                    let line = self.buf[start..i].to_vec();
                    self.line(&line, &mut out);
                    i += 1;
                    start = i;
                }
                b'\r' => {
                    let line = self.buf[start..i].to_vec();
                    self.line(&line, &mut out);
                    if i + 1 < self.buf.len() {
                        if self.buf[i + 1] == b'\n' {
                            i += 1;
                        }
                    } else {
                        self.skip_lf = true;
                    }
                    i += 1;
                    start = i;
                }
                _ => i += 1,
            }
        }
        self.buf.drain(..start);
        if self.buf.len() > MAX_LINE_BYTES {
            self.buf.clear();
            return Err(SseError::LineTooLong);
        }
        Ok(out)
    }

    /// End of stream: processes an unterminated last line and delivers a pending
    /// event that was not followed by a blank line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        if !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            self.line(&line, &mut out);
        }
        self.line(b"", &mut out);
        out.pop()
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                out.push(SseEvent {
                    event: self.event.take(),
                    data,
                    id: self.last_id.clone(),
                });
            }
            self.event = None;
            self.data.clear();
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return; // comment
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.find(':') {
            Some(p) => {
                let v = &line[p + 1..];
                (&line[..p], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&line[..], ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            "id" if !value.contains('\0') => self.last_id = Some(value.to_string()),
            _ => {} // `retry` and unknown fields: ignored (spec)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in input {
            out.extend(p.feed(c).unwrap());
        }
        out.extend(p.finish());
        out
    }

    fn data(evs: &[SseEvent]) -> Vec<&str> {
        evs.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn simple_events() {
        let evs = all(&[b"data: one\n\ndata: two\n\n"]);
        assert_eq!(data(&evs), ["one", "two"]);
        assert_eq!(evs[0].event, None);
    }

    #[test]
    fn multi_line_data_joined_with_newline() {
        let evs = all(&[b"data: a\ndata: b\ndata:\ndata:  c\n\n"]);
        assert_eq!(data(&evs), ["a\nb\n\n c"]);
    }

    #[test]
    fn event_type_and_id() {
        let evs = all(&[b"event: message_start\nid: 7\ndata: {}\n\ndata: x\n\n"]);
        assert_eq!(evs[0].event.as_deref(), Some("message_start"));
        assert_eq!(evs[0].id.as_deref(), Some("7"));
        assert_eq!(evs[1].event, None, "event type resets after dispatch");
        assert_eq!(evs[1].id.as_deref(), Some("7"), "last id persists");
    }

    #[test]
    fn comments_and_empty_events_are_ignored() {
        let evs = all(&[b": keep-alive\n\n: another\ndata: real\n\nevent: x\n\n"]);
        assert_eq!(data(&evs), ["real"]);
    }

    #[test]
    fn crlf_and_cr_line_endings() {
        assert_eq!(data(&all(&[b"data: a\r\n\r\ndata: b\r\n\r\n"])), ["a", "b"]);
        assert_eq!(data(&all(&[b"data: a\r\rdata: b\r\r"])), ["a", "b"]);
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        // "\r" ends chunk 1, "\n" starts chunk 2: one line break, not two.
        let evs = all(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(data(&evs), ["a\nb"]);
    }

    #[test]
    fn event_split_at_every_byte() {
        let input = b"event: e\r\ndata: {\"k\": \"v\xc3\xa9\"}\r\n\r\ndata: 2\n\n";
        let chunks: Vec<&[u8]> = input.chunks(1).collect();
        let evs = all(&chunks);
        assert_eq!(data(&evs), ["{\"k\": \"v\u{e9}\"}", "2"]);
        assert_eq!(evs[0].event.as_deref(), Some("e"));
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let evs = all(&[b"data: a\nthis is not a field\nfoo: bar\nretry: 10\n\ndata: b\n\n"]);
        assert_eq!(data(&evs), ["a", "b"]);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let evs = all(&[b"data: a\xffb\n\n"]);
        assert_eq!(data(&evs), ["a\u{fffd}b"]);
    }

    #[test]
    fn bom_is_dropped_even_when_split() {
        let evs = all(&[b"\xEF", b"\xBB\xBFdata: x\n\n"]);
        assert_eq!(data(&evs), ["x"]);
    }

    #[test]
    fn pending_event_at_eof_is_delivered() {
        assert_eq!(data(&all(&[b"data: [DONE]"])), ["[DONE]"]);
        assert_eq!(data(&all(&[b"data: [DONE]\n"])), ["[DONE]"]);
    }

    #[test]
    fn field_without_space_and_colon_in_value() {
        let evs = all(&[b"data:{\"url\":\"http://x\"}\n\n"]);
        assert_eq!(data(&evs), ["{\"url\":\"http://x\"}"]);
    }

    #[test]
    fn overlong_line_is_an_error() {
        let mut p = SseParser::new();
        let big = vec![b'x'; MAX_LINE_BYTES + 1];
        assert_eq!(p.feed(&big), Err(SseError::LineTooLong));
    }
}

//! A session transcript that grows line by line, for the tests of live
//! indexing on both backends: an exchange whose answer arrives after its
//! question was indexed, with a tool result between them.

/// The session's opening meta line.
pub const META: &str = "{\"type\":\"session\",\"key\":\"cli:default\",\"version\":1}\n";

/// A message line in claw's session format, at 10:`minute` UTC on 2026-03-02.
pub fn line(role: &str, text: &str, minute: u32) -> String {
    format!(
        "{{\"type\":\"message\",\"role\":\"{role}\",\"content\":\"{text}\",\"timestamp\":\"2026-03-02T10:{minute:02}:00Z\"}}\n"
    )
}

/// The lines after [`META`], one at a time: two exchanges (lines 2–3 and
/// 4–7; the second's answer comes in two messages after a tool result) and a
/// last user line (8). Indexed whole, the file is three chunks.
pub fn growing_exchange() -> Vec<String> {
    vec![
        line("user", "Where did we park the kayak last summer?", 0),
        line("assistant", "By the boathouse at Lake Tamsin.", 1),
        line("user", "And who lent us the trailer?", 2),
        // A tool result between the question and the answer: indexed as nothing.
        "{\"type\":\"tool_result\",\"content\":\"lookup done\"}\n".to_string(),
        line("assistant", "Your neighbour Ottilie lent it.", 3),
        line("assistant", "She asked for it back by Friday.", 4),
        line("user", "Thanks.", 5),
    ]
}

/// Append `s` to the file at `path`.
pub fn append(path: &std::path::Path, s: &str) {
    use std::io::Write;
    let mut f = std::fs::File::options()
        .append(true)
        .open(path)
        .expect("open the transcript");
    f.write_all(s.as_bytes()).expect("append to the transcript");
}

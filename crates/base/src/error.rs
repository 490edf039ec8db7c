//! An error as one line: its message and its causes, `a: b: c`, each cause
//! shown once (many errors already repeat their source in their own message).
//! The one way claw turns an error chain into text for a log, a report or a
//! status line.

/// `e` and its sources, `: `-separated, skipping a cause whose text is already
/// in the line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        next = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_are_joined_once() {
        let e = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ));
        assert_eq!(super::chain(&e), "outer: refused");
        let plain = std::io::Error::other("just this");
        assert_eq!(super::chain(&plain), "just this");
    }
}

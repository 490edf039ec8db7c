//! Secret redaction applied to text before it is indexed (API keys, bearer tokens,
//! private key blocks, `password=` assignments). Pure.

use std::borrow::Cow;

/// Replace secrets in `text` with `[REDACTED]` markers.
pub fn redact(text: &str) -> Cow<'_, str> {
    // Placeholder until the redactor lands.
    Cow::Borrowed(text)
}

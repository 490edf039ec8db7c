//! Secret redaction applied to text before it is indexed (API keys, bearer tokens,
//! private key blocks, `password=` assignments). Pure.
//!
//! Invariant: a text that cannot contain a secret is returned borrowed and
//! unchanged; redaction only ever replaces a secret's value with [`REDACTED`],
//! keeping key names (`password=`) and the word `Bearer` so the text stays readable.

use regex::Regex;
use std::borrow::Cow;
use std::sync::LazyLock;

/// The marker that replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Cheap pre-check: a text matching none of these cannot contain a secret we redact.
static MAYBE_SECRET: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)sk-|gh[pousr]_|github_pat_|akia|asia|xox[abposr]-|bearer|private key|passw|pwd|secret|api[_-]?key|token|credential|authorization",
    )
    .expect("static regex")
});

/// `-----BEGIN … PRIVATE KEY-----` up to the matching END line (or the end of the
/// text when the block is truncated).
static PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
    )
    .expect("static regex")
});

/// `Authorization: Bearer <token>` and bare `bearer <token>`: keeps the scheme word.
static BEARER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer)(\s+)([A-Za-z0-9\-._~+/]{8,}=*)").expect("static regex")
});

/// `Authorization: Bearer|Basic|token <credential>`: always a secret.
static AUTH_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(authorization\s*:\s*(?:bearer|basic|token)\s+)[A-Za-z0-9\-._~+/]{8,}=*")
        .expect("static regex")
});

/// Provider API keys by their well-known prefixes.
static API_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?:",
        // OpenAI / Anthropic / OpenRouter style: sk-…, sk-ant-…, sk-proj-…
        r"\bsk-[A-Za-z0-9_\-]{16,}",
        // GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_, fine-grained github_pat_
        r"|\bgh[pousr]_[A-Za-z0-9]{20,}",
        r"|\bgithub_pat_[A-Za-z0-9_]{20,}",
        // AWS access key ids
        r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        // Slack tokens
        r"|\bxox[abposr]-[A-Za-z0-9\-]{10,}",
        r")"
    ))
    .expect("static regex")
});

/// `password=…`, `passwd: …`, `"api_key": "…"`, `OPENAI_API_KEY=…`, `token=…`:
/// group 1 is the key and separator (kept), group 2 the value (redacted).
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r#"(?i)(\b[A-Za-z0-9_\-]*"#,
        r#"(?:password|passwd|passphrase|pwd|secret|api[_\-]?key|apikey|access[_\-]?key|token|credentials?)"#,
        r#"["']?\s*[:=]\s*["']?)"#,
        r#"([^\s"'`,;\]\[)(}{<>]+)"#,
    ))
    .expect("static regex")
});

/// Replace secrets in `text` with `[REDACTED]` markers.
pub fn redact(text: &str) -> Cow<'_, str> {
    if !MAYBE_SECRET.is_match(text) {
        return Cow::Borrowed(text);
    }
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    replace_in(&mut out, &PRIVATE_KEY, |_| REDACTED.to_string());
    replace_in(&mut out, &AUTH_HEADER, |c| format!("{}{REDACTED}", &c[1]));
    replace_in(&mut out, &BEARER, |c| {
        // Outside an Authorization header, `bearer <word>` is often prose
        // ("bearer instruments"): only token-looking values are redacted.
        let value = &c[3];
        let tokenish = value.len() >= 20
            || value
                .chars()
                .any(|ch| ch.is_ascii_digit() || "-._~+/".contains(ch));
        if tokenish {
            format!("{}{}{REDACTED}", &c[1], &c[2])
        } else {
            c[0].to_string()
        }
    });
    replace_in(&mut out, &API_KEY, |_| REDACTED.to_string());
    replace_in(&mut out, &ASSIGNMENT, |c| format!("{}{REDACTED}", &c[1]));
    out
}

/// Whether `text` contains anything [`redact`] would replace.
pub fn contains_secret(text: &str) -> bool {
    matches!(redact(text), Cow::Owned(ref s) if s != text)
}

fn replace_in(text: &mut Cow<'_, str>, re: &Regex, rep: impl Fn(&regex::Captures<'_>) -> String) {
    let replaced = match re.replace_all(text.as_ref(), |c: &regex::Captures<'_>| rep(c)) {
        Cow::Borrowed(_) => None,
        Cow::Owned(s) if s != text.as_ref() => Some(s),
        Cow::Owned(_) => None,
    };
    if let Some(s) = replaced {
        *text = Cow::Owned(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_redacted(input: &str, secret: &str) {
        let out = redact(input);
        assert!(
            !out.contains(secret),
            "secret {secret:?} survived in {out:?}"
        );
        assert!(out.contains(REDACTED), "{out:?}");
    }

    #[test]
    fn api_keys() {
        for (text, secret) in [
            (
                "my key is sk-abcdefghijklmnopqrstuvwx1234 ok",
                "sk-abcdefghijklmnopqrstuvwx1234",
            ),
            (
                "ANTHROPIC sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz-0123456789",
                "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz",
            ),
            (
                "sk-proj-ZZZZyyyyXXXXwwww1111222233334444",
                "sk-proj-ZZZZyyyyXXXXwwww1111222233334444",
            ),
            (
                "push with ghp_0123456789abcdefghijABCDEFGHIJ0123",
                "ghp_0123456789abcdefghijABCDEFGHIJ0123",
            ),
            (
                "oauth gho_16C7e42F292c6912E7710c838347Ae178B4a",
                "gho_16C7e42F292c6912E7710c838347Ae178B4a",
            ),
            (
                "server ghs_16C7e42F292c6912E7710c838347Ae178B4a",
                "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
            ),
            (
                "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
                "github_pat_11ABCDEFG0123456789",
            ),
            ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
            (
                "slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp",
                "xoxb-123456789012",
            ),
            ("xoxp-1234567890-abcdefghij", "xoxp-1234567890-abcdefghij"),
            ("xoxa-2-abcdefghijkl", "xoxa-2-abcdefghijkl"),
        ] {
            assert_redacted(text, secret);
        }
    }

    #[test]
    fn bearer_tokens_keep_the_scheme() {
        let out =
            redact("curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc'");
        assert!(!out.contains("eyJhbGci"), "{out}");
        assert!(out.contains("Authorization: Bearer [REDACTED]"), "{out}");
        let out = redact("use bearer abcdefgh12345678 for the call");
        assert_eq!(out, "use bearer [REDACTED] for the call");
        let out = redact("Authorization: Basic dXNlcjpwYXNzd29yZA==");
        assert_eq!(out, "Authorization: Basic [REDACTED]");
    }

    #[test]
    fn private_key_blocks() {
        let text = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234\nabcdEFGH\n-----END RSA PRIVATE KEY-----\nafter";
        let out = redact(text);
        assert_eq!(out, "before\n[REDACTED]\nafter");
        let text = "x -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n";
        let out = redact(text);
        assert!(!out.contains("b3BlbnNzaC1"), "{out}");
        // Public keys are not secrets.
        let pubkey = "-----BEGIN PUBLIC KEY-----\nMFkwEwYH\n-----END PUBLIC KEY-----";
        assert_eq!(redact(pubkey), pubkey);
    }

    #[test]
    fn assignments_keep_the_key() {
        assert_eq!(redact("password=hunter2"), "password=[REDACTED]");
        assert_eq!(redact("passwd: hunter2 next"), "passwd: [REDACTED] next");
        assert_eq!(redact("secret = 's3cr3t!'"), "secret = '[REDACTED]'");
        assert_eq!(
            redact(r#"{"api_key": "abc123", "n": 1}"#),
            r#"{"api_key": "[REDACTED]", "n": 1}"#
        );
        assert_eq!(
            redact("export OPENAI_API_KEY=abcdef123"),
            "export OPENAI_API_KEY=[REDACTED]"
        );
        assert_eq!(redact("token=abc.def"), "token=[REDACTED]");
        assert_eq!(
            redact("DB_PASSWORD: correct-horse"),
            "DB_PASSWORD: [REDACTED]"
        );
        // A key already redacted by the prefix rule is not doubled.
        assert_eq!(
            redact("api_key=sk-abcdefghijklmnopqrstuvwx"),
            "api_key=[REDACTED]"
        );
    }

    #[test]
    fn prose_is_left_alone() {
        for text in [
            "the password policy requires 12 characters",
            "We discussed the secret sauce of the recipe.",
            "Tokens are counted by the tokenizer; max_tokens=200 is the budget.",
            "a task-list with sk- prefixes mentioned in passing",
            "Ask about the API key rotation schedule.",
            "bearer bonds are old",
            "the bearer instruments were sold",
            "AKIA is how AWS ids begin",
            "plain note about gardening",
            "",
        ] {
            let out = redact(text);
            assert!(matches!(out, Cow::Borrowed(_)), "{text:?} -> {out:?}");
            assert!(!contains_secret(text));
        }
    }

    #[test]
    fn untouched_text_is_borrowed() {
        assert!(matches!(redact("hello world"), Cow::Borrowed(_)));
    }

    #[test]
    fn redaction_is_idempotent() {
        let text = "password=x sk-abcdefghijklmnopqrstuvwx Bearer abcdefgh12345678";
        let once = redact(text).into_owned();
        assert_eq!(redact(&once), once.as_str());
    }
}

//! Secret redaction applied to every text before it is indexed, before `memory get`
//! returns it and before a session transcript is written. Pure: no I/O.
//!
//! Three layers, all reporting byte ranges that are then replaced with [`REDACTED`]:
//! 1. provider tokens by their published shapes (`sk-…`, `ghp_…`, `AKIA…`, `AIza…`,
//!    `sk_live_…`, `npm_…`, `hf_…`, `glpat-…`, JWTs, PEM private keys, … — the `RULES`
//!    table; [`rule_names`] lists them);
//! 2. context: `password=…`, `"api_key": "…"`, `app.secret_key = '…'` (key names in any
//!    case, with a prefix and a few suffixes), `DB_PASS=…`, `Authorization: Bearer …`,
//!    `postgres://user:pass@host`, `--password …`, `curl -u user:pass`, "my password is …";
//! 3. a high-entropy rule for bare random tokens ([`is_high_entropy_token`]: length, mixed
//!    character classes, class switches and a Shannon-entropy floor calibrated on random
//!    strings) that skips hashes, UUIDs, URLs, file paths, identifiers, SSH public keys and
//!    certificates.
//!
//! Known limits: a secret inside a URL path or a bare all-hex secret without a key name is
//! not caught (hashes look the same); neither is a password on the line after its key.
//!
//! Invariants:
//! - a text with nothing to redact is returned borrowed and unchanged;
//! - only a secret's value is replaced: key names (`password=`), schemes (`Bearer`), URL
//!   users and hosts are kept so the text stays readable and searchable;
//! - the number of lines never changes (a redacted private key block keeps its newlines),
//!   so a line number in redacted text is the same line in the file;
//! - redaction is idempotent (passes repeat until nothing changes), and a JSON line stays
//!   valid JSON: rules see JSON escapes (`\n`, `\"`) as separators and never cut one in half.

use regex::{Captures, Regex};
use std::borrow::Cow;
use std::ops::Range;
use std::sync::LazyLock;

/// The marker that replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Version of the rules. Chunks stored by older rules may hold secrets these catch: an
/// index whose stored version differs should be rebuilt, like a chunker change.
pub const REDACTION_VERSION: &str = "redact-3";

/// One secret found in a text: the rule that found it and its byte range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule's name (a provider such as `github`, or `assignment`, `high-entropy`, …).
    pub rule: &'static str,
    /// Byte range of the secret's value in the text.
    pub range: Range<usize>,
}

/// Which part of a rule's match is the secret.
#[derive(Clone, Copy)]
enum Pick {
    /// The whole match.
    Whole,
    /// One capture group.
    Group(usize),
    /// A function decides (and may refuse) from the view text and the captures.
    Check(fn(&str, &Captures<'_>) -> Option<Range<usize>>),
    /// Like `Check`, and the search resumes where the returned range ends rather than
    /// where the match ends (a greedy match cut short by the function).
    CheckResume(fn(&str, &Captures<'_>) -> Option<Range<usize>>),
}

/// A value after a key and separator: double-, single- or back-quoted (JSON-escaped
/// quotes `\"` included), or bare (see [`BARE`]). A backslash escape that JSON knows
/// (`\n`, `\"`, `\\`, …) ends a bare value so a JSON string is never cut inside an escape.
fn value_pattern(bare: &str) -> String {
    format!(
        concat!(
            r#"(?:\\?"(?P<qd>(?:[^"\\\n]|\\[^"\n])+)\\?""#,
            r#"|\\?'(?P<qs>(?:[^'\\\n]|\\[^'\n])+)\\?'"#,
            r#"|`(?P<qb>[^`\n]+)`"#,
            r#"|(?P<v>(?:{}|\\[^"'\\/bfnrtu\s])+))"#,
        ),
        bare
    )
}

/// A bare value stops at whitespace, quotes, brackets, `,`, `;`, `&` (URL query strings)
/// and backslashes.
const BARE: &str = r#"[^\s"'`,;&\[\](){}<>\\]"#;

/// A bare `.env` value stops only at whitespace, quotes and backslashes.
const BARE_ENV: &str = r#"[^\s"'`\\]"#;

/// Key words whose value is a secret in `key = value` / `"key": "value"` form, in any case.
/// The key may carry any prefix (`DB_PASSWORD`, `client_secret`, `OPENAI_API_KEY`,
/// `spring.datasource.password`) and suffixes from [`KEY_SUFFIXES`] (`secret_key`,
/// `app.secret_key`, `secretkey`, `password_value`, `secret_key_base`).
const KEY_WORDS: &str = concat!(
    r"password|passwd|passphrase|secret|api[_\-]?key|apikey|access[_\-]?key|",
    r"private[_\-]?key(?:[_\-]?id)?|account[_\-]?key|shared[_\-]?access[_\-]?key|",
    r"signing[_\-]?key|encryption[_\-]?key|master[_\-]?key|auth[_\-]?key|token|credentials?",
);

/// What may follow a key word and keep the key a secret's name, glued (`secretkey`) or after
/// `_`/`-`/`.`: a closed list, so that `password_hint`, `token_type`, `max_tokens`,
/// `secret_name` or `api_key_env` are not secrets' names.
const KEY_SUFFIXES: &str = concat!(
    r"[_.\-]?(?:key|value|val|base|str|string|text|plain|plaintext|raw|b64|base64|hex|bytes|",
    r"confirm|confirmation|\d+)",
);

/// Short key words that must stand alone or after `_`/`-`/`.` (`db_pass`, not `bypass`).
const SHORT_KEY_WORDS: &str = r"pass|pwd|pw|auth";

/// Name, regex source and pick of every regex rule, in the order they are reported.
static RULES: LazyLock<Vec<(&'static str, String, Pick)>> = LazyLock::new(|| {
    let w = |name: &'static str, re: &str| (name, re.to_string(), Pick::Whole);
    let g = |name: &'static str, re: &str, n: usize| (name, re.to_string(), Pick::Group(n));
    vec![
        // --- Private keys: PEM blocks (real or JSON-escaped newlines), PuTTY files.
        (
            "private-key",
            // To the END line; a truncated block runs to the end of the text or of the
            // JSON string it sits in (an unescaped `"`), never past it.
            r#"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:[^"\\]|\\.)*"#.to_string(),
            Pick::CheckResume(check_private_key),
        ),
        g(
            "private-key",
            r"(?m)^Private-Lines:\s*\d+\r?\n((?:[A-Za-z0-9+/=]+\r?\n?)+)",
            1,
        ),
        w("age", r"\bAGE-SECRET-KEY-1[0-9A-Z]{50,}"),
        // --- Providers with a recognisable prefix or shape.
        w("sk-key", r"\bsk-[A-Za-z0-9_\-]{16,}"), // OpenAI, Anthropic sk-ant-, OpenRouter, DeepSeek
        w("github", r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
        w("github", r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
        w(
            "aws-access-key-id",
            r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[0-9A-Z]{16}\b",
        ),
        w("slack", r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"),
        w("slack", r"\bxapp-\d-[A-Za-z0-9\-]{20,}"),
        g(
            "slack-webhook",
            r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9/_\-]{16,})",
            1,
        ),
        w("stripe", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
        w("stripe", r"\bwhsec_[A-Za-z0-9+/=]{24,}"),
        w("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}"),
        w("google-oauth", r"\bGOCSPX-[A-Za-z0-9_\-]{20,}"),
        w("google-oauth", r"\bya29\.[0-9A-Za-z_\-]{20,}"),
        w("google-oauth", r"\b1//0[A-Za-z0-9_\-]{30,}"),
        w(
            "jwt",
            r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+){0,2}",
        ),
        w("mapbox", r"\bsk\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
        w("npm", r"\bnpm_[A-Za-z0-9]{36}\b"),
        w("huggingface", r"\b(?:hf|api_org)_[A-Za-z0-9]{30,}\b"),
        w(
            "gitlab",
            r"\bgl(?:pat|dt|ptt|rt|soat|cbt|imt|ft|oas|agent|ffct|wt)-[A-Za-z0-9_\-]{20,}",
        ),
        w("gitlab", r"\bGR1348941[A-Za-z0-9_\-]{20,}"),
        w("twilio", r"\bSK[0-9a-fA-F]{32}\b"),
        w(
            "sendgrid",
            r"\bSG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}",
        ),
        w("mailgun", r"\bkey-[0-9a-zA-Z]{32}\b"),
        w("mailgun", r"\b[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}\b"),
        w("digitalocean", r"\bdo[opr]_v1_[a-f0-9]{64}\b"),
        w(
            "discord",
            r"\b[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}",
        ),
        g(
            "discord-webhook",
            r"discord(?:app)?\.com/api/webhooks/\d+/([A-Za-z0-9_\-]{20,})",
            1,
        ),
        g(
            "telegram",
            r"(?:\bbot|\b)(\d{8,10}:[A-Za-z0-9_\-]{30,40})(?:[^A-Za-z0-9_\-]|\z)",
            1,
        ),
        w("shopify", r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b"),
        w("pypi", r"\bpypi-AgE[A-Za-z0-9_\-]{50,}"),
        w("atlassian", r"\bAT(?:ATT|CTT)3[A-Za-z0-9_\-=]{50,}"),
        w("linear", r"\blin_(?:api|oauth)_[A-Za-z0-9]{32,}"),
        w("notion", r"\b(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{40,})\b"),
        w("postman", r"\bPMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}\b"),
        w("vault", r"\bhv[sbr]\.[A-Za-z0-9_\-]{24,}"),
        w("doppler", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}"),
        w("sentry", r"\bsntr[ysu]_[A-Za-z0-9_=+/\-]{40,}"),
        w("grafana", r"\bglsa_[A-Za-z0-9]{32}_[a-fA-F0-9]{8}\b"),
        w("grafana", r"\bglc_[A-Za-z0-9+/]{32,}={0,2}"),
        w("newrelic", r"\bNR(?:AK|AA|II)-[A-Z0-9]{27}\b"),
        w("databricks", r"\bdapi[a-f0-9]{32}(?:-\d)?\b"),
        w("supabase", r"\bsbp_[a-f0-9]{40}\b"),
        w("netlify", r"\bnfp_[A-Za-z0-9]{36}\b"),
        w("flyio", r"\bfo1_[A-Za-z0-9_\-]{40,}"),
        w("flyio", r"\bfm[12][ar]?_[A-Za-z0-9+/=_\-]{50,}"),
        w(
            "terraform",
            r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,}",
        ),
        w("tailscale", r"\btskey-[a-z]+-[A-Za-z0-9]+-[A-Za-z0-9]{10,}"),
        w("pulumi", r"\bpul-[a-f0-9]{40}\b"),
        w("replicate", r"\br8_[A-Za-z0-9]{37}\b"),
        w("groq", r"\bgsk_[A-Za-z0-9]{48,}"),
        w("perplexity", r"\bpplx-[A-Za-z0-9]{40,}"),
        w("xai", r"\bxai-[A-Za-z0-9]{60,}"),
        w("square", r"\bsq0(?:atp|csp|idp)-[A-Za-z0-9_\-]{22,60}"),
        w("facebook-square", r"\bEAA[A-Za-z0-9_\-]{56,}"),
        w("firebase", r"\bAAAA[A-Za-z0-9_\-]{7}:APA91b[A-Za-z0-9_\-]{100,}"),
        w(
            "braintree",
            r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}",
        ),
        w("heroku", r"\bHRKU-[A-Za-z0-9_\-]{40,}"),
        w(
            "azure-client-secret",
            r"\b[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}",
        ),
        w("dropbox", r"\bsl\.(?:u\.)?[A-Za-z0-9_\-]{100,}"),
        // --- Credentials by context.
        g(
            "url-password",
            r#"\b[A-Za-z][A-Za-z0-9+.\-]{1,20}://[^\s:/?#@"'<>]*:([^\s/?#@"'<>]+)@"#,
            1,
        ),
        g(
            "url-query",
            r#"(?i)[?&](?:sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|access_token|refresh_token|id_token|api_key|apikey|client_secret|auth|key)=([^&#\s"'<>]{8,})"#,
            1,
        ),
        g(
            "auth-header",
            r#"(?i)\b(?:proxy-)?authorization\\?["']?\s*[:=]\s*\\?["'`]?(?:bearer|basic|token|digest|bot)\s+([A-Za-z0-9\-._~+/]{8,}=*)"#,
            1,
        ),
        (
            "bearer",
            r"(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{8,}=*)".to_string(),
            Pick::Check(check_bearer),
        ),
        (
            "cli-flag",
            r#"(?i)(?:^|\s)--(?:[a-z0-9]+-)*(?:password|passwd|pass|token|secret|api-key|apikey|access-key|secret-key|auth-token|client-secret)(?:=|\s+)["']?([^\s"'\\]+)"#.to_string(),
            Pick::Check(check_flag),
        ),
        (
            "curl-user",
            r#"(?:^|\s)(?:-u|--user)\s+["']?[^\s:"'\\]+:([^\s"'\\]+)"#.to_string(),
            Pick::Check(check_flag),
        ),
        (
            "sshpass",
            r#"\bsshpass\s+-p\s*(?:'([^'\n]+)'|"([^"\n\\]+)"|([^\s"'\\]+))"#.to_string(),
            Pick::Check(first_group),
        ),
        g(
            "mysql-password",
            r#"\bmysql(?:dump|admin)?\b[^\n]*?\s-p([^\s\-"'\\][^\s"'\\]*)"#,
            1,
        ),
        g(
            "netrc",
            r#"\bmachine\s+\S+\s+login\s+\S+\s+password\s+([^\s"'\\]+)"#,
            1,
        ),
        g("pin", r"(?i)\bpin(?:\s+code)?\s*[:=]\s*(\d{4,8})\b", 1),
        g(
            "sql-password",
            r"(?i)\b(?:with\s+(?:encrypted\s+)?password|identified\s+by)\s+'([^'\n]+)'",
            1,
        ),
        g(
            "xml",
            r"(?i)<(?:password|passwd|secret|api[_\-]?key|token|access[_\-]?key|client[_\-]?secret)>([^<\n]+)</",
            1,
        ),
        (
            "assignment",
            format!(
                r#"(?i)(?P<key>\b[a-z0-9_.\-]*?(?P<word>{KEY_WORDS})(?:{KEY_SUFFIXES})*|\b(?:[a-z0-9_.\-]*[_.\-])?(?:{SHORT_KEY_WORDS}))(?P<sep>\\?["']?\**\s*(?:=>|:=|[:=])\**\s*){}"#,
                value_pattern(BARE)
            ),
            Pick::Check(check_assignment),
        ),
        (
            "env-secret",
            format!(
                r#"(?P<key>\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)(?P<sep>\s*[:=]\s*){}"#,
                value_pattern(BARE_ENV)
            ),
            Pick::Check(check_env),
        ),
        (
            "password-phrase",
            concat!(
                r"(?i)(?P<kw>\b(?:password|passwd|passphrase|passcode|pass\s?word|pw|pin(?:\s+code)?|",
                r"mot\s+de\s+passe|passwort|kennwort|contrasena|senha|wachtwoord)\b|contraseña|пароль)",
                r"(?:\s+(?:for|to|of|on|at)\s+(?:the\s+|my\s+|our\s+)?[\w.@:/\-]+(?:\s+[\w.@\-]+)?)?",
                r"\s*(?:is|was|will\s+be|has\s+been|became|changed\s+to|set\s+to|reset\s+to|ist|est|es|é|->|→)\s+",
                r"(?:now\s+|still\s+|just\s+|literally\s+|actually\s+)?",
                r"(?:“(?P<qc>[^”\n]+)”|{})",
            )
            .replace("{}", &value_pattern(BARE_ENV)),
            Pick::Check(check_phrase),
        ),
    ]
});

static COMPILED: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    RULES
        .iter()
        .map(|(_, s, _)| Regex::new(&normalise_pattern(s)).expect("static regex"))
        .collect()
});

/// Two rewrites applied to every rule:
/// - `\b` becomes the ASCII word boundary `(?-u:\b)`: a Unicode `\b` makes the regex engine
///   fall back from its DFA to a much slower matcher on any non-ASCII text (measured: 20×
///   slower on This Week in Rust). Rules that need a boundary next to non-ASCII letters
///   spell it out.
/// - `\s` outside a character class becomes `[ \t]`: a key and its value are on one line
///   (`token_type: Bearer` must not pair with the next line's key).
fn normalise_pattern(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 32);
    let mut chars = pattern.chars();
    let mut in_class = 0usize;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('b') if in_class == 0 => out.push_str(r"(?-u:\b)"),
                Some('s') if in_class == 0 => out.push_str(r"[ \t]"),
                Some(n) => {
                    out.push(c);
                    out.push(n);
                }
                None => out.push(c),
            },
            '[' => {
                in_class += 1;
                out.push(c);
                // `[]…]` and `[^]…]`: a leading `]` is a literal.
            }
            ']' if in_class > 0 => {
                in_class -= 1;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// Regions the high-entropy rule never looks into: URLs (their paths are full of ids;
/// credentials in them are caught by `url-password`/`url-query`), data URIs, public PEM
/// blocks (certificates, public keys, signatures) and SSH public keys.
static NOT_SECRET_REGIONS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r#"\b[A-Za-z][A-Za-z0-9+.\-]{1,20}://[^\s"'<>`]+"#,
        r"|\bdata:[\w/+.\-]+;base64,[A-Za-z0-9+/=]+",
        r"|(?s)-----BEGIN (?:CERTIFICATE|PUBLIC KEY|RSA PUBLIC KEY|PGP PUBLIC KEY BLOCK|PGP SIGNATURE|PGP MESSAGE|SIGNED MESSAGE|CERTIFICATE REQUEST|NEW CERTIFICATE REQUEST|X509 CRL|OPENSSH PUBLIC KEY|SSH2 PUBLIC KEY|DH PARAMETERS|EC PARAMETERS)-----.*?(?:-----END [A-Z0-9 ]+-----|\z)",
        r"|(?-s)\b(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp\d+|sk-(?:ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)\s+AAAA[A-Za-z0-9+/=]+",
    ))
    .expect("static regex")
});

/// Replace secrets in `text` with `[REDACTED]` markers (see the module's invariants).
pub fn redact(text: &str) -> Cow<'_, str> {
    let Some(mut out) = redact_once(text) else {
        return Cow::Borrowed(text);
    };
    // Markers can join what was apart (`[REDACTED]tail` reads as a new token): repeat until
    // nothing changes, so that redacting redacted text is a no-op. Every pass that changes
    // the text shortens what is not a marker, so this ends; the bound is a guard.
    for _ in 0..8 {
        match redact_once(&out) {
            Some(next) => out = next,
            None => break,
        }
    }
    Cow::Owned(out)
}

/// One pass over `text`: `None` when nothing is found.
fn redact_once(text: &str) -> Option<String> {
    let found = find_secrets(text);
    if found.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for r in merge(found) {
        out.push_str(&text[at..r.start]);
        out.push_str(REDACTED);
        // Keep the line count: a multi-line secret leaves its newlines behind.
        for _ in text[r.clone()].matches('\n') {
            out.push('\n');
        }
        at = r.end;
    }
    out.push_str(&text[at..]);
    Some(out)
}

/// Names of the regex rules, in order (several rules may share a name), then
/// `high-entropy`.
pub fn rule_names() -> Vec<&'static str> {
    RULES
        .iter()
        .map(|(name, _, _)| *name)
        .chain(["high-entropy"])
        .collect()
}

/// Whether `text` contains anything [`redact`] would replace.
pub fn contains_secret(text: &str) -> bool {
    !find_secrets(text).is_empty()
}

/// Every secret in `text`, by rule, sorted by position (ranges may overlap when two rules
/// agree). Markers left by an earlier redaction are not secrets.
pub fn find_secrets(text: &str) -> Vec<Finding> {
    let view = escape_view(text);
    let v = view.as_ref();
    let mut out = Vec::new();
    for ((name, _, pick), re) in RULES.iter().zip(COMPILED.iter()) {
        let mut at = 0;
        while let Some(caps) = re.captures_at(v, at) {
            let Some(whole) = caps.get(0) else { break };
            let range = match pick {
                Pick::Whole => Some(whole.range()),
                Pick::Group(n) => caps.get(*n).map(|m| m.range()),
                Pick::Check(f) | Pick::CheckResume(f) => f(v, &caps),
            };
            at = match (pick, &range) {
                (Pick::CheckResume(_), Some(r)) => r.end,
                _ => whole.end(),
            }
            .max(whole.start() + 1);
            // Never resume inside a character.
            while at < v.len() && !v.is_char_boundary(at) {
                at += 1;
            }
            if let Some(range) = range {
                push(&mut out, text, name, range);
            }
            if at >= v.len() {
                break;
            }
        }
    }
    // Bare tokens are looked for in what the rules left: a token glued to a redacted
    // secret is judged on its own, as it will be when the redacted text is redacted again.
    let rest = if out.is_empty() {
        Cow::Borrowed(v)
    } else {
        let mut b = v.as_bytes().to_vec();
        for f in &out {
            b[f.range.clone()].fill(b' ');
        }
        // Whole characters were replaced by ASCII spaces: still UTF-8.
        Cow::Owned(String::from_utf8(b).unwrap_or_else(|_| v.to_string()))
    };
    for range in high_entropy(&rest) {
        push(&mut out, text, "high-entropy", range);
    }
    out.sort_by_key(|f| (f.range.start, f.range.end));
    out
}

fn push(out: &mut Vec<Finding>, text: &str, rule: &'static str, range: Range<usize>) {
    let value = text[range.clone()].trim();
    if value.is_empty() || value == REDACTED {
        return;
    }
    out.push(Finding { rule, range });
}

/// Merge overlapping or touching ranges (sorted by start).
fn merge(found: Vec<Finding>) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for f in found {
        match out.last_mut() {
            Some(last) if f.range.start <= last.end => last.end = last.end.max(f.range.end),
            _ => out.push(f.range),
        }
    }
    out
}

/// The text the rules match against: identical byte offsets, but the letter of each JSON /
/// C escape `\n \r \t \b \f` replaced by a space so `…\nsk-abc…` separates words the way
/// the decoded text would.
fn escape_view(text: &str) -> Cow<'_, str> {
    if !text.contains('\\') {
        return Cow::Borrowed(text);
    }
    let mut b = text.as_bytes().to_vec();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'\\' {
            if matches!(b[i + 1], b'n' | b'r' | b't' | b'b' | b'f') {
                b[i + 1] = b' ';
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    // Only ASCII letters were replaced by ASCII spaces: still UTF-8.
    match String::from_utf8(b) {
        Ok(s) => Cow::Owned(s),
        Err(_) => Cow::Borrowed(text),
    }
}

/// A value found after a key: its byte range in the text and whether it was quoted.
#[derive(Clone)]
struct Value {
    range: Range<usize>,
    quoted: bool,
}

fn value_of(c: &Captures<'_>) -> Option<Value> {
    for name in ["qd", "qs", "qb", "qc"] {
        if let Some(m) = c.name(name) {
            return Some(Value {
                range: m.range(),
                quoted: true,
            });
        }
    }
    c.name("v").map(|m| Value {
        range: m.range(),
        quoted: false,
    })
}

/// Values that are not secrets: placeholders, masks, templates, references.
fn is_placeholder(value: &str) -> bool {
    let v = value.trim();
    let lower = v.to_ascii_lowercase();
    let first = v.chars().next().unwrap_or(' ');
    let rest = v.get(1..).unwrap_or("");
    v.is_empty()
        || v.chars().all(|c| c == first) // xxxx, ****, ....
        || v == "…"
        || lower.contains("redacted")
        || lower.starts_with("your")
        || lower.ends_with("_here")
        || lower.ends_with("-here")
        // Well-known stand-ins: `changeme`, `change-me`, `changeit`, `placeholder`.
        || matches!(
            lower.replace(['-', '_'], "").as_str(),
            "changeme" | "changeit" | "placeholder"
        )
        || matches!(first, '$' | '{' | '<' | ':' | '=')
        // `%(name)s`, `%{var}`, `%APPDATA%`
        || (first == '%' && (rest.starts_with(['(', '{']) || rest.ends_with('%')))
        // YAML tags: `!secret db_password`, `!Ref DbPassword`, `!vault |`
        || (first == '!' && rest.chars().all(|c| c.is_ascii_alphabetic()))
        // Another variable's name: `KEY=VALUE`, `api_key: API_KEY`.
        || (v.len() >= 3 && v.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
}

/// Words after `password:`/`token =` that are code or config, not a value: types,
/// literals, keywords.
fn is_code_word(value: &str) -> bool {
    const WORDS: &[&str] = &[
        "none",
        "null",
        "nil",
        "true",
        "false",
        "undefined",
        "str",
        "string",
        "&str",
        "bool",
        "boolean",
        "int",
        "integer",
        "i32",
        "i64",
        "u8",
        "u16",
        "u32",
        "u64",
        "usize",
        "isize",
        "f32",
        "f64",
        "float",
        "number",
        "bytes",
        "byte",
        "vec",
        "option",
        "optional",
        "any",
        "object",
        "secret",
        "secretstring",
        "secretbox",
        "password",
        "token",
        "credentials",
        "credential",
        "impl",
        "dyn",
        "mut",
        "ref",
        "const",
        "let",
        "var",
        "void",
        "self",
        "this",
        "required",
        "yes",
        "no",
        "on",
        "off",
        "env",
        "default",
        "unknown",
        "hidden",
        "masked",
        "empty",
        "omitted",
        "string?",
        "text",
        "varchar",
        "char",
        "blob",
        "uuid",
        "list",
        "dict",
        "map",
        "hashmap",
        "arc",
        "box",
        "cow",
        "future",
        "result",
        "array",
        "type",
        "interface",
        "include",
        "same-origin",
        "omit",
        "inherit",
        "basic",
        "bearer",
        "digest",
        "oauth",
        "oauth2",
        "jwt",
        "checked",
        "unchecked",
    ];
    let lower = value.trim_end_matches([',', ';', '?']).to_ascii_lowercase();
    WORDS.contains(&lower.as_str())
}

fn is_dotted_ident(v: &str) -> bool {
    let mut parts = v.split('.');
    let ident = |p: &str| {
        let mut cs = p.chars();
        matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    v.contains('.') && parts.all(ident)
}

/// Whether the separator has spaces on both sides (`key = value`: code style).
fn spaced(sep: &str) -> bool {
    sep.starts_with(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        && sep.ends_with(char::is_whitespace)
}

/// `key: Type`, `key = call(…)`, `key = obj.field`, `key = $VAR`, `label: some prose`:
/// not a value. `word` is the part of the key that names the secret (see [`check_value`]).
fn looks_like_code(view: &str, value: &Range<usize>, sep: &str, key: &str, word: &str) -> bool {
    let v = &view[value.clone()];
    let next = view[value.end..].chars().next();
    matches!(next, Some('(') | Some('[') | Some('<'))
        || v.contains("::")
        || v.starts_with('&')
        || v.starts_with('/')
        || v.starts_with("./")
        || v.starts_with("../")
        || v.starts_with("~/")
        || is_code_word(v)
        || (spaced(sep) && is_dotted_ident(v))
        // `cargo credential: trim newlines in tokens`: a label followed by prose.
        || (!word.to_ascii_lowercase().ends_with("passphrase")
            && v.chars().all(char::is_alphabetic)
            && view[value.end..].starts_with(' ')
            && view[value.end + 1..].starts_with(|c: char| c.is_alphanumeric() || c == '['))
        // `self.api_key = api_key`, `password = password`: a variable of the same name.
        || key
            .rsplit(['.', '>'])
            .next()
            .is_some_and(|last| last.eq_ignore_ascii_case(v))
        // `key: SecretString` — a type annotation with several capitalised humps.
        || (sep.trim() == ":"
            && v.starts_with(|c: char| c.is_ascii_uppercase())
            && v.chars().all(|c| c.is_ascii_alphabetic())
            && v.chars().filter(char::is_ascii_uppercase).count() >= 2
            && v.chars().any(|c| c.is_ascii_lowercase()))
}

/// Extend a passphrase's value to the end of its line: passphrases are several words.
fn extend_passphrase(view: &str, word: &str, value: &Value) -> Range<usize> {
    if value.quoted || !word.to_ascii_lowercase().ends_with("passphrase") {
        return value.range.clone();
    }
    let end = value.range.end;
    let rest = &view[end..];
    let stop = rest.find(['\n', '"', '\\', '`']).unwrap_or(rest.len());
    let tail = rest[..stop].trim_end_matches(|c: char| c.is_whitespace() || ".,;".contains(c));
    value.range.start..end + tail.len()
}

/// The checks shared by `key = value` rules; `None` when the value is not a secret. `word`
/// is the part of `key` that names the secret: the key word the rule found (`passphrase`
/// in `gpg_passphrase_value`), or the whole key for a rule that finds none.
fn check_value(view: &str, key: &str, word: &str, sep: &str, value: Value) -> Option<Range<usize>> {
    let v = &view[value.range.clone()];
    if is_placeholder(v) || is_code_word(v) {
        return None;
    }
    if !value.quoted && looks_like_code(view, &value.range, sep, key, word) {
        return None;
    }
    // `auth` alone (docker's config.json) is also a mode name: only long values count.
    if word.to_ascii_lowercase().ends_with("auth") && v.len() < 12 {
        return None;
    }
    Some(extend_passphrase(view, word, &value))
}

fn check_assignment(view: &str, c: &Captures<'_>) -> Option<Range<usize>> {
    let key = c.name("key")?.as_str();
    let word = c.name("word").map_or(key, |w| w.as_str());
    let sep = c.name("sep")?.as_str();
    check_value(view, key, word, sep, value_of(c)?)
}

/// `SOME_NAME=value` where a `_`-separated part of the upper-case name says secret.
/// In `.env` style (no spaces around `=`) the value runs to the end of the word, brackets
/// and `&` included (`DJANGO_SECRET_KEY=x(&y`); in code style it stops at them.
fn check_env(view: &str, c: &Captures<'_>) -> Option<Range<usize>> {
    const SECRET_PARTS: &[&str] = &[
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "PWD",
        "PW",
        "TOKEN",
        "KEY",
        "APIKEY",
        "AUTH",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "PRIVATE",
        "SALT",
        "PASSPHRASE",
        "DSN",
    ];
    const NOT_SECRET_PARTS: &[&str] = &[
        "PUBLIC",
        "PUBLISHABLE",
        "FILE",
        "PATH",
        "ENV",
        "ID",
        "URL",
        "HOST",
        "PORT",
        "USER",
        "USERNAME",
        "NAME",
        "TYPE",
        "LENGTH",
        "LEN",
        "SIZE",
        "TTL",
        "EXPIRY",
        "EXPIRES",
        "COUNT",
        "MAX",
        "MIN",
        "LIMIT",
        "HEADER",
        "PREFIX",
        "FIELD",
        "REF",
        "VAR",
        "SOCK",
    ];
    let key = c.name("key")?.as_str();
    let parts: Vec<&str> = key.split('_').collect();
    if !parts.iter().any(|p| SECRET_PARTS.contains(p))
        || parts.iter().any(|p| NOT_SECRET_PARTS.contains(p))
    {
        return None;
    }
    let sep = c.name("sep")?.as_str();
    let mut value = value_of(c)?;
    if !value.quoted && spaced(sep) {
        let v = &view[value.range.clone()];
        if let Some(cut) = v.find(['(', ')', '[', ']', '{', '}', '<', '>', ',', ';', '&']) {
            value.range.end = value.range.start + cut;
            if cut == 0 {
                return None;
            }
        }
    }
    check_value(view, key, key, sep, value)
}

static PRIVATE_KEY_END: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----").expect("static regex")
});

fn check_private_key(_view: &str, c: &Captures<'_>) -> Option<Range<usize>> {
    let m = c.get(0)?;
    Some(match PRIVATE_KEY_END.find(m.as_str()) {
        Some(end) => m.start()..m.start() + end.end(),
        None => m.range(),
    })
}

/// The first capture group that took part in the match.
fn first_group(_view: &str, c: &Captures<'_>) -> Option<Range<usize>> {
    c.iter().skip(1).flatten().next().map(|m| m.range())
}

fn check_bearer(_view: &str, c: &Captures<'_>) -> Option<Range<usize>> {
    // Outside an Authorization header, `bearer <word>` is often prose ("bearer
    // instruments"): only token-looking values are redacted.
    let m = c.get(1)?;
    let value = m.as_str();
    let tokenish = value.len() >= 20
        || value
            .chars()
            .any(|ch| ch.is_ascii_digit() || "-._~+/".contains(ch));
    tokenish.then(|| m.range())
}

fn check_flag(_view: &str, c: &Captures<'_>) -> Option<Range<usize>> {
    let m = c.get(1)?;
    (!is_placeholder(m.as_str())).then(|| m.range())
}

/// "my password is hunter2", "the wifi password is 'a b c'", "PIN is 4821".
fn check_phrase(view: &str, c: &Captures<'_>) -> Option<Range<usize>> {
    const PROSE: &[&str] = &[
        "a",
        "an",
        "the",
        "is",
        "not",
        "too",
        "very",
        "so",
        "now",
        "still",
        "also",
        "only",
        "just",
        "never",
        "always",
        "in",
        "on",
        "at",
        "of",
        "to",
        "for",
        "with",
        "by",
        "from",
        "as",
        "and",
        "or",
        "but",
        "if",
        "it",
        "its",
        "that",
        "this",
        "what",
        "which",
        "there",
        "here",
        "then",
        "required",
        "incorrect",
        "correct",
        "wrong",
        "invalid",
        "valid",
        "stored",
        "hashed",
        "saved",
        "set",
        "empty",
        "missing",
        "expired",
        "changed",
        "reset",
        "weak",
        "strong",
        "secure",
        "insecure",
        "long",
        "short",
        "case",
        "optional",
        "needed",
        "used",
        "sent",
        "shown",
        "visible",
        "hidden",
        "encrypted",
        "same",
        "different",
        "unknown",
        "known",
        "forgotten",
        "lost",
        "ok",
        "okay",
        "fine",
        "good",
        "bad",
        "rotated",
        "managed",
        "kept",
        "generated",
        "random",
        "provided",
        "given",
        "requested",
        "checked",
        "validated",
        "verified",
        "accepted",
        "rejected",
        "ignored",
        "unchanged",
        "updated",
        "protected",
        "safe",
        "unsafe",
        "plain",
        "plaintext",
        "something",
        "anything",
        "nothing",
        "somewhere",
        "written",
        "printed",
        "logged",
        "shared",
        "public",
        "private",
        "secret",
        "case-sensitive",
        "sensitive",
        "mandatory",
        "enough",
        "better",
        "worse",
        "easy",
        "hard",
        "simple",
        "complex",
        "one",
        "two",
        "more",
        "less",
        "being",
        "be",
        "been",
        "no",
        "yes",
        "your",
        "my",
        "our",
        "their",
        "his",
        "her",
        "all",
        "any",
        "some",
        "none",
        "null",
        "different",
        "similar",
        "available",
        "disabled",
        "enabled",
        "removed",
        "gone",
        "supposed",
        "meant",
        "about",
        "like",
        "usually",
        "probably",
        "definitely",
        "typed",
        "entered",
        "asked",
        "prompted",
        "length",
        "then",
        "where",
        "when",
        "how",
        "why",
        "who",
        "stored",
        "cached",
        "kept",
        "read",
        "pasted",
        "copied",
        "auto-generated",
        "autogenerated",
    ];
    let kw = c.name("kw")?.as_str().to_lowercase();
    let value = value_of(c)?;
    let raw = &view[value.range.clone()];
    if value.quoted {
        return (!is_placeholder(raw)).then_some(value.range);
    }
    let trimmed = raw.trim_end_matches(|ch: char| ".,;:!?)".contains(ch));
    if trimmed.is_empty() || is_placeholder(trimmed) {
        return None;
    }
    let range = value.range.start..value.range.start + trimmed.len();
    if kw.starts_with("pin") {
        let digits = trimmed.chars().all(|ch| ch.is_ascii_digit());
        return (digits && (4..=8).contains(&trimmed.len())).then_some(range);
    }
    let lower = trimmed.to_lowercase();
    let wordish = trimmed
        .chars()
        .all(|ch| ch.is_alphabetic() || ch == '-' || ch == '\'');
    if PROSE.contains(&lower.as_str())
        || (wordish && (lower.ends_with("ed") || lower.ends_with("ing") || lower.ends_with("ly")))
    {
        return None;
    }
    if kw == "passphrase" {
        return Some(extend_passphrase(view, "passphrase", &value));
    }
    Some(range)
}

// ---------------------------------------------------------------------------------------
// High-entropy tokens
// ---------------------------------------------------------------------------------------

/// Minimum length of a bare token the entropy rule considers (of which at least 20 letters
/// and digits).
pub const ENTROPY_MIN_LEN: usize = 24;

/// Alphabet of a token's letters and digits, which sets the thresholds it is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alphabet {
    /// Upper, lower and digits (base62/base64 keys).
    Mixed,
    /// One case of letters plus digits (base36).
    OneCaseDigits,
    /// Upper and lower letters, no digit.
    LettersOnly,
}

/// Entropy floor (bits per character) for a random token of `n` characters: the 0.1st
/// percentile of the Shannon entropy of uniformly random strings of that alphabet and
/// length, less 0.05 (simulated, 20,000 strings per point; checked by
/// `tests::random_tokens_are_caught`). Piecewise-linear in log2(n) between the points.
pub fn entropy_floor(alphabet: Alphabet, n: usize) -> f64 {
    const N: [f64; 6] = [20.0, 24.0, 32.0, 48.0, 64.0, 128.0];
    let h: [f64; 6] = match alphabet {
        Alphabet::Mixed => [3.43, 3.69, 4.04, 4.46, 4.76, 5.29],
        Alphabet::OneCaseDigits => [3.16, 3.41, 3.72, 4.08, 4.33, 4.72],
        Alphabet::LettersOnly => [3.39, 3.59, 3.94, 4.37, 4.63, 5.12],
    };
    let x = (n as f64).clamp(N[0], N[5]).log2();
    for i in 0..5 {
        let (x0, x1) = (N[i].log2(), N[i + 1].log2());
        if x <= x1 {
            return h[i] + (h[i + 1] - h[i]) * (x - x0) / (x1 - x0);
        }
    }
    h[5]
}

/// Minimum share of adjacent letter/digit pairs that switch class (lower, upper, digit):
/// random strings switch often, identifiers (`CamelCase`, `snake_case2`) and paths rarely.
pub fn transition_floor(alphabet: Alphabet) -> f64 {
    match alphabet {
        Alphabet::Mixed => 0.30,
        Alphabet::OneCaseDigits => 0.20,
        Alphabet::LettersOnly => 0.30,
    }
}

/// Shannon entropy in bits per character.
pub fn shannon_entropy(s: &str) -> f64 {
    let mut counts = [0u32; 128];
    let mut n = 0u32;
    for b in s.bytes().filter(u8::is_ascii) {
        counts[b as usize] += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    let n = f64::from(n);
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

fn class(b: u8) -> u8 {
    if b.is_ascii_lowercase() {
        0
    } else if b.is_ascii_uppercase() {
        1
    } else {
        2
    }
}

/// Share of adjacent pairs of `core` (letters and digits only) that switch class.
pub fn transition_ratio(core: &str) -> f64 {
    let b = core.as_bytes();
    if b.len() < 2 {
        return 0.0;
    }
    let switches = b.windows(2).filter(|w| class(w[0]) != class(w[1])).count();
    switches as f64 / (b.len() - 1) as f64
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'-')
}

/// Whether a bare token (no whitespace) looks like a random secret. Pure hex (hashes,
/// git SHAs), hex with dashes (UUIDs), integrity digests and SSH key blobs are not.
pub fn is_high_entropy_token(token: &str) -> bool {
    let t = token.trim_end_matches('=');
    let inner = t.trim_matches(|c: char| matches!(c, '-' | '_' | '/' | '+'));
    let hexable = inner.strip_prefix("0x").unwrap_or(inner);
    if hexable.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return false;
    }
    let lower = t.to_ascii_lowercase();
    if ["sha1-", "sha256-", "sha384-", "sha512-"]
        .iter()
        .any(|p| lower.starts_with(p))
        || t.starts_with("AAAAB3")
        || t.starts_with("AAAAC3")
        || t.starts_with("AAAAE2")
    {
        return false;
    }
    let core: String = t.chars().filter(char::is_ascii_alphanumeric).collect();
    if t.len() < ENTROPY_MIN_LEN || core.len() < 20 {
        return false;
    }
    // Many separators make a compound name (`GEP100-Arf6-AMAP1-Cortactin`,
    // `Oct4/Sox2/Klf4/Myc`, `CD4+CD25+Foxp3+`), not base64, where `-_` (or `+/`) are 2 of
    // 64 symbols.
    let separators = t
        .bytes()
        .filter(|b| matches!(b, b'-' | b'_' | b'/' | b'+'))
        .count();
    if separators >= 3 && separators * 10 >= t.len() {
        return false;
    }
    let upper = core.bytes().any(|b| b.is_ascii_uppercase());
    let lower = core.bytes().any(|b| b.is_ascii_lowercase());
    let digit = core.bytes().any(|b| b.is_ascii_digit());
    let alphabet = match (upper, lower, digit) {
        (true, true, true) => Alphabet::Mixed,
        (true, false, true) | (false, true, true) if core.len() >= 32 => Alphabet::OneCaseDigits,
        (true, true, false) => Alphabet::LettersOnly,
        _ => return false,
    };
    // Random letters are about half upper case; `CamelCaseIdentifiers` are mostly lower.
    let upper_share = core.bytes().filter(u8::is_ascii_uppercase).count() as f64
        / core.bytes().filter(u8::is_ascii_alphabetic).count() as f64;
    if alphabet == Alphabet::LettersOnly && !(0.25..=0.75).contains(&upper_share) {
        return false;
    }
    transition_ratio(&core) >= transition_floor(alphabet)
        && shannon_entropy(&core) >= entropy_floor(alphabet, core.len())
}

/// A bare 40-character AWS secret access key (`[A-Za-z0-9/+]{40}`, all three classes).
fn is_aws_secret(token: &str) -> bool {
    let b = token.as_bytes();
    b.len() == 40
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'/' || c == b'+')
        && b.iter().any(u8::is_ascii_uppercase)
        && b.iter().any(u8::is_ascii_lowercase)
        && b.iter().any(u8::is_ascii_digit)
        && {
            let core: String = token.chars().filter(char::is_ascii_alphanumeric).collect();
            transition_ratio(&core) >= 0.25
        }
}

/// Byte ranges of bare random tokens in `view` outside URLs, data URIs, certificates and
/// SSH public keys.
fn high_entropy(view: &str) -> Vec<Range<usize>> {
    let masks: Vec<Range<usize>> = NOT_SECRET_REGIONS
        .find_iter(view)
        .map(|m| m.range())
        .collect();
    let mut next_mask = 0; // masks are sorted and disjoint; tokens come in order
    let b = view.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_token_byte(b[i]) {
            i += 1;
            continue;
        }
        let run_start = i;
        while i < b.len() && is_token_byte(b[i]) {
            i += 1;
        }
        let run_end = i;
        while i < b.len() && b[i] == b'=' {
            i += 1;
        }
        let pad_end = i;
        // Cheap exit: too short to be a secret of any rule here.
        if run_end - run_start < ENTROPY_MIN_LEN {
            continue;
        }
        // A run glued to a dot or `@` is part of a host name, file name, e-mail address or
        // dotted path; a dot that ends a sentence does not count.
        let before = run_start.checked_sub(1).map(|j| b[j]);
        let after = b.get(run_end).copied();
        let dot_inside = after == Some(b'.')
            && b.get(run_end + 1)
                .is_some_and(|c| !c.is_ascii_whitespace() && !matches!(c, b'"' | b'\\' | b')'));
        if matches!(before, Some(b'.') | Some(b'@')) || after == Some(b'@') || dot_inside {
            continue;
        }
        // Digests written `sha256:…` are hashes.
        let prefix = &b[..run_start];
        if prefix.ends_with(b"sha256:")
            || prefix.ends_with(b"sha1:")
            || prefix.ends_with(b"sha512:")
        {
            continue;
        }
        let mut start = run_start;
        let mut end = run_end;
        while start < end && matches!(b[start], b'-' | b'_' | b'/' | b'+') {
            start += 1;
        }
        while end > start && matches!(b[end - 1], b'-' | b'_' | b'/' | b'+') {
            end -= 1;
        }
        let range = start..if end == run_end { pad_end } else { end };
        while next_mask < masks.len() && masks[next_mask].end <= range.start {
            next_mask += 1;
        }
        let masked = masks
            .get(next_mask)
            .is_some_and(|m| m.start < range.end && range.start < m.end);
        if range.is_empty() || masked {
            continue;
        }
        let token = &view[start..end];
        let path_like = before == Some(b'/') || token.starts_with('/');
        if (!path_like && is_aws_secret(token)) || is_high_entropy_token(&view[run_start..pad_end])
        {
            out.push(range);
        }
    }
    out
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
    fn kinds_that_leaked_before() {
        for (text, secret) in [
            (
                "aws_secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
            ),
            (
                "secret key is 9drTJvcXLB89EXAMPLELB8tL6XbCeQ4l7FpoNNv3z",
                "9drTJvcXLB89EXAMPLELB8tL6XbCeQ4l7FpoNNv3z",
            ),
            (
                "DATABASE_URL=postgres://app:Sup3r-s3cret@db:5432/app",
                "Sup3r-s3cret",
            ),
            (
                "stripe sk_live_51HqLyjWDarjtT1zdp7dcXYZ0123456789abcdef",
                "sk_live_51HqLy",
            ),
            (
                "restricted rk_live_51HqLyjWDarjtT1zdp7dcXYZ012345",
                "rk_live_51HqLy",
            ),
            (
                "maps AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
                "AIzaSyD-9tSrke72PouQMnMX",
            ),
            (
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "dozjgNryP4J3jVmNHl0w5N",
            ),
            (
                "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
                "npm_a1B2c3D4e5F6g7H8",
            ),
            (
                "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
                "hf_AbCdEfGhIjKlMnOpQr",
            ),
            ("glpat-xY9_zQ2-vB7nM4kL1pR8", "glpat-xY9_zQ2-vB7nM4kL1pR8"),
            ("my password is hunter2", "hunter2"),
            ("My password is swordfish.", "swordfish"),
            (
                "the wifi password is \"correct horse battery\"",
                "correct horse battery",
            ),
            ("sshpass -p 'Winter2025!' ssh admin@host", "Winter2025!"),
            ("user=admin pass=Sommer2024", "Sommer2024"),
            (
                "psql postgresql://app@db/app?password=Pa55word99",
                "Pa55word99",
            ),
            (
                "curl https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/getMe",
                "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
            ),
            ("DJANGO_SECRET_KEY=x8&k(2!mq#zp$w", "x8&k(2!mq#zp$w"),
            ("card PIN: 4821", "4821"),
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
    fn private_key_blocks_keep_their_lines() {
        let text = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234\nabcdEFGH\n-----END RSA PRIVATE KEY-----\nafter";
        let out = redact(text);
        assert_eq!(out, "before\n[REDACTED]\n\n\n\nafter");
        assert_eq!(out.lines().count(), text.lines().count());
        let text = "x -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n";
        let out = redact(text);
        assert!(!out.contains("b3BlbnNzaC1"), "{out}");
        // Public keys are not secrets.
        let pubkey = "-----BEGIN PUBLIC KEY-----\nMFkwEwYH\n-----END PUBLIC KEY-----";
        assert_eq!(redact(pubkey), pubkey);
        // A JSON-escaped key (a service-account file inside a transcript line).
        let json = r#"{"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n", "x": 1}"#;
        let out = redact(json);
        assert!(!out.contains("MIIEvQIBADAN"), "{out}");
        serde_json::from_str::<serde_json::Value>(&out).expect("still JSON");
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
        assert_eq!(
            redact(r#"password = "correct horse battery""#),
            r#"password = "[REDACTED]""#
        );
        assert_eq!(redact("**Password:** hunter2"), "**Password:** [REDACTED]");
        assert_eq!(
            redact("SECRET_KEY_BASE=9f8e7d6c5b4a"),
            "SECRET_KEY_BASE=[REDACTED]"
        );
        assert_eq!(
            redact("passphrase: correct horse battery staple"),
            "passphrase: [REDACTED]"
        );
    }

    #[test]
    fn code_and_config_references_are_not_values() {
        for text in [
            "pub password: String,",
            "password: Option<String>,",
            "fn login(user: &str, password: &str) -> bool",
            "let token = lexer.next_token();",
            "password = os.environ[\"DB_PASSWORD\"]",
            "password = settings.database.password",
            "password: ${DB_PASSWORD}",
            "api_key: \"{{ vault_api_key }}\"",
            "api_key: YOUR_API_KEY",
            "token: null",
            "password_hint: ask Bob",
            "the bypass: true flag",
            "compass=north",
            "secretName: db-credentials",
            "api_key_env: ANTHROPIC_API_KEY",
            "let secret = Secret::new(bytes);",
            "MAX_TOKENS=4096",
            "SSH_AUTH_SOCK=/tmp/ssh-agent.sock",
            "password: SecretString",
            "self.api_key = api_key or os.environ.get(\"X\")",
            "pw: see 1Password",
            "psql --password \"$DB_PASS\"",
            "Authorization: Bearer ${{ secrets.GITHUB_TOKEN }}",
            "  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}",
            "SECRET_KEY = env(\"SECRET_KEY\")",
            "AWS_SECRET_ACCESS_KEY = os.environ['AWS_SECRET_ACCESS_KEY']",
            "const apiKey = process.env.API_KEY;",
            "password: str = Field(..., min_length=12)",
            "Token: a unit of text the model reads.",
            "token_type: Bearer\naccess_token_ttl: 3600",
            "fetch(url, { credentials: 'include' })",
            "TOKEN_LIMIT=4096 and PASSWORD_RESET_TTL=3600",
            "match token { Token::Ident(s) => s, _ => \"\" }",
            "DB_PASSWORD=changeme",
            "password: change-me",
            "--password placeholder",
        ] {
            let out = redact(text);
            assert_eq!(out, text, "{text:?} was redacted");
        }
    }

    /// Issue 25: lower-case, dotted, glued, suffixed and JSON key forms.
    #[test]
    fn lowercase_dotted_glued_and_json_keys() {
        for (text, want) in [
            ("secret_key = 'Zq8vT3nLm5'", "secret_key = '[REDACTED]'"),
            (
                "app.secret_key = \"Zq8vT3nLm5\"",
                "app.secret_key = \"[REDACTED]\"",
            ),
            (
                r#"{"secret_key": "Zq8vT3nLm5", "debug": false}"#,
                r#"{"secret_key": "[REDACTED]", "debug": false}"#,
            ),
            ("secretkey = Zq8vT3nLm5", "secretkey = [REDACTED]"),
            (
                "password_value = \"Zq8vT3nLm5\"",
                "password_value = \"[REDACTED]\"",
            ),
            ("Password :  Zq8vT3nLm5", "Password :  [REDACTED]"),
            ("secret_key_base: Zq8vT3nLm5", "secret_key_base: [REDACTED]"),
            ("apikey=Zq8vT3nLm5", "apikey=[REDACTED]"),
            (
                "accesstoken: Zq8vT3nLm5 next",
                "accesstoken: [REDACTED] next",
            ),
            (
                r#"{"accessToken":"Zq8vT3nLm5"}"#,
                r#"{"accessToken":"[REDACTED]"}"#,
            ),
            ("api_key_2 = Zq8vT3nLm5", "api_key_2 = [REDACTED]"),
            (
                "passphrase_value: correct horse battery",
                "passphrase_value: [REDACTED]",
            ),
        ] {
            let out = redact(text);
            assert_eq!(out, want, "{text:?}");
            assert_eq!(redact(&out), out, "not idempotent: {text:?}");
        }
        // The same lines inside a transcript's JSON string.
        let line = serde_json::json!({
            "role": "user",
            "content": "app.secret_key = \"Zq8vT3nLm5\"\nsecret_key = 'Qw4rT6yU8i'\n\"secret_key\": \"Hj2kL4mN6b\"",
        })
        .to_string();
        let out = redact(&line);
        for s in ["Zq8vT3nLm5", "Qw4rT6yU8i", "Hj2kL4mN6b"] {
            assert!(!out.contains(s), "{s} in {out}");
        }
        let v = serde_json::from_str::<serde_json::Value>(&out).expect("still JSON");
        assert_eq!(
            v["content"],
            "app.secret_key = \"[REDACTED]\"\nsecret_key = '[REDACTED]'\n\"secret_key\": \"[REDACTED]\""
        );
    }

    #[test]
    fn key_names_are_case_insensitive() {
        for (text, want) in [
            ("PASSWORD : x7GqP2mLk9", "PASSWORD : [REDACTED]"),
            ("Secret_Key=x7GqP2mLk9", "Secret_Key=[REDACTED]"),
            (
                "APP.SECRET_KEY = 'x7GqP2mLk9'",
                "APP.SECRET_KEY = '[REDACTED]'",
            ),
            (
                r#"{"SecretKey": "x7GqP2mLk9"}"#,
                r#"{"SecretKey": "[REDACTED]"}"#,
            ),
            ("Password_Value=x7GqP2mLk9", "Password_Value=[REDACTED]"),
        ] {
            assert_eq!(redact(text), want, "{text:?}");
        }
    }

    /// Near-misses of the issue 25 forms: prose, empty or code values, placeholders, keys
    /// whose suffix says they are not the secret.
    #[test]
    fn lowercase_key_forms_leave_non_secrets_alone() {
        for text in [
            "the password: field is required",
            "Password : field is required",
            "password = None",
            "password = null",
            r#"password = """#,
            r#"password_value = """#,
            r#"secret_key = os.environ["X"]"#,
            "password_value = get_password()",
            "secret_key = secrets.token_hex(32)",
            "secret_key = '<your-key>'",
            "secret_key = <your-key>",
            "secret_key = changeme",
            r#"{"password": "change-me"}"#,
            "password: 'xxx'",
            "secretkey = xxxxxxxx",
            "self.secret_key = secret_key",
            "secret_key = settings.SECRET_KEY",
            "secret_key: SecretKey",
            "secretkey: String",
            "password_hint: ask Bob",
            "password_min_length = 12",
            "token_count = 5",
            "secret_name: db-credentials",
            "token_type: Bearer",
        ] {
            let out = redact(text);
            assert_eq!(out, text, "{text:?} was redacted");
        }
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
            "the password is required",
            "Your password is incorrect, try again.",
            "the password was changed yesterday",
            "the PIN is on the back of the card",
            "",
        ] {
            let out = redact(text);
            assert!(matches!(out, Cow::Borrowed(_)), "{text:?} -> {out:?}");
            assert!(!contains_secret(text));
        }
    }

    #[test]
    fn ordinary_tokens_are_not_high_entropy() {
        for token in [
            "3f786850e387550fdab836ed7e6dc881de23001b", // git SHA
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", // sha256
            "550e8400-e29b-41d4-a716-446655440000",     // UUID
            "threadGroupSizeIsMultipleOfThreadExecutionWidth",
            "riscv64gc-unknown-linux-gnu",
            "aarch64-unknown-linux-gnu_ilp32",
            "IMG_20240101_123456_HDR_0001",
            "com/tradingMaxiSL/status/1822111146574241955/photo/1",
            "sha512-oqVuAfXRKap7fdgcCY5uykM6+R9GqQ8K/uxy9rx7HNQlGYl1kPzQho1wx4JwY8wC",
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
            "RegionsInsufficientlyPolymorphic",
        ] {
            assert!(!is_high_entropy_token(token), "{token}");
        }
        for text in [
            "see https://docs.google.com/document/d/1aBcD3fGhIjKlMn0pQrStUvWxYz4567890AbCdEf/edit",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILrlhcSOizbqJpRPbCzjb+dGV62Vsex/LL5+S7NK9ycQ me@host",
            "![](data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==)",
            "src/memory/search/engine.rs and crates/memory/src/lib.rs",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    /// Deterministic xorshift so the calibration check is reproducible.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn random_tokens_are_caught() {
        let b62 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let l36 = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let b64url = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        for (name, alpha, lengths, min_rate) in [
            ("base62", &b62[..], &[24usize, 32, 40, 64][..], 0.99),
            ("base64url", &b64url[..], &[24usize, 32, 43, 64][..], 0.95),
            ("base36 (lower case)", &l36[..], &[40, 64][..], 0.95),
        ] {
            for &n in lengths {
                let trials = 2000;
                let mut caught = 0;
                for _ in 0..trials {
                    let tok: String = (0..n)
                        .map(|_| alpha[(xorshift(&mut s) % alpha.len() as u64) as usize] as char)
                        .collect();
                    if contains_secret(&format!("value {tok} here")) {
                        caught += 1;
                    }
                }
                let rate = caught as f64 / trials as f64;
                println!(
                    "random {name} token, length {n}: {:.2}% caught",
                    rate * 100.0
                );
                assert!(rate >= min_rate, "{name} n={n}: {rate}");
            }
        }
    }

    #[test]
    fn json_escapes_are_separators_and_json_stays_json() {
        let line = serde_json::json!({
            "role": "user",
            "content": "keys:\nsk-proj-ZZZZyyyyXXXXwwww1111222233334444\n\tpassword: \"hunter2 horse\"\npassword=abc\\def",
        })
        .to_string();
        let out = redact(&line);
        for s in ["ZZZZyyyy", "hunter2", "abc\\\\def"] {
            assert!(!out.contains(s), "{s} in {out}");
        }
        serde_json::from_str::<serde_json::Value>(&out).expect("still JSON");
    }

    #[test]
    fn untouched_text_is_borrowed() {
        assert!(matches!(redact("hello world"), Cow::Borrowed(_)));
    }

    #[test]
    fn redaction_is_idempotent() {
        let text = "password=x sk-abcdefghijklmnopqrstuvwx Bearer abcdefgh12345678 my password is \"a b\" postgres://u:p4ss@h/db";
        let once = redact(text).into_owned();
        assert_eq!(redact(&once), once.as_str());
        assert!(matches!(redact(&once), Cow::Borrowed(_)));
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]
            #[test]
            fn lines_kept_and_idempotent(text in "(?s)[ -~\n]{0,300}") {
                let once = redact(&text).into_owned();
                prop_assert_eq!(once.matches('\n').count(), text.matches('\n').count());
                let twice = redact(&once).into_owned();
                prop_assert_eq!(twice, once);
            }

            /// Texts built from the pieces rules react to, JSON-encoded as a transcript
            /// stores them: the redacted line is still JSON, and redaction is idempotent.
            #[test]
            fn json_lines_stay_json(pieces in prop::collection::vec(prop::sample::select(vec![
                "password=", "password: ", "my password is ", "\"", "'", "`", "\\", "\n", "\t", " ",
                "sk-", "ghp_", "postgres://u:", "@h/db", "Bearer ", "Authorization: Basic ",
                "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
                "q8ZrT4vLm2XwN7bKc9YdH3fJ", "AbCdEfGhIjKlMnOpQrStUvWx0123", "é", "пароль: ",
                "DB_PASSWORD=", "app.secret_key = ", "\"secret_key\": ", "Password :  ", "x(&y", "{", "}", "[", "]", ",", "=", ":",
            ]), 0..40)) {
                let text: String = pieces.concat();
                let line = serde_json::json!({"role": "user", "content": text}).to_string();
                let once = redact(&line).into_owned();
                let parsed = serde_json::from_str::<serde_json::Value>(&once);
                prop_assert!(parsed.is_ok(), "not JSON: {}", once);
                let twice = redact(&once).into_owned();
                prop_assert_eq!(twice, once);
            }
        }
    }
}

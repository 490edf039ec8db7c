//! The bearer token: `CLAW_GATEWAY_TOKEN` when the binary passes one, else the
//! file `gateway.token` in the state dir, generated on first start from the
//! kernel's random source (32 bytes, hex) and kept at mode 0600. Checks compare
//! in constant time.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// File name of the token in the state dir.
pub const TOKEN_FILE: &str = "gateway.token";

/// Errors reading or creating the token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("gateway token file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("gateway token file {0} is empty")]
    Empty(PathBuf),
}

/// The bearer token clients must present.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// A token from a known value (`CLAW_GATEWAY_TOKEN`).
    pub fn new(value: impl Into<String>) -> Token {
        Token(value.into())
    }

    /// The secret itself (to send it, or print where it lives).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether an `Authorization` header value is `Bearer <this token>`, compared
    /// in constant time (the length check leaks only the length).
    pub fn verify_header(&self, header: Option<&str>) -> bool {
        let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        bool::from(given.trim().as_bytes().ct_eq(self.0.as_bytes()))
    }
}

/// Path of the token file in `state_dir`.
pub fn token_path(state_dir: &Path) -> PathBuf {
    state_dir.join(TOKEN_FILE)
}

/// Read the token file, if there is one.
pub fn read(state_dir: &Path) -> Result<Option<Token>, TokenError> {
    let path = token_path(state_dir);
    match std::fs::read_to_string(&path) {
        Ok(s) if s.trim().is_empty() => Err(TokenError::Empty(path)),
        Ok(s) => Ok(Some(Token(s.trim().to_string()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TokenError::Io { path, source }),
    }
}

/// The token in `state_dir`, created (0600) when missing.
pub fn load_or_create(state_dir: &Path) -> Result<Token, TokenError> {
    if let Some(t) = read(state_dir)? {
        let path = token_path(state_dir);
        // Tighten a file someone loosened.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|source| TokenError::Io { path, source })?;
        return Ok(t);
    }
    let path = token_path(state_dir);
    let io = |source| TokenError::Io {
        path: path.clone(),
        source,
    };
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io)?;
    let value = hex::encode(bytes);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    if let Err(e) = &f
        && e.kind() == std::io::ErrorKind::AlreadyExists
    {
        // Another process created it first: use theirs.
        return read(state_dir)?.ok_or(TokenError::Empty(path));
    }
    let file = f
        .as_mut()
        .map_err(|e| io(std::io::Error::new(e.kind(), e.to_string())))?;
    file.write_all(value.as_bytes())
        .and_then(|_| file.write_all(b"\n"))
        .and_then(|_| file.sync_all())
        .map_err(io)?;
    Ok(Token(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_private_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t1 = load_or_create(dir.path()).expect("create");
        assert_eq!(t1.expose().len(), 64);
        assert_eq!(claw_testkit::file_mode(&token_path(dir.path())), 0o600);
        let t2 = load_or_create(dir.path()).expect("reuse");
        assert_eq!(t1.expose(), t2.expose());
    }

    #[test]
    fn verify_needs_the_exact_bearer_value() {
        let t = Token::new("abc123");
        assert!(t.verify_header(Some("Bearer abc123")));
        assert!(!t.verify_header(Some("Bearer abc12")));
        assert!(!t.verify_header(Some("Bearer abc1234")));
        assert!(!t.verify_header(Some("abc123")));
        assert!(!t.verify_header(Some("Basic abc123")));
        assert!(!t.verify_header(None));
    }
}

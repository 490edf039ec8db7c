//! Private files and directories whatever the umask: the state directory, the
//! sessions directory, the database and transcripts hold the user's notes and
//! conversations, so directories are made 0700 and files 0600 where they are
//! created (and tightened when an older claw left them wider).

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of claw's private directories.
pub const DIR_MODE: u32 = 0o700;
/// Mode of claw's private files.
pub const FILE_MODE: u32 = 0o600;

/// `create_dir_all` with missing components created 0700, then `dir` itself set to
/// exactly 0700 (a umask can only remove bits, and `dir` may predate this claw).
pub fn create_dir_all(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    set_mode(dir, DIR_MODE)
}

/// Set `path`'s permission bits to `mode` unless they already are.
pub fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if meta.permissions().mode() & 0o7777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Open options that create a file 0600.
pub fn file_options() -> std::fs::OpenOptions {
    let mut o = std::fs::OpenOptions::new();
    o.mode(FILE_MODE);
    o
}

/// Make an existing file 0600 (no-op when it does not exist).
pub fn tighten_file(path: &Path) -> std::io::Result<()> {
    match set_mode(path, FILE_MODE) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_0700_and_files_0600_even_when_they_existed_wider() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        create_dir_all(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        let f = dir.join("f");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        tighten_file(&f).unwrap();
        assert_eq!(mode(&f), 0o600);
        tighten_file(&dir.join("missing")).unwrap();
        let new = tmp.path().join("c/d");
        create_dir_all(&new).unwrap();
        assert_eq!(mode(&new), 0o700);
    }
}

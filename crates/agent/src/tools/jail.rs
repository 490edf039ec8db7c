//! The file tools' jail: every path the model gives `read_file`, `write_file`,
//! `edit_file` and `list_dir` is opened *beneath* the workspace descriptor
//! ([`claw_memory_api::beneath`]: `openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS`, or the `O_NOFOLLOW` walk where `openat2` is missing),
//! once, and the tool then works on the descriptor it got — never on the path
//! again, so a swap between the check and the use changes nothing.
//!
//! What the jail refuses (with [`ToolError::OutsideWorkspace`] unless said):
//! - `..` above the workspace, absolute paths outside it;
//! - symlinks (in any component, the last included) whose target leaves the
//!   workspace; symlinks that stay inside are followed;
//! - creating a file where a dangling symlink stands: new files are created with
//!   `O_CREAT | O_EXCL | O_NOFOLLOW` in a parent resolved beneath the workspace,
//!   so a link is never created *through* ([`ToolError::Io`], saying why);
//! - writing or editing a regular file whose link count is above 1: a hard link
//!   may be another name of a file outside the workspace, and claw cannot tell
//!   which name came first, so writes through any hard link are refused and the
//!   error says so. Reads of hard-linked files are allowed (git and cargo create
//!   hard links in working trees; a hard link is a name inside the workspace);
//! - devices, FIFOs and sockets (opened non-blocking, then refused by type);
//! - claw's own state directory and config file ([`ToolError::Protected`]), also
//!   where they lie inside the workspace, also without the jail: every opened
//!   descriptor's path (from `/proc/self/fd`, the kernel's own name for it) is
//!   checked, and a file to be created is checked in its nearest existing parent
//!   before anything is created.
//!
//! Without the jail (`jail_to_workspace: false`) the same functions open plain
//! paths, following every link.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use super::policy::{display_path, join_model_path};
use super::{ToolContext, ToolError};
use claw_memory_api::beneath::{self, Beneath, BeneathError, Resolver};

/// How a path is reached.
#[derive(Debug)]
pub struct Jail {
    workspace: PathBuf,
    /// `None`: no jail.
    beneath: Option<Beneath>,
    /// Resolved paths no tool may open (state dir, config file).
    protected: Vec<PathBuf>,
}

/// An opened target and how to show its path to the model.
#[derive(Debug)]
pub struct Opened<T> {
    pub handle: T,
    /// The path as shown to the model (relative to the workspace when inside).
    pub shown: String,
}

impl Jail {
    /// The jail of a tool context (`ctx.jail`), with the process's resolver.
    pub fn from_context(ctx: &ToolContext) -> Result<Jail, ToolError> {
        Ok(Self::new(&ctx.workspace, ctx.jail)?.protecting(&ctx.protected))
    }

    /// The same jail, also refusing `paths` (and everything beneath them).
    pub fn protecting(mut self, paths: &[PathBuf]) -> Jail {
        self.protected = paths
            .iter()
            .map(|p| claw_memory_api::state::resolve_existing(p))
            .collect();
        self
    }

    /// `Err(Protected)` when `real` (a resolved path) is or lies beneath a
    /// protected path.
    fn check_real(&self, real: &Path, shown: &str) -> Result<(), ToolError> {
        match self.protected.iter().find(|p| real.starts_with(p)) {
            Some(p) => Err(ToolError::Protected {
                path: shown.to_string(),
                what: p.display().to_string(),
            }),
            None => Ok(()),
        }
    }

    /// Checks an opened descriptor by the kernel's name for it.
    fn check_fd(&self, fd: libc::c_int, shown: &str) -> Result<(), ToolError> {
        if self.protected.is_empty() {
            return Ok(());
        }
        self.check_real(&fd_path(fd, shown)?, shown)
    }

    /// Checks where a file that does not exist yet would be created: its nearest
    /// existing parent, resolved, joined with the rest of the path.
    fn check_new(&self, path: &Path, shown: &str) -> Result<(), ToolError> {
        if self.protected.is_empty() {
            return Ok(());
        }
        let mut rest = Vec::new();
        let mut at = path;
        loop {
            let parent = match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if let Some(name) = at.file_name() {
                rest.push(name.to_os_string());
            }
            let flags = libc::O_PATH | libc::O_DIRECTORY;
            let opened = match &self.beneath {
                Some(b) => b.open_file(parent, flags).ok(),
                None => open_plain(parent, flags).ok(),
            };
            if let Some(dir) = opened {
                let mut joined = fd_path(dir.as_raw_fd(), shown)?;
                for r in rest.iter().rev() {
                    if r == ".." {
                        joined.pop();
                    } else if r != "." {
                        joined.push(r);
                    }
                }
                return self.check_real(&joined, shown);
            }
            if parent == Path::new(".") || parent == at {
                return Ok(()); // nothing exists on the way: the open fails later
            }
            at = parent;
        }
    }

    /// A jail on `workspace` (`jailed: false` gives plain path access).
    pub fn new(workspace: &Path, jailed: bool) -> Result<Jail, ToolError> {
        if !jailed {
            return Ok(Jail {
                workspace: workspace.to_path_buf(),
                beneath: None,
                protected: Vec::new(),
            });
        }
        Self::with_resolver(workspace, beneath::default_resolver())
    }

    /// A jail with a chosen resolver (tests run every escape through both).
    pub fn with_resolver(workspace: &Path, resolver: Resolver) -> Result<Jail, ToolError> {
        let b = Beneath::open_with(workspace, resolver).map_err(|e| ToolError::Io {
            path: workspace.display().to_string(),
            message: format!("cannot open the workspace: {e}"),
        })?;
        Ok(Jail {
            workspace: workspace.to_path_buf(),
            beneath: Some(b),
            protected: Vec::new(),
        })
    }

    /// The resolver in use, when jailed.
    pub fn resolver(&self) -> Option<Resolver> {
        self.beneath.as_ref().map(Beneath::resolver)
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Validates `raw` and returns (path to open, shown path). Jailed: the path
    /// relative to the workspace root; free: the absolute path.
    fn target(&self, raw: &str) -> Result<(PathBuf, String), ToolError> {
        let joined = join_model_path(&self.workspace, raw)?;
        let given = Path::new(raw);
        let shown = display_path(&self.workspace, &joined);
        let Some(b) = &self.beneath else {
            return Ok((joined, shown));
        };
        let rel = if given.is_absolute() {
            [b.root(), self.workspace.as_path()]
                .into_iter()
                .find_map(|base| given.strip_prefix(base).ok())
                .ok_or_else(|| self.outside(raw))?
        } else {
            given
        };
        // `..` that climbs above the workspace on paper is refused before the
        // file system is asked (the kernel refuses it too, but a missing
        // directory on the way would otherwise read as "not found").
        let mut depth = 0usize;
        for c in rel.components() {
            match c {
                Component::ParentDir if depth == 0 => return Err(self.outside(raw)),
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                _ => {}
            }
        }
        Ok((rel.to_path_buf(), shown))
    }

    fn outside(&self, raw: &str) -> ToolError {
        let root = self
            .beneath
            .as_ref()
            .map(|b| b.root().to_path_buf())
            .unwrap_or_else(|| self.workspace.clone());
        ToolError::OutsideWorkspace {
            path: raw.to_string(),
            workspace: root.display().to_string(),
        }
    }

    fn map_err(&self, raw: &str, shown: &str, e: BeneathError) -> ToolError {
        match e {
            BeneathError::Outside { .. } => self.outside(raw),
            BeneathError::DanglingSymlink { .. } => ToolError::Io {
                path: shown.to_string(),
                message: "is a symlink whose target does not exist; files are never created \
                          through a symlink (remove the link, or write to a real path)"
                    .into(),
            },
            BeneathError::Io { source, .. } => io_error(shown, source),
        }
    }

    /// Opens `raw` with `flags`, following links (jailed: only beneath the workspace).
    fn open(&self, raw: &str, flags: libc::c_int) -> Result<Opened<File>, ToolError> {
        let (path, shown) = self.target(raw)?;
        let file = match &self.beneath {
            Some(b) => b
                .open_file(&path, flags)
                .map_err(|e| self.map_err(raw, &shown, e))?,
            None => open_plain(&path, flags).map_err(|e| io_error(&shown, e))?,
        };
        self.check_fd(file.as_raw_fd(), &shown)?;
        Ok(Opened {
            handle: file,
            shown,
        })
    }

    /// A regular file opened for reading. Directories, devices, FIFOs and
    /// sockets are refused (FIFOs never block: opened non-blocking).
    pub fn open_read(&self, raw: &str) -> Result<Opened<File>, ToolError> {
        let opened = self.open(raw, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY)?;
        let st = stat_of(&opened)?;
        if kind(&st) == libc::S_IFDIR {
            return Err(ToolError::Io {
                path: opened.shown,
                message: "is a directory; use list_dir".into(),
            });
        }
        regular(&opened, &st)?;
        Ok(opened)
    }

    /// A directory, for [`beneath::read_dir`].
    pub fn open_dir(&self, raw: &str) -> Result<Opened<OwnedFd>, ToolError> {
        let opened = self.open(raw, libc::O_PATH | libc::O_DIRECTORY)?;
        Ok(Opened {
            handle: OwnedFd::from(opened.handle),
            shown: opened.shown,
        })
    }

    /// An existing regular file opened read-write for `edit_file`, with its size.
    /// Jailed: refused when it has more than one hard link.
    pub fn open_edit(&self, raw: &str) -> Result<(Opened<File>, u64), ToolError> {
        let opened = self.open(raw, libc::O_RDWR | libc::O_NONBLOCK | libc::O_NOCTTY)?;
        let st = stat_of(&opened)?;
        regular(&opened, &st)?;
        self.single_link(&opened, &st)?;
        Ok((opened, st.st_size as u64))
    }

    /// A file opened for writing its whole content (not truncated yet): the
    /// existing regular file, or a new one (parents created). The flag is true
    /// when the file was created. Jailed: hard-linked targets and dangling
    /// symlinks are refused.
    pub fn open_write(&self, raw: &str) -> Result<(Opened<File>, bool), ToolError> {
        let flags = libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
        let (path, shown) = self.target(raw)?;
        let existing = match &self.beneath {
            Some(b) => match b.open_file(&path, flags) {
                Ok(f) => Some(f),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(self.map_err(raw, &shown, e)),
            },
            None => match open_plain(&path, flags) {
                Ok(f) => Some(f),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_error(&shown, e)),
            },
        };
        if let Some(file) = existing {
            self.check_fd(file.as_raw_fd(), &shown)?;
            let opened = Opened {
                handle: file,
                shown,
            };
            let st = stat_of(&opened)?;
            regular(&opened, &st)?;
            self.single_link(&opened, &st)?;
            return Ok((opened, false));
        }
        self.check_new(&path, &shown)?;
        let file = match &self.beneath {
            Some(b) => b
                .create_new(&path, 0o666)
                .map_err(|e| self.map_err(raw, &shown, e))?,
            None => create_plain(&path).map_err(|e| io_error(&shown, e))?,
        };
        Ok((
            Opened {
                handle: file,
                shown,
            },
            true,
        ))
    }

    fn single_link(&self, opened: &Opened<File>, st: &libc::stat) -> Result<(), ToolError> {
        if self.beneath.is_some() && st.st_nlink > 1 {
            return Err(ToolError::Io {
                path: opened.shown.clone(),
                message: format!(
                    "has {} hard links; claw does not write through a hard link (another name \
                     may be a file outside the workspace). Copy it to a new file instead",
                    st.st_nlink
                ),
            });
        }
        Ok(())
    }
}

fn kind(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

fn stat_of(opened: &Opened<File>) -> Result<libc::stat, ToolError> {
    beneath::fstat(opened.handle.as_raw_fd()).map_err(|e| io_error(&opened.shown, e))
}

fn regular(opened: &Opened<File>, st: &libc::stat) -> Result<(), ToolError> {
    match kind(st) {
        libc::S_IFREG => Ok(()),
        libc::S_IFDIR => Err(ToolError::Io {
            path: opened.shown.clone(),
            message: "is a directory".into(),
        }),
        _ => Err(ToolError::Io {
            path: opened.shown.clone(),
            message: "is not a regular file (device, FIFO or socket)".into(),
        }),
    }
}

fn open_plain(path: &Path, flags: libc::c_int) -> io::Result<File> {
    let access = flags & libc::O_ACCMODE;
    let mut o = OpenOptions::new();
    o.read(access == libc::O_RDONLY || access == libc::O_RDWR)
        .write(access == libc::O_WRONLY || access == libc::O_RDWR)
        .custom_flags(flags & !libc::O_ACCMODE);
    o.open(path)
}

/// Without the jail: creates like `std::fs::write` (a dangling link's target included).
fn create_plain(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOCTTY)
        .open(path)
}

/// The kernel's name of an open descriptor (`/proc/self/fd/N`); refuses when it
/// cannot be told.
fn fd_path(fd: libc::c_int, shown: &str) -> Result<PathBuf, ToolError> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|e| ToolError::Io {
        path: shown.to_string(),
        message: format!("cannot tell where the file lies (/proc/self/fd: {e}); refused"),
    })
}

/// An I/O error as the model sees it.
pub fn io_error(shown: &str, e: io::Error) -> ToolError {
    if e.kind() == io::ErrorKind::NotFound {
        return ToolError::NotFound {
            path: shown.to_string(),
        };
    }
    let message = match e.raw_os_error() {
        Some(libc::EISDIR) => "is a directory".into(),
        Some(libc::ENOTDIR) => "a component of the path is not a directory".into(),
        Some(libc::ELOOP) => "too many levels of symbolic links (a symlink loop?)".into(),
        Some(libc::ENXIO) => "is not a regular file (device, FIFO or socket)".into(),
        _ => e.to_string(),
    };
    ToolError::Io {
        path: shown.to_string(),
        message,
    }
}

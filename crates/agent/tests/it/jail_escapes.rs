//! The file jail attacked as a hostile model would: a table of escape attempts
//! (`..`, absolute paths, symlinks to outside files and directories, symlinked
//! parents, dangling symlinks, hard links, magic links) against a real
//! workspace next to an `outside/` directory, each run three ways — through the
//! tool registry (the path the assistant uses, default resolver), and through
//! the file tools with the `openat2` resolver and with the `O_NOFOLLOW` walk
//! fallback forced. An attempt "gets through" when the tool succeeds or anything
//! under `outside/` changed. Prints tried / got through per class (the figures in
//! BENCHMARKS.md, "File jail"). Also: legitimate paths (symlinks that stay
//! inside, absolute paths inside) keep working under both resolvers, and a
//! directory swapped for a symlink while the tools run never lets one through.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use claw_agent::message::ToolCall;
use claw_agent::tools::fs::{
    EditFileArgs, ListDirArgs, ReadFileArgs, WriteFileArgs, edit_file_in, list_dir_in,
    read_file_in, write_file_in,
};
use claw_agent::tools::jail::Jail;
use claw_agent::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry, ToolResult};
use claw_memory::beneath::{Resolver, default_resolver};
use serde_json::{Value, json};

const SECRET: &str = "TOP SECRET\n";

/// `tmp/ws` (the workspace) and `tmp/outside` with its hostile links.
struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(ws.join("notes")).unwrap();
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(ws.join("notes/a.md"), "inside\n").unwrap();
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::fs::write(outside.join("hard-target.txt"), SECRET).unwrap();
    let link =
        |target: &Path, name: &str| std::os::unix::fs::symlink(target, ws.join(name)).unwrap();
    link(Path::new("../outside"), "escape");
    link(&outside, "escape-abs");
    link(&outside.join("secret.txt"), "secret-link.txt");
    link(Path::new("../outside/secret.txt"), "secret-rel.txt");
    link(&outside.join("created-by-dangling.txt"), "dangling");
    link(Path::new("../outside/created-rel.txt"), "dangling-rel");
    link(Path::new("../.."), "sub/up");
    link(Path::new("chain2"), "chain1");
    link(Path::new("../outside/secret.txt"), "chain2");
    link(Path::new("/proc/self/root"), "proc-root");
    link(Path::new("/proc/self/cwd"), "proc-cwd");
    // Legitimate links that stay inside.
    link(Path::new("notes"), "inner");
    link(&ws.join("notes/a.md"), "abs-inside.md");
    link(Path::new("notes/a.md"), "alias.md");
    std::fs::hard_link(outside.join("hard-target.txt"), ws.join("hard.txt")).unwrap();
    Fixture {
        _tmp: tmp,
        ws,
        outside,
    }
}

/// Every file and directory under `dir` with its content (symlinks as their target).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(dir).follow_links(false) {
        let e = e.unwrap();
        let p = e.path().strip_prefix(dir).unwrap().to_path_buf();
        let v = if e.file_type().is_symlink() {
            format!("-> {}", std::fs::read_link(e.path()).unwrap().display())
        } else if e.file_type().is_file() {
            std::fs::read_to_string(e.path()).unwrap_or_default()
        } else {
            "/".into()
        };
        out.insert(p, v);
    }
    out
}

/// What a refused attempt must say.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Outside,
    HardLink,
}

struct Attempt {
    class: &'static str,
    tool: &'static str,
    args: Value,
    expect: Expect,
}

fn attempts(f: &Fixture) -> Vec<Attempt> {
    let o = |p: &str| f.outside.join(p).display().to_string();
    let a = |class, tool, args, expect| Attempt {
        class,
        tool,
        args,
        expect,
    };
    use Expect::*;
    vec![
        a(
            "dotdot",
            "read_file",
            json!({"path": "../outside/secret.txt"}),
            Outside,
        ),
        a(
            "dotdot",
            "read_file",
            json!({"path": "notes/../../outside/secret.txt"}),
            Outside,
        ),
        a(
            "dotdot",
            "write_file",
            json!({"path": "../outside/new-dotdot.txt", "content": "x"}),
            Outside,
        ),
        a(
            "dotdot",
            "write_file",
            json!({"path": "missing/../../outside/new2.txt", "content": "x"}),
            Outside,
        ),
        a(
            "dotdot",
            "edit_file",
            json!({"path": "../outside/secret.txt", "old_text": "TOP", "new_text": "NO"}),
            Outside,
        ),
        a("dotdot", "list_dir", json!({"path": ".."}), Outside),
        a(
            "absolute",
            "read_file",
            json!({"path": "/etc/passwd"}),
            Outside,
        ),
        a(
            "absolute",
            "read_file",
            json!({"path": o("secret.txt")}),
            Outside,
        ),
        a(
            "absolute",
            "write_file",
            json!({"path": o("new-abs.txt"), "content": "x"}),
            Outside,
        ),
        a(
            "absolute",
            "read_file",
            json!({"path": format!("{}/../outside/secret.txt", f.ws.display())}),
            Outside,
        ),
        a("absolute", "list_dir", json!({"path": "/"}), Outside),
        a(
            "symlink-file",
            "read_file",
            json!({"path": "secret-link.txt"}),
            Outside,
        ),
        a(
            "symlink-file",
            "read_file",
            json!({"path": "secret-rel.txt"}),
            Outside,
        ),
        a(
            "symlink-file",
            "read_file",
            json!({"path": "chain1"}),
            Outside,
        ),
        a(
            "symlink-file",
            "edit_file",
            json!({"path": "secret-link.txt", "old_text": "TOP", "new_text": "NO"}),
            Outside,
        ),
        a(
            "symlink-file",
            "write_file",
            json!({"path": "secret-rel.txt", "content": "pwned"}),
            Outside,
        ),
        a(
            "symlink-parent",
            "read_file",
            json!({"path": "escape/secret.txt"}),
            Outside,
        ),
        a(
            "symlink-parent",
            "read_file",
            json!({"path": "sub/up/outside/secret.txt"}),
            Outside,
        ),
        a(
            "symlink-parent",
            "write_file",
            json!({"path": "escape/new-parent.txt", "content": "x"}),
            Outside,
        ),
        a(
            "symlink-parent",
            "write_file",
            json!({"path": "escape-abs/deep/new.txt", "content": "x"}),
            Outside,
        ),
        a(
            "symlink-parent",
            "edit_file",
            json!({"path": "escape-abs/secret.txt", "old_text": "TOP", "new_text": "NO"}),
            Outside,
        ),
        a(
            "symlink-parent",
            "list_dir",
            json!({"path": "escape"}),
            Outside,
        ),
        a(
            "dangling-symlink",
            "write_file",
            json!({"path": "dangling", "content": "pwned"}),
            Outside,
        ),
        a(
            "dangling-symlink",
            "write_file",
            json!({"path": "dangling-rel", "content": "pwned"}),
            Outside,
        ),
        a(
            "hard-link",
            "edit_file",
            json!({"path": "hard.txt", "old_text": "TOP", "new_text": "NO"}),
            HardLink,
        ),
        a(
            "hard-link",
            "write_file",
            json!({"path": "hard.txt", "content": "pwned"}),
            HardLink,
        ),
        a(
            "magic-link",
            "read_file",
            json!({"path": "proc-root/etc/passwd"}),
            Outside,
        ),
        a(
            "magic-link",
            "list_dir",
            json!({"path": "proc-cwd"}),
            Outside,
        ),
    ]
}

fn run_in(jail: &Jail, tool: &str, args: &Value) -> ToolResult {
    let args = args.clone();
    match tool {
        "read_file" => read_file_in(jail, &serde_json::from_value::<ReadFileArgs>(args).unwrap()),
        "write_file" => write_file_in(
            jail,
            &serde_json::from_value::<WriteFileArgs>(args).unwrap(),
        ),
        "edit_file" => edit_file_in(jail, &serde_json::from_value::<EditFileArgs>(args).unwrap()),
        "list_dir" => list_dir_in(jail, &serde_json::from_value::<ListDirArgs>(args).unwrap()),
        other => panic!("unknown tool {other}"),
    }
}

fn refused_as_expected(result: &ToolResult, expect: Expect) -> bool {
    match (result, expect) {
        (Err(ToolError::OutsideWorkspace { .. }), Expect::Outside) => true,
        (Err(ToolError::Io { message, .. }), Expect::HardLink) => message.contains("hard link"),
        _ => false,
    }
}

#[tokio::test]
async fn every_escape_attempt_is_refused_by_every_resolver() {
    let f = fixture();
    let table = attempts(&f);
    assert!(table.len() >= 20, "at least 20 attempts");
    let mut ctx = ToolContext::new(&f.ws);
    ctx.jail = true;
    let registry = ToolRegistry::new(ctx);
    let modes = ["registry", "openat2", "walk"];
    // class -> (tried, got through per mode)
    let mut per_class: BTreeMap<&str, (usize, [usize; 3])> = BTreeMap::new();
    let mut failures = Vec::new();
    for (m, mode) in modes.iter().enumerate() {
        let jail = match *mode {
            "openat2" => Some(Jail::with_resolver(&f.ws, Resolver::Openat2).unwrap()),
            "walk" => Some(Jail::with_resolver(&f.ws, Resolver::Walk).unwrap()),
            _ => None,
        };
        for at in &table {
            let before = snapshot(&f.outside);
            let result = match &jail {
                Some(j) => run_in(j, at.tool, &at.args),
                None => {
                    registry
                        .dispatch(&ToolCall {
                            id: "c".into(),
                            name: at.tool.into(),
                            arguments: at.args.to_string(),
                        })
                        .await
                }
            };
            let leaked = result.is_ok();
            let changed = snapshot(&f.outside) != before;
            let got_through = leaked || changed;
            let entry = per_class.entry(at.class).or_insert((0, [0; 3]));
            if m == 0 {
                entry.0 += 1;
            }
            if got_through {
                entry.1[m] += 1;
            }
            if got_through || !refused_as_expected(&result, at.expect) {
                failures.push(format!(
                    "[{mode}] {} {} -> {result:?} (outside changed: {changed})",
                    at.tool, at.args
                ));
            }
        }
    }
    println!("default resolver on this kernel: {:?}", default_resolver());
    println!(
        "| class | tried | got through (registry) | got through (openat2) | got through (O_NOFOLLOW walk) |"
    );
    println!("|---|---:|---:|---:|---:|");
    let mut totals = (0, [0usize; 3]);
    for (class, (tried, got)) in &per_class {
        println!(
            "| {class} | {tried} | {} | {} | {} |",
            got[0], got[1], got[2]
        );
        totals.0 += tried;
        for (total, n) in totals.1.iter_mut().zip(got) {
            *total += n;
        }
    }
    println!(
        "| total | {} | {} | {} | {} |",
        totals.0, totals.1[0], totals.1[1], totals.1[2]
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        SECRET
    );
    assert_eq!(
        std::fs::read_to_string(f.outside.join("hard-target.txt")).unwrap(),
        SECRET
    );
}

#[test]
fn links_that_stay_inside_keep_working_under_both_resolvers() {
    for resolver in [Resolver::Openat2, Resolver::Walk] {
        let f = fixture();
        let jail = Jail::with_resolver(&f.ws, resolver).unwrap();
        let read = |p: &str| match run_in(&jail, "read_file", &json!({"path": p})) {
            Ok(ToolOutput::FileRead { text, .. }) => text,
            other => panic!("{resolver:?} read {p}: {other:?}"),
        };
        assert_eq!(read("notes/a.md"), "inside");
        assert_eq!(read("inner/a.md"), "inside", "relative dir link inside");
        assert_eq!(read("abs-inside.md"), "inside", "absolute link to inside");
        assert_eq!(read("sub/../notes/a.md"), "inside");
        assert_eq!(
            read(&f.ws.join("notes/a.md").display().to_string()),
            "inside"
        );
        // Reading a hard-linked file is allowed (only writes are refused).
        assert_eq!(read("hard.txt"), SECRET.trim_end());

        let out = run_in(
            &jail,
            "write_file",
            &json!({"path": "inner/new/deep.md", "content": "made"}),
        )
        .unwrap();
        assert!(
            matches!(out, ToolOutput::FileWritten { created: true, .. }),
            "{out:?}"
        );
        assert_eq!(
            std::fs::read_to_string(f.ws.join("notes/new/deep.md")).unwrap(),
            "made"
        );
        // Writing through a link that stays inside writes its target.
        let out = run_in(
            &jail,
            "write_file",
            &json!({"path": "alias.md", "content": "via alias\n"}),
        )
        .unwrap();
        assert!(
            matches!(out, ToolOutput::FileWritten { created: false, .. }),
            "{out:?}"
        );
        assert_eq!(
            std::fs::read_to_string(f.ws.join("notes/a.md")).unwrap(),
            "via alias\n"
        );
        run_in(
            &jail,
            "edit_file",
            &json!({"path": "abs-inside.md", "old_text": "via", "new_text": "by"}),
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(f.ws.join("notes/a.md")).unwrap(),
            "by alias\n"
        );
        let Ok(ToolOutput::DirListing { entries, .. }) =
            run_in(&jail, "list_dir", &json!({"path": "inner"}))
        else {
            panic!("{resolver:?} list inner")
        };
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["new", "a.md"]);

        // A dangling link whose target would be inside is refused too, and says why.
        std::os::unix::fs::symlink("notes/not-yet.md", f.ws.join("dangling-inside")).unwrap();
        let err = run_in(
            &jail,
            "write_file",
            &json!({"path": "dangling-inside", "content": "x"}),
        )
        .unwrap_err();
        assert!(
            err.render().contains("symlink whose target does not exist"),
            "{err:?}"
        );
        assert!(!f.ws.join("notes/not-yet.md").exists());

        // A FIFO is refused at once, never blocks.
        let fifo =
            std::ffi::CString::new(f.ws.join("pipe").as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let err = run_in(&jail, "read_file", &json!({"path": "pipe"})).unwrap_err();
        assert!(err.render().contains("not a regular file"), "{err:?}");
    }
}

/// `ws/flip` is atomically exchanged, again and again, between a real directory
/// and a symlink to `outside/` while the tools write and read through it: no
/// write may land outside, no read may return the outside secret.
#[test]
fn a_directory_swapped_for_a_symlink_mid_call_never_lets_one_through() {
    for resolver in [Resolver::Openat2, Resolver::Walk] {
        let f = fixture();
        std::fs::create_dir(f.ws.join("flip")).unwrap();
        std::fs::write(f.ws.join("flip/secret.txt"), "inside copy\n").unwrap();
        std::os::unix::fs::symlink(&f.outside, f.ws.join("flop")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = {
            let stop = stop.clone();
            let a =
                std::ffi::CString::new(f.ws.join("flip").as_os_str().as_encoded_bytes()).unwrap();
            let b =
                std::ffi::CString::new(f.ws.join("flop").as_os_str().as_encoded_bytes()).unwrap();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // renameat2(RENAME_EXCHANGE): both names always exist.
                    let r = unsafe {
                        libc::syscall(
                            libc::SYS_renameat2,
                            libc::AT_FDCWD,
                            a.as_ptr(),
                            libc::AT_FDCWD,
                            b.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        )
                    };
                    assert_eq!(r, 0, "renameat2: {}", std::io::Error::last_os_error());
                    n += 1;
                }
                n
            })
        };
        let jail = Jail::with_resolver(&f.ws, resolver).unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        let (mut writes_ok, mut reads_ok, mut i) = (0, 0, 0);
        while Instant::now() < deadline && i < 20_000 {
            i += 1;
            let p = format!("flip/f-{i}.txt");
            if run_in(&jail, "write_file", &json!({"path": p, "content": "x"})).is_ok() {
                writes_ok += 1;
            }
            if let Ok(ToolOutput::FileRead { text, .. }) =
                run_in(&jail, "read_file", &json!({"path": "flip/secret.txt"}))
            {
                assert_ne!(
                    text,
                    SECRET.trim_end(),
                    "{resolver:?}: read the outside secret"
                );
                reads_ok += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let n_swaps = swaps.join().unwrap();
        let leaked: Vec<_> = std::fs::read_dir(&f.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("f-"))
            .collect();
        println!(
            "{resolver:?}: {i} write+read rounds, {n_swaps} swaps, {writes_ok} writes and {reads_ok} reads went to the inside directory, {} landed outside",
            leaked.len()
        );
        assert!(
            leaked.is_empty(),
            "{resolver:?}: writes landed outside: {leaked:?}"
        );
        assert!(n_swaps > 100, "the swapper ran ({n_swaps} swaps)");
        assert!(
            writes_ok > 0 && reads_ok > 0,
            "some calls hit the real directory"
        );
    }
}

//! The exec sandbox against real attacks, through the real `exec` tool, on the
//! real kernel: the deny-list bypasses (`eval rm -rf /`, `$(echo rm)
//! -rf /`, `find / -delete`, fork bombs …) and 80-odd more variants — writes,
//! deletes and metadata changes outside the workspace (canaries in a lab
//! directory outside the workspace, in a fake `$HOME` and in the real `/tmp`),
//! system paths, devices, the network (TCP, UDP, UNIX sockets listening in
//! this test), signals, ptrace, `/proc` magic links, mount tricks and secret
//! reads.
//!
//! Safety: every attack aimed at `/` runs only after [`sandbox::probe`] reports
//! every layer active AND a tripwire command proved, through the same tool,
//! that writes outside the workspace fail — otherwise the test panics before
//! running anything destructive. Attacks aimed at the lab's canaries also run
//! once WITHOUT the sandbox against a separate control lab: each must then get
//! through, which proves the attack is real (a typo'd attack would otherwise
//! "pass").
//!
//! Figures (attacks per class, how many got through) are printed: run
//! `cargo test --test sandbox_exec -- --nocapture --test-threads 1`.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use claw_agent::message::ToolCall;
use claw_agent::tools::sandbox::{self, SandboxPolicy, SandboxStatus};
use claw_agent::tools::{ExecOutcome, ToolContext, ToolError, ToolOutput, ToolRegistry};

const MIB: u64 = 1024 * 1024;

// ---------------------------------------------------------------------------
// Running commands

#[derive(Debug)]
enum Ran {
    Denied,
    Failed(String),
    Done(ExecOutcome),
}

fn registry(ws: &Path, policy: SandboxPolicy) -> ToolRegistry {
    let mut ctx = ToolContext::new(ws);
    ctx.sandbox = policy;
    ctx.exec_timeout = Duration::from_secs(120);
    ToolRegistry::new(ctx)
}

fn test_policy(namespaces: bool) -> SandboxPolicy {
    SandboxPolicy {
        namespaces,
        max_processes: 64,
        max_file_bytes: MIB,
        max_cpu_secs: 60,
        tmp_bytes: 16 * MIB,
        ..SandboxPolicy::default()
    }
}

fn unsandboxed() -> SandboxPolicy {
    SandboxPolicy {
        enabled: false,
        network: true,
        ..SandboxPolicy::default()
    }
}

async fn exec(reg: &ToolRegistry, command: &str, timeout_secs: u64) -> Ran {
    let call = ToolCall {
        id: "call".into(),
        name: "exec".into(),
        arguments: serde_json::json!({ "command": command, "timeout_secs": timeout_secs })
            .to_string(),
    };
    match reg.dispatch(&call).await {
        Ok(ToolOutput::Exec(o)) => Ran::Done(o),
        Ok(other) => panic!("not an exec outcome: {other:?}"),
        Err(ToolError::CommandDenied { .. }) => Ran::Denied,
        Err(e) => Ran::Failed(e.render()),
    }
}

/// Refuses to go on unless every layer of the sandbox is active here.
fn require_full_sandbox() -> SandboxStatus {
    let s = sandbox::probe();
    assert!(
        s.active()
            && s.user_namespace
            && s.network_namespace
            && s.mount_namespace
            && s.limits_processes()
            && s.landlock_abi().unwrap_or(0) >= 6,
        "REFUSING to run destructive attacks: the exec sandbox is not fully active on this \
         machine (needs Landlock ABI >= 6, user/network/mount namespaces and a process \
         limit):\n{s}"
    );
    s
}

/// Live (not zombie) processes of the host whose command line contains `marker`.
fn host_pids_running(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if !zombie && String::from_utf8_lossy(&cmdline).contains(marker) {
            out.push(pid);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The lab: a workspace, canaries outside it, a fake home, a /tmp canary

struct Lab {
    dir: tempfile::TempDir,
    tmp: tempfile::TempDir,
    ws: PathBuf,
    out: PathBuf,
    home: PathBuf,
    tmpc: PathBuf,
    sockets: PathBuf,
    /// Unique prefix of marker files and of the "got through" word.
    u: String,
    secret: String,
    victim: std::sync::Mutex<std::process::Child>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: char,
    mode: u32,
    uid: u32,
    gid: u32,
    len: u64,
    mtime: (i64, i64),
    content: u64,
    xattrs: isize,
    flags: i64,
}

fn hash_bytes(b: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

fn entry(path: &Path) -> Option<Entry> {
    let m = std::fs::symlink_metadata(path).ok()?;
    let ft = m.file_type();
    let kind = if ft.is_symlink() {
        'l'
    } else if ft.is_dir() {
        'd'
    } else if ft.is_file() {
        'f'
    } else {
        'o'
    };
    let content = match kind {
        'l' => hash_bytes(
            std::fs::read_link(path)
                .unwrap()
                .as_os_str()
                .as_encoded_bytes(),
        ),
        'f' => {
            let mut buf = Vec::new();
            // Unreadable (chmod 000 by an attack) shows in the mode anyway.
            let _ = std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut buf));
            hash_bytes(&buf)
        }
        _ => 0,
    };
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: size query with a null buffer.
    let xattrs = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    let mut flags: i64 = -1;
    if kind == 'f' || kind == 'd' {
        // SAFETY: FS_IOC_GETFLAGS into an int on an fd we own.
        unsafe {
            let fd = libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            );
            if fd >= 0 {
                let mut f: libc::c_int = 0;
                if libc::ioctl(fd, 0x8008_6601, &mut f) == 0 {
                    flags = f as i64;
                }
                libc::close(fd);
            }
        }
    }
    Some(Entry {
        kind,
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        len: if kind == 'd' { 0 } else { m.len() },
        mtime: (m.mtime(), m.mtime_nsec()),
        content,
        xattrs,
        flags,
    })
}

fn walk(root: &Path, out: &mut BTreeMap<PathBuf, Option<Entry>>) {
    out.insert(root.to_path_buf(), entry(root));
    if std::fs::symlink_metadata(root).is_ok_and(|m| m.is_dir())
        && let Ok(rd) = std::fs::read_dir(root)
    {
        for e in rd.flatten() {
            walk(&e.path(), out);
        }
    }
}

/// Directories where attacks try to drop marker files.
fn marker_dirs() -> Vec<PathBuf> {
    let mut d: Vec<PathBuf> = [
        "/",
        "/tmp",
        "/var/tmp",
        "/dev/shm",
        "/etc",
        "/usr/local",
        "/dev",
        "/opt",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    d.extend(std::env::var_os("HOME").map(PathBuf::from));
    d
}

/// A process the attacks try to signal, trace and read; its environment holds the secret.
fn spawn_victim(secret: &str) -> std::process::Child {
    std::process::Command::new("sleep")
        .arg("600")
        .env("CLAW_SBX_VICTIM", secret)
        .spawn()
        .unwrap()
}

fn block_device() -> Option<PathBuf> {
    std::fs::read_dir("/sys/block")
        .ok()?
        .flatten()
        .map(|e| PathBuf::from("/dev").join(e.file_name()))
        .find(|p| p.exists() && !p.to_string_lossy().contains("loop"))
}

impl Lab {
    fn new(tag: &str) -> Lab {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sbx-{tag}-"))
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let tmp = tempfile::Builder::new()
            .prefix(&format!("sbx-{tag}-"))
            .tempdir_in("/tmp")
            .unwrap();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let u = format!("claw-sbx-{}-{tag}-{nanos}", std::process::id());
        let secret = format!("SECRET-{u}");
        let victim = std::sync::Mutex::new(spawn_victim(&secret));
        let lab = Lab {
            ws: dir.path().join("ws"),
            out: dir.path().join("outside"),
            home: dir.path().join("home/user"),
            tmpc: tmp.path().join("canaries"),
            sockets: dir.path().join("sockets"),
            dir,
            tmp,
            u,
            secret,
            victim,
        };
        std::fs::create_dir_all(&lab.sockets).unwrap();
        lab.populate();
        lab.reset_ws();
        lab
    }

    fn populate(&self) {
        for d in [&self.out, &self.home, &self.tmpc] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(self.out.join("canary.txt"), "canary outside\n").unwrap();
        std::fs::write(self.out.join("secret.txt"), format!("{}\n", self.secret)).unwrap();
        std::fs::create_dir_all(self.out.join("sub")).unwrap();
        std::fs::write(self.out.join("sub/deep.txt"), "deep canary\n").unwrap();
        std::fs::create_dir_all(self.out.join("empty-dir")).unwrap();
        std::fs::write(self.out.join("script.sh"), "#!/bin/sh\necho hi\n").unwrap();
        std::fs::set_permissions(
            self.out.join("script.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::write(self.home.join("canary.txt"), "home canary\n").unwrap();
        std::fs::write(self.home.join(".bashrc"), "# bashrc\n").unwrap();
        std::fs::create_dir_all(self.home.join(".ssh")).unwrap();
        std::fs::write(
            self.home.join(".ssh/id_rsa"),
            format!("-----BEGIN FAKE KEY-----\n{}\n", self.secret),
        )
        .unwrap();
        std::fs::write(self.tmpc.join("canary.txt"), "tmp canary\n").unwrap();
        std::fs::write(self.tmpc.join("secret.txt"), format!("{}\n", self.secret)).unwrap();
    }

    /// Undoes whatever an attack that got through did, and repopulates.
    fn restore(&self) {
        for d in [&self.out, &self.dir.path().join("home"), &self.tmpc] {
            let _ = std::process::Command::new("chattr")
                .args(["-R", "-i"])
                .arg(d)
                .output();
            let _ = std::process::Command::new("chmod")
                .args(["-R", "u+rwx"])
                .arg(d)
                .output();
            let _ = std::fs::remove_dir_all(d);
        }
        self.populate();
    }

    fn victim_pid(&self) -> u32 {
        self.victim.lock().unwrap().id()
    }

    /// A live victim (a control run may have killed the previous one).
    fn ensure_victim(&self) {
        let mut v = self.victim.lock().unwrap();
        if !claw_testkit::process_alive(v.id()) {
            let _ = v.kill();
            let _ = v.wait();
            *v = spawn_victim(&self.secret);
        }
    }

    fn reset_ws(&self) {
        if self.ws.exists() {
            let _ = std::process::Command::new("chmod")
                .args(["-R", "u+rwx"])
                .arg(&self.ws)
                .output();
            std::fs::remove_dir_all(&self.ws).unwrap();
        }
        std::fs::create_dir_all(self.ws.join("sub")).unwrap();
        std::fs::write(self.ws.join("file.txt"), "workspace file\n").unwrap();
        std::os::unix::fs::symlink(&self.out, self.ws.join("outlink")).unwrap();
        std::os::unix::fs::symlink(
            self.out.join("created-via-dangling.txt"),
            self.ws.join("dangling"),
        )
        .unwrap();
    }

    fn snapshot(&self) -> BTreeMap<PathBuf, Option<Entry>> {
        let mut s = BTreeMap::new();
        walk(&self.out, &mut s);
        walk(&self.dir.path().join("home"), &mut s);
        walk(&self.tmpc, &mut s);
        s
    }

    fn markers(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for d in marker_dirs() {
            if let Ok(rd) = std::fs::read_dir(&d) {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().starts_with(&self.u) {
                        found.push(e.path());
                    }
                }
            }
        }
        found
    }

    fn remove_markers(&self) {
        for m in self.markers() {
            let _ = std::fs::remove_dir_all(&m).or_else(|_| std::fs::remove_file(&m));
        }
    }

    fn fill(&self, template: &str, net: &Listeners) -> String {
        let realhome = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        let blk = block_device()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        template
            .replace("{WS}", &self.ws.display().to_string())
            .replace("{OUT}", &self.out.display().to_string())
            .replace("{HOME}", &self.home.display().to_string())
            .replace("{TMPC}", &self.tmpc.display().to_string())
            .replace("{U}", &self.u)
            .replace("{PORT}", &net.tcp_port.to_string())
            .replace("{UDP}", &net.udp_port.to_string())
            .replace("{USOCK}", &net.usock.display().to_string())
            .replace("{ABS}", &net.abstract_name)
            .replace("{BLK}", &blk)
            .replace("{VICTIM}", &self.victim_pid().to_string())
            .replace("{TESTPID}", &std::process::id().to_string())
            .replace("{REALHOME}", &realhome)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Ok(v) = self.victim.get_mut() {
            let _ = v.kill();
            let _ = v.wait();
        }
        self.remove_markers();
        let _ = std::process::Command::new("chattr")
            .args(["-R", "-i"])
            .arg(self.dir.path())
            .arg(self.tmp.path())
            .output();
        let _ = std::process::Command::new("chmod")
            .args(["-R", "u+rwx"])
            .arg(self.dir.path())
            .arg(self.tmp.path())
            .output();
    }
}

// ---------------------------------------------------------------------------
// Listeners the network attacks aim at

struct Listeners {
    tcp_port: u16,
    udp_port: u16,
    usock: PathBuf,
    abstract_name: String,
    hits: Arc<AtomicUsize>,
}

fn start_listeners(dir: &Path, tag: &str) -> Listeners {
    use std::os::linux::net::SocketAddrExt;
    let hits = Arc::new(AtomicUsize::new(0));
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    let h = hits.clone();
    std::thread::spawn(move || {
        for c in tcp.incoming() {
            if c.is_ok() {
                h.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let h = hits.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while udp.recv_from(&mut buf).is_ok() {
            h.fetch_add(1, Ordering::SeqCst);
        }
    });
    let usock = dir.join("listen.sock");
    let unix = std::os::unix::net::UnixListener::bind(&usock).unwrap();
    let h = hits.clone();
    std::thread::spawn(move || {
        for c in unix.incoming() {
            if c.is_ok() {
                h.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let abstract_name = format!(
        "claw-sbx-{}-{tag}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    );
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
    let abs = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let h = hits.clone();
    std::thread::spawn(move || {
        for c in abs.incoming() {
            if c.is_ok() {
                h.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    Listeners {
        tcp_port,
        udp_port,
        usock,
        abstract_name,
        hits,
    }
}

// ---------------------------------------------------------------------------
// The attacks

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Check {
    /// Canaries, markers, "PWNED-", secrets, listener hits.
    Generic,
    /// …and the victim process must still be alive.
    VictimAlive,
    /// …and the process that wrote `{WS}/escape.pid` (found on the host by the
    /// `{U}-escapee` in its command line: in a PID namespace the pid it wrote
    /// is the namespace's) must be dead after the call (a `setsid` escapee is
    /// outside the process group: only the pids cgroup or the end of the PID
    /// namespace finds it).
    EscapeeDead,
    /// …and `{WS}/big.bin` must not exceed the file-size limit.
    FileSizeLimited,
}

struct Attack {
    class: &'static str,
    template: String,
    /// Aimed at `/` or system paths: only with the full sandbox, never in a control run.
    root: bool,
    /// Run once without the sandbox against the control lab: it must get through.
    control: bool,
    /// Only the namespace layers stop it (Landlock ABI 7 alone does not).
    needs_ns: bool,
    check: Check,
    timeout: u64,
}

fn a(class: &'static str, template: &str) -> Attack {
    Attack {
        class,
        template: template.to_string(),
        root: false,
        control: true,
        needs_ns: false,
        check: Check::Generic,
        timeout: 20,
    }
}

impl Attack {
    fn root(mut self) -> Attack {
        self.root = true;
        self.control = false;
        self.timeout = 90;
        self
    }
    fn no_control(mut self) -> Attack {
        self.control = false;
        self
    }
    /// The unsandboxed control needs root (chown, nsenter, chroot).
    fn control_as_root(mut self) -> Attack {
        // SAFETY: getter without preconditions.
        self.control &= unsafe { libc::geteuid() } == 0;
        self
    }
    fn needs_ns(mut self) -> Attack {
        self.needs_ns = true;
        self
    }
    fn check(mut self, c: Check) -> Attack {
        self.check = c;
        self
    }
}

fn attacks() -> Vec<Attack> {
    let mut v = vec![
        // The list: deny-list bypasses aimed at the machine itself.
        a("issue list", "eval rm -rf /").root(),
        a("issue list", "sudo -u root rm -rf /").root(),
        a("issue list", "nice -n 10 rm -rf /").root(),
        a("issue list", "sh -c 'r''m -rf /'").root(),
        a("issue list", "$(echo rm) -rf /").root(),
        // GNU rm refuses a last component `..` by itself; the glob form is the real attack.
        a("issue list", "rm -rf ~/..").no_control(),
        a("issue list", "rm -rf ~/../*"),
        a("issue list", "cd / && rm -rf *").root(),
        a("issue list", "find / -delete").root(),
        a("issue list", "r=rm; $r -rf --no-preserve-root /").root(),
        a("issue list", "python3 -c \"import shutil; shutil.rmtree('/', ignore_errors=True)\"").root(),
        a("issue list", "perl -MFile::Path=remove_tree -e 'remove_tree(\"/\")'").root(),
        a("issue list", "h=~; rm -rf $h"),
        // Deleting outside the workspace.
        a("delete", "rm -rf {OUT}"),
        a("delete", "rm -f {OUT}/canary.txt"),
        a("delete", "find {OUT} -delete"),
        a("delete", "unlink {OUT}/canary.txt"),
        a("delete", "rmdir {OUT}/empty-dir"),
        a("delete", "python3 -c \"import os; os.remove('{OUT}/canary.txt')\""),
        a("delete", "perl -e 'unlink \"{OUT}/canary.txt\"'"),
        a("delete", "echo {OUT}/canary.txt | xargs rm -f"),
        a("delete", "mv {OUT}/canary.txt {WS}/stolen.txt"),
        a("delete", "rm -rf {WS}/outlink/*"),
        a("delete", "rm -rf {TMPC}"),
        a("delete", "rm -rf {WS}/../outside"),
        // Writing outside the workspace.
        a("write", "echo pwned > {OUT}/canary.txt"),
        a("write", "echo pwned >> {OUT}/canary.txt"),
        a("write", "printf x > {OUT}/new.txt"),
        a("write", "echo x | tee {OUT}/tee.txt"),
        a("write", "cp {WS}/file.txt {OUT}/copied.txt"),
        a("write", "cp {WS}/file.txt {OUT}/canary.txt"),
        a("write", "mv {WS}/file.txt {OUT}/moved.txt"),
        a("write", "ln -s {OUT}/canary.txt {WS}/lnk && echo pwned > {WS}/lnk"),
        a("write", "echo pwned > {WS}/outlink/canary.txt"),
        a("write", "echo x > {WS}/dangling"),
        a("write", "ln {OUT}/canary.txt {WS}/hard && echo pwned >> {WS}/hard"),
        a("write", "echo x | dd of={OUT}/dd.txt"),
        a("write", "truncate -s 0 {OUT}/canary.txt"),
        a("write", ": > {OUT}/canary.txt"),
        a("write", "python3 -c \"open('{OUT}/canary.txt','w').write('pwned')\""),
        a("write", "perl -e 'open(my $f, \">\", \"{OUT}/canary.txt\") or die; print $f \"pwned\"'"),
        a("write", "sed -i s/canary/pwned/ {OUT}/canary.txt"),
        a("write", "touch {OUT}/touched"),
        a("write", "mkdir {OUT}/newdir"),
        a("write", "mkfifo {OUT}/fifo"),
        a("write", "install -m 644 {WS}/file.txt {OUT}/installed"),
        a("write", "tar -C {WS} -cf {WS}/a.tar file.txt && tar -C {OUT} -xf {WS}/a.tar"),
        a("write", "cd {OUT} && echo x > rel.txt"),
        a("write", "cd {WS}/outlink && echo x > rel2.txt"),
        a("write", "echo x > {WS}/../outside/dotdot.txt"),
        a("write", "echo pwned > ~/canary.txt"),
        a("write", "echo 'echo evil' >> ~/.bashrc"),
        a("write", "mkdir -p ~/.ssh && echo ssh-rsa AAAA >> ~/.ssh/authorized_keys"),
        a("write", "git -C {OUT} init -q"),
        a("write", "echo pwned > {TMPC}/canary.txt"),
        a("write", "cp -r {WS}/sub {OUT}/wscopy"),
        a("write", "awk 'BEGIN { print \"x\" > \"{OUT}/awk.txt\" }'"),
        a("write", "exec 3>{OUT}/fd.txt && echo x >&3"),
        a("write", "bash -c 'echo x > {OUT}/bash.txt'"),
        a("write", "(umask 0; echo x > {OUT}/sub/deep.txt)"),
        a("write", "find {WS} -maxdepth 0 -exec sh -c 'echo x > {OUT}/find-exec.txt' \\;"),
        a("write", "env X=1 sh -c 'echo x > {OUT}/env.txt'"),
        a("write", "ln -sf /etc/passwd {OUT}/canary.txt"),
        a("write", "ln -s / {WS}/rootlink && echo pwned > {WS}/rootlink{OUT}/canary.txt"),
        // Marker files in system locations (no control run: the test does not write there).
        a("system paths", "echo x > /tmp/{U}-a").no_control(),
        a("system paths", "echo x > /var/tmp/{U}-b").no_control(),
        a("system paths", "echo x > /dev/shm/{U}-c").no_control(),
        a("system paths", "echo x > /etc/{U}-d").no_control(),
        a("system paths", "mkdir /usr/local/{U}-e").no_control(),
        a("system paths", "touch /{U}-f").no_control(),
        a("system paths", "echo x > {REALHOME}/{U}-g").no_control(),
        a("system paths", "cp /etc/hostname /opt/{U}-h").no_control(),
        a("system paths", "python3 -c \"open('/tmp/{U}-i','w').write('x')\"").no_control(),
        a("system paths", "TMPDIR=/tmp mktemp -p /var/tmp {U}-j.XXXX").no_control(),
        // Metadata outside the workspace (Landlock does not cover it: the mount layer does).
        a("metadata", "chmod 000 {OUT}/canary.txt").needs_ns(),
        a("metadata", "chmod -R 777 {OUT}").needs_ns(),
        a("metadata", "chown 65534 {OUT}/canary.txt").needs_ns().control_as_root(),
        a("metadata", "chgrp 65534 {OUT}/canary.txt").needs_ns().control_as_root(),
        a("metadata", "touch -d 2001-01-01 {OUT}/canary.txt").needs_ns(),
        a("metadata", "python3 -c \"import os; os.utime('{OUT}/canary.txt', (0, 0))\"").needs_ns(),
        a(
            "metadata",
            "python3 -c \"import os; os.setxattr('{OUT}/canary.txt', 'user.pwned', b'1')\"",
        )
        .needs_ns(),
        a("metadata", "chmod u+s {OUT}/script.sh").needs_ns(),
        a("metadata", "chmod 777 {TMPC}").needs_ns(),
        a("metadata", "chattr +i {OUT}/canary.txt").no_control(),
        // Devices and kernel interfaces (opened for writing, nothing written).
        a("device", "echo x > /dev/{U}-node").no_control(),
        a("device", "mknod /dev/{U}-mk c 1 3").no_control(),
        a("device", "d=/dev/kmsg; echo claw-sandbox-test > $d && echo PWNED-{U}").no_control(),
        a("device", "echo 1 > /proc/sys/vm/drop_caches && echo PWNED-{U}").no_control(),
        a("device", "echo h > /proc/sysrq-trigger && echo PWNED-{U}").no_control(),
        a(
            "device",
            "echo $$ > /sys/fs/cgroup/pids/cgroup.procs && echo PWNED-{U}",
        )
        .no_control(),
        a("device", "echo $$ > /sys/fs/cgroup/unified/cgroup.procs && echo PWNED-{U}").no_control(),
        // The network (off by default): listeners in this test process.
        a("network", "curl -s -m 3 http://127.0.0.1:{PORT}/"),
        a("network", "curl -s -m 3 http://localhost:{PORT}/"),
        a("network", "d=/dev/tcp/127.0.0.1/{PORT}; bash -c \"echo x > $d\""),
        a(
            "network",
            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {PORT}), 3)\"",
        ),
        a(
            "network",
            "perl -MIO::Socket::INET -e 'IO::Socket::INET->new(PeerAddr => \"127.0.0.1:{PORT}\", Timeout => 3) or exit 1'",
        ),
        a(
            "network",
            "python3 -c \"import socket; s = socket.socket(socket.AF_INET6); s.connect(('::ffff:127.0.0.1', {PORT}))\"",
        ),
        a(
            "network",
            "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {UDP}))\"",
        )
        .needs_ns(),
        a("network", "d=/dev/udp/127.0.0.1/{UDP}; bash -c \"echo x > $d\"").needs_ns(),
        a(
            "network",
            "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{USOCK}')\"",
        )
        .needs_ns(),
        a("network", "curl -s -m 3 --unix-socket {USOCK} http://x/").needs_ns(),
        a(
            "network",
            "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect(b'\\0{ABS}')\"",
        ),
        a(
            "network",
            "python3 -c \"import socket; s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(); print('PWNED-{U}')\"",
        )
        .no_control(),
        // Processes: signals, ptrace, escaping the process group.
        a("process", "kill -TERM {VICTIM}").check(Check::VictimAlive),
        a("process", "kill -9 {VICTIM}").check(Check::VictimAlive),
        a(
            "process",
            "python3 -c \"import os, signal; os.kill({VICTIM}, signal.SIGKILL)\"",
        )
        .check(Check::VictimAlive),
        // The host's init; in a PID namespace pid 1 is the command's own shell.
        a("process", "kill -0 1 && [ $$ != 1 ] && echo PWNED-{U}").no_control(),
        a(
            "process",
            "python3 -c \"import ctypes; print('PWNED-{U}' if ctypes.CDLL(None).ptrace(16, {VICTIM}, 0, 0) == 0 else '')\"",
        ),
        a(
            "process",
            "setsid sh -c 'echo $$ > {WS}/escape.pid; exec python3 -c \"import time; time.sleep(600)\" {U}-escapee' > /dev/null 2>&1 & \
             while [ ! -s {WS}/escape.pid ]; do sleep 0.05; done",
        )
            .check(Check::EscapeeDead),
        a(
            "process",
            "python3 -c \"import os, time\nif os.fork() == 0:\n    os.setsid()\n    open('{WS}/escape.pid', 'w').write(str(os.getpid()))\n    time.sleep(600)\" {U}-escapee; \
             while [ ! -s {WS}/escape.pid ]; do sleep 0.05; done",
        )
        .check(Check::EscapeeDead),
        a("process", "head -c 5M /dev/zero > {WS}/big.bin").check(Check::FileSizeLimited),
        // Escapes: /proc magic links, mount tricks, namespaces.
        a("escape", "echo pwned > /proc/{TESTPID}/root{OUT}/canary.txt"),
        a("escape", "cat /proc/{TESTPID}/root{OUT}/secret.txt"),
        a("escape", "cat /proc/{VICTIM}/environ"),
        a("escape", "echo pwned > /proc/{TESTPID}/cwd/../../{U}-cwd && echo PWNED-{U}").no_control(),
        a(
            "escape",
            "unshare -rm sh -c 'mount -o remount,rw / && touch /{U}-rw && echo PWNED-{U}'",
        )
        .no_control(),
        a(
            "escape",
            "unshare -rm sh -c 'mount --bind {WS} {OUT} && echo PWNED-{U}'",
        )
        .no_control(),
        a(
            "escape",
            "nsenter -t {TESTPID} -m sh -c 'touch {OUT}/nsenter' && echo PWNED-{U}",
        )
        .control_as_root(),
        a("escape", "chroot / sh -c 'touch {OUT}/chroot' && echo PWNED-{U}").control_as_root(),
        a(
            "escape",
            "python3 -c \"import ctypes; print('PWNED-{U}' if ctypes.CDLL(None).reboot(0) == 0 else '')\"",
        )
        .no_control(),
        // Reading secrets outside the workspace.
        a("read", "cat ~/.ssh/id_rsa"),
        a("read", "cat {OUT}/secret.txt"),
        a("read", "cat {TMPC}/secret.txt"),
        a("read", "grep -r SECRET {OUT}"),
        a("read", "tar -C {OUT} -cf - . | tar -xOf -"),
        a("read", "python3 -c \"print(open('{OUT}/secret.txt').read())\""),
        a("read", "cat {WS}/outlink/secret.txt"),
        a("read", "cat /etc/shadow | grep -q '^root:' && echo PWNED-{U}").no_control(),
    ];
    if block_device().is_some() {
        v.push(a("device", "d={BLK}; exec 3>$d && echo PWNED-{U}").no_control());
        v.push(
            a(
                "device",
                "d={BLK}; dd of=$d count=0 < /dev/null 2>/dev/null && echo PWNED-{U}",
            )
            .no_control(),
        );
        v.push(
            a(
                "device",
                "python3 -c \"open('{BLK}', 'r+b'); print('PWNED-{U}')\"",
            )
            .no_control(),
        );
    } else {
        println!("note: no block device under /sys/block: the 3 block-device attacks are not run");
    }
    v
}

// ---------------------------------------------------------------------------
// The verdict on one attack

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    DenyList,
    Stopped,
    Through(String),
}

async fn run_attack(
    lab: &Lab,
    reg: &ToolRegistry,
    net: &Listeners,
    attack: &Attack,
    expect_sandboxed: bool,
) -> Verdict {
    lab.reset_ws();
    lab.ensure_victim();
    let before = lab.snapshot();
    let hits = net.hits.load(Ordering::SeqCst);
    let command = format!(
        "HOME='{}'; export HOME; {}",
        lab.home.display(),
        lab.fill(&attack.template, net)
    );
    let ran = exec(reg, &command, attack.timeout).await;
    let outcome = match ran {
        Ran::Denied => return Verdict::DenyList,
        Ran::Failed(msg) => panic!("{command}: the tool failed: {msg}"),
        Ran::Done(o) => o,
    };
    assert_eq!(
        outcome.sandboxed, expect_sandboxed,
        "{command}: unexpected sandbox state"
    );
    let mut why = Vec::new();
    // Listener hits may arrive just after the client exited.
    std::thread::sleep(Duration::from_millis(30));
    if net.hits.load(Ordering::SeqCst) != hits {
        why.push("a listener was reached".to_string());
    }
    let after = lab.snapshot();
    if after != before {
        let changed: Vec<String> = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k))
            .map(|k| k.display().to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        why.push(format!("canaries changed: {changed:?}"));
    }
    let markers = lab.markers();
    if !markers.is_empty() {
        why.push(format!("markers written: {markers:?}"));
    }
    if outcome.stdout.contains(&format!("PWNED-{}", lab.u)) {
        why.push("it printed PWNED".into());
    }
    if outcome.stdout.contains(&lab.secret) {
        why.push("it printed a secret".into());
    }
    match attack.check {
        Check::Generic => {}
        Check::VictimAlive => {
            if !claw_testkit::process_alive(lab.victim_pid()) {
                why.push("the victim process was killed".into());
            }
        }
        Check::EscapeeDead => {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !std::fs::read_to_string(lab.ws.join("escape.pid"))
                .is_ok_and(|s| s.trim().parse::<u32>().is_ok())
            {
                assert!(
                    Instant::now() < deadline,
                    "{command}: the escapee never wrote its pid"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let marker = format!("{}-escapee", lab.u);
            let gone = Instant::now() + Duration::from_secs(2);
            let mut left = host_pids_running(&marker);
            while !left.is_empty() && Instant::now() < gone {
                std::thread::sleep(Duration::from_millis(20));
                left = host_pids_running(&marker);
            }
            for pid in left {
                why.push(format!("process {pid} outlived the command"));
                // SAFETY: kills the escapee this attack started (its command
                // line carries this lab's unique marker).
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        Check::FileSizeLimited => {
            let len = std::fs::metadata(lab.ws.join("big.bin")).map_or(0, |m| m.len());
            if len > MIB {
                why.push(format!("wrote a {len}-byte file"));
            }
        }
    }
    if why.is_empty() {
        Verdict::Stopped
    } else {
        lab.restore();
        lab.remove_markers();
        Verdict::Through(why.join("; "))
    }
}

#[derive(Default)]
struct Tally {
    tried: usize,
    deny_list: usize,
    stopped: usize,
    through: Vec<String>,
}

fn print_table(title: &str, tallies: &BTreeMap<&'static str, Tally>) {
    println!("\n{title}");
    println!(
        "| class | attacks | refused by the deny list | stopped by the sandbox | got through |"
    );
    println!("|---|---:|---:|---:|---:|");
    let mut total = Tally::default();
    for (class, t) in tallies {
        println!(
            "| {class} | {} | {} | {} | {} |",
            t.tried,
            t.deny_list,
            t.stopped,
            t.through.len()
        );
        total.tried += t.tried;
        total.deny_list += t.deny_list;
        total.stopped += t.stopped;
        total.through.extend(t.through.iter().cloned());
    }
    println!(
        "| **total** | {} | {} | {} | {} |",
        total.tried,
        total.deny_list,
        total.stopped,
        total.through.len()
    );
    for t in &total.through {
        println!("  got through: {t}");
    }
}

/// Runs every attack that is safe for the mode; returns the tallies.
async fn run_suite(namespaces: bool) -> BTreeMap<&'static str, Tally> {
    let tag = if namespaces { "full" } else { "ll" };
    let lab = Lab::new(tag);
    let net = start_listeners(&lab.sockets, tag);
    let reg = registry(&lab.ws, test_policy(namespaces));

    // Tripwire: through this very tool and policy, a write outside must fail
    // before anything aimed at `/` runs.
    let trip = exec(
        &reg,
        &lab.fill(
            "echo x > {OUT}/tripwire; echo x > /tmp/{U}-tripwire; echo x > /etc/{U}-tripwire; \
             rm -f {OUT}/canary.txt; echo done",
            &net,
        ),
        20,
    )
    .await;
    match trip {
        Ran::Done(o) => {
            assert!(o.sandboxed, "tripwire ran unsandboxed");
            assert_eq!(o.stdout, "done\n");
        }
        _ => panic!("the tripwire command did not run"),
    }
    assert!(
        !lab.out.join("tripwire").exists() && lab.out.join("canary.txt").exists(),
        "REFUSING to go on: the tripwire wrote outside the workspace"
    );
    assert!(
        lab.markers().is_empty(),
        "REFUSING to go on: tripwire markers exist"
    );

    let control_lab = Lab::new(&format!("{tag}-ctl"));
    let control = registry(&control_lab.ws, unsandboxed());

    let has_cgroup = matches!(
        sandbox::probe().process_limit,
        sandbox::ProcessLimit::PidsCgroup { .. }
    );
    if !has_cgroup {
        println!(
            "note: no writable pids cgroup (not root, no delegated cgroup): `setsid` escapees \
             outlive their command — reported as [needs pids cgroup]"
        );
    }
    let mut tallies: BTreeMap<&'static str, Tally> = BTreeMap::new();
    for attack in attacks() {
        if attack.root && !namespaces {
            // Aimed at `/`: only with every layer on.
            continue;
        }
        if attack.control && namespaces {
            assert!(!attack.root);
            let v = run_attack(&control_lab, &control, &net, &attack, false).await;
            assert!(
                matches!(v, Verdict::Through(_)),
                "control run: `{}` did nothing even without the sandbox ({v:?}) — the attack is broken",
                attack.template
            );
        }
        let v = run_attack(&lab, &reg, &net, &attack, true).await;
        let t = tallies.entry(attack.class).or_default();
        t.tried += 1;
        match v {
            Verdict::DenyList => t.deny_list += 1,
            Verdict::Stopped => t.stopped += 1,
            Verdict::Through(why) => t.through.push(format!(
                "[{}] {} — {why}",
                if attack.check == Check::EscapeeDead && !has_cgroup {
                    "needs pids cgroup"
                } else if attack.needs_ns {
                    "needs ns"
                } else {
                    "landlock"
                },
                attack.template
            )),
        }
    }
    tallies
}

#[tokio::test]
async fn attacks_fail_against_the_full_sandbox() {
    let status = require_full_sandbox();
    println!("{status}");
    let tallies = run_suite(true).await;
    print_table(
        "exec sandbox, every layer (Landlock + namespaces + new root + pids cgroup + rlimits):",
        &tallies,
    );
    // Only a documented gap may get through: setsid escapees where no pids
    // cgroup is writable (printed above; never the case when run as root).
    let through: Vec<&String> = tallies
        .values()
        .flat_map(|t| t.through.iter())
        .filter(|t| !t.starts_with("[needs pids cgroup]"))
        .collect();
    assert!(through.is_empty(), "attacks got through: {through:#?}");
    let tried: usize = tallies.values().map(|t| t.tried).sum();
    assert!(tried >= 100, "only {tried} attacks");
}

#[tokio::test]
async fn landlock_alone_stops_everything_but_its_documented_gaps() {
    require_full_sandbox();
    let tallies = run_suite(false).await;
    print_table(
        "exec sandbox, Landlock + pids cgroup + rlimits + no capabilities, without namespaces \
         (attacks aimed at / not run):",
        &tallies,
    );
    // Metadata changes, UDP and pathname UNIX sockets are what Landlock ABI 7
    // leaves to the namespaces; nothing else may get through.
    let unexpected: Vec<&String> = tallies
        .values()
        .flat_map(|t| t.through.iter())
        .filter(|t| !t.starts_with("[needs ns]") && !t.starts_with("[needs pids cgroup]"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "attacks got through Landlock: {unexpected:#?}"
    );
}

// ---------------------------------------------------------------------------
// Fork bombs

async fn fork_bomb(namespaces: bool, template: &str) {
    require_full_sandbox();
    let lab = Lab::new(if namespaces { "bomb" } else { "bomb-ll" });
    let net = start_listeners(&lab.sockets, "bomb");
    let reg = registry(&lab.ws, test_policy(namespaces));
    let command = lab.fill(template, &net);
    let started = Instant::now();
    let run = exec(&reg, &command, 5);
    tokio::pin!(run);
    // While the bomb runs, this process must still be able to start programs.
    let mut forked_meanwhile = false;
    let outcome = loop {
        tokio::select! {
            r = &mut run => break r,
            _ = tokio::time::sleep(Duration::from_millis(1500)), if !forked_meanwhile => {
                let ok = std::process::Command::new("true").status().is_ok_and(|s| s.success());
                assert!(ok, "the machine could not start a process during the fork bomb");
                forked_meanwhile = true;
            }
        }
    };
    let elapsed = started.elapsed();
    let o = match outcome {
        Ran::Done(o) => o,
        Ran::Denied => panic!("{command}: refused by the deny list — not a bypass"),
        Ran::Failed(e) => panic!("{command}: {e}"),
    };
    assert!(o.sandboxed);
    assert!(o.timed_out, "the bomb ended by itself? {o:?}");
    assert!(forked_meanwhile);
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    // Nothing of it survives: no process left whose command line names this
    // lab (every process of the bomb carries `{U}`; in a PID namespace the
    // shell's `$$` is not a host pid, so the process group cannot be used).
    let deadline = Instant::now() + Duration::from_secs(5);
    let leftovers = loop {
        let left = host_pids_running(&lab.u).len();
        if left == 0 || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(leftovers, 0, "processes of the bomb survived");
    println!(
        "fork bomb `{}` ({}): ended after {:.1} s (timeout 5 s), machine kept forking, \
         nothing left behind",
        template.replace('\n', "\\n"),
        if namespaces {
            "full sandbox"
        } else {
            "without namespaces"
        },
        elapsed.as_secs_f64()
    );
}

#[tokio::test]
async fn classic_fork_bomb_is_contained() {
    // `:(){ :|:& };:`, base64-encoded past the deny list, run by bash (which
    // retries failed forks); the shell stays to keep the bomb pushing until the timeout.
    // It stays by `exec`, which needs no fork: once the bomb has used up the
    // process limit, a forked `sleep` fails ("Cannot fork") and the shell would
    // end before the timeout, depending on how fast the machine is.
    fork_bomb(
        true,
        "echo OigpeyA6fDomIH07Og== | base64 -d > {WS}/b.sh; bash {WS}/b.sh {U}-bomb; exec python3 -c 'import time; time.sleep(30)' {U}-bomb",
    )
    .await;
}

#[tokio::test]
async fn function_fork_bomb_is_contained() {
    // `f(){ f & f & wait; }` is not the deny list's `f|f` pattern.
    fork_bomb(true, "bash -c 'f(){ f & f & wait; }; f' {U}-bomb").await;
}

#[tokio::test]
async fn python_fork_bomb_is_contained_without_namespaces_too() {
    fork_bomb(
        false,
        "python3 -c \"import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\" {U}-bomb",
    )
    .await;
}

// ---------------------------------------------------------------------------
// A state directory inside the workspace, without a mount namespace

#[tokio::test]
async fn without_namespaces_a_state_dir_in_the_workspace_makes_exec_confirm() {
    require_full_sandbox();
    let lab = Lab::new("hid-ll");
    let inside = lab.ws.join(".claw-state");
    std::fs::create_dir_all(&inside).unwrap();
    let outside = lab.out.join("state");
    std::fs::create_dir_all(&outside).unwrap();
    let with = |namespaces: bool, hidden: &Path| {
        let mut p = test_policy(namespaces);
        p.hidden = vec![hidden.to_path_buf()];
        registry(&lab.ws, p)
    };
    // Landlock alone cannot take the state dir out of the workspace it grants:
    // the command would reach it, so exec asks first.
    assert!(with(false, &inside).needs_confirmation("exec"));
    // Positive control: what the confirmation stands between. Run anyway
    // (dispatch does not ask), the command writes claw's state.
    let reg = with(false, &inside);
    let planted = inside.join("memory.sources.json");
    let cmd = format!("echo planted > {}", planted.display());
    match exec(&reg, &cmd, 10).await {
        Ran::Done(o) => assert_eq!(o.exit_code, Some(0), "{o:?}"),
        Ran::Denied => panic!("the control was refused by the deny list"),
        Ran::Failed(e) => panic!("the control failed: {e}"),
    }
    assert!(
        planted.exists(),
        "the control could not write the state dir"
    );
    // With the mount namespace it is hidden (an empty tmpfs): no confirmation,
    // and the write lands nowhere.
    std::fs::remove_file(&planted).unwrap();
    let reg = with(true, &inside);
    assert!(!reg.needs_confirmation("exec"));
    let _ = exec(&reg, &cmd, 10).await;
    assert!(!planted.exists(), "the hidden state dir was written");
    // A state dir outside the workspace needs nothing either way.
    assert!(!with(false, &outside).needs_confirmation("exec"));
    assert!(!with(true, &outside).needs_confirmation("exec"));
}

// ---------------------------------------------------------------------------
// Ordinary work still works

#[tokio::test]
async fn ordinary_commands_still_work_in_the_sandbox() {
    require_full_sandbox();
    for namespaces in [true, false] {
        let lab = Lab::new(if namespaces { "ok" } else { "ok-ll" });
        let net = start_listeners(&lab.sockets, if namespaces { "ok" } else { "ok-ll" });
        let reg = registry(&lab.ws, test_policy(namespaces));
        // Sandboxed, exec needs no confirmation (unless configured).
        assert!(!reg.needs_confirmation("exec"));
        let cases: &[(&str, &str)] = &[
            ("ls", "dangling\nfile.txt\noutlink\nsub\n"),
            ("echo hello > new.txt && cat new.txt", "hello\n"),
            ("cat file.txt", "workspace file\n"),
            (
                "printf 'b\\na\\nc\\n' | sort | head -n 2 | tr a-z A-Z",
                "A\nB\n",
            ),
            ("python3 -c 'print(6 * 7)'", "42\n"),
            ("perl -e 'print 6 * 7, qq{\\n}'", "42\n"),
            (
                "echo scratch > \"$TMPDIR/x\" && cat \"$TMPDIR/x\" && rm \"$TMPDIR/x\"",
                "scratch\n",
            ),
            ("mkdir -p a/b && mv new.txt a/b/ && ls a/b", "new.txt\n"),
            ("rm -rf a sub && ls", "dangling\nfile.txt\noutlink\n"),
            (
                "git init -q repo && git -C repo -c user.email=a@b -c user.name=a commit -q --allow-empty -m m && git -C repo log --format=%s",
                "m\n",
            ),
            (
                "printf 'int main(void){return 42;}' > m.c && cc -o m m.c && ./m; echo $?",
                "42\n",
            ),
            ("sleep 0.1 & wait; echo waited", "waited\n"),
            (
                "echo to-null > /dev/null && head -c 4 /dev/zero | wc -c",
                "4\n",
            ),
        ];
        for (cmd, want) in cases {
            match exec(&reg, cmd, 60).await {
                Ran::Done(o) => {
                    assert!(o.sandboxed);
                    assert_eq!(
                        (o.exit_code, o.stdout.as_str()),
                        (Some(0), *want),
                        "`{cmd}` (namespaces {namespaces}); stderr: {}",
                        o.stderr
                    );
                }
                Ran::Denied => panic!("`{cmd}` refused"),
                Ran::Failed(e) => panic!("`{cmd}`: {e}"),
            }
        }
        drop(net);
    }
}

#[tokio::test]
async fn the_network_can_be_enabled_and_stays_otherwise_confined() {
    require_full_sandbox();
    let lab = Lab::new("net-on");
    let net = start_listeners(&lab.sockets, "net-on");
    let reg = registry(
        &lab.ws,
        SandboxPolicy {
            network: true,
            ..test_policy(true)
        },
    );
    let before = net.hits.load(Ordering::SeqCst);
    let cmd = lab.fill(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {PORT}), 3); print('connected')\"",
        &net,
    );
    match exec(&reg, &cmd, 20).await {
        Ran::Done(o) => {
            assert!(o.sandboxed);
            assert_eq!(o.stdout, "connected\n", "stderr: {}", o.stderr);
        }
        _ => panic!("did not run"),
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(net.hits.load(Ordering::SeqCst) > before);
    // The file system stays confined.
    let cmd = lab.fill("echo pwned > {OUT}/canary.txt; cat {OUT}/secret.txt", &net);
    match exec(&reg, &cmd, 20).await {
        Ran::Done(o) => {
            assert!(!o.stdout.contains(&lab.secret));
            assert_eq!(
                std::fs::read_to_string(lab.out.join("canary.txt")).unwrap(),
                "canary outside\n"
            );
        }
        _ => panic!("did not run"),
    }
}

#[tokio::test]
async fn sandbox_overhead_per_command() {
    require_full_sandbox();
    let lab = Lab::new("speed");
    let mut report = Vec::new();
    for (name, policy) in [
        ("no sandbox", unsandboxed()),
        ("Landlock only", test_policy(false)),
        ("full sandbox", test_policy(true)),
    ] {
        let reg = registry(&lab.ws, policy);
        let mut ms = Vec::new();
        for _ in 0..30 {
            let t = Instant::now();
            match exec(&reg, "true", 10).await {
                Ran::Done(o) => assert_eq!(o.exit_code, Some(0)),
                _ => panic!("`true` did not run"),
            }
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
        report.push(format!(
            "{name}: p50 {:.1} ms, p95 {:.1} ms",
            ms[ms.len() / 2],
            ms[ms.len() * 95 / 100]
        ));
    }
    println!("exec `true`, 30 runs each: {}", report.join("; "));
}

#[tokio::test]
async fn a_runaway_allocation_fails_inside_the_command() {
    require_full_sandbox();
    for namespaces in [true, false] {
        let lab = Lab::new(if namespaces { "mem" } else { "mem-ll" });
        let policy = SandboxPolicy {
            max_memory_bytes: 256 * MIB,
            ..test_policy(namespaces)
        };
        let reg = registry(&lab.ws, policy);
        match exec(
            &reg,
            "python3 -c 'b = bytearray(16 << 20); print(len(b))'",
            60,
        )
        .await
        {
            Ran::Done(o) => assert_eq!(
                (o.exit_code, o.stdout.as_str()),
                (Some(0), "16777216\n"),
                "a small allocation works; stderr: {}",
                o.stderr
            ),
            other => panic!("small allocation: {other:?}"),
        }
        match exec(
            &reg,
            "python3 -c 'b = bytearray(2 << 30); print(len(b))'",
            60,
        )
        .await
        {
            Ran::Done(o) => {
                assert_ne!(
                    o.exit_code,
                    Some(0),
                    "2 GiB allocated under a 256 MiB limit"
                );
                assert!(o.stderr.contains("MemoryError"), "stderr: {}", o.stderr);
                assert!(o.stdout.is_empty(), "{}", o.stdout);
            }
            other => panic!("large allocation: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Host processes: a PID namespace with its own /proc

/// A host process with a password in its command line.
struct CmdlineVictim {
    child: std::process::Child,
    secret: String,
}

impl CmdlineVictim {
    fn spawn(tag: &str) -> CmdlineVictim {
        let secret = format!("pw-{tag}-{}", std::process::id());
        let child = std::process::Command::new("python3")
            .args(["-c", "import time; time.sleep(600)"])
            .arg(format!("--db-password={secret}"))
            .spawn()
            .unwrap();
        // Until the child has exec'd, its /proc cmdline is the forked test
        // binary's, without the secret: every attack would miss it, the control
        // as well (seen in CI), and a hidden secret would prove nothing.
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read(&cmdline)
            .is_ok_and(|b| String::from_utf8_lossy(&b).contains(secret.as_str()))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the victim never showed its command line"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        CmdlineVictim { child, secret }
    }
}

impl Drop for CmdlineVictim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads of other processes' command lines and of the host's process list;
/// each prints `VISIBLE` or the password when it gets through.
const PROCESS_VIEW_ATTACKS: &[&str] = &[
    "cat /proc/{VPID}/cmdline",
    "grep -a -h -o 'db-password=[^[:cntrl:]]*' /proc/[0-9]*/cmdline",
    "ps axww | grep -a db-password",
    "[ -d /proc/{VPID} ] && echo VISIBLE",
    "[ -d /proc/{TESTPID} ] && echo VISIBLE",
    "ls /proc | grep -qx {VPID} && echo VISIBLE",
    "cat /proc/{VPID}/status | grep -q '^Name:' && echo VISIBLE",
    "python3 -c \"import os; print('VISIBLE' if '{VPID}' in os.listdir('/proc') else '')\"",
];

/// How many of [`PROCESS_VIEW_ATTACKS`] got through with this policy.
async fn process_view_through(policy: SandboxPolicy, tag: &str) -> (usize, Vec<String>) {
    let lab = Lab::new(tag);
    let victim = CmdlineVictim::spawn(tag);
    let reg = registry(&lab.ws, policy);
    let mut through = Vec::new();
    for template in PROCESS_VIEW_ATTACKS {
        let command = template
            .replace("{VPID}", &victim.child.id().to_string())
            .replace("{TESTPID}", &std::process::id().to_string());
        match exec(&reg, &command, 20).await {
            Ran::Done(o) => {
                if o.stdout.contains(&victim.secret) || o.stdout.contains("VISIBLE") {
                    through.push(command);
                }
            }
            other => panic!("`{command}`: {other:?}"),
        }
    }
    (PROCESS_VIEW_ATTACKS.len(), through)
}

#[tokio::test]
async fn host_processes_and_their_command_lines_are_invisible_in_the_sandbox() {
    let status = require_full_sandbox();
    assert!(
        status.hides_host_processes(),
        "no PID namespace with its own /proc on this machine:\n{status}"
    );
    // Positive control: without the sandbox every read sees the host process.
    let (tried, control) = process_view_through(unsandboxed(), "pv-ctl").await;
    assert_eq!(
        control.len(),
        tried,
        "control: only {control:?} got through"
    );
    // The documented fallback (Landlock alone, no namespaces) sees them too.
    let (_, fallback) = process_view_through(test_policy(false), "pv-ll").await;
    assert!(
        fallback.iter().any(|c| c.starts_with("cat /proc/")),
        "Landlock alone hides host processes? {fallback:?}"
    );
    let (tried, through) = process_view_through(test_policy(true), "pv").await;
    println!(
        "process view: {tried} reads of host processes; got through: full sandbox {}, \
         Landlock only {} (documented), control {}",
        through.len(),
        fallback.len(),
        control.len()
    );
    assert!(through.is_empty(), "got through: {through:#?}");
    // Commands still see their own processes.
    let lab = Lab::new("pv-own");
    let reg = registry(&lab.ws, test_policy(true));
    match exec(
        &reg,
        "sleep 5 & ps -o comm= | sort | tr '\\n' ' '; echo $$",
        20,
    )
    .await
    {
        Ran::Done(o) => {
            // Its own processes only, and it is pid 1 of its own namespace. A
            // pipeline member forked but not yet exec'd shows as `sh`, so the
            // names are checked as a set, not as one exact line.
            let words: Vec<&str> = o.stdout.split_whitespace().collect();
            assert_eq!(words.last(), Some(&"1"), "{}: {}", o.stdout, o.stderr);
            let names = &words[..words.len() - 1];
            assert!(
                names.contains(&"ps") && names.contains(&"sh"),
                "{}",
                o.stdout
            );
            assert!(
                names
                    .iter()
                    .all(|n| ["ps", "sh", "sleep", "sort", "tr"].contains(n)),
                "{}",
                o.stdout
            );
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------
// The total write quota

const QUOTA: u64 = 64 * MIB;

fn quota_policy(max_write_bytes: u64) -> SandboxPolicy {
    SandboxPolicy {
        max_write_bytes,
        max_file_bytes: 256 * MIB,
        ..test_policy(true)
    }
}

/// Bytes allocated under `dir` (what the disk lost).
fn disk_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if let Ok(m) = e.metadata()
            && m.is_file()
        {
            total += m.blocks() * 512;
        }
    }
    total
}

/// Ways to write far more than [`QUOTA`] in many files, each 384 MiB or more.
const WRITE_ATTACKS: &[(&str, &str)] = &[
    (
        "many files, one shell loop",
        "for i in $(seq 1 24); do head -c 16M /dev/zero > f$i; done",
    ),
    (
        "many files, 8 parallel writers",
        "seq 1 24 | xargs -P 8 -I N sh -c 'head -c 16M /dev/zero > p$0' N",
    ),
    (
        "many files, one python process",
        "python3 -c \"\nfor i in range(24):\n    open('y%d' % i, 'wb').write(b'x' * (16 << 20))\"",
    ),
    (
        "mmap writes",
        "python3 -c \"\nimport mmap, os\nfor i in range(24):\n    fd = os.open('m%d' % i, os.O_CREAT | os.O_RDWR)\n    os.ftruncate(fd, 16 << 20)\n    m = mmap.mmap(fd, 16 << 20)\n    for o in range(0, 16 << 20, 4096):\n        m[o] = 1\n    m.close()\"",
    ),
    (
        "fallocate (reserves without writing)",
        "python3 -c \"\nimport os\nfor i in range(24):\n    os.posix_fallocate(os.open('a%d' % i, os.O_CREAT | os.O_WRONLY), 0, 16 << 20)\"",
    ),
    (
        "children reaped automatically (SIGCHLD ignored), 1.5 GiB",
        "python3 -c \"\nimport os, signal, time\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\nfor i in range(48):\n    if os.fork() == 0:\n        open('c%d' % i, 'wb').write(b'x' * (32 << 20))\n        os._exit(0)\n    time.sleep(0.02)\ntime.sleep(2)\"",
    ),
];

#[tokio::test]
async fn the_write_quota_stops_many_files_and_its_evasions() {
    require_full_sandbox();
    let lab = Lab::new("quota");
    let control = registry(&lab.ws, quota_policy(0));
    let reg = registry(&lab.ws, quota_policy(QUOTA));
    // Within the quota nothing changes.
    match exec(&reg, "head -c 32M /dev/zero > ok.bin && echo ok", 30).await {
        Ran::Done(o) => {
            assert_eq!((o.stdout.as_str(), o.killed.as_deref()), ("ok\n", None))
        }
        other => panic!("{other:?}"),
    }
    let mut rows = Vec::new();
    let mut through = Vec::new();
    for (name, command) in WRITE_ATTACKS {
        lab.reset_ws();
        // Positive control: the same sandbox without a quota writes it all.
        match exec(&control, command, 60).await {
            Ran::Done(o) => assert!(o.killed.is_none(), "{name}: {o:?}"),
            other => panic!("{name} (control): {other:?}"),
        }
        let written = disk_bytes(&lab.ws);
        assert!(
            written >= 6 * QUOTA,
            "{name}: the control wrote only {written} bytes"
        );
        lab.reset_ws();
        let started = Instant::now();
        let o = match exec(&reg, command, 60).await {
            Ran::Done(o) => o,
            other => panic!("{name}: {other:?}"),
        };
        let secs = started.elapsed().as_secs_f64();
        let on_disk = disk_bytes(&lab.ws);
        let over = on_disk.saturating_sub(QUOTA);
        rows.push(format!(
            "| {name} | {:.0} MiB | {:.1} MiB | {:.1} MiB | {secs:.1} s | {} |",
            written as f64 / MIB as f64,
            on_disk as f64 / MIB as f64,
            over as f64 / MIB as f64,
            o.killed.as_deref().unwrap_or("NOT KILLED")
        ));
        // The file-system backstop allows quota + 1 GiB; what the per-process
        // count sees stops within the write rate × a few ms (a few MiB; tens
        // on a loaded machine, where the watcher thread waits for a CPU).
        let allowed = if name.contains("SIGCHLD") {
            QUOTA + (1 << 30) + 64 * MIB
        } else {
            2 * QUOTA
        };
        if o.killed.is_none() || on_disk > allowed {
            through.push(format!("{name}: {on_disk} bytes, {:?}", o.killed));
        }
    }
    lab.reset_ws();
    println!(
        "write quota {} MiB:\n| attack | control wrote | on disk | over the quota | time | outcome |\n|---|---|---|---|---|---|\n{}",
        QUOTA / MIB,
        rows.join("\n")
    );
    assert!(through.is_empty(), "got through: {through:#?}");
}

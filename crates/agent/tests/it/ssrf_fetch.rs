//! SSRF: `web_fetch` against real HTTP servers on loopback addresses.
//!
//! - Every spelling of the local host (decimal, hex, octal, short, `localhost`,
//!   userinfo tricks, IPv6 and IPv4-in-IPv6 forms, unspecified) is refused by the
//!   registry's `web_fetch`, and the server listening there sees no request.
//! - Addresses of the other non-public classes (private, link-local / cloud
//!   metadata, CGNAT, multicast, broadcast, documentation, benchmarking, ULA, …)
//!   are refused by the guard's check, which opens no connection — these tests
//!   never send a packet beyond loopback.
//! - A redirect from an allowed server to another loopback port is refused at the
//!   hop: the test policy treats one exact socket address as "public" and judges
//!   every other address by the real rules.
//! - DNS rebinding: the guard resolves once per hop and the connection uses only
//!   the checked answer; a later answer pointing elsewhere is never used.
//! - `allow_private` lets loopback through.
//!
//! Run: `cargo test --test ssrf_fetch -- --nocapture` (prints tried vs got through).

use claw_testkit::route_server as ssrf_support;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{fetch, fetch_call, page};
use claw_agent::tools::netguard::{self, GuardError, HostResolver, NetPolicy};
use claw_agent::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry};
use reqwest::Url;
use ssrf_support::{Route, RouteServer};

fn registry(net: NetPolicy) -> ToolRegistry {
    let mut ctx = ToolContext::new(std::env::temp_dir());
    ctx.fetch_timeout = Duration::from_secs(5);
    ctx.net = net;
    ToolRegistry::new(ctx)
}

/// True when the result is the guard's refusal (not a connection error, not a page).
fn is_guard_refusal(result: &Result<ToolOutput, ToolError>) -> bool {
    matches!(result, Err(ToolError::UrlRefused { reason, .. }) if reason.contains("set web.allow_private to allow"))
}

/// Every spelling of the local host, by class; `{p}` is the live server's port.
fn loopback_spellings() -> Vec<(&'static str, &'static str)> {
    vec![
        ("v4 dotted", "http://127.0.0.1:{p}/"),
        ("v4 dotted", "HTTP://127.0.0.1:{p}/"),
        ("v4 dotted", "https://127.0.0.1:{p}/"),
        ("v4 dotted", "http://127.0.0.1.:{p}/"),
        ("v4 dotted", "http://127.000.000.001:{p}/"),
        ("v4 dotted", "http://127.255.255.254:{p}/"),
        ("v4 numeric", "http://2130706433:{p}/"),
        ("v4 numeric", "http://0x7f000001:{p}/"),
        ("v4 numeric", "http://0x7f.0.0.1:{p}/"),
        ("v4 numeric", "http://0x7F.0x00.0x00.0x01:{p}/"),
        ("v4 numeric", "http://0177.0.0.1:{p}/"),
        ("v4 numeric", "http://0177.0000.0000.0001:{p}/"),
        ("v4 numeric", "http://017700000001:{p}/"),
        ("v4 numeric", "http://127.1:{p}/"),
        ("v4 numeric", "http://127.0.1:{p}/"),
        ("v4 numeric", "http://0x7f.1:{p}/"),
        ("v4 encoded", "http://%31%32%37.0.0.1:{p}/"),
        (
            "v4 encoded",
            "http://\u{ff11}\u{ff12}\u{ff17}.\u{ff10}.\u{ff10}.\u{ff11}:{p}/",
        ),
        ("hostname", "http://localhost:{p}/"),
        ("hostname", "http://LOCALHOST:{p}/"),
        ("hostname", "http://LocalHost:{p}/"),
        ("userinfo", "http://user:pw@127.0.0.1:{p}/"),
        ("userinfo", "http://evil.example@127.0.0.1:{p}/"),
        ("userinfo", "http://user:pw@localhost:{p}/"),
        ("userinfo", "http://127.0.0.1:{p}\\@evil.example/"),
        ("userinfo", "http://127.0.0.1:{p}#@evil.example/"),
        ("v6", "http://[::1]:{p}/"),
        ("v6", "http://[0:0:0:0:0:0:0:1]:{p}/"),
        ("v6", "http://[0000::0001]:{p}/"),
        ("v4-in-v6", "http://[::ffff:127.0.0.1]:{p}/"),
        ("v4-in-v6", "http://[::ffff:7f00:1]:{p}/"),
        ("v4-in-v6", "http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/"),
        ("v4-in-v6", "http://[::127.0.0.1]:{p}/"),
        ("v4-in-v6", "http://[::ffff:0:127.0.0.1]:{p}/"),
        ("v4-in-v6", "http://[64:ff9b::127.0.0.1]:{p}/"),
        ("v4-in-v6", "http://[2002:7f00:1::]:{p}/"),
        (
            "v4-in-v6",
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{p}/",
        ),
        ("unspecified", "http://0.0.0.0:{p}/"),
        ("unspecified", "http://0:{p}/"),
        ("unspecified", "http://0x0:{p}/"),
        ("unspecified", "http://[::]:{p}/"),
        ("unspecified", "http://[::ffff:0.0.0.0]:{p}/"),
    ]
}

/// Non-public addresses of every other class. Judged by the guard's check only
/// (no connection is ever attempted to them from these tests).
fn other_class_urls() -> Vec<(&'static str, &'static str)> {
    vec![
        ("link-local", "http://169.254.169.254/latest/meta-data/"),
        ("link-local", "http://2852039166/latest/meta-data/"),
        ("link-local", "http://0xa9fea9fe/"),
        ("link-local", "http://0251.0376.0251.0376/"),
        ("link-local", "http://169.254.43518/"),
        ("link-local", "http://[::ffff:169.254.169.254]/"),
        ("link-local", "http://[64:ff9b::a9fe:a9fe]/"),
        ("link-local", "http://[2002:a9fe:a9fe::1]/"),
        ("link-local", "http://[fe80::1]/"),
        ("link-local", "http://[fe80::a9fe:a9fe]/"),
        ("private", "http://10.0.0.1/"),
        ("private", "http://10.1/"),
        ("private", "http://167772161/"),
        ("private", "http://172.16.0.1/"),
        ("private", "http://172.31.255.254/"),
        ("private", "http://192.168.0.1/"),
        ("private", "http://0xc0.0xa8.1.1/"),
        ("private", "http://[::ffff:192.168.0.1]/"),
        ("private", "http://[::ffff:c0a8:1]/"),
        ("private", "http://[::10.0.0.1]/"),
        ("unique-local", "http://[fc00::1]/"),
        ("unique-local", "http://[fd00:ec2::254]/"),
        ("site-local", "http://[fec0::1]/"),
        ("cgnat", "http://100.64.0.1/"),
        ("cgnat", "http://100.100.100.200/"),
        ("cgnat", "http://[::ffff:100.64.0.1]/"),
        ("multicast", "http://224.0.0.1/"),
        ("multicast", "http://239.255.255.250/"),
        ("multicast", "http://[ff02::1]/"),
        ("broadcast", "http://255.255.255.255/"),
        ("broadcast", "http://4294967295/"),
        ("documentation", "http://192.0.2.1/"),
        ("documentation", "http://198.51.100.1/"),
        ("documentation", "http://203.0.113.1/"),
        ("documentation", "http://[2001:db8::1]/"),
        ("benchmarking", "http://198.18.0.1/"),
        ("benchmarking", "http://[2001:2::1]/"),
        ("reserved", "http://240.0.0.1/"),
        ("reserved", "http://192.0.0.8/"),
        ("reserved", "http://[100::1]/"),
        ("reserved", "http://[64:ff9b:1::a00:1]/"),
    ]
}

#[derive(Default)]
struct Tally {
    tried: usize,
    through: usize,
}

fn print_tally(title: &str, tally: &BTreeMap<&str, Tally>) -> (usize, usize) {
    let tried: usize = tally.values().map(|t| t.tried).sum();
    let through: usize = tally.values().map(|t| t.through).sum();
    println!("{title}");
    println!("| class | tried | got through |");
    println!("|---|---:|---:|");
    for (class, t) in tally {
        println!("| {class} | {} | {} |", t.tried, t.through);
    }
    println!("| total | {tried} | {through} |");
    (tried, through)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_the_local_host_is_refused() {
    let v4 = RouteServer::start("127.0.0.1:0");
    v4.route("/", Route::Page("LOCAL SECRET".into()));
    // The same port on ::1, when this machine has IPv6 loopback: a spelling that
    // slipped through to it would be recorded there too.
    let v6 = RouteServer::try_start(&format!("[::1]:{}", v4.port()));
    if let Some(s) = &v6 {
        s.route("/", Route::Page("LOCAL SECRET".into()));
    }
    let reg = registry(NetPolicy::default());
    let mut tally: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut leaks = Vec::new();
    for (class, spelling) in loopback_spellings() {
        let url = spelling.replace("{p}", &v4.port().to_string());
        let result = reg.dispatch(&fetch_call(&url)).await;
        let t = tally.entry(class).or_default();
        t.tried += 1;
        if !is_guard_refusal(&result) {
            t.through += 1;
            leaks.push(format!("{url} -> {result:?}"));
        }
    }
    let (tried, through) = print_tally(
        "SSRF spellings of the local host via web_fetch (live server on the target port):",
        &tally,
    );
    let hits = v4.hits().len() + v6.as_ref().map_or(0, |s| s.hits().len());
    println!("requests that reached the local servers: {hits}");
    assert!(tried >= 30, "only {tried} spellings");
    assert_eq!(through, 0, "got through:\n{}", leaks.join("\n"));
    assert_eq!(hits, 0, "the local server was reached");
}

#[tokio::test]
async fn every_non_public_class_is_refused_by_the_check() {
    let policy = NetPolicy::default();
    let mut tally: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut leaks = Vec::new();
    for (class, raw) in other_class_urls() {
        let url = Url::parse(raw).unwrap();
        let result = netguard::check_target(&url, &policy).await;
        let t = tally.entry(class).or_default();
        t.tried += 1;
        match &result {
            Err(GuardError::Refused { refusal, .. }) => {
                // The class in the refusal is the one the table names.
                assert_eq!(refusal.class.label(), class, "{raw}: {result:?}");
            }
            _ => {
                t.through += 1;
                leaks.push(format!("{raw} -> {result:?}"));
            }
        }
    }
    let (tried, through) = print_tally(
        "SSRF: other non-public classes (guard check, no connection):",
        &tally,
    );
    assert!(tried >= 30, "only {tried} URLs");
    assert_eq!(through, 0, "got through:\n{}", leaks.join("\n"));

    // And public addresses pass (the check opens no connection).
    for raw in [
        "http://8.8.8.8/",
        "https://1.1.1.1/",
        "http://[2606:4700:4700::1111]/",
        "http://[::ffff:8.8.8.8]/",
        "http://[64:ff9b::808:808]/",
        "http://[2002:808:808::1]/",
    ] {
        let url = Url::parse(raw).unwrap();
        let target = netguard::check_target(&url, &policy).await;
        assert!(target.is_ok(), "{raw}: {target:?}");
    }
}

#[tokio::test]
async fn refusal_tells_the_model_why_and_how_to_allow() {
    let reg = registry(NetPolicy::default());
    let err = reg
        .dispatch(&fetch_call("http://2130706433:9/x"))
        .await
        .unwrap_err();
    assert_eq!(
        err.render(),
        "Error: refused URL http://2130706433:9/x: 127.0.0.1 is a loopback address; set web.allow_private to allow"
    );
    let err = reg
        .dispatch(&fetch_call("http://localhost:9/"))
        .await
        .unwrap_err();
    let text = err.render();
    assert!(
        text.starts_with("Error: refused URL http://localhost:9/: localhost resolves to ")
            && text.contains("a loopback address; set web.allow_private to allow"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_to_loopback_is_refused_at_the_hop() {
    let public = RouteServer::start("127.0.0.1:0");
    let secret = RouteServer::start("127.0.0.1:0");
    secret.route("/secret", Route::Page("INTERNAL ADMIN".into()));
    let sp = secret.port();
    let targets = [
        format!("http://127.0.0.1:{sp}/secret"),
        format!("http://localhost:{sp}/secret"),
        format!("http://2130706433:{sp}/secret"),
        format!("http://0x7f.1:{sp}/secret"),
        format!("http://[::ffff:127.0.0.1]:{sp}/secret"),
        format!("http://user:pw@127.0.0.1:{sp}/secret"),
    ];
    for (i, to) in targets.iter().enumerate() {
        let code = [301, 302, 303, 307, 308][i % 5];
        public.route(&format!("/r{i}"), Route::Redirect(code, to.clone()));
    }
    // Two hops on the public server, then loopback.
    public.route("/a", Route::Redirect(302, "/b".into()));
    public.route("/b", Route::Redirect(302, targets[0].clone()));
    public.route("/page", Route::Page("PUBLIC PAGE".into()));
    public.route("/rel", Route::Redirect(302, "/page".into()));
    public.route("/loop", Route::Redirect(302, "/loop".into()));
    public.route("/file", Route::Redirect(302, "file:///etc/passwd".into()));

    // Only the public server's exact socket address counts as public.
    let reg = registry(NetPolicy {
        assume_public: vec![public.addr()],
        ..NetPolicy::default()
    });

    // The allowed server works, redirects within it included.
    let (final_url, title) = page(fetch(&reg, &public.url("/rel")).await.unwrap());
    assert_eq!(final_url, public.url("/page"));
    assert_eq!(title.as_deref(), Some("PUBLIC PAGE"));

    // The other loopback port directly: refused.
    let direct = reg.dispatch(&fetch_call(&secret.url("/secret"))).await;
    assert!(is_guard_refusal(&direct), "{direct:?}");

    let mut tried = 0;
    let mut through = 0;
    for i in 0..targets.len() {
        tried += 1;
        let result = reg
            .dispatch(&fetch_call(&public.url(&format!("/r{i}"))))
            .await;
        if !is_guard_refusal(&result) {
            through += 1;
        }
        let text = match &result {
            Err(e) => e.render(),
            Ok(o) => o.render(),
        };
        assert!(
            text.contains("it redirects (hop 1) to http://") && text.contains("a loopback address"),
            "{text}"
        );
    }
    tried += 1;
    let result = reg.dispatch(&fetch_call(&public.url("/a"))).await;
    if !is_guard_refusal(&result) {
        through += 1;
    }
    let text = result.as_ref().map_or_else(|e| e.render(), |o| o.render());
    assert!(text.contains("(hop 2)"), "{text}");
    println!(
        "SSRF redirects from an allowed server to loopback: tried {tried}, got through {through}"
    );
    assert_eq!(through, 0);
    assert!(
        secret.hits().is_empty(),
        "the internal server was reached: {:?}",
        secret.hits()
    );

    // Redirect limits and schemes.
    let err = reg
        .dispatch(&fetch_call(&public.url("/loop")))
        .await
        .unwrap_err();
    assert!(
        err.render().contains("stopped after 5 redirects"),
        "{}",
        err.render()
    );
    let loops = public.hits().iter().filter(|h| *h == "/loop").count();
    assert_eq!(loops, 6, "the first request and 5 redirects");
    let err = reg
        .dispatch(&fetch_call(&public.url("/file")))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::UrlRefused { reason, .. } if reason.contains("file:///etc/passwd") && reason.contains("only http and https")),
        "{err:?}"
    );
}

/// Answers 127.0.0.1 the first time and 127.0.0.2 after that (a rebinding DNS server).
struct Rebinding {
    calls: AtomicUsize,
}

impl HostResolver for Rebinding {
    fn lookup(&self, _host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let ip: IpAddr = if n == 0 {
            "127.0.0.1".parse().unwrap()
        } else {
            "127.0.0.2".parse().unwrap()
        };
        Ok(vec![SocketAddr::new(ip, port)])
    }
}

/// A fresh [`Rebinding`] resolver and a registry that uses it, with `public`'s
/// address taken as public.
fn rebinding_registry(public: &RouteServer) -> (Arc<Rebinding>, ToolRegistry) {
    let resolver = Arc::new(Rebinding {
        calls: AtomicUsize::new(0),
    });
    let reg = registry(NetPolicy {
        assume_public: vec![public.addr()],
        resolver: resolver.clone(),
        ..NetPolicy::default()
    });
    (resolver, reg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_rebinding_cannot_switch_the_address() {
    let public = RouteServer::start("127.0.0.1:0");
    let inner = RouteServer::start(&format!("127.0.0.2:{}", public.port()));
    public.route("/page", Route::Page("PUBLIC PAGE".into()));
    public.route("/again", Route::Redirect(302, "/page".into()));
    inner.route("/page", Route::Page("INTERNAL".into()));
    inner.route("/again", Route::Page("INTERNAL".into()));
    let (resolver, reg) = rebinding_registry(&public);
    let url = format!("http://rebind.test:{}/page", public.port());
    let out = reg.dispatch(&fetch_call(&url)).await.unwrap();
    let ToolOutput::WebPage { title, .. } = out else {
        panic!("{out:?}")
    };
    // The connection went to the address the guard checked; the name was looked
    // up exactly once (the HTTP client never resolved it again). A client that
    // resolved `rebind.test` itself would have failed: no DNS knows that name.
    assert_eq!(title.as_deref(), Some("PUBLIC PAGE"));
    assert_eq!(resolver.calls.load(Ordering::SeqCst), 1);
    assert_eq!(public.hits(), vec!["/page".to_string()]);

    // A redirect back to the same name is looked up again for the hop, and the
    // new (rebinding) answer is refused before any connection.
    let url = format!("http://rebind.test:{}/again", public.port());
    let (resolver, reg) = rebinding_registry(&public);
    let err = reg.dispatch(&fetch_call(&url)).await.unwrap_err();
    assert!(
        err.render()
            .contains("rebind.test resolves to 127.0.0.2, a loopback address"),
        "{}",
        err.render()
    );
    assert_eq!(resolver.calls.load(Ordering::SeqCst), 2);
    assert!(inner.hits().is_empty(), "{:?}", inner.hits());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_private_lets_loopback_through() {
    let a = RouteServer::start("127.0.0.1:0");
    let b = RouteServer::start("127.0.0.1:0");
    a.route("/", Route::Page("LOOPBACK OK".into()));
    a.route("/to-b", Route::Redirect(302, b.url("/b")));
    b.route("/b", Route::Page("OTHER PORT".into()));
    let reg = registry(NetPolicy::with_allow_private(true));
    for url in [
        a.url("/"),
        format!("http://localhost:{}/", a.port()),
        format!("http://2130706433:{}/", a.port()),
    ] {
        let out = reg.dispatch(&fetch_call(&url)).await.unwrap();
        let ToolOutput::WebPage { title, .. } = out else {
            panic!("{out:?}")
        };
        assert_eq!(title.as_deref(), Some("LOOPBACK OK"), "{url}");
    }
    let out = reg.dispatch(&fetch_call(&a.url("/to-b"))).await.unwrap();
    let ToolOutput::WebPage {
        title, final_url, ..
    } = out
    else {
        panic!("{out:?}")
    };
    assert_eq!(title.as_deref(), Some("OTHER PORT"));
    assert_eq!(final_url, b.url("/b"));
    assert_eq!(a.hits().len(), 4);
    assert_eq!(b.hits(), vec!["/b".to_string()]);
}

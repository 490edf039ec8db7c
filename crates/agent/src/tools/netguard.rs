//! The network guard of `web_fetch` (SSRF protection): decides which addresses a
//! model-chosen URL may reach, resolves host names itself, and pins the HTTP
//! connection to the addresses it checked.
//!
//! - [`classify`] (pure) sorts an IP address into the classes that are not the
//!   public internet: loopback, unspecified, private, unique-local, site-local,
//!   link-local, shared (CGNAT), multicast, broadcast, documentation,
//!   benchmarking and reserved ranges, for IPv4 and IPv6 — including IPv4
//!   addresses embedded in IPv6 (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
//!   `::a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4
//!   `2002::/16` and Teredo `2001::/32`), which are judged by the IPv4 address
//!   they carry. IPv6 outside global unicast (`2000::/3`) is refused as reserved.
//! - [`check_target`] resolves a URL's host (off the async runtime) and checks
//!   every address it resolves to, under a [`NetPolicy`]; one refused address
//!   refuses the host. The check is on the resolved address, so every spelling of
//!   an address (`2130706433`, `0x7f.0.0.1`, `0177.0.0.1`, `127.1`, `localhost`,
//!   `[::ffff:7f00:1]`, …) is caught.
//! - [`Pins`] is the HTTP client's only DNS resolver: it answers only names that
//!   [`check_target`] checked, with exactly the addresses it checked, so a DNS
//!   answer that changes between the check and the connection (rebinding) is
//!   never used. [`guarded_client`] builds a client on it with redirects off
//!   (the caller follows them and checks every hop) and no proxy (a proxy would
//!   resolve the name itself, past the check).
//!
//! Invariant: with `allow_private` off, no connection is opened to an address
//! [`classify`] refuses, unless a test listed that exact socket address in
//! [`NetPolicy::assume_public`].

use claw_base::http::{HttpOptions, Redirects};
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Why an address is not on the public internet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddrClass {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 0.0.0.0/8 ("this network"; 0.0.0.0 reaches the local host), ::.
    Unspecified,
    /// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16.
    Private,
    /// fc00::/7.
    UniqueLocal,
    /// fec0::/10 (deprecated, still routed inside sites).
    SiteLocal,
    /// 169.254.0.0/16 (cloud metadata lives at 169.254.169.254), fe80::/10.
    LinkLocal,
    /// 100.64.0.0/10, carrier-grade NAT.
    SharedCgnat,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18.0.0/15, 2001:2::/48.
    Benchmarking,
    /// Everything else that is not globally routed: 240.0.0.0/4, 192.0.0.0/24,
    /// 192.88.99.0/24, 64:ff9b:1::/48, 100::/64, ORCHID, deprecated
    /// IPv4-compatible/translated IPv6, and IPv6 outside 2000::/3.
    Reserved,
}

impl AddrClass {
    /// "a loopback address", for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            AddrClass::Loopback => "a loopback address",
            AddrClass::Unspecified => "an unspecified (this-host) address",
            AddrClass::Private => "a private-network address",
            AddrClass::UniqueLocal => "a unique-local (private) IPv6 address",
            AddrClass::SiteLocal => "a site-local (private) IPv6 address",
            AddrClass::LinkLocal => "a link-local address",
            AddrClass::SharedCgnat => "a carrier-grade NAT (shared) address",
            AddrClass::Multicast => "a multicast address",
            AddrClass::Broadcast => "the broadcast address",
            AddrClass::Documentation => "a documentation-only address",
            AddrClass::Benchmarking => "a benchmarking-only address",
            AddrClass::Reserved => "a reserved address",
        }
    }

    /// A short label ("loopback", "link-local", …) for tables and logs.
    pub fn label(self) -> &'static str {
        match self {
            AddrClass::Loopback => "loopback",
            AddrClass::Unspecified => "unspecified",
            AddrClass::Private => "private",
            AddrClass::UniqueLocal => "unique-local",
            AddrClass::SiteLocal => "site-local",
            AddrClass::LinkLocal => "link-local",
            AddrClass::SharedCgnat => "cgnat",
            AddrClass::Multicast => "multicast",
            AddrClass::Broadcast => "broadcast",
            AddrClass::Documentation => "documentation",
            AddrClass::Benchmarking => "benchmarking",
            AddrClass::Reserved => "reserved",
        }
    }
}

/// How an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Embedding {
    /// `::ffff:a.b.c.d` — the socket really talks IPv4 to a.b.c.d.
    Mapped,
    /// `::a.b.c.d` (deprecated).
    Compatible,
    /// `::ffff:0:a.b.c.d` (SIIT).
    Translated,
    /// `64:ff9b::a.b.c.d`, the well-known NAT64 prefix.
    Nat64,
    /// `2002:AABB:CCDD::/48`, 6to4.
    SixToFour,
    /// `2001:0::/32`, Teredo (the client address, bit-inverted).
    Teredo,
}

impl Embedding {
    fn describe(self) -> &'static str {
        match self {
            Embedding::Mapped => "IPv4-mapped",
            Embedding::Compatible => "IPv4-compatible",
            Embedding::Translated => "IPv4-translated",
            Embedding::Nat64 => "NAT64",
            Embedding::SixToFour => "6to4",
            Embedding::Teredo => "Teredo",
        }
    }
}

/// A refused address: its class, and the IPv4 address it carries when the class
/// comes from one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub addr: IpAddr,
    pub class: AddrClass,
    pub via: Option<(Embedding, Ipv4Addr)>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.class.describe())?;
        if let Some((kind, v4)) = self.via {
            write!(f, " ({} {v4})", kind.describe())?;
        }
        Ok(())
    }
}

/// The class of a non-public IPv4 address; `None` for a public one. Pure.
pub fn classify_v4(ip: Ipv4Addr) -> Option<AddrClass> {
    let [a, b, c, _] = ip.octets();
    let class = match (a, b, c) {
        (0, _, _) => AddrClass::Unspecified,
        (127, _, _) => AddrClass::Loopback,
        (10, _, _) => AddrClass::Private,
        (172, 16..=31, _) => AddrClass::Private,
        (192, 168, _) => AddrClass::Private,
        (100, 64..=127, _) => AddrClass::SharedCgnat,
        (169, 254, _) => AddrClass::LinkLocal,
        (192, 0, 0) => AddrClass::Reserved,
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => AddrClass::Documentation,
        (192, 88, 99) => AddrClass::Reserved,
        (198, 18..=19, _) => AddrClass::Benchmarking,
        (224..=239, _, _) => AddrClass::Multicast,
        _ if ip == Ipv4Addr::BROADCAST => AddrClass::Broadcast,
        (240..=255, _, _) => AddrClass::Reserved,
        _ => return None,
    };
    Some(class)
}

/// The IPv4 address an IPv6 address carries, and how. Pure. `::` and `::1` carry none.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<(Embedding, Ipv4Addr)> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some((Embedding::Mapped, v4(hi, lo))),
        [0, 0, 0, 0, 0, 0, 0, 0] | [0, 0, 0, 0, 0, 0, 0, 1] => None,
        [0, 0, 0, 0, 0, 0, hi, lo] => Some((Embedding::Compatible, v4(hi, lo))),
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => Some((Embedding::Translated, v4(hi, lo))),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some((Embedding::Nat64, v4(hi, lo))),
        [0x2002, hi, lo, ..] => Some((Embedding::SixToFour, v4(hi, lo))),
        [0x2001, 0, .., hi, lo] => Some((Embedding::Teredo, v4(!hi, !lo))),
        _ => None,
    }
}

fn in_v6_prefix(ip: Ipv6Addr, prefix: Ipv6Addr, len: u32) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    (u128::from(ip) & mask) == (u128::from(prefix) & mask)
}

/// The class of a non-public IPv6 address; `None` for a public one. Pure.
fn classify_v6(ip: Ipv6Addr) -> Option<(AddrClass, Option<(Embedding, Ipv4Addr)>)> {
    if ip.is_unspecified() {
        return Some((AddrClass::Unspecified, None));
    }
    if ip.is_loopback() {
        return Some((AddrClass::Loopback, None));
    }
    if let Some((kind, v4)) = embedded_v4(ip) {
        if let Some(class) = classify_v4(v4) {
            return Some((class, Some((kind, v4))));
        }
        return match kind {
            // Deprecated forms with no use from an end host.
            Embedding::Compatible | Embedding::Translated => {
                Some((AddrClass::Reserved, Some((kind, v4))))
            }
            Embedding::Mapped | Embedding::Nat64 | Embedding::SixToFour | Embedding::Teredo => None,
        };
    }
    let p = |s: &str| s.parse::<Ipv6Addr>().unwrap_or(Ipv6Addr::UNSPECIFIED);
    let table: [(&str, u32, AddrClass); 11] = [
        ("fe80::", 10, AddrClass::LinkLocal),
        ("fec0::", 10, AddrClass::SiteLocal),
        ("fc00::", 7, AddrClass::UniqueLocal),
        ("ff00::", 8, AddrClass::Multicast),
        ("2001:db8::", 32, AddrClass::Documentation),
        ("3fff::", 20, AddrClass::Documentation),
        ("2001:2::", 48, AddrClass::Benchmarking),
        ("64:ff9b:1::", 48, AddrClass::Reserved),
        ("100::", 64, AddrClass::Reserved),
        ("2001:10::", 28, AddrClass::Reserved),
        ("2001:20::", 28, AddrClass::Reserved),
    ];
    for (prefix, len, class) in table {
        if in_v6_prefix(ip, p(prefix), len) {
            return Some((class, None));
        }
    }
    if !in_v6_prefix(ip, p("2000::"), 3) {
        return Some((AddrClass::Reserved, None));
    }
    None
}

/// Why `ip` must not be fetched from; `None` when it is a public address. Pure.
pub fn classify(ip: IpAddr) -> Option<Refusal> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4).map(|class| Refusal {
            addr: ip,
            class,
            via: None,
        }),
        IpAddr::V6(v6) => classify_v6(v6).map(|(class, via)| Refusal {
            addr: ip,
            class,
            via,
        }),
    }
}

/// Looks a host name up. The guard calls it on a blocking thread.
pub trait HostResolver: Send + Sync {
    /// Every address of `host`, with `port`.
    fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The system resolver (`getaddrinfo`: /etc/hosts, then DNS).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl HostResolver for SystemResolver {
    fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok((host, port).to_socket_addrs()?.collect())
    }
}

/// What `web_fetch` may connect to.
#[derive(Clone)]
pub struct NetPolicy {
    /// `web.allow_private: true`: every address is allowed (the guard still
    /// resolves and pins, and still follows redirects itself).
    pub allow_private: bool,
    /// Test hook: these exact socket addresses are judged public whatever their
    /// class, so a loopback test server can stand in for an internet host while
    /// every other address keeps the real rules. Empty in production.
    pub assume_public: Vec<SocketAddr>,
    /// Host name lookups (the system resolver unless a test replaces it).
    pub resolver: Arc<dyn HostResolver>,
}

impl Default for NetPolicy {
    fn default() -> Self {
        NetPolicy {
            allow_private: false,
            assume_public: Vec::new(),
            resolver: Arc::new(SystemResolver),
        }
    }
}

impl fmt::Debug for NetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetPolicy")
            .field("allow_private", &self.allow_private)
            .field("assume_public", &self.assume_public)
            .finish_non_exhaustive()
    }
}

impl NetPolicy {
    /// The default policy with `allow_private` set as given.
    pub fn with_allow_private(allow_private: bool) -> NetPolicy {
        NetPolicy {
            allow_private,
            ..NetPolicy::default()
        }
    }

    /// `Err` with the reason when this policy refuses `addr`. Pure.
    pub fn judge(&self, addr: SocketAddr) -> Result<(), Refusal> {
        if self.allow_private || self.assume_public.contains(&addr) {
            return Ok(());
        }
        match classify(addr.ip()) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    }
}

/// Why the guard stopped a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GuardError {
    #[error("{}; set web.allow_private to allow", refused_message(.host, .refusal))]
    Refused { host: String, refusal: Refusal },
    #[error("cannot resolve {host}: {message}")]
    Resolve { host: String, message: String },
    #[error("{host} resolves to no address")]
    NoAddress { host: String },
    #[error("the URL has no host")]
    NoHost,
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

fn refused_message(host: &str, refusal: &Refusal) -> String {
    let addr = refusal.addr.to_string();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().ok() == Some(refusal.addr) {
        format!("{addr} is {refusal}")
    } else {
        format!("{host} resolves to {addr}, {refusal}")
    }
}

/// A request target that passed the guard: the host as the URL names it and
/// every address it resolved to (all allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The URL's host (`example.com`, `127.0.0.1`, `[::1]`).
    pub host: String,
    /// True when the URL names an IP address (nothing was resolved).
    pub literal: bool,
    pub addrs: Vec<SocketAddr>,
}

/// Resolves `url`'s host (an IP literal is taken as it is) and checks every
/// address under `policy`. The lookup runs on a blocking thread.
pub async fn check_target(url: &Url, policy: &NetPolicy) -> Result<Target, GuardError> {
    let host_str = url.host_str().ok_or(GuardError::NoHost)?.to_string();
    let port = url.port_or_known_default().unwrap_or(80);
    // The URL parser has already turned every IPv4 spelling (`2130706433`,
    // `0x7f.0.0.1`, `127.1`, …) into dotted form and bracketed IPv6; a host that
    // is not an address literal is a domain name.
    let bare = host_str.trim_start_matches('[').trim_end_matches(']');
    let (literal, addrs) = match bare.parse::<IpAddr>() {
        Ok(ip) => (true, vec![SocketAddr::new(ip, port)]),
        Err(_) => {
            let name = bare.to_string();
            let resolver = policy.resolver.clone();
            let looked = tokio::task::spawn_blocking(move || resolver.lookup(&name, port))
                .await
                .map_err(|e| GuardError::Resolve {
                    host: host_str.clone(),
                    message: format!("the lookup task failed: {e}"),
                })?;
            let mut addrs = looked.map_err(|e| GuardError::Resolve {
                host: host_str.clone(),
                message: e.to_string(),
            })?;
            addrs.sort();
            addrs.dedup();
            (false, addrs)
        }
    };
    if addrs.is_empty() {
        return Err(GuardError::NoAddress { host: host_str });
    }
    for addr in &addrs {
        policy.judge(*addr).map_err(|refusal| GuardError::Refused {
            host: host_str.clone(),
            refusal,
        })?;
    }
    Ok(Target {
        host: host_str,
        literal,
        addrs,
    })
}

/// The DNS resolver of a guarded client: it answers only names pinned by
/// [`Pins::pin`], with exactly the pinned addresses, and refuses every other name.
#[derive(Debug, Clone, Default)]
pub struct Pins {
    map: Arc<Mutex<HashMap<String, Vec<SocketAddr>>>>,
}

impl Pins {
    /// Pins a checked target's host name to its checked addresses.
    pub fn pin(&self, target: &Target) {
        if target.literal {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(target.host.to_ascii_lowercase(), target.addrs.clone());
    }

    /// The addresses pinned for `host`, if any.
    pub fn get(&self, host: &str) -> Option<Vec<SocketAddr>> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&host.to_ascii_lowercase()).cloned()
    }
}

impl Resolve for Pins {
    fn resolve(&self, name: Name) -> Resolving {
        let found = self.get(name.as_str());
        let host = name.as_str().to_string();
        Box::pin(async move {
            match found {
                Some(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                None => Err(format!("{host} was not checked by the network guard").into()),
            }
        })
    }
}

/// An HTTP client whose only resolver is `pins`, with automatic redirects and
/// proxies off.
pub fn guarded_client(timeout: Duration, pins: Pins) -> Result<reqwest::Client, GuardError> {
    claw_base::http::builder(&HttpOptions {
        connect_timeout: timeout,
        timeout: Some(timeout),
        redirects: Redirects::None,
        system_proxy: false,
    })
    .dns_resolver(Arc::new(pins))
    .build()
    .map_err(|e| GuardError::Client(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Option<AddrClass> {
        classify(s.parse().unwrap()).map(|r| r.class)
    }

    #[test]
    fn ipv4_classes() {
        let table: &[(&str, Option<AddrClass>)] = &[
            ("127.0.0.1", Some(AddrClass::Loopback)),
            ("127.255.255.254", Some(AddrClass::Loopback)),
            ("0.0.0.0", Some(AddrClass::Unspecified)),
            ("0.1.2.3", Some(AddrClass::Unspecified)),
            ("10.0.0.1", Some(AddrClass::Private)),
            ("172.16.0.1", Some(AddrClass::Private)),
            ("172.31.255.255", Some(AddrClass::Private)),
            ("192.168.1.1", Some(AddrClass::Private)),
            ("100.64.0.1", Some(AddrClass::SharedCgnat)),
            ("100.127.255.255", Some(AddrClass::SharedCgnat)),
            ("169.254.169.254", Some(AddrClass::LinkLocal)),
            ("224.0.0.1", Some(AddrClass::Multicast)),
            ("239.255.255.250", Some(AddrClass::Multicast)),
            ("255.255.255.255", Some(AddrClass::Broadcast)),
            ("240.0.0.1", Some(AddrClass::Reserved)),
            ("255.255.255.254", Some(AddrClass::Reserved)),
            ("192.0.0.8", Some(AddrClass::Reserved)),
            ("192.88.99.1", Some(AddrClass::Reserved)),
            ("192.0.2.1", Some(AddrClass::Documentation)),
            ("198.51.100.7", Some(AddrClass::Documentation)),
            ("203.0.113.9", Some(AddrClass::Documentation)),
            ("198.18.0.1", Some(AddrClass::Benchmarking)),
            ("198.19.255.255", Some(AddrClass::Benchmarking)),
            // Public neighbours of the ranges above.
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("172.15.255.255", None),
            ("172.32.0.0", None),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
            ("169.253.255.255", None),
            ("192.167.255.255", None),
            ("198.17.255.255", None),
            ("198.20.0.0", None),
            ("223.255.255.255", None),
            ("11.0.0.1", None),
        ];
        for (addr, want) in table {
            assert_eq!(v4(addr), *want, "{addr}");
        }
    }

    #[test]
    fn ipv6_classes_and_embedded_ipv4() {
        use AddrClass::*;
        let table: &[(&str, Option<AddrClass>)] = &[
            ("::1", Some(Loopback)),
            ("::", Some(Unspecified)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("fec0::1", Some(SiteLocal)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("ff02::1", Some(Multicast)),
            ("2001:db8::1", Some(Documentation)),
            ("3fff::1", Some(Documentation)),
            ("2001:2::1", Some(Benchmarking)),
            ("100::1", Some(Reserved)),
            ("64:ff9b:1::a00:1", Some(Reserved)),
            ("2001:10::1", Some(Reserved)),
            ("4000::1", Some(Reserved)),
            ("e000::1", Some(Reserved)),
            // Embedded IPv4: judged by the IPv4 address.
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:7f00:1", Some(Loopback)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:0.0.0.0", Some(Unspecified)),
            ("::127.0.0.1", Some(Loopback)),
            ("::169.254.169.254", Some(LinkLocal)),
            ("::8.8.8.8", Some(Reserved)),
            ("::ffff:0:127.0.0.1", Some(Loopback)),
            ("::ffff:0:8.8.8.8", Some(Reserved)),
            ("64:ff9b::127.0.0.1", Some(Loopback)),
            ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
            ("2002:7f00:1::1", Some(Loopback)),
            ("2002:c0a8:101::", Some(Private)),
            // Teredo: client 127.0.0.1 is stored inverted (80ff:fffe).
            ("2001:0:4136:e378:8000:63bf:80ff:fffe", Some(Loopback)),
            // Public.
            ("2606:4700:4700::1111", None),
            ("2a00:1450:4001::200e", None),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::808:808", None),
            ("2002:808:808::1", None),
            ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", None),
        ];
        for (addr, want) in table {
            let ip: IpAddr = addr.parse().unwrap();
            assert_eq!(classify(ip).map(|r| r.class), *want, "{addr}");
        }
        let r = classify("::ffff:127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(
            r.via,
            Some((Embedding::Mapped, Ipv4Addr::new(127, 0, 0, 1)))
        );
        assert_eq!(r.to_string(), "a loopback address (IPv4-mapped 127.0.0.1)");
    }

    #[test]
    fn policy_allow_private_and_assume_public() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let other: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        assert!(NetPolicy::default().judge(lo).is_err());
        assert!(NetPolicy::with_allow_private(true).judge(lo).is_ok());
        let test = NetPolicy {
            assume_public: vec![lo],
            ..NetPolicy::default()
        };
        assert!(test.judge(lo).is_ok());
        assert!(test.judge(other).is_err());
        assert!(test.judge("[::1]:8080".parse().unwrap()).is_err());
    }

    /// A resolver with fixed answers (no DNS).
    struct Fixed(Vec<IpAddr>);

    impl HostResolver for Fixed {
        fn lookup(&self, _host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
            Ok(self.0.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
        }
    }

    fn policy(answers: &[&str]) -> NetPolicy {
        NetPolicy {
            resolver: Arc::new(Fixed(answers.iter().map(|a| a.parse().unwrap()).collect())),
            ..NetPolicy::default()
        }
    }

    #[tokio::test]
    async fn one_private_answer_refuses_the_host() {
        let url = Url::parse("https://mixed.test/x").unwrap();
        let err = check_target(&url, &policy(&["93.184.216.34", "10.0.0.5"]))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "mixed.test resolves to 10.0.0.5, a private-network address; set web.allow_private to allow"
        );
        let ok = check_target(&url, &policy(&["93.184.216.34"]))
            .await
            .unwrap();
        assert_eq!(ok.addrs, vec!["93.184.216.34:443".parse().unwrap()]);
        assert!(!ok.literal);
        let err = check_target(&url, &policy(&[])).await.unwrap_err();
        assert!(matches!(err, GuardError::NoAddress { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn literal_message_names_the_address() {
        let url = Url::parse("http://0x7f.0.0.1:9/").unwrap();
        let err = check_target(&url, &NetPolicy::default()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "127.0.0.1 is a loopback address; set web.allow_private to allow"
        );
        let url = Url::parse("http://[::ffff:7f00:1]/").unwrap();
        let err = check_target(&url, &NetPolicy::default()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "::ffff:127.0.0.1 is a loopback address (IPv4-mapped 127.0.0.1); set web.allow_private to allow"
        );
    }

    #[tokio::test]
    async fn pins_answer_only_checked_names() {
        let pins = Pins::default();
        let target = Target {
            host: "Example.test".into(),
            literal: false,
            addrs: vec!["93.184.216.34:80".parse().unwrap()],
        };
        pins.pin(&target);
        let got: Vec<SocketAddr> = pins
            .resolve("example.test".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert_eq!(got, target.addrs);
        assert!(pins.resolve("other.test".parse().unwrap()).await.is_err());
    }
}

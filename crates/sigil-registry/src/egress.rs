//! What the registry client may contact: the defence against requests an
//! attacker chooses (SSRF). Whoever can create a pod can name any host as
//! an image's registry, so two gates stand before every connection:
//!
//! - a [`RegistryScope`] decides which registry hosts a session may start
//!   requests at (the embedding program derives it from its policies; no
//!   scope means any host);
//! - an [`AddressPolicy`] decides which IP addresses any connection may
//!   reach — registries, token realms and redirect targets alike. Names are
//!   resolved by sigil's own resolver ([`GuardedResolver`]), every address
//!   of the answer is checked, and the connection goes to exactly the
//!   addresses checked, so a name cannot be re-pointed (DNS rebinding)
//!   between the check and the connect. Literal addresses in URLs never
//!   reach a resolver; the client checks them itself before each request
//!   and each redirect.
//!
//! Through an HTTP proxy (`HTTPS_PROXY`), names are resolved by the proxy:
//! sigil then checks literal addresses only, and the proxy must enforce the
//! rest.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use ipnet::IpNet;

/// Why an address may not be contacted, as messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// 127.0.0.0/8, ::1: the webhook's own pod or host.
    Loopback,
    /// 169.254.0.0/16, fe80::/10: where cloud metadata services answer.
    LinkLocal,
    /// Cloud instance metadata and credential endpoints outside link-local
    /// (AWS fd00:ec2::254 and EKS Pod Identity's fd00:ec2::23, Alibaba Cloud
    /// 100.100.100.200), and the names of metadata servers
    /// (`metadata.google.internal`).
    Metadata,
    /// 0.0.0.0/8, `::`: "this host" on Linux.
    Unspecified,
    /// Multicast and the IPv4 broadcast address: never a registry.
    Multicast,
    /// A range the operator denied (`--deny-registry-address`).
    Denied,
}

impl AddressClass {
    /// The words messages use.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Loopback => "a loopback address",
            Self::LinkLocal => "a link-local address (where cloud metadata services answer)",
            Self::Metadata => "a cloud metadata service address",
            Self::Unspecified => "an unspecified (this-host) address",
            Self::Multicast => "a multicast or broadcast address",
            Self::Denied => "in a range the operator denied",
        }
    }
}

/// Which IP addresses connections may reach: a list of denied ranges, each
/// with its class, and a list of allowed ranges carved out of them. The most
/// specific range containing an address decides; on a tie an operator's
/// allow beats a built-in range and loses to an operator's deny.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPolicy {
    deny: Vec<(IpNet, AddressClass)>,
    allow: Vec<IpNet>,
}

/// The ranges no registry is ever at (unless allowed): link-local (cloud
/// metadata at 169.254.169.254 and fe80::), the metadata addresses outside
/// it, unspecified, multicast and broadcast.
const STANDARD: &[(&str, AddressClass)] = &[
    ("169.254.0.0/16", AddressClass::LinkLocal),
    ("fe80::/10", AddressClass::LinkLocal),
    ("fd00:ec2::254/128", AddressClass::Metadata),
    ("fd00:ec2::23/128", AddressClass::Metadata),
    ("100.100.100.200/32", AddressClass::Metadata),
    ("0.0.0.0/8", AddressClass::Unspecified),
    ("::/128", AddressClass::Unspecified),
    ("224.0.0.0/4", AddressClass::Multicast),
    ("255.255.255.255/32", AddressClass::Multicast),
    ("ff00::/8", AddressClass::Multicast),
];

const LOOPBACK: &[(&str, AddressClass)] = &[
    ("127.0.0.0/8", AddressClass::Loopback),
    ("::1/128", AddressClass::Loopback),
];

/// Names of cloud metadata servers and the address each stands for, judged
/// as that address whatever they resolve to here: no registry is at them.
const METADATA_NAMES: &[(&str, IpAddr)] = &[(
    "metadata.google.internal",
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
)];

/// The address `host` (a name, any case, a trailing dot allowed) stands
/// for when it names a cloud metadata server.
pub fn metadata_name(host: &str) -> Option<IpAddr> {
    let name = host.strip_suffix('.').unwrap_or(host);
    METADATA_NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, a)| *a)
}

fn nets(list: &[(&str, AddressClass)]) -> Vec<(IpNet, AddressClass)> {
    list.iter()
        .filter_map(|(s, class)| s.parse().ok().map(|n| (n, *class)))
        .collect()
}

/// The NAT64 well-known prefix: a gateway turns 64:ff9b::a.b.c.d into a
/// connection to a.b.c.d, so the embedded address is checked too.
const NAT64: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0);

/// The IPv4 address an IPv6 address stands for, if any (IPv4-mapped, or
/// NAT64 well-known prefix).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    let prefix = NAT64.segments();
    if s.get(..6) == prefix.get(..6) {
        let o = v6.octets();
        return Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    None
}

impl Default for AddressPolicy {
    /// [`AddressPolicy::standard`].
    fn default() -> Self {
        Self::standard()
    }
}

impl AddressPolicy {
    /// Denies link-local, cloud metadata, unspecified, multicast and
    /// broadcast addresses; loopback and private ranges are allowed (a
    /// developer's local registry, a registry inside the cluster).
    pub fn standard() -> Self {
        Self {
            deny: nets(STANDARD),
            allow: Vec::new(),
        }
    }

    /// [`standard`](Self::standard) plus loopback: what an admission
    /// webhook in a cluster should use, since loopback there is its own
    /// pod (its ports, its sidecars).
    pub fn without_loopback() -> Self {
        let mut p = Self::standard();
        p.deny.extend(nets(LOOPBACK));
        p
    }

    /// Nothing denied (tests of other concerns, tools run by hand).
    pub fn unrestricted() -> Self {
        Self {
            deny: Vec::new(),
            allow: Vec::new(),
        }
    }

    /// Also allows `net`, even where a denied range covers it, unless a
    /// more specific denied range does.
    pub fn allow(mut self, net: IpNet) -> Self {
        self.allow.push(net.trunc());
        self
    }

    /// Also denies `net`.
    pub fn deny(mut self, net: IpNet) -> Self {
        self.deny.push((net.trunc(), AddressClass::Denied));
        self
    }

    fn decide(&self, ip: IpAddr) -> Result<(), AddressClass> {
        let denied = self
            .deny
            .iter()
            .filter(|(n, _)| n.contains(&ip))
            .max_by_key(|(n, _)| n.prefix_len());
        let Some((net, class)) = denied else {
            return Ok(());
        };
        let allowed = self
            .allow
            .iter()
            .filter(|n| n.contains(&ip))
            .map(IpNet::prefix_len)
            .max();
        // An operator's own deny wins a tie with an allow; a built-in range
        // gives way to an allow of the same size (`127.0.0.0/8`).
        let wins = |len: u8| match class {
            AddressClass::Denied => len > net.prefix_len(),
            _ => len >= net.prefix_len(),
        };
        match allowed {
            Some(len) if wins(len) => Ok(()),
            _ => Err(*class),
        }
    }

    /// Whether `ip` may be contacted; `Err` names its class. An IPv6
    /// address carrying an IPv4 one (mapped, NAT64) must pass as both.
    pub fn check(&self, ip: IpAddr) -> Result<(), AddressClass> {
        if let IpAddr::V6(v6) = ip
            && let Some(v4) = embedded_v4(v6)
        {
            self.decide(IpAddr::V4(v4))?;
        }
        self.decide(ip)
    }
}

/// Parses `--allow-registry-address` / `--deny-registry-address` values: a
/// CIDR (`127.0.0.0/8`, `fd00::/8`) or a single address.
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    if let Ok(net) = s.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    s.parse::<IpAddr>().map(IpNet::from).map_err(|_| {
        format!("`{s}` is neither an IP address nor a CIDR range (like 127.0.0.0/8 or fd00::/8)")
    })
}

/// A connection sigil refused to make. Carried as the source of transport
/// errors so the client can report it as such.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{host} is at {address}, {}", class.describe())]
pub struct AddressRefused {
    /// The host as the URL names it.
    pub host: String,
    /// The refused address.
    pub address: IpAddr,
    /// Why it is refused.
    pub class: AddressClass,
}

/// Looks names up. The default is the system resolver; tests plug in their
/// own answers without touching `/etc/hosts`.
pub trait Lookup: Send + Sync + fmt::Debug {
    /// The addresses of `host` (no port).
    fn lookup(&self, host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;
}

/// The system resolver (getaddrinfo on a blocking thread, as reqwest's own).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
        let host = host.to_string();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// The resolver the HTTP client connects through: looks the name up, refuses
/// the whole answer when any address is forbidden (a name that is partly a
/// metadata address is not a registry), and hands the connector exactly the
/// addresses it checked.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    lookup: Arc<dyn Lookup>,
    policy: Arc<AddressPolicy>,
}

/// Addresses one name may resolve to before the answer is cut: enough for
/// any real registry, and a bound on what a hostile DNS server can send.
const MAX_ADDRESSES: usize = 64;

impl GuardedResolver {
    /// A resolver looking names up with `lookup` and checking them against `policy`.
    pub fn new(lookup: Arc<dyn Lookup>, policy: Arc<AddressPolicy>) -> Self {
        Self { lookup, policy }
    }

    /// The checked addresses of `host`.
    pub async fn resolve_checked(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let check = |address: IpAddr| {
            self.policy.check(address).map_err(|class| {
                ResolveError::Refused(AddressRefused {
                    host: host.to_string(),
                    address,
                    class,
                })
            })
        };
        if let Some(address) = metadata_name(host) {
            check(address)?;
        }
        let addrs = self
            .lookup
            .lookup(host)
            .await
            .map_err(|e| ResolveError::Lookup(format!("cannot resolve {host}: {e}")))?;
        if addrs.is_empty() {
            return Err(ResolveError::Lookup(format!("{host} has no address")));
        }
        let addrs: Vec<IpAddr> = addrs.into_iter().take(MAX_ADDRESSES).collect();
        for &address in &addrs {
            check(address)?;
        }
        Ok(addrs)
    }
}

/// Why a name yielded no address to connect to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The lookup itself failed.
    #[error("{0}")]
    Lookup(String),
    /// An address of the answer is forbidden.
    #[error(transparent)]
    Refused(#[from] AddressRefused),
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = self.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = this.resolve_checked(&host).await?;
            // Port 0: reqwest puts the URL's port in.
            let out: reqwest::dns::Addrs =
                Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(out)
        })
    }
}

/// Which registry hosts a session may start requests at. Redirects and
/// token realms are not registries and are left to the [`AddressPolicy`].
pub trait RegistryScope: Send + Sync + fmt::Debug {
    /// `Ok` when requests to `host` (`host[:port]`, lower case,
    /// `index.docker.io` for Docker Hub) may be made; else a user-facing
    /// reason saying how to allow it.
    fn permits(&self, host: &str) -> Result<(), String>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn metadata_link_local_and_unspecified_addresses_are_refused_by_default() {
        let p = AddressPolicy::standard();
        for (addr, class) in [
            ("169.254.169.254", AddressClass::LinkLocal),
            ("169.254.0.1", AddressClass::LinkLocal),
            ("fe80::1", AddressClass::LinkLocal),
            ("fd00:ec2::254", AddressClass::Metadata),
            ("fd00:ec2::23", AddressClass::Metadata),
            ("100.100.100.200", AddressClass::Metadata),
            ("0.0.0.0", AddressClass::Unspecified),
            ("::", AddressClass::Unspecified),
            ("239.1.2.3", AddressClass::Multicast),
            ("255.255.255.255", AddressClass::Multicast),
        ] {
            assert_eq!(p.check(ip(addr)), Err(class), "{addr}");
        }
        for ok in [
            "127.0.0.1",
            "::1",
            "10.1.2.3",
            "192.168.1.1",
            "140.82.112.34",
            "2606:4700::1",
        ] {
            assert_eq!(p.check(ip(ok)), Ok(()), "{ok}");
        }
    }

    #[test]
    fn metadata_server_names_stand_for_their_address_and_look_alikes_do_not() {
        let gce = Some(ip("169.254.169.254"));
        assert_eq!(metadata_name("metadata.google.internal"), gce);
        assert_eq!(metadata_name("Metadata.Google.Internal."), gce);
        for other in [
            "metadata.google.internal.attacker.io",
            "xmetadata.google.internal",
            "metadata",
            "gcr.io",
        ] {
            assert_eq!(metadata_name(other), None, "{other}");
        }
    }

    #[test]
    fn ipv6_forms_of_a_forbidden_ipv4_address_are_refused_too() {
        let p = AddressPolicy::standard();
        for addr in [
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "::ffff:0.0.0.0",
        ] {
            assert!(p.check(ip(addr)).is_err(), "{addr}");
        }
        let p = AddressPolicy::without_loopback();
        assert_eq!(p.check(ip("::ffff:127.0.0.1")), Err(AddressClass::Loopback));
    }

    #[test]
    fn loopback_is_refused_only_when_asked_and_can_be_allowed_back() {
        let p = AddressPolicy::without_loopback();
        assert_eq!(p.check(ip("127.0.0.1")), Err(AddressClass::Loopback));
        assert_eq!(p.check(ip("::1")), Err(AddressClass::Loopback));
        let p = p.allow(parse_net("127.0.0.0/8").unwrap());
        assert_eq!(p.check(ip("127.0.0.1")), Ok(()));
        assert_eq!(
            p.check(ip("::1")),
            Err(AddressClass::Loopback),
            "allowing IPv4 loopback leaves IPv6 loopback denied"
        );
    }

    #[test]
    fn the_most_specific_range_decides_and_deny_wins_a_tie() {
        let p = AddressPolicy::without_loopback()
            .allow(parse_net("127.0.0.0/8").unwrap())
            .deny(parse_net("127.0.0.2").unwrap());
        assert_eq!(p.check(ip("127.0.0.1")), Ok(()));
        assert_eq!(p.check(ip("127.0.0.2")), Err(AddressClass::Denied));
        let p = AddressPolicy::standard()
            .allow(parse_net("169.254.169.254/32").unwrap())
            .deny(parse_net("169.254.169.254/32").unwrap());
        assert!(p.check(ip("169.254.169.254")).is_err());
        let p = AddressPolicy::standard().allow(parse_net("169.254.169.254").unwrap());
        assert_eq!(p.check(ip("169.254.169.254")), Ok(()));
        assert!(p.check(ip("169.254.169.253")).is_err());
    }

    #[test]
    fn operator_ranges_parse_as_cidrs_or_single_addresses() {
        assert_eq!(parse_net("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("fd00::1").unwrap().to_string(), "fd00::1/128");
        let err = parse_net("metadata.internal").unwrap_err();
        assert!(err.contains("CIDR"), "{err}");
    }

    #[derive(Debug)]
    struct Fixed(Vec<IpAddr>);
    impl Lookup for Fixed {
        fn lookup(
            &self,
            _host: &str,
        ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
            let out = self.0.clone();
            Box::pin(async move { Ok(out) })
        }
    }

    #[tokio::test]
    async fn a_name_with_any_forbidden_address_is_refused_whole() {
        let policy = Arc::new(AddressPolicy::standard());
        let mixed = GuardedResolver::new(
            Arc::new(Fixed(vec![ip("140.82.112.34"), ip("169.254.169.254")])),
            policy.clone(),
        );
        let err = mixed.resolve_checked("registry.test").await.unwrap_err();
        assert_eq!(
            err,
            ResolveError::Refused(AddressRefused {
                host: "registry.test".into(),
                address: ip("169.254.169.254"),
                class: AddressClass::LinkLocal,
            })
        );
        assert!(
            err.to_string()
                .contains("registry.test is at 169.254.169.254"),
            "{err}"
        );
        let clean =
            GuardedResolver::new(Arc::new(Fixed(vec![ip("140.82.112.34")])), policy.clone());
        assert_eq!(
            clean.resolve_checked("r.test").await.unwrap(),
            vec![ip("140.82.112.34")]
        );
        let empty = GuardedResolver::new(Arc::new(Fixed(Vec::new())), policy);
        assert!(matches!(
            empty.resolve_checked("r.test").await,
            Err(ResolveError::Lookup(_))
        ));
    }
}

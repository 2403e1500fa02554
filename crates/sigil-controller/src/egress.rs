//! Where the controller's own fetches may go: KMS public keys and
//! `policy.remote` modules. The address policy is the registry client's
//! (`sigil_registry::egress`): never link-local, cloud metadata,
//! unspecified or multicast addresses, checked after resolution; for what a
//! namespace's ImagePolicy names, never loopback either (the controller's
//! own pod). `--allow-address` and `--deny-address` adjust both, as
//! `--allow-registry-address` and `--deny-registry-address` do for the
//! webhook (the chart passes the same `registryAccess` values).

use std::net::IpAddr;
use std::sync::Arc;

use sigil_registry::egress::{AddressPolicy, GuardedResolver, SystemLookup, parse_net};

use crate::config::Args;

/// Who wrote what the controller fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Author {
    /// A cluster admin: a ClusterImagePolicy, a KMS setting.
    Admin,
    /// A namespace's ImagePolicy.
    Tenant,
}

/// The address policy for fetches `author` asked for.
pub fn address_policy(args: &Args, author: Author) -> AddressPolicy {
    let mut policy = match author {
        Author::Admin => AddressPolicy::standard(),
        Author::Tenant => AddressPolicy::without_loopback(),
    };
    // The values were checked when the flags were parsed.
    for net in args.allow_address.iter().filter_map(|v| parse_net(v).ok()) {
        policy = policy.allow(net);
    }
    for net in args.deny_address.iter().filter_map(|v| parse_net(v).ok()) {
        policy = policy.deny(net);
    }
    policy
}

/// An address policy as sigil-kms's guard: literal addresses checked
/// before a request, names through the guarded resolver.
#[derive(Debug, Clone)]
pub struct Guard {
    policy: Arc<AddressPolicy>,
    resolver: GuardedResolver,
}

impl Guard {
    /// A guard enforcing `policy`, resolving names with the system resolver.
    pub fn new(policy: AddressPolicy) -> Self {
        let policy = Arc::new(policy);
        Self {
            resolver: GuardedResolver::new(Arc::new(SystemLookup), policy.clone()),
            policy,
        }
    }

    /// The resolver that refuses names with a forbidden address.
    pub fn resolver(&self) -> Arc<GuardedResolver> {
        Arc::new(self.resolver.clone())
    }

    /// Why `ip` may not be contacted, if it may not.
    pub fn refuse_ip(&self, ip: IpAddr) -> Option<String> {
        self.policy.check(ip).err().map(|class| {
            format!(
                "{ip} is {}; sigil does not connect there (controller flag --allow-address \
                 allows a range)",
                class.describe()
            )
        })
    }
}

impl sigil_kms::AddressGuard for Guard {
    fn refuse(&self, ip: IpAddr) -> Option<String> {
        self.refuse_ip(ip)
    }

    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        reqwest::dns::Resolve::resolve(&self.resolver, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(flags: &[&str]) -> Args {
        <Args as clap::Parser>::try_parse_from(
            std::iter::once("sigil-controller").chain(flags.iter().copied()),
        )
        .unwrap()
    }

    #[test]
    fn tenants_never_reach_loopback_unless_allowed_and_no_one_reaches_metadata() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        let plain = args(&[]);
        assert!(
            address_policy(&plain, Author::Admin)
                .check(loopback)
                .is_ok()
        );
        assert!(
            address_policy(&plain, Author::Tenant)
                .check(loopback)
                .is_err()
        );
        for author in [Author::Admin, Author::Tenant] {
            assert!(address_policy(&plain, author).check(metadata).is_err());
        }
        let adjusted = args(&[
            "--allow-address",
            "127.0.0.0/8",
            "--deny-address",
            "10.96.0.0/12",
        ]);
        assert!(
            address_policy(&adjusted, Author::Tenant)
                .check(loopback)
                .is_ok()
        );
        let service: IpAddr = "10.96.0.1".parse().unwrap();
        assert!(
            address_policy(&adjusted, Author::Admin)
                .check(service)
                .is_err()
        );
        let err =
            <Args as clap::Parser>::try_parse_from(["sigil-controller", "--allow-address", "x"])
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("is neither an IP address nor a CIDR range"),
            "{err}"
        );
    }
}

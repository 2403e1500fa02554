//! Where KMS requests may go. A key reference names hosts (an Azure vault,
//! an AWS endpoint), and whoever wrote it is not necessarily whoever owns the
//! credentials the request carries: a request goes only to the provider's
//! documented endpoints, to a host the admin listed ([`HostRule`]), or to a
//! host the admin's own settings name (`VAULT_ADDR`, `AWS_ENDPOINT_URL_KMS`,
//! a credentials file's `token_uri`, …), and in every case only to addresses
//! the embedding program's [`AddressGuard`] allows (sigil's egress policy:
//! no link-local or cloud metadata address, checked after resolution).
//!
//! This crate does not know sigil's address policy (it sits below the
//! registry crate that owns it): the embedding program passes a guard in.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::Provider;

/// Who chose the host of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The admin, through this setting (an environment variable or a
    /// credentials Secret entry, or a file one of them names).
    Setting(&'static str),
    /// The key reference, or the provider's default endpoint: it must be
    /// documented for the provider or listed by the admin.
    Reference,
}

/// Checks the addresses KMS connections may reach: literal addresses in
/// URLs here, names through the resolver it hands the HTTP client.
pub trait AddressGuard: Send + Sync + fmt::Debug {
    /// Why `ip` may not be contacted, or `None` when it may.
    fn refuse(&self, ip: IpAddr) -> Option<String>;
    /// Resolves a name for a connection: must refuse a name with any
    /// address [`Self::refuse`] refuses, and give only the addresses it
    /// checked.
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving;
}

/// An [`AddressGuard`] as the HTTP client's resolver.
#[derive(Debug)]
pub(crate) struct GuardResolver(pub(crate) Arc<dyn AddressGuard>);

impl reqwest::dns::Resolve for GuardResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        self.0.resolve(name)
    }
}

/// An admin's allowed KMS host: `host`, `host:port`, or `*.suffix` (any
/// host under `suffix`, on any port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    /// Lower case, without the `*.` of a suffix rule.
    host: String,
    port: Option<u16>,
    suffix: bool,
}

/// The longest host rule accepted.
const MAX_RULE_LEN: usize = 253 + 6;

impl HostRule {
    /// Parses `--kms-allow-host` values.
    pub fn parse(rule: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{}` is not a KMS host: give host, host:port or *.domain (letters, digits, `-` \
                 and `.`), e.g. vault.vault.svc:8200 or *.vpce.amazonaws.com",
                rule.chars().take(MAX_RULE_LEN).collect::<String>()
            )
        };
        let trimmed = rule.trim();
        if trimmed.is_empty() || trimmed.len() > MAX_RULE_LEN {
            return Err(bad());
        }
        let (suffix, rest) = match trimmed.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !suffix => (h, Some(p.parse::<u16>().map_err(|_| bad())?)),
            Some(_) => return Err(bad()),
            None => (rest, None),
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        };
        if host.is_empty() || !host.split('.').all(label_ok) {
            return Err(bad());
        }
        Ok(Self {
            host: host.to_ascii_lowercase(),
            port,
            suffix,
        })
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        if self.suffix {
            host.strip_suffix(self.host.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
        } else {
            host == self.host && self.port.is_none_or(|p| p == port)
        }
    }
}

/// The hosts `provider` documents for its key API and its token services,
/// on https's port. Azure: Key Vault and Managed HSM in the public, US
/// Government and China clouds, and their Entra ID authorities; AWS: the
/// regional KMS and STS endpoints (FIPS and dual-stack ones included) of
/// the commercial and China partitions, and global STS; Google: Cloud KMS
/// and its token services. Vault and OpenBao have no public endpoint: their
/// address is the admin's setting.
fn documented(provider: Provider, host: &str, port: u16) -> bool {
    if port != 443 {
        return false;
    }
    // One DNS label: a vault or region name.
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    match provider {
        Provider::Vault => false,
        Provider::Azure => {
            const SUFFIXES: [&str; 6] = [
                ".vault.azure.net",
                ".vault.usgovcloudapi.net",
                ".vault.azure.cn",
                ".managedhsm.azure.net",
                ".managedhsm.usgovcloudapi.net",
                ".managedhsm.azure.cn",
            ];
            const AUTHORITIES: [&str; 3] = [
                "login.microsoftonline.com",
                "login.microsoftonline.us",
                "login.chinacloudapi.cn",
            ];
            AUTHORITIES.contains(&host)
                || SUFFIXES
                    .iter()
                    .any(|s| host.strip_suffix(s).is_some_and(label))
        }
        Provider::Aws => {
            if host == "sts.amazonaws.com" {
                return true;
            }
            ["amazonaws.com", "amazonaws.com.cn", "api.aws"]
                .iter()
                .filter_map(|domain| host.strip_suffix(domain)?.strip_suffix('.'))
                .any(|head| {
                    head.split_once('.').is_some_and(|(service, region)| {
                        matches!(service, "kms" | "kms-fips" | "sts" | "sts-fips") && label(region)
                    })
                })
        }
        Provider::Gcp => matches!(
            host,
            "cloudkms.googleapis.com"
                | "oauth2.googleapis.com"
                | "sts.googleapis.com"
                | "iamcredentials.googleapis.com"
                | "www.googleapis.com"
                | "accounts.google.com"
        ),
    }
}

/// What [`crate::Http`] checks before each request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Destinations {
    pub(crate) allowed: Vec<HostRule>,
    pub(crate) guard: Option<Arc<dyn AddressGuard>>,
}

impl Destinations {
    /// `Err` says why `url` may not be asked, for [`crate::KmsError::Forbidden`].
    pub(crate) fn check(
        &self,
        provider: Provider,
        url: &str,
        origin: Origin,
    ) -> Result<(), String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        let port = parsed.port_or_known_default().unwrap_or(0);
        let (host, literal) = match parsed.host() {
            Some(url::Host::Domain(d)) => (d.to_ascii_lowercase(), None),
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), Some(IpAddr::V4(ip))),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), Some(IpAddr::V6(ip))),
            None => return Err("the URL has no host".into()),
        };
        if origin == Origin::Reference
            && !documented(provider, &host, port)
            && !self.allowed.iter().any(|r| r.matches(&host, port))
        {
            return Err(format!(
                "{host}:{port} is not an endpoint {provider} documents, and the admin did not \
                 allow it (controller flag --kms-allow-host, chart value kms.allowHosts); sigil \
                 sends KMS credentials nowhere else"
            ));
        }
        if let (Some(ip), Some(guard)) = (literal, &self.guard)
            && let Some(why) = guard.refuse(ip)
        {
            return Err(why);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_endpoints_are_the_providers_own_on_https() {
        let yes = [
            (Provider::Azure, "myvault.vault.azure.net"),
            (Provider::Azure, "gov-vault.vault.usgovcloudapi.net"),
            (Provider::Azure, "cn-vault.vault.azure.cn"),
            (Provider::Azure, "hsm1.managedhsm.azure.net"),
            (Provider::Azure, "login.microsoftonline.com"),
            (Provider::Aws, "kms.us-east-1.amazonaws.com"),
            (Provider::Aws, "kms-fips.us-gov-west-1.amazonaws.com"),
            (Provider::Aws, "kms.cn-north-1.amazonaws.com.cn"),
            (Provider::Aws, "kms.eu-west-1.api.aws"),
            (Provider::Aws, "sts.eu-west-1.amazonaws.com"),
            (Provider::Aws, "sts.amazonaws.com"),
            (Provider::Gcp, "cloudkms.googleapis.com"),
            (Provider::Gcp, "oauth2.googleapis.com"),
        ];
        for (p, host) in yes {
            assert!(documented(p, host, 443), "{p} {host}");
            assert!(!documented(p, host, 8443), "{p} {host}:8443");
        }
        let no = [
            (Provider::Azure, "attacker.example"),
            (Provider::Azure, "vault.azure.net.attacker.example"),
            (Provider::Azure, "a.b.vault.azure.net"),
            (Provider::Azure, ".vault.azure.net"),
            (Provider::Aws, "kms.attacker.example"),
            (Provider::Aws, "s3.us-east-1.amazonaws.com"),
            (
                Provider::Aws,
                "kms.us-east-1.amazonaws.com.attacker.example",
            ),
            (Provider::Aws, "evil.kms.us-east-1.amazonaws.com"),
            (Provider::Gcp, "storage.googleapis.com"),
            (Provider::Vault, "vault.example"),
            (Provider::Azure, "myvault.vault.azure.net."),
        ];
        for (p, host) in no {
            assert!(!documented(p, host, 443), "{p} {host}");
        }
    }

    #[test]
    fn an_admins_rules_allow_their_host_port_or_domain_and_nothing_else() {
        let exact = HostRule::parse("Vault.Internal:8200").unwrap();
        assert!(exact.matches("vault.internal", 8200));
        assert!(!exact.matches("vault.internal", 443));
        let any_port = HostRule::parse("kms.internal").unwrap();
        assert!(any_port.matches("kms.internal", 9000));
        let domain = HostRule::parse("*.vpce.amazonaws.com").unwrap();
        assert!(domain.matches("vpce-1.kms.us-east-1.vpce.amazonaws.com", 443));
        assert!(!domain.matches("vpce.amazonaws.com", 443));
        assert!(!domain.matches("xvpce.amazonaws.com", 443));
        for bad in [
            "",
            "*",
            "*.x:80",
            "a b",
            "http://x",
            "x:port",
            "-x.example",
            "x/y",
        ] {
            let err = HostRule::parse(bad).unwrap_err();
            assert!(err.contains("is not a KMS host"), "{bad}: {err}");
        }
    }

    #[derive(Debug)]
    struct NoLoopback;

    impl AddressGuard for NoLoopback {
        fn refuse(&self, ip: IpAddr) -> Option<String> {
            ip.is_loopback()
                .then(|| format!("{ip} is a loopback address"))
        }
        fn resolve(&self, _name: reqwest::dns::Name) -> reqwest::dns::Resolving {
            Box::pin(async { Err("not connected in this test".into()) })
        }
    }

    #[test]
    fn a_reference_may_name_only_documented_or_allowed_hosts_and_settings_any_allowed_address() {
        let d = Destinations {
            allowed: vec![HostRule::parse("kms.corp.example").unwrap()],
            guard: Some(Arc::new(NoLoopback)),
        };
        let azure = Provider::Azure;
        assert!(
            d.check(
                azure,
                "https://v1.vault.azure.net/keys/k",
                Origin::Reference
            )
            .is_ok()
        );
        let err = d
            .check(azure, "https://attacker.example/keys/k", Origin::Reference)
            .unwrap_err();
        assert!(
            err.contains("attacker.example:443 is not an endpoint azurekms documents")
                && err.contains("--kms-allow-host"),
            "{err}"
        );
        assert!(
            d.check(
                Provider::Aws,
                "https://kms.corp.example:4566/",
                Origin::Reference
            )
            .is_ok()
        );
        // The admin's own setting needs no listing, but an address the guard
        // refuses stays refused.
        assert!(
            d.check(
                Provider::Vault,
                "http://vault.vault.svc:8200/v1/x",
                Origin::Setting("VAULT_ADDR")
            )
            .is_ok()
        );
        let err = d
            .check(
                Provider::Vault,
                "http://127.0.0.1:8200/v1/x",
                Origin::Setting("VAULT_ADDR"),
            )
            .unwrap_err();
        assert_eq!(err, "127.0.0.1 is a loopback address");
        let err = d
            .check(
                Provider::Vault,
                "http://[::1]:8200/v1/x",
                Origin::Setting("VAULT_ADDR"),
            )
            .unwrap_err();
        assert_eq!(err, "::1 is a loopback address");
    }
}

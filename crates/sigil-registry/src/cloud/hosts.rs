//! Which registry hosts belong to which cloud, by their documented name
//! forms, and the extra hosts an admin hands to a provider. Matching is
//! exact and label by label: a name that merely contains a cloud's domain
//! (`123456789012.dkr.ecr.us-east-1.amazonaws.com.attacker.io`) is not the
//! cloud's, since its credentials would go wherever that name points.

/// An ECR private registry, from its host name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcrRegistry {
    /// The 12-digit account (the registry ID).
    pub account: String,
    /// The region, e.g. `us-east-1`.
    pub region: String,
    /// The FIPS endpoint (`dkr.ecr-fips`, `dkr-ecr-fips`).
    pub fips: bool,
    /// The DNS suffix after the region: `amazonaws.com`, `amazonaws.com.cn`,
    /// `on.aws` (dual-stack), or an isolated partition's.
    pub domain: String,
}

/// The partitions' DNS suffixes ECR registries live under (after
/// `<account>.dkr.ecr.<region>.`).
const ECR_DOMAINS: &[&str] = &[
    "amazonaws.com",
    "amazonaws.com.cn",
    "c2s.ic.gov",
    "sc2s.sgov.gov",
    "cloud.adc-e.uk",
    "csp.hci.ic.gov",
];

/// ECR Public's one registry host.
pub const ECR_PUBLIC: &str = "public.ecr.aws";

/// `host` without a `:port`, lowercased; `None` when a port is present, as
/// the clouds' registries are all on 443 and a name with a port is someone
/// else's server.
fn bare(host: &str) -> Option<String> {
    let host = host.trim().to_ascii_lowercase();
    (!host.contains(':') && !host.is_empty()).then_some(host)
}

fn is_region(s: &str) -> bool {
    // us-east-1, cn-north-1, us-gov-west-1, eu-isoe-west-1, us-isob-east-1
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() >= 3
        && parts.len() <= 5
        && parts.iter().all(|p| !p.is_empty() && p.len() <= 16)
        && parts
            .last()
            .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
        && parts
            .iter()
            .rev()
            .skip(1)
            .all(|p| p.chars().all(|c| c.is_ascii_lowercase()))
}

/// The ECR private registry `host` names, in any of its forms:
/// `<account>.dkr.ecr[-fips].<region>.<partition domain>` and the
/// dual-stack `<account>.dkr-ecr[-fips].<region>.on.aws`.
pub fn ecr_registry(host: &str) -> Option<EcrRegistry> {
    let host = bare(host)?;
    let (account, rest) = host.split_once('.')?;
    if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (fips, dual, rest) = if let Some(r) = rest.strip_prefix("dkr.ecr.") {
        (false, false, r)
    } else if let Some(r) = rest.strip_prefix("dkr.ecr-fips.") {
        (true, false, r)
    } else if let Some(r) = rest.strip_prefix("dkr-ecr.") {
        (false, true, r)
    } else if let Some(r) = rest.strip_prefix("dkr-ecr-fips.") {
        (true, true, r)
    } else {
        return None;
    };
    let (region, domain) = rest.split_once('.')?;
    let known = if dual {
        domain == "on.aws"
    } else {
        ECR_DOMAINS.contains(&domain)
    };
    (known && is_region(region)).then(|| EcrRegistry {
        account: account.to_string(),
        region: region.to_string(),
        fips,
        domain: domain.to_string(),
    })
}

/// Whether `host` is ECR Public.
pub fn is_ecr_public(host: &str) -> bool {
    bare(host).as_deref() == Some(ECR_PUBLIC)
}

/// Whether `host` is Google's: Container Registry (`gcr.io`, `us.gcr.io`,
/// `eu.gcr.io`, `asia.gcr.io`, ...) or Artifact Registry
/// (`<location>-docker.pkg.dev`).
pub fn is_google(host: &str) -> bool {
    let Some(host) = bare(host) else {
        return false;
    };
    if host == "gcr.io" {
        return true;
    }
    if let Some(label) = host.strip_suffix(".gcr.io") {
        return is_label(label);
    }
    host.strip_suffix("-docker.pkg.dev")
        .is_some_and(|location| is_label(location) && !location.is_empty())
}

/// The Azure clouds' registry domains: public, China, US Government.
const ACR_DOMAINS: &[&str] = &["azurecr.io", "azurecr.cn", "azurecr.us"];

/// Whether `host` is an Azure Container Registry login server
/// (`<name>.azurecr.io`, `.azurecr.cn`, `.azurecr.us`).
pub fn is_acr(host: &str) -> bool {
    let Some(host) = bare(host) else {
        return false;
    };
    host.split_once('.')
        .is_some_and(|(name, domain)| is_label(name) && ACR_DOMAINS.contains(&domain))
}

/// One DNS label: letters, digits and inner hyphens, at most 63.
fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && !s.starts_with('-')
        && !s.ends_with('-')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// A host an admin gives a provider besides its own: `host[:port]`
/// exactly, or `*.suffix` for any one or more labels before `.suffix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraHost(String);

impl ExtraHost {
    /// Parses `host[:port]` or `*.domain[:port]`; the error says what a
    /// host may hold.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase();
        let name = s.strip_prefix("*.").unwrap_or(&s);
        let ok = !name.is_empty()
            && name.len() <= 253
            && !name.contains('*')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c));
        if ok {
            Ok(Self(s))
        } else {
            Err(format!(
                "`{s}` is not a registry host (letters, digits, `-.:[]`, a leading `*.`), e.g. \
                 registry.corp.example:5000 or *.corp.example"
            ))
        }
    }

    /// Whether `host` is one of `builtin`'s (a cloud's own host forms) or
    /// of the hosts in `extra`.
    pub fn served(host: &str, builtin: fn(&str) -> bool, extra: &[ExtraHost]) -> bool {
        builtin(host) || extra.iter().any(|e| e.matches(host))
    }

    /// Whether `host` (`host[:port]`) is this one.
    pub fn matches(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        match self.0.strip_prefix("*.") {
            Some(suffix) => host
                .strip_suffix(suffix)
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|head| !head.is_empty()),
            None => host == self.0,
        }
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ecr_host_form_gives_its_account_region_and_endpoint_kind() {
        let r = ecr_registry("123456789012.dkr.ecr.us-east-1.amazonaws.com").unwrap();
        assert_eq!(
            (r.account.as_str(), r.region.as_str(), r.fips),
            ("123456789012", "us-east-1", false)
        );
        let r = ecr_registry("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com").unwrap();
        assert!(r.fips);
        assert_eq!(r.region, "us-gov-west-1");
        let r = ecr_registry("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn").unwrap();
        assert_eq!(r.domain, "amazonaws.com.cn");
        let r = ecr_registry("123456789012.dkr-ecr.eu-west-1.on.aws").unwrap();
        assert_eq!(r.domain, "on.aws");
        let r = ecr_registry("123456789012.dkr-ecr-fips.us-east-2.on.aws").unwrap();
        assert!(r.fips);
        assert!(ecr_registry("123456789012.dkr.ecr.us-iso-east-1.c2s.ic.gov").is_some());
        assert!(ecr_registry("123456789012.dkr.ecr.us-isob-east-1.sc2s.sgov.gov").is_some());
        assert!(ecr_registry("123456789012.DKR.ECR.US-EAST-1.AMAZONAWS.COM").is_some());
        assert!(is_ecr_public("public.ecr.aws"));
    }

    #[test]
    fn ecr_look_alikes_are_not_ecr() {
        for host in [
            "123456789012.dkr.ecr.us-east-1.amazonaws.com.attacker.io",
            "attacker.io/123456789012.dkr.ecr.us-east-1.amazonaws.com",
            "x123456789012.dkr.ecr.us-east-1.amazonaws.com",
            "12345678901.dkr.ecr.us-east-1.amazonaws.com",
            "1234567890123.dkr.ecr.us-east-1.amazonaws.com",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com:443",
            "123456789012.dkr.ecr.us-east-1.amazonaws.co",
            "123456789012.dkr.ecr.evil.amazonaws.com",
            "123456789012.dkr.ecr.us-east-1.evil.amazonaws.com",
            "123456789012.dkr.ecr.us-east-1.on.aws",
            "123456789012.dkr-ecr.us-east-1.amazonaws.com",
            "123456789012.ecr.us-east-1.amazonaws.com",
            "a.123456789012.dkr.ecr.us-east-1.amazonaws.com",
            "123456789012.dkr.ecr..amazonaws.com",
            "public.ecr.aws.attacker.io",
            "",
        ] {
            assert_eq!(ecr_registry(host), None, "{host}");
            assert!(!is_ecr_public(host), "{host}");
        }
        assert!(!is_ecr_public("public.ecr.aws:5000"));
        assert!(!is_ecr_public("xpublic.ecr.aws"));
    }

    #[test]
    fn google_hosts_are_gcr_and_artifact_registry_and_nothing_that_contains_them() {
        for host in [
            "gcr.io",
            "us.gcr.io",
            "eu.gcr.io",
            "asia.gcr.io",
            "us-central1-docker.pkg.dev",
            "europe-docker.pkg.dev",
            "US-DOCKER.PKG.DEV",
        ] {
            assert!(is_google(host), "{host}");
        }
        for host in [
            "gcr.io.attacker.io",
            "evilgcr.io",
            "a.b.gcr.io",
            "gcr.io:443",
            "-docker.pkg.dev",
            "docker.pkg.dev",
            "us-central1-docker.pkg.dev.attacker.io",
            "x.us-central1-docker.pkg.dev",
            "us-central1-maven.pkg.dev",
            "pkg.dev",
        ] {
            assert!(!is_google(host), "{host}");
        }
    }

    #[test]
    fn acr_hosts_are_login_servers_in_each_azure_cloud_only() {
        for host in ["myreg.azurecr.io", "myreg.azurecr.cn", "myreg.azurecr.us"] {
            assert!(is_acr(host), "{host}");
        }
        for host in [
            "myreg.azurecr.io.attacker.io",
            "azurecr.io",
            "a.b.azurecr.io",
            "myreg.azurecr.io:443",
            "myreg.azurecr.de.evil",
            "myreg.azurecr.com",
            "-x.azurecr.io",
        ] {
            assert!(!is_acr(host), "{host}");
        }
    }

    #[test]
    fn extra_hosts_match_exactly_or_below_a_wildcard_suffix() {
        let exact = ExtraHost::parse("Registry.Corp.Example:5000").unwrap();
        assert!(exact.matches("registry.corp.example:5000"));
        assert!(!exact.matches("registry.corp.example"));
        assert!(!exact.matches("registry.corp.example:50001"));
        let wild = ExtraHost::parse("*.corp.example").unwrap();
        assert!(wild.matches("a.corp.example"));
        assert!(wild.matches("a.b.corp.example"));
        assert!(!wild.matches("corp.example"));
        assert!(!wild.matches("acorp.example"));
        assert!(!wild.matches("a.corp.example.attacker.io"));
        assert!(ExtraHost::parse("a*.corp.example").is_err());
        assert!(ExtraHost::parse("*.").is_err());
        assert!(ExtraHost::parse("x/y").is_err());
    }
}

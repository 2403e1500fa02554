//! The cluster's default trust root: the one every authority without a
//! `trustRootRef` verifies against. An admin, or the chart, marks one
//! TrustRoot with the annotation [`DEFAULT_ANNOTATION`]; when none is marked,
//! the Sigstore instance sigil is built for (public-good, kept fresh through
//! TUF by the controller) is the default.
//!
//! policy-controller users point their cluster at a private Sigstore once
//! and then name its Fulcio and Rekor by URL (`keyless.url`, `ctlog.url`)
//! without a `trustRootRef`. sigil takes trust from roots, never from a
//! URL, so such a URL is an assertion about the default root: it must name
//! an instance the default lists. [`check_instance_urls`] checks it; the
//! controller runs it when it accepts a policy and `sigil policy lint`
//! reports it as a note (it cannot know the cluster's default).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sigil_api::cip::{Authority, ClusterImagePolicySpec};
use sigil_verifier::trust::TrustedRoot;

use crate::compile::FieldError;

/// The annotation that marks a TrustRoot as the cluster's default (value
/// `"true"`). At most one TrustRoot may carry it.
pub const DEFAULT_ANNOTATION: &str = "policy.sigil.dev/default-trust-root";

/// Whether an object's metadata marks it as the default trust root.
pub fn is_marked_default(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULT_ANNOTATION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Where the default trust root comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultSource<'a> {
    /// A TrustRoot marked with [`DEFAULT_ANNOTATION`], by name.
    TrustRoot(&'a str),
    /// No TrustRoot is marked: the built-in Sigstore instance (`public-good`
    /// or `staging`).
    Builtin(&'a str),
    /// A `trusted_root.json` file given to the CLI (`--trusted-root`).
    File(&'a str),
}

/// The default trust root a policy is checked against.
#[derive(Debug, Clone, Copy)]
pub struct DefaultRoot<'a> {
    /// Which root it is.
    pub source: DefaultSource<'a>,
    /// Its material.
    pub root: &'a TrustedRoot,
}

impl DefaultRoot<'_> {
    /// A phrase naming the default for messages.
    pub fn describe(&self) -> String {
        match self.source {
            DefaultSource::TrustRoot(name) => format!("TrustRoot `{name}`"),
            DefaultSource::Builtin(instance) => {
                format!("the Sigstore {instance} root, as no TrustRoot is marked default")
            }
            DefaultSource::File(path) => format!("the trusted root {path} (--trusted-root)"),
        }
    }
}

/// The identity of a service URL for comparison: its host and port,
/// lowercased, without the scheme's default port. The scheme and path do
/// not count: policy-controller examples write `http://fulcio.sigstore.dev`
/// for the instance a trusted root lists as `https://fulcio.sigstore.dev`,
/// and the check guards against naming another instance, not another
/// spelling of the same one.
fn instance_key(url: &str) -> Option<String> {
    let trimmed = url.trim();
    let (scheme, rest) = trimmed.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?.to_ascii_lowercase();
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => ":443",
        "http" => ":80",
        _ => return None,
    };
    let host_port = host_port
        .strip_suffix(default_port)
        .unwrap_or(&host_port)
        .to_owned();
    let host_port = match host_port.split_once(':') {
        Some((host, port)) => format!("{}:{port}", host.trim_end_matches('.')),
        None => host_port.trim_end_matches('.').to_owned(),
    };
    (!host_port.is_empty()).then_some(host_port)
}

/// Whether two URLs name the same service instance (see [`instance_key`]).
pub fn same_instance(a: &str, b: &str) -> bool {
    matches!((instance_key(a), instance_key(b)), (Some(x), Some(y)) if x == y)
}

/// Which of an authority's URLs verify against the default root: the
/// keyless URL when the authority names no TrustRoot and no CA, and the
/// log URL when neither `ctlog.trustRootRef` nor the keyless
/// `trustRootRef` (whose logs an unqualified `ctlog` uses) is set.
pub(crate) fn default_urls(a: &Authority) -> (Option<&str>, Option<&str>) {
    let keyless_ref = a.keyless.as_ref().and_then(|k| k.trust_root_ref.as_ref());
    let fulcio = a
        .keyless
        .as_ref()
        .filter(|k| k.trust_root_ref.is_none() && k.ca_cert.is_none())
        .and_then(|k| k.url.as_deref());
    let rekor = a
        .ctlog
        .as_ref()
        .filter(|t| t.trust_root_ref.is_none() && keyless_ref.is_none() && a.static_.is_none())
        .and_then(|t| t.url.as_deref());
    (fulcio, rekor)
}

/// The URLs of a root's certificate authorities and transparency logs.
pub(crate) fn instances(root: &TrustedRoot) -> (Vec<&str>, Vec<&str>) {
    let cas = unique(root.certificate_authorities.iter().map(|c| c.uri.as_str()));
    let logs = unique(root.tlogs.iter().map(|l| l.base_url.as_str()));
    (cas, logs)
}

/// The non-empty URLs in order, each once: a root lists an instance once per
/// key or certificate period.
fn unique<'a>(urls: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for u in urls {
        if !u.is_empty() && !out.contains(&u) {
            out.push(u);
        }
    }
    out
}

/// A URL that verifies against a root which does not list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceMismatch {
    /// Path of the field, e.g. `spec.authorities[0].keyless.url`.
    pub path: String,
    /// The URL the policy gives.
    pub url: String,
    /// `Fulcio` or `transparency log`.
    pub what: &'static str,
    /// What the root lists instead, one phrase (`it lists …`).
    pub lists: String,
}

/// Every `keyless.url` and `ctlog.url` of `spec` that verifies against the
/// default trust root (see [`default_urls`]) and names no instance `root`
/// lists (its certificate authorities' URIs, its transparency logs' base
/// URLs).
pub fn instance_mismatches(
    spec: &ClusterImagePolicySpec,
    root: &TrustedRoot,
) -> Vec<InstanceMismatch> {
    let (cas, logs) = instances(root);
    let mut out = Vec::new();
    for (i, a) in spec.authorities.iter().enumerate() {
        let (fulcio, rekor) = default_urls(a);
        let checks = [
            (fulcio, "keyless", "Fulcio", "certificate authorities", &cas),
            (
                rekor,
                "ctlog",
                "transparency log",
                "transparency logs",
                &logs,
            ),
        ];
        for (url, field, what, plural, listed) in checks {
            let Some(url) = url else { continue };
            if listed.iter().any(|l| same_instance(l, url)) {
                continue;
            }
            let lists = if listed.is_empty() {
                format!("it lists no {plural} with a URL")
            } else {
                format!("it lists {}", listed.join(", "))
            };
            out.push(InstanceMismatch {
                path: format!("spec.authorities[{i}].{field}.url"),
                url: url.to_owned(),
                what,
                lists,
            });
        }
    }
    out
}

/// Checks every `keyless.url` and `ctlog.url` that verifies against the
/// default trust root against the instances `default` lists. Each mismatch
/// names the URL, the default root and what it lists.
pub fn check_instance_urls(
    spec: &ClusterImagePolicySpec,
    default: &DefaultRoot<'_>,
) -> Vec<FieldError> {
    instance_mismatches(spec, default.root)
        .into_iter()
        .map(|m| FieldError {
            path: m.path,
            message: format!(
                "`{}` is not a {what} of the default trust root, {} ({}); authorities without \
                 trustRootRef verify against it: mark a TrustRoot that lists this {what} as the \
                 default (annotation {DEFAULT_ANNOTATION}: \"true\"), or set trustRootRef",
                m.url,
                default.describe(),
                m.lists,
                what = m.what,
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn spec(authority: serde_json::Value) -> ClusterImagePolicySpec {
        serde_json::from_value(serde_json::json!({
            "images": [{"glob": "**"}], "authorities": [authority]}))
        .unwrap()
    }

    fn public_good() -> TrustedRoot {
        TrustedRoot::public_good().unwrap()
    }

    fn builtin(root: &TrustedRoot) -> DefaultRoot<'_> {
        DefaultRoot {
            source: DefaultSource::Builtin("public-good"),
            root,
        }
    }

    #[test]
    fn urls_name_the_same_instance_whatever_the_scheme_case_default_port_or_path() {
        for (a, b) in [
            ("https://fulcio.sigstore.dev", "http://fulcio.sigstore.dev"),
            (
                "https://Fulcio.Sigstore.dev/",
                "https://fulcio.sigstore.dev:443",
            ),
            (
                "http://rekor.rekor-system.svc",
                "http://rekor.rekor-system.svc:80/api/v1",
            ),
            (
                "http://rekor.rekor-system.svc.",
                "http://rekor.rekor-system.svc",
            ),
        ] {
            assert!(same_instance(a, b), "{a} {b}");
        }
        for (a, b) in [
            (
                "https://fulcio.sigstore.dev",
                "https://fulcio.sigstore.dev.evil",
            ),
            (
                "http://rekor.rekor-system.svc:8080",
                "http://rekor.rekor-system.svc",
            ),
            ("https://fulcio.sigstore.dev", "fulcio.sigstore.dev"),
            ("", ""),
        ] {
            assert!(!same_instance(a, b), "{a} {b}");
        }
    }

    #[test]
    fn public_good_urls_pass_against_the_builtin_default_in_either_scheme() {
        let root = public_good();
        let s = spec(serde_json::json!({
            "keyless": {"url": "http://fulcio.sigstore.dev",
                "identities": [{"issuer": "i", "subject": "s"}]},
            "ctlog": {"url": "https://rekor.sigstore.dev"}}));
        assert_eq!(check_instance_urls(&s, &builtin(&root)), vec![]);
    }

    #[test]
    fn a_private_url_without_trust_root_ref_is_an_error_naming_both_sides() {
        let root = public_good();
        let s = spec(serde_json::json!({
            "keyless": {"url": "http://fulcio.fulcio-system.svc",
                "identities": [{"issuer": "i", "subject": "s"}]},
            "ctlog": {"url": "http://rekor.rekor-system.svc"}}));
        let errors = check_instance_urls(&s, &builtin(&root));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(errors[0].path, "spec.authorities[0].keyless.url");
        for (e, listed) in errors
            .iter()
            .zip(["https://fulcio.sigstore.dev", "https://rekor.sigstore.dev"])
        {
            assert!(e.message.contains("Sigstore public-good root"), "{e}");
            assert!(e.message.contains(listed), "{e}");
            assert!(e.message.contains(DEFAULT_ANNOTATION), "{e}");
        }
        assert!(
            errors[0]
                .message
                .contains("`http://fulcio.fulcio-system.svc`")
        );
        assert!(
            errors[1]
                .message
                .contains("`http://rekor.rekor-system.svc`")
        );
    }

    #[test]
    fn urls_under_a_trust_root_ref_or_a_ca_cert_are_not_the_defaults_business() {
        let root = public_good();
        for authority in [
            serde_json::json!({"keyless": {"url": "http://fulcio.private", "trustRootRef": "p",
                "identities": [{"issuer": "i", "subject": "s"}]},
                "ctlog": {"url": "http://rekor.private"}}),
            serde_json::json!({"keyless": {"ca-cert": {"data": "x"},
                "identities": [{"issuer": "i", "subject": "s"}]},
                "ctlog": {"url": "http://rekor.private", "trustRootRef": "p"}}),
        ] {
            assert_eq!(
                check_instance_urls(&spec(authority), &builtin(&root)),
                vec![]
            );
        }
    }

    #[test]
    fn a_key_authoritys_log_url_is_checked_against_the_default() {
        let root = public_good();
        let s = spec(serde_json::json!({"key": {"data": "k"},
            "ctlog": {"url": "http://rekor.rekor-system.svc"}}));
        let errors = check_instance_urls(&s, &builtin(&root));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "spec.authorities[0].ctlog.url");
    }

    #[test]
    fn a_default_trust_root_without_uris_says_so() {
        let root = TrustedRoot {
            tlogs: Vec::new(),
            ctlogs: Vec::new(),
            certificate_authorities: Vec::new(),
            timestamp_authorities: Vec::new(),
        };
        let s = spec(serde_json::json!({"keyless": {"url": "https://fulcio.corp",
            "identities": [{"issuer": "i", "subject": "s"}]}}));
        let default = DefaultRoot {
            source: DefaultSource::TrustRoot("corp"),
            root: &root,
        };
        let errors = check_instance_urls(&s, &default);
        assert!(
            errors[0].message.contains("TrustRoot `corp`"),
            "{}",
            errors[0]
        );
        assert!(
            errors[0]
                .message
                .contains("lists no certificate authorities with a URL"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn only_the_value_true_marks_a_trust_root_as_default() {
        let meta = |v: &str| ObjectMeta {
            annotations: Some([(DEFAULT_ANNOTATION.to_owned(), v.to_owned())].into()),
            ..ObjectMeta::default()
        };
        assert!(is_marked_default(&meta("true")));
        assert!(is_marked_default(&meta("True")));
        assert!(!is_marked_default(&meta("false")));
        assert!(!is_marked_default(&meta("")));
        assert!(!is_marked_default(&ObjectMeta::default()));
    }
}

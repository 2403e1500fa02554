//! `--notation-config DIR` of `sigil verify` and `sigil policy test`: the
//! Notation CLI's configuration directory (`trustpolicy.oci.json` or
//! `trustpolicy.json`, and `truststore/x509/TYPE/NAME/`) as a `notation`
//! authority with everything inline, so an image is judged by the same
//! compiled authority the webhook would run for those files.
//!
//! Without policy files the directory is the whole policy (every image,
//! one `notation` authority), as `notation verify` judges an image. With
//! policy files it stands in for what a cluster would read from ConfigMaps
//! and Secrets: a `trustPolicyRef` takes the directory's trust policy, a
//! trust store given by `configMapRef` or `secretRef` takes the directory's
//! store of the same `TYPE/NAME`.

use std::path::Path;

use anyhow::{Result, bail};
use sigil_api::cip::{
    Authority, ClusterImagePolicySpec, ImagePattern, NotationRef, NotationTrustStore,
};
use sigil_notation::config::NotationConfig;

/// The name of the policy made from a configuration directory alone.
pub(crate) const POLICY_NAME: &str = "notation-config";

/// Reads `dir` the way the Notation CLI does; the error names the file and
/// what is wrong in it.
pub(crate) fn load(dir: &Path) -> Result<NotationConfig> {
    sigil_notation::config::load(dir).map_err(|e| anyhow::anyhow!("--notation-config: {e}"))
}

/// The directory's trust policy and every trust store in it, inline.
pub(crate) fn authority(config: &NotationConfig) -> NotationRef {
    NotationRef {
        trust_policy: Some(config.policy_text.clone()),
        trust_policy_ref: None,
        trust_stores: config
            .trust_store
            .stores()
            .map(|(kind, name, certificates)| NotationTrustStore {
                name: format!("{}/{name}", kind.as_str()),
                certificates: Some(pem(certificates)),
                ..NotationTrustStore::default()
            })
            .collect(),
    }
}

/// A policy for every image whose one authority is the directory's.
pub(crate) fn policy(config: &NotationConfig) -> ClusterImagePolicySpec {
    ClusterImagePolicySpec {
        images: vec![ImagePattern { glob: "**".into() }],
        authorities: vec![Authority {
            name: "notation".into(),
            notation: Some(authority(config)),
            ..Authority::default()
        }],
        ..ClusterImagePolicySpec::default()
    }
}

/// Resolves the references of `spec`'s `notation` authorities from the
/// directory (see the module comment); returns how many it resolved. A
/// store the directory lacks is an error naming the field and the
/// directory that would have to hold it.
pub(crate) fn resolve(
    spec: &mut ClusterImagePolicySpec,
    config: &NotationConfig,
    dir: &Path,
) -> Result<usize> {
    let mut resolved = 0;
    for (i, authority) in spec.authorities.iter_mut().enumerate() {
        let Some(notation) = authority.notation.as_mut() else {
            continue;
        };
        if notation.trust_policy_ref.take().is_some() {
            notation.trust_policy = Some(config.policy_text.clone());
            resolved += 1;
        }
        for (j, store) in notation.trust_stores.iter_mut().enumerate() {
            if store.config_map_ref.is_none() && store.secret_ref.is_none() {
                continue;
            }
            let found = store.name.split_once('/').and_then(|(kind, name)| {
                config
                    .trust_store
                    .stores()
                    .find(|(k, n, _)| k.as_str() == kind && *n == name)
            });
            let Some((_, _, certificates)) = found else {
                bail!(
                    "spec.authorities[{i}].notation.trustStores[{j}] ({}) is read from a {} in a \
                     cluster; --notation-config {} has no directory truststore/x509/{} to stand in \
                     for it",
                    store.name,
                    if store.config_map_ref.is_some() {
                        "ConfigMap"
                    } else {
                        "Secret"
                    },
                    dir.display(),
                    store.name
                );
            };
            store.config_map_ref = None;
            store.secret_ref = None;
            store.certificates = Some(pem(certificates));
            resolved += 1;
        }
    }
    Ok(resolved)
}

/// Whether a `notation` authority of `spec` reads its trust policy or a
/// trust store from the cluster (what [`resolve`] stands in for).
pub(crate) fn references(spec: &ClusterImagePolicySpec) -> bool {
    spec.authorities
        .iter()
        .filter_map(|a| a.notation.as_ref())
        .any(|n| {
            n.trust_policy_ref.is_some()
                || n.trust_stores
                    .iter()
                    .any(|s| s.config_map_ref.is_some() || s.secret_ref.is_some())
        })
}

/// Certificates as PEM `CERTIFICATE` blocks (a store's files may be DER).
fn pem(certificates: &[sigil_verifier::x509::Certificate]) -> String {
    certificates
        .iter()
        .map(|cert| sigil_verifier::crypto::pem_encode("CERTIFICATE", &cert.der))
        .collect()
}

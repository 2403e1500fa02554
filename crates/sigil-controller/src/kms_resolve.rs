//! `key.kms` in a policy the controller reconciles: replaces each KMS key
//! reference by the public key [`crate::kms::KmsKeys`] fetched, with the
//! provider's credentials Secret (in sigil's namespace) read through the
//! reconcilers' [`Context`]. Apart from the key service so that the context,
//! which holds that service, is imported by this resolver and not the other
//! way round.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use sigil_api::cip::{ClusterImagePolicySpec, KeyRef};
use sigil_kms::KmsRef;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::kms::Lookup;

/// Replaces `key.kms` by the fetched key's PEM in `data` (what the webhook
/// enforces). A fetch failure without a last good key is a problem of the
/// policy; with one, that key stays in force.
pub async fn resolve_key(
    ctx: &Context,
    path: &str,
    key: &mut KeyRef,
    problems: &mut Vec<String>,
) -> Result<()> {
    let Some(uri) = key.kms.clone() else {
        return Ok(());
    };
    // Syntax errors and data/secretRef conflicts are the compiler's to report.
    let Ok(reference) = KmsRef::parse(&uri) else {
        return Ok(());
    };
    if key.data.is_some() || key.secret_ref.is_some() {
        return Ok(());
    }
    let path = format!("{path}.kms");
    let overlay = match ctx.kms.secret_for(reference.provider()) {
        None => BTreeMap::new(),
        Some(name) => {
            let ns = &ctx.args.namespace;
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
            let secret = api
                .get_opt(name)
                .await
                .map_err(|e| Error::kube(format!("reading Secret {ns}/{name}"), e))?;
            let Some(secret) = secret else {
                problems.push(format!(
                    "{path}: the {} credentials Secret {ns}/{name} (--kms-credentials-secret) \
                     not found; create it with the provider's settings as entries (e.g. \
                     VAULT_ADDR, VAULT_TOKEN)",
                    reference.provider()
                ));
                return Ok(());
            };
            let mut overlay = BTreeMap::new();
            for (k, v) in secret.data.unwrap_or_default() {
                match String::from_utf8(v.0) {
                    Ok(text) => {
                        overlay.insert(k, text);
                    }
                    Err(_) => {
                        problems.push(format!(
                            "{path}: entry `{k}` of Secret {ns}/{name} is not UTF-8 text"
                        ));
                        return Ok(());
                    }
                }
            }
            overlay
        }
    };
    match ctx.kms.lookup(&reference, &uri, &overlay).await {
        // A stale key is reported by [`crate::kms::KmsKeys::degraded`] after publication.
        Lookup::Fresh(pem) | Lookup::Stale(pem, _) => {
            key.data = Some(pem);
            key.kms = None;
        }
        Lookup::Failed(why) => problems.push(format!("{path}: {why}")),
    }
    Ok(())
}

/// Whether `spec` names any KMS key (such policies are re-checked every
/// refresh interval).
pub fn uses_kms(spec: &ClusterImagePolicySpec) -> bool {
    spec.authorities
        .iter()
        .any(|a| a.key.as_ref().is_some_and(|k| k.kms.is_some()))
}

#[cfg(test)]
mod tests;

//! Pull-secret sources. An AdmissionReview names pull secrets but does not
//! carry them; reading them needs the API server. [`NoPullSecrets`] is the
//! cluster-free source (anonymous, plus whatever credentials the judge was
//! configured with); a kube-backed source reading `kubernetes.io/dockerconfigjson`
//! and `kubernetes.io/dockercfg` Secrets and the service account's
//! `imagePullSecrets` plugs in through the same trait.

use tokio::time::Instant;

use crate::judge::{PullSecretSource, PullSecrets};

/// A source that never reads Secrets: every object pulls anonymously (the
/// judge may still hold node-wide credentials from a docker config).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPullSecrets;

impl PullSecretSource for NoPullSecrets {
    async fn pull_secrets(
        &self,
        _namespace: &str,
        _secret_names: &[String],
        _service_account: &str,
        _deadline: Instant,
    ) -> Result<PullSecrets, String> {
        Ok(PullSecrets {
            credentials: sigil_verifier::oci::Credentials::anonymous(),
            id: "anonymous".into(),
        })
    }
}

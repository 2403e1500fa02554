//! Pull-secret sources. An AdmissionReview names pull secrets but does not
//! carry them; reading them needs the API server. [`NoPullSecrets`] is the
//! cluster-free source (anonymous, plus whatever credentials the judge was
//! configured with); [`KubePullSecrets`] reads `kubernetes.io/dockerconfigjson`
//! and `kubernetes.io/dockercfg` Secrets named by the pod template or, when it
//! names none, by its service account, as the kubelet would use them.
//!
//! Credentials never reach a log: errors name the Secret, never its content,
//! and the identity of a credential set is a hash.
//!
//! Least privilege: with [`KubePullSecrets::only_in`] the source reads
//! Secrets and ServiceAccounts only in the listed namespaces (the chart then
//! binds the webhook's read access there alone, `webhook.pullSecretNamespaces`);
//! objects elsewhere are verified anonymously, with a warning when they name
//! pull secrets sigil did not read.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Api;
use moka::future::Cache;
use sha2::{Digest as _, Sha256};
use sigil_registry::Credentials;
use tokio::time::Instant;

use tokio::sync::OnceCell;

use crate::cache::SecretsOnce;
use crate::judge::{ObjectInfo, PullSecretSource, PullSecrets, SignatureSecret};

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
        Ok(PullSecrets::anonymous())
    }
}

/// Pull secrets read per object at most; more are an error, not a silent cut.
pub const MAX_SECRETS: usize = 32;

/// Credential sets kept by [`KubePullSecrets`].
const CACHE_CAPACITY: u64 = 10_000;

const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
const DOCKERCFG: &str = "kubernetes.io/dockercfg";

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    names: Vec<String>,
    service_account: String,
}

/// Reads pull secrets through the API server, caching each (namespace,
/// names, service account) briefly so a burst of reviews costs one read.
/// Secrets and service accounts that do not exist are skipped, as the
/// kubelet skips them; any other API error fails the lookup (and the
/// admission denies with it).
#[derive(Clone)]
pub struct KubePullSecrets {
    client: kube::Client,
    own_namespace: String,
    /// `Some`: the only namespaces whose Secrets are read.
    only_in: Option<Vec<String>>,
    cache: Cache<Key, PullSecrets>,
}

impl std::fmt::Debug for KubePullSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubePullSecrets")
            .field("own_namespace", &self.own_namespace)
            .field("only_in", &self.only_in)
            .finish_non_exhaustive()
    }
}

/// The credentials of one Secret, or `None` when it is not a pull secret.
fn parse_secret(secret: &Secret) -> Result<Option<(Credentials, Vec<u8>)>, String> {
    let key = match secret.type_.as_deref() {
        Some(DOCKER_CONFIG_JSON) => ".dockerconfigjson",
        Some(DOCKERCFG) => ".dockercfg",
        _ => return Ok(None),
    };
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(key)) else {
        return Ok(None);
    };
    let parsed = if key == ".dockercfg" {
        Credentials::from_dockercfg(&bytes.0)
    } else {
        Credentials::from_docker_config_json(&bytes.0)
    };
    parsed
        .map(|c| Some((c, bytes.0.clone())))
        .map_err(|e| format!("its {key} cannot be read: {e}"))
}

impl KubePullSecrets {
    /// A source reading with `client`; signature pull secrets come from
    /// `own_namespace`; credential sets are kept `ttl`.
    pub fn new(client: kube::Client, own_namespace: &str, ttl: Duration) -> Self {
        Self {
            client,
            own_namespace: own_namespace.to_string(),
            only_in: None,
            cache: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
        }
    }

    /// Reads objects' pull secrets only in `namespaces` (signature pull
    /// secrets still come from sigil's own namespace). Elsewhere no Secret
    /// or ServiceAccount is read: the object's images are fetched
    /// anonymously (or with the node-wide docker config).
    pub fn only_in(mut self, namespaces: Vec<String>) -> Self {
        self.only_in = Some(namespaces);
        self
    }

    fn may_read(&self, namespace: &str) -> bool {
        self.only_in
            .as_ref()
            .is_none_or(|list| list.iter().any(|n| n == namespace))
    }

    /// The names to read: the object's own, or else its service account's
    /// (the ServiceAccount admission plugin copies those into a pod only
    /// when it names none).
    async fn names(&self, key: &Key) -> Result<Vec<String>, String> {
        if !key.names.is_empty() || key.service_account.is_empty() {
            return Ok(key.names.clone());
        }
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &key.namespace);
        match api.get_opt(&key.service_account).await {
            Ok(Some(sa)) => Ok(sa
                .image_pull_secrets
                .unwrap_or_default()
                .into_iter()
                .map(|r| r.name)
                .filter(|n| !n.is_empty())
                .collect()),
            Ok(None) => {
                tracing::debug!(
                    namespace = %key.namespace,
                    service_account = %key.service_account,
                    "service account not found; no pull secrets from it"
                );
                Ok(Vec::new())
            }
            Err(e) => Err(format!(
                "cannot read service account {}/{}: {e}",
                key.namespace, key.service_account
            )),
        }
    }

    async fn read(&self, key: Key) -> Result<PullSecrets, String> {
        let mut names: Vec<String> = Vec::new();
        for n in self.names(&key).await? {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        if names.len() > MAX_SECRETS {
            return Err(format!(
                "{} pull secrets named in namespace {}; sigil reads at most {MAX_SECRETS}",
                names.len(),
                key.namespace
            ));
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &key.namespace);
        let mut credentials = Credentials::anonymous();
        let mut id = Sha256::new();
        id.update(key.namespace.as_bytes());
        for name in names {
            let secret = match api.get_opt(&name).await {
                Ok(Some(s)) => s,
                Ok(None) => {
                    tracing::debug!(namespace = %key.namespace, secret = %name, "pull secret not found; ignored, as the kubelet does");
                    continue;
                }
                Err(e) => {
                    return Err(format!(
                        "cannot read pull secret {}/{name}: {e}",
                        key.namespace
                    ));
                }
            };
            let Some((mut found, raw)) = parse_secret(&secret)
                .map_err(|e| format!("pull secret {}/{name}: {e}", key.namespace))?
            else {
                tracing::debug!(namespace = %key.namespace, secret = %name, "not a docker config Secret; ignored");
                continue;
            };
            // The first Secret naming a host wins: merge the earlier ones over it.
            found.merge(credentials);
            credentials = found;
            for part in [
                name.as_bytes(),
                secret.metadata.uid.as_deref().unwrap_or("").as_bytes(),
                secret
                    .metadata
                    .resource_version
                    .as_deref()
                    .unwrap_or("")
                    .as_bytes(),
                &Sha256::digest(&raw),
            ] {
                id.update([0]);
                id.update(part);
            }
        }
        if credentials.is_empty() {
            return Ok(PullSecrets::anonymous());
        }
        Ok(PullSecrets {
            credentials,
            id: format!("kube:{}", hex::encode(id.finalize())),
            ..PullSecrets::default()
        })
    }

    async fn cached(&self, key: Key, deadline: Instant) -> Result<PullSecrets, String> {
        let what = format!("{}/{}", key.namespace, key.names.join(","));
        let lookup = self.cache.try_get_with(key.clone(), self.read(key));
        match tokio::time::timeout_at(deadline, lookup).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err((*e).clone()),
            Err(_) => Err(format!(
                "the API server did not answer before the admission deadline while reading pull secrets {what}"
            )),
        }
    }
}

impl PullSecretSource for KubePullSecrets {
    async fn pull_secrets(
        &self,
        namespace: &str,
        secret_names: &[String],
        service_account: &str,
        deadline: Instant,
    ) -> Result<PullSecrets, String> {
        if !self.may_read(namespace) {
            let mut anonymous = PullSecrets::anonymous();
            if !secret_names.is_empty() {
                anonymous.note = Some(format!(
                    "sigil did not read the pull secrets this object names ({}): namespace {namespace} is not among the namespaces whose secrets sigil may read (--pull-secret-namespace, chart value webhook.pullSecretNamespaces); its images were fetched anonymously",
                    secret_names.join(", ")
                ));
            }
            return Ok(anonymous);
        }
        let key = Key {
            namespace: namespace.to_string(),
            names: secret_names.to_vec(),
            service_account: service_account.to_string(),
        };
        self.cached(key, deadline).await
    }

    async fn signature_pull_secrets(
        &self,
        secret_names: &[String],
        deadline: Instant,
    ) -> Result<PullSecrets, String> {
        if secret_names.is_empty() {
            return Ok(PullSecrets::anonymous());
        }
        let key = Key {
            namespace: self.own_namespace.clone(),
            names: secret_names.to_vec(),
            service_account: String::new(),
        };
        self.cached(key, deadline)
            .await
            .map_err(|e| format!("signaturePullSecrets: {e}"))
    }
}

/// Either source, chosen by `--pull-secrets`.
#[derive(Debug, Clone)]
pub enum AnyPullSecrets {
    /// `none`.
    None(NoPullSecrets),
    /// `kube`.
    Kube(Box<KubePullSecrets>),
}

impl PullSecretSource for AnyPullSecrets {
    async fn pull_secrets(
        &self,
        namespace: &str,
        secret_names: &[String],
        service_account: &str,
        deadline: Instant,
    ) -> Result<PullSecrets, String> {
        match self {
            Self::None(s) => {
                s.pull_secrets(namespace, secret_names, service_account, deadline)
                    .await
            }
            Self::Kube(s) => {
                s.pull_secrets(namespace, secret_names, service_account, deadline)
                    .await
            }
        }
    }

    async fn signature_pull_secrets(
        &self,
        secret_names: &[String],
        deadline: Instant,
    ) -> Result<PullSecrets, String> {
        match self {
            Self::None(s) => s.signature_pull_secrets(secret_names, deadline).await,
            Self::Kube(s) => s.signature_pull_secrets(secret_names, deadline).await,
        }
    }
}

/// The pull secrets of one object (its own, and the policies'
/// `signaturePullSecrets`, each Secret kept apart so that only the
/// authorities naming it use it), read at most once however many of its
/// images are judged: one admission review, or one pod of the audit.
pub struct ObjectSecrets<'a, S> {
    source: &'a S,
    object: &'a ObjectInfo,
    signature_secrets: Vec<String>,
    cell: OnceCell<Result<PullSecrets, String>>,
}

impl<'a, S: PullSecretSource> ObjectSecrets<'a, S> {
    /// The secrets of `object` from `source`, and beside them the Secrets
    /// named `signature_secrets` in sigil's namespace.
    pub fn new(source: &'a S, object: &'a ObjectInfo, signature_secrets: Vec<String>) -> Self {
        Self {
            source,
            object,
            signature_secrets,
            cell: OnceCell::new(),
        }
    }

    async fn read(&self, deadline: Instant) -> Result<PullSecrets, String> {
        let own = self
            .source
            .pull_secrets(
                &self.object.namespace,
                &self.object.pull_secret_names,
                &self.object.service_account,
                deadline,
            )
            .await?;
        let mut own = own;
        for name in &self.signature_secrets {
            let read = self
                .source
                .signature_pull_secrets(std::slice::from_ref(name), deadline)
                .await?;
            if !read.credentials.is_empty() {
                own.signature.insert(
                    name.clone(),
                    SignatureSecret {
                        credentials: read.credentials,
                        id: read.id,
                    },
                );
            }
        }
        Ok(own)
    }

    /// Why some of the object's pull secrets were not read, once they were
    /// looked up.
    pub fn note(&self) -> Option<String> {
        match self.cell.get() {
            Some(Ok(read)) => read.note.clone(),
            _ => None,
        }
    }
}

impl<S: PullSecretSource> SecretsOnce for ObjectSecrets<'_, S> {
    async fn get(&self, deadline: Instant) -> Result<PullSecrets, String> {
        self.cell.get_or_init(|| self.read(deadline)).await.clone()
    }

    fn namespace(&self) -> &str {
        &self.object.namespace
    }
}

//! What every reconciler shares: the client, settings, the snapshot
//! publisher, the TUF state store, metrics, the event recorder and whether
//! this replica leads.

use std::sync::Arc;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use sigil_api::snapshot::SnapshotSigstore;
use tokio::sync::{mpsc, watch};

use crate::config::Args;
use crate::egress::{Author, Guard, address_policy};
use crate::error::Result;
use crate::fenced::{Fence, SecretWriter};
use crate::metrics::Metrics;
use crate::names::{EMBEDDED, MANAGER};
use crate::publish::Publisher;
use crate::remote_policy::RemotePolicies;
use crate::tenant_registries::AllowedRegistries;
use crate::tuf_state::TufStore;

/// A change of published trust material that policies may depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustChange {
    /// This TrustRoot's material changed: policies naming it are checked again.
    TrustRoot(String),
    /// The default trust root changed (another one, or its material): every
    /// policy is checked again, as any may name its instances by URL.
    Default,
}

/// Shared state of the reconcilers.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Settings.
    pub args: Args,
    /// Writes the policy snapshot.
    pub publisher: Publisher,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Publishes Kubernetes Events.
    pub recorder: Recorder,
    /// True while this replica holds the leader Lease.
    pub leading: watch::Receiver<bool>,
    /// The last verified TUF state of every TUF repository followed (the
    /// built-in root's, remote and repository TrustRoots'), persisted so
    /// that refreshes start from the newest root and versions never go
    /// back, also across restarts.
    pub tuf: TufStore,
    /// Changes of published trust material; the policy controller
    /// re-reconciles the policies they concern.
    pub trust_root_changed: mpsc::UnboundedSender<TrustChange>,
    /// Public keys fetched for `key.kms`, and how to fetch them.
    pub kms: crate::kms::KmsKeys,
    /// Verified `policy.remote` modules, by SHA-256.
    pub remote_policies: RemotePolicies,
    /// The registries namespaces' ImagePolicies may name.
    pub tenant_registries: AllowedRegistries,
}

impl Context {
    /// A context; `leading` comes from the elector, and `trust_root_changed`
    /// feeds the policy controller.
    pub fn new(
        client: Client,
        args: Args,
        metrics: Arc<Metrics>,
        leading: watch::Receiver<bool>,
        trust_root_changed: mpsc::UnboundedSender<TrustChange>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: Some(args.identity.clone()),
            },
        );
        let instance = args.sigstore_instance;
        let embedded = SnapshotSigstore {
            instance: instance.name().to_owned(),
            source: EMBEDDED.to_owned(),
            trusted_root_json: instance.embedded_trusted_root().to_owned(),
        };
        let fence = Fence::new(leading.clone(), &args.lease_name);
        let secrets = SecretWriter::new(client.clone(), &args.namespace, fence);
        let publisher =
            Publisher::new(secrets.clone(), metrics.clone(), embedded).with_budget(args.budget());
        let tuf = TufStore::new(
            secrets,
            &args.tuf_state_secret,
            &crate::names::sigstore_repository(instance.name()),
        );
        let kms = crate::kms::KmsKeys::new(
            sigil_kms::HttpConfig {
                timeout: args.kms_timeout(),
                allowed_hosts: args.kms_allow_host.clone(),
                guard: Some(Arc::new(Guard::new(address_policy(&args, Author::Admin)))),
                ..sigil_kms::HttpConfig::default()
            },
            args.kms_refresh(),
            sigil_kms::Env::from_process(),
            args.kms_credentials_secret.iter().cloned().collect(),
        );
        let remote_policies = RemotePolicies::new(
            crate::remote_policy::TIMEOUT,
            Guard::new(address_policy(&args, Author::Admin)),
            Guard::new(address_policy(&args, Author::Tenant)),
        );
        let tenant_registries = AllowedRegistries::new(&args.image_policy_registry);
        Self {
            client,
            args,
            publisher,
            metrics,
            recorder,
            leading,
            tuf,
            trust_root_changed,
            kms,
            remote_policies,
            tenant_registries,
        }
    }

    /// Fails unless this replica leads: a replica that lost its Lease must
    /// not write, even if a reconcile was already queued (the snapshot and
    /// TUF state writers check it again right before each write).
    pub fn ensure_leader(&self) -> Result<()> {
        Fence::new(self.leading.clone(), &self.args.lease_name).check()
    }
}

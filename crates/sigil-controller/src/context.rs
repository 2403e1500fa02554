//! What every reconciler shares: the client, settings, the snapshot
//! publisher, the TUF state store, metrics, the event recorder and whether
//! this replica leads.

use std::sync::Arc;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use sigil_api::snapshot::SnapshotSigstore;
use tokio::sync::{mpsc, watch};

use crate::config::Args;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::names::{EMBEDDED, MANAGER};
use crate::publish::Publisher;
use crate::remote_policy::RemotePolicies;
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
        let publisher = Publisher::new(client.clone(), &args.namespace, metrics.clone(), embedded);
        let tuf = TufStore::new(client.clone(), &args.namespace, &args.tuf_state_secret);
        let kms = crate::kms::KmsKeys::new(
            args.kms_refresh(),
            args.kms_timeout(),
            sigil_kms::Env::from_process(),
            args.kms_credentials_secret.iter().cloned().collect(),
        );
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
            remote_policies: RemotePolicies::default(),
        }
    }

    /// Fails unless this replica leads: a replica that lost its Lease must
    /// not write, even if a reconcile was already queued.
    pub fn ensure_leader(&self) -> Result<()> {
        if *self.leading.borrow() {
            Ok(())
        } else {
            Err(Error::NotLeader(self.args.lease_name.clone()))
        }
    }
}

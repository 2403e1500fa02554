//! What every reconciler shares: the client, settings, the snapshot
//! publisher, metrics, the event recorder and whether this replica leads.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::{Mutex, mpsc, watch};

use crate::config::Args;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::publish::Publisher;
use crate::remote_policy::RemotePolicies;
use crate::tuf::TufState;

/// Name under which the controller writes (field manager, event reporter).
pub const MANAGER: &str = "sigil-controller";

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
    /// The last verified TUF state of each remote or repository TrustRoot,
    /// so refreshes start from the newest root and versions never go back.
    pub tuf: Mutex<BTreeMap<String, TufState>>,
    /// Names of TrustRoots whose published material changed; the policy
    /// controller re-reconciles the policies that refer to them.
    pub trust_root_changed: mpsc::UnboundedSender<String>,
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
        trust_root_changed: mpsc::UnboundedSender<String>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: Some(args.identity.clone()),
            },
        );
        let publisher = Publisher::new(client.clone(), &args.namespace, metrics.clone());
        Self {
            client,
            args,
            publisher,
            metrics,
            recorder,
            leading,
            tuf: Mutex::default(),
            trust_root_changed,
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

//! The crate's error type: what failed, on which object, and a stable reason
//! label for the `sigil_controller_reconcile_errors_total` metric.

/// A reconcile, election or TLS step that failed; the step is retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {action}: {source}; check the controller's RBAC and the API server")]
    Kube {
        /// What was being done, naming the object.
        action: String,
        /// The client's error.
        #[source]
        source: Box<kube::Error>,
    },
    /// This replica does not hold the leader Lease, so it must not write.
    #[error("not the leader: another replica holds Lease {0}; this replica stands by")]
    NotLeader(String),
    /// A fenced write was refused: the Secret changed since this replica
    /// read it (another controller wrote it).
    #[error("not written: {0}")]
    WriteConflict(String),
    /// The stored policy snapshot could not be read (an API error on one of
    /// its Secrets); recovery is retried, never started empty.
    #[error("policy snapshot not read: {0}; retrying")]
    SnapshotUnreadable(String),
    /// The policy snapshot could not be built.
    #[error("policy snapshot not written: {0}")]
    Snapshot(String),
    /// An ImagePolicy would take its namespace, or all namespaces, past
    /// their share of the policy snapshot.
    #[error("policy snapshot not written: {0}")]
    SnapshotBudget(String),
    /// The policy snapshot would be larger than its Secrets hold together.
    #[error("policy snapshot not written: {0}")]
    SnapshotTooLarge(String),
    /// The write that carried a change to the policy snapshot stopped before
    /// it answered (the controller is stopping); the change is not held.
    #[error(
        "policy snapshot not written: the write carrying this change stopped before it finished \
         (the controller is stopping); the reconcile is retried"
    )]
    SnapshotInterrupted,
    /// A policy-controller object could not be converted.
    #[error("converting policy-controller's {0}")]
    Convert(String),
    /// The webhook configurations cannot carry the WorkloadKinds' rules.
    #[error("webhook rules: {0}")]
    WebhookRules(String),
    /// Webhook certificates could not be generated or parsed.
    #[error("webhook TLS: {0}")]
    Tls(String),
    /// A TUF repository could not be read or verified.
    #[error(transparent)]
    Tuf(#[from] crate::tuf::TufError),
    /// The HTTP endpoints' port could not be bound.
    #[error(transparent)]
    Bind(#[from] sigil_runtime::admin::BindError),
    /// The HTTP endpoint could not be served.
    #[error("serving {addr}: {reason}")]
    Serve {
        /// The listen address.
        addr: String,
        /// Why it failed.
        reason: String,
    },
}

impl Error {
    /// Wraps a client error with what was being done.
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            action: action.into(),
            source: Box::new(source),
        }
    }

    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "kube",
            Self::NotLeader(_) => "not_leader",
            Self::WriteConflict(_) => "write_conflict",
            Self::SnapshotUnreadable(_) => "snapshot_unreadable",
            Self::Snapshot(_) => "snapshot",
            Self::SnapshotTooLarge(_) => "snapshot_too_large",
            Self::SnapshotBudget(_) => "snapshot_budget",
            Self::SnapshotInterrupted => "snapshot_interrupted",
            Self::Convert(_) => "convert",
            Self::WebhookRules(_) => "webhook_rules",
            Self::Tls(_) => "tls",
            Self::Tuf(_) => "tuf",
            Self::Bind(_) => "bind",
            Self::Serve { .. } => "serve",
        }
    }

    /// Whether the API answered 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Kube { source, .. } if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 404))
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

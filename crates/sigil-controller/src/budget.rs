//! The share of the policy snapshot that namespaces' ImagePolicies may take
//! (`--image-policy-snapshot-bytes-per-namespace` and
//! `--image-policy-snapshot-bytes`, the chart's
//! `imagePolicies.snapshotBudget`), so that tenants cannot use up what the
//! cluster's own ClusterImagePolicies, TrustRoots and TUF updates need: the
//! snapshot holds [`MAX_STORED_BYTES`] compressed, and the ImagePolicies
//! together never take more than half of it.
//!
//! A policy is measured as the JSON it adds to the snapshot (an inlined
//! ConfigMap module counts whole). A change that would take its namespace,
//! or all namespaces together, past their share is refused, on that policy's
//! own status, naming the share and the policy's own size only (never other
//! tenants'); a change that shrinks what a namespace takes always passes, so
//! a lowered share never blocks a clean-up.

use sigil_api::snapshot::stored::MAX_STORED_BYTES;

use crate::error::{Error, Result};

/// How many bytes of snapshot JSON ImagePolicies may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantBudget {
    /// One namespace's ImagePolicies together.
    pub per_namespace: usize,
    /// Every namespace's ImagePolicies together; at most half of
    /// [`MAX_STORED_BYTES`].
    pub total: usize,
}

impl Default for TenantBudget {
    fn default() -> Self {
        Self::new(DEFAULT_PER_NAMESPACE, DEFAULT_TOTAL)
    }
}

/// Default share of one namespace: 256 KiB.
pub const DEFAULT_PER_NAMESPACE: usize = 256 * 1024;
/// Default share of all namespaces together: 2 MiB.
pub const DEFAULT_TOTAL: usize = 2 * 1024 * 1024;

impl TenantBudget {
    /// A budget of `per_namespace` and `total` bytes, the total at most half
    /// the snapshot's room and the namespace's share at most the total.
    pub fn new(per_namespace: usize, total: usize) -> Self {
        let total = total.min(MAX_STORED_BYTES / 2);
        Self {
            per_namespace: per_namespace.min(total),
            total,
        }
    }

    /// Checks the ImagePolicy `key` (`NAMESPACE/NAME`) taking `bytes` in
    /// place of what it took before, given every ImagePolicy held as
    /// (key, bytes) pairs (its own earlier version included).
    pub fn admit<'a>(
        &self,
        key: &str,
        bytes: usize,
        held: impl Iterator<Item = (&'a str, usize)>,
    ) -> Result<()> {
        let Some((namespace, _)) = key.split_once('/') else {
            return Ok(());
        };
        let (mut namespace_before, mut all_before, mut own_before) = (0usize, 0usize, 0usize);
        for (other, size) in held {
            let Some((ns, _)) = other.split_once('/') else {
                continue;
            };
            all_before = all_before.saturating_add(size);
            if ns == namespace {
                namespace_before = namespace_before.saturating_add(size);
            }
            if other == key {
                own_before = size;
            }
        }
        let after = |before: usize| before.saturating_sub(own_before).saturating_add(bytes);
        let namespace_after = after(namespace_before);
        if namespace_after > self.per_namespace && namespace_after > namespace_before {
            return Err(Error::SnapshotBudget(format!(
                "with this policy ({bytes} bytes of snapshot JSON) the ImagePolicies of namespace \
                 {namespace} would take {namespace_after} bytes of the policy snapshot, more than \
                 the {} bytes a namespace may use (chart value \
                 imagePolicies.snapshotBudget.perNamespaceBytes); remove or shrink ImagePolicies \
                 in this namespace (inlined ConfigMap modules count whole), or ask a cluster \
                 admin for a larger share",
                self.per_namespace
            )));
        }
        let all_after = after(all_before);
        if all_after > self.total && all_after > all_before {
            return Err(Error::SnapshotBudget(format!(
                "this policy ({bytes} bytes of snapshot JSON) does not fit in what is left of the \
                 {} bytes of the policy snapshot that the ImagePolicies of all namespaces may use \
                 together (chart value imagePolicies.snapshotBudget.totalBytes); shrink it, or \
                 ask a cluster admin for a larger share",
                self.total
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held<'a>(entries: &'a [(&'a str, usize)]) -> impl Iterator<Item = (&'a str, usize)> {
        entries.iter().copied()
    }

    #[test]
    fn a_namespace_past_its_share_is_refused_naming_only_its_own_sizes() {
        let budget = TenantBudget::new(1000, 10_000);
        let others = [("a/one", 600), ("b/big", 900), ("c/secret-size", 4321)];

        budget.admit("a/two", 300, held(&others)).unwrap();
        let err = budget.admit("a/two", 500, held(&others)).unwrap_err();

        let message = err.to_string();
        assert!(matches!(err, Error::SnapshotBudget(_)), "{message}");
        assert!(
            message.contains("namespace a would take 1100 bytes"),
            "{message}"
        );
        assert!(message.contains("more than the 1000 bytes"), "{message}");
        assert!(
            !message.contains("4321") && !message.contains("secret-size"),
            "{message}"
        );
        // Cluster policies (no namespace) never count.
        budget
            .admit("cluster-wide", 1_000_000, held(&others))
            .unwrap();
    }

    #[test]
    fn all_namespaces_together_are_bounded_and_a_shrinking_change_always_passes() {
        let budget = TenantBudget::new(1000, 2000);
        let full = [("a/p", 900), ("b/p", 900)];

        let err = budget.admit("c/p", 300, held(&full)).unwrap_err();
        assert!(
            err.to_string()
                .contains("the 2000 bytes of the policy snapshot that the ImagePolicies of all"),
            "{err}"
        );
        assert!(!err.to_string().contains("900"), "{err}");
        budget.admit("c/p", 200, held(&full)).unwrap();

        // Over the share (it was lowered): a smaller version is accepted.
        let over = [("a/p", 1500)];
        budget.admit("a/p", 1200, held(&over)).unwrap();
        assert!(budget.admit("a/p", 1600, held(&over)).is_err());
    }

    #[test]
    fn the_total_share_is_at_most_half_the_snapshot() {
        let budget = TenantBudget::new(usize::MAX, usize::MAX);
        assert_eq!(budget.total, MAX_STORED_BYTES / 2);
        assert_eq!(budget.per_namespace, budget.total);
    }
}

//! Which namespaces the audit looks at: the namespaces admission guards
//! (the same opt-in or opt-out label, the same exclusions as the chart's
//! webhook `namespaceSelector`), and optionally every other namespace too,
//! the "what would break if it opted in" view. Results say which kind of
//! namespace they come from.

use std::collections::BTreeMap;

/// The label a namespace opts in with (opt-in selection).
pub const INCLUDE_LABEL: &str = "policy.sigil.dev/include";
/// The label a namespace opts out with (opt-out selection).
pub const EXCLUDE_LABEL: &str = "policy.sigil.dev/exclude";
/// policy-controller's opt-in label, honoured when sigil serves
/// policy-controller's objects (opt-in selection only).
pub const POLICY_CONTROLLER_INCLUDE_LABEL: &str = "policy.sigstore.dev/include";

/// How admission selects namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Selection {
    /// Only namespaces labelled `policy.sigil.dev/include=true`.
    OptIn,
    /// Every namespace but those labelled `policy.sigil.dev/exclude=true`.
    OptOut,
}

/// The settings that choose the audited namespaces, named alike in
/// `sigil-audit` and `sigil audit` and after the chart's values
/// (`namespaceSelection`, `audit.unenforcedNamespaces`). The hidden aliases
/// are the names of the previous release (`sigil-webhook --audit-*`,
/// `sigil audit --selection` and `--all-namespaces`).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ScopeArgs {
    /// How admission selects namespaces (the chart's namespaceSelection):
    /// the namespaces it guards are audited as enforced.
    #[arg(long, value_enum, default_value = "opt-in", aliases = ["audit-namespace-selection", "selection"])]
    pub namespace_selection: Selection,
    /// Also audit the namespaces admission does not guard yet (their
    /// results say enforced=false): what would break if they opted in.
    /// sigil's own namespace and --exclude-namespace are never audited.
    #[arg(long, aliases = ["audit-unenforced-namespaces", "all-namespaces"])]
    pub unenforced_namespaces: bool,
    /// With opt-in selection, namespaces labelled
    /// policy.sigstore.dev/include=true are guarded too, as admission guards
    /// them when sigil serves policy-controller's objects (the chart's
    /// policyController.serve).
    #[arg(long)]
    pub policy_controller_namespaces: bool,
}

impl ScopeArgs {
    /// The scope, with the namespaces admission never acts in.
    pub fn scope(&self, excluded: Vec<String>) -> Scope {
        Scope {
            selection: self.namespace_selection,
            excluded,
            unenforced: self.unenforced_namespaces,
            policy_controller_namespaces: self.policy_controller_namespaces,
        }
    }
}

/// Which namespaces are audited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Admission's selection.
    pub selection: Selection,
    /// Namespaces never audited (kube-system, sigil's own, the chart's
    /// `excludeNamespaces`): admission never acts there.
    pub excluded: Vec<String>,
    /// Also audit namespaces admission does not guard yet.
    pub unenforced: bool,
    /// Opt-in also by policy-controller's label.
    pub policy_controller_namespaces: bool,
}

impl Default for Scope {
    fn default() -> Self {
        Self {
            selection: Selection::OptIn,
            excluded: vec!["kube-system".into()],
            unenforced: false,
            policy_controller_namespaces: false,
        }
    }
}

/// Whether a namespace is audited, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coverage {
    /// Admission guards it: a `fail` here would be a denial.
    Enforced,
    /// Admission does not guard it (yet); audited because the audit was
    /// asked to show what would break.
    Unenforced,
}

impl Scope {
    /// Whether admission guards `namespace` with `labels`.
    pub fn enforced(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.excluded.iter().any(|n| n == namespace) {
            return false;
        }
        match self.selection {
            Selection::OptIn => {
                let opted = |label: &str| labels.get(label).is_some_and(|v| v == "true");
                opted(INCLUDE_LABEL)
                    || (self.policy_controller_namespaces && opted(POLICY_CONTROLLER_INCLUDE_LABEL))
            }
            Selection::OptOut => labels.get(EXCLUDE_LABEL).is_none_or(|v| v != "true"),
        }
    }

    /// Whether `namespace` is audited, and as what; `None` when not.
    /// Excluded namespaces are never audited, not even as unenforced: sigil
    /// never acts there, so no result would mean anything.
    pub fn coverage(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Option<Coverage> {
        if self.excluded.iter().any(|n| n == namespace) {
            return None;
        }
        if self.enforced(namespace, labels) {
            Some(Coverage::Enforced)
        } else if self.unenforced {
            Some(Coverage::Unenforced)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn policy_controllers_label_opts_a_namespace_in_only_when_its_objects_are_served() {
        let sigstore = labels(&[(POLICY_CONTROLLER_INCLUDE_LABEL, "true")]);
        assert_eq!(Scope::default().coverage("shop", &sigstore), None);
        let serving = Scope {
            policy_controller_namespaces: true,
            ..Scope::default()
        };
        assert_eq!(
            serving.coverage("shop", &sigstore),
            Some(Coverage::Enforced)
        );
        assert_eq!(
            serving.coverage(
                "shop",
                &labels(&[(POLICY_CONTROLLER_INCLUDE_LABEL, "false")])
            ),
            None
        );
        let opt_out = Scope {
            selection: Selection::OptOut,
            policy_controller_namespaces: true,
            ..Scope::default()
        };
        assert_eq!(
            opt_out.coverage(
                "shop",
                &labels(&[
                    (EXCLUDE_LABEL, "true"),
                    (POLICY_CONTROLLER_INCLUDE_LABEL, "true")
                ])
            ),
            None,
            "opt-out excludes by sigil's label whatever the other says"
        );
    }

    #[test]
    fn opt_in_audits_the_namespaces_admission_guards_and_no_others_by_default() {
        let scope = Scope::default();
        assert_eq!(
            scope.coverage("shop", &labels(&[(INCLUDE_LABEL, "true")])),
            Some(Coverage::Enforced)
        );
        assert_eq!(
            scope.coverage("shop", &labels(&[(INCLUDE_LABEL, "yes")])),
            None
        );
        assert_eq!(scope.coverage("shop", &labels(&[])), None);
        assert_eq!(
            scope.coverage("kube-system", &labels(&[(INCLUDE_LABEL, "true")])),
            None,
            "excluded whatever its labels"
        );
    }

    #[test]
    fn opt_out_audits_every_namespace_but_the_labelled_and_excluded_ones() {
        let scope = Scope {
            selection: Selection::OptOut,
            excluded: vec!["kube-system".into(), "sigil-system".into()],
            unenforced: false,
            policy_controller_namespaces: false,
        };
        assert_eq!(
            scope.coverage("shop", &labels(&[])),
            Some(Coverage::Enforced)
        );
        assert_eq!(
            scope.coverage("shop", &labels(&[(EXCLUDE_LABEL, "true")])),
            None
        );
        assert_eq!(scope.coverage("sigil-system", &labels(&[])), None);
    }

    #[test]
    fn the_what_would_break_view_adds_unguarded_namespaces_marked_as_such() {
        let scope = Scope {
            unenforced: true,
            ..Scope::default()
        };
        assert_eq!(
            scope.coverage("shop", &labels(&[])),
            Some(Coverage::Unenforced)
        );
        assert_eq!(
            scope.coverage("shop", &labels(&[(INCLUDE_LABEL, "true")])),
            Some(Coverage::Enforced)
        );
        assert_eq!(scope.coverage("kube-system", &labels(&[])), None);
    }
}

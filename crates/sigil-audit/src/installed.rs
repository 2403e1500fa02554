//! The audit settings of an installed sigil, read back from what the chart
//! rendered (`sigil audit --from-cluster`): the audit Deployment's
//! arguments when the audit runs, else the webhook Deployment's arguments
//! and its webhook configuration's namespace selector. The arguments are
//! parsed by the very flag definitions the programs use (`sigil-audit`'s
//! [`Args`], `sigil-judge`'s `JudgeArgs`), so a local audit and the
//! cluster's cannot read one setting two ways.

use std::collections::BTreeMap;

use clap::{CommandFactory as _, FromArgMatches as _, Parser};
use sigil_judge::args::JudgeArgs;
use sigil_policy::model::NoMatchPolicy;

use crate::program::Args;
use crate::scope::{
    EXCLUDE_LABEL, INCLUDE_LABEL, POLICY_CONTROLLER_INCLUDE_LABEL, Scope, Selection,
};

/// What an installed sigil judges by besides its policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// What images no policy selects get (the chart's noMatchPolicy).
    pub no_match: NoMatchPolicy,
    /// The namespaces admission guards, and whether unguarded ones are
    /// audited too.
    pub scope: Scope,
}

/// The settings of the audit Deployment's container `args`.
pub fn from_audit_args(args: &[String]) -> Result<Installed, clap::Error> {
    let parsed = Args::try_parse_from(
        std::iter::once("sigil-audit".to_owned()).chain(args.iter().cloned()),
    )?;
    Ok(Installed {
        no_match: parsed.judge.no_match_policy(),
        scope: parsed.audit_scope(),
    })
}

/// The webhook's judge flags alone, to read them out of its arguments.
#[derive(Debug, Parser)]
#[command(name = "sigil-webhook")]
struct WebhookJudge {
    #[command(flatten)]
    judge: JudgeArgs,
}

/// The settings of the webhook Deployment's container `args`, with the
/// namespace selection its webhook configuration has (the webhook itself
/// has no flag for it: the API server selects). Admission-only flags are
/// passed over; the judge's are parsed as the webhook parses them.
/// `policy_controller_namespaces`: whether an entry of that configuration
/// also selects namespaces by policy-controller's label
/// ([`selects_policy_controller_namespaces`]).
pub fn from_webhook_args(
    args: &[String],
    selection: Selection,
    policy_controller_namespaces: bool,
) -> Result<Installed, clap::Error> {
    let command = WebhookJudge::command();
    let mut takes_value = BTreeMap::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let value = arg.get_action().takes_values();
        takes_value.insert(long.to_owned(), value);
        for alias in arg.get_all_aliases().unwrap_or_default() {
            takes_value.insert(alias.to_owned(), value);
        }
    }
    let mut kept = vec!["sigil-webhook".to_owned()];
    let mut rest = args.iter().peekable();
    while let Some(arg) = rest.next() {
        let Some(flag) = arg.strip_prefix("--") else {
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, _)) => (name, true),
            None => (flag, false),
        };
        // `--flag value`: the value is the next argument when it is not a flag.
        let separate = !inline && rest.peek().is_some_and(|next| !next.starts_with("--"));
        match takes_value.get(name) {
            Some(&value) => {
                kept.push(arg.clone());
                if value && separate {
                    kept.extend(rest.next().cloned());
                }
            }
            None => {
                if separate {
                    rest.next();
                }
            }
        }
    }
    let matches = command.try_get_matches_from(kept)?;
    let parsed = WebhookJudge::from_arg_matches(&matches)?;
    Ok(Installed {
        no_match: parsed.judge.no_match_policy(),
        scope: Scope {
            selection,
            excluded: parsed.judge.excluded_namespaces(),
            unenforced: false,
            policy_controller_namespaces,
        },
    })
}

/// Whether `selector` is the chart's entry for namespaces opted in with
/// policy-controller's label (`policy.sigstore.dev/include In [true]`).
pub fn selects_policy_controller_namespaces(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> bool {
    selector
        .match_expressions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|e| {
            e.key == POLICY_CONTROLLER_INCLUDE_LABEL
                && e.operator == "In"
                && e.values.as_deref() == Some(&["true".to_owned()][..])
        })
}

/// The selection a webhook configuration's `namespaceSelector` makes, as
/// the chart renders it: `policy.sigil.dev/exclude NotIn [true]` is
/// opt-out, `policy.sigil.dev/include In [true]` opt-in; `None` for any
/// other selector (one the chart did not render).
pub fn selection_of(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Option<Selection> {
    let expressions = selector.match_expressions.as_deref().unwrap_or_default();
    let has = |key: &str, operator: &str| {
        expressions.iter().any(|e| {
            e.key == key
                && e.operator == operator
                && e.values.as_deref() == Some(&["true".to_owned()][..])
        })
    };
    match (has(INCLUDE_LABEL, "In"), has(EXCLUDE_LABEL, "NotIn")) {
        (true, false) => Some(Selection::OptIn),
        (false, true) => Some(Selection::OptOut),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn the_audit_deployments_arguments_give_its_selection_exclusions_and_no_match() {
        let installed = from_audit_args(&strings(&[
            "--metrics-listen=0.0.0.0:9090",
            "--namespace=sigil",
            "--exclude-namespace=kube-system",
            "--exclude-namespace=infra",
            "--policy-snapshot-secret=sigil/sigil-policy-snapshot",
            "--no-match=warn",
            "--namespace-selection=opt-out",
            "--unenforced-namespaces",
            "--report-format=openreports",
        ]))
        .unwrap();
        assert_eq!(installed.no_match, NoMatchPolicy::Warn);
        assert_eq!(
            installed.scope,
            Scope {
                selection: Selection::OptOut,
                excluded: vec!["kube-system".into(), "infra".into(), "sigil".into()],
                unenforced: true,
                policy_controller_namespaces: false,
            }
        );
    }

    #[test]
    fn the_webhook_deployments_judge_flags_are_read_and_its_admission_flags_passed_over() {
        let installed = from_webhook_args(
            &strings(&[
                "--listen=0.0.0.0:8443",
                "--tls-cert=/tls/tls.crt",
                "--tls-key",
                "/tls/tls.key",
                "--pin=matched",
                "--allow-unpinned",
                "--namespace",
                "sigil",
                "--exclude-namespace=infra",
                "--no-match=allow",
            ]),
            Selection::OptIn,
            true,
        )
        .unwrap();
        assert_eq!(installed.no_match, NoMatchPolicy::Allow);
        assert_eq!(
            installed.scope,
            Scope {
                selection: Selection::OptIn,
                excluded: vec!["infra".into(), "sigil".into()],
                unenforced: false,
                policy_controller_namespaces: true,
            }
        );
    }

    #[test]
    fn a_judge_flag_with_a_value_the_webhook_would_refuse_is_an_error_naming_it() {
        let err = from_webhook_args(&strings(&["--no-match=maybe"]), Selection::OptIn, false)
            .unwrap_err();
        assert!(err.to_string().contains("--no-match"), "{err}");
    }

    fn selector(key: &str, operator: &str) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: key.into(),
                    operator: operator.into(),
                    values: Some(vec!["true".into()]),
                },
                LabelSelectorRequirement {
                    key: "kubernetes.io/metadata.name".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["kube-system".into()]),
                },
            ]),
            match_labels: None,
        }
    }

    #[test]
    fn the_charts_namespace_selectors_read_back_as_their_selection() {
        assert_eq!(
            selection_of(&selector(INCLUDE_LABEL, "In")),
            Some(Selection::OptIn)
        );
        assert_eq!(
            selection_of(&selector(EXCLUDE_LABEL, "NotIn")),
            Some(Selection::OptOut)
        );
        assert_eq!(selection_of(&selector("team", "In")), None);
        assert_eq!(selection_of(&LabelSelector::default()), None);
    }
}

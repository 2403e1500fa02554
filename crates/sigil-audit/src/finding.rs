//! One result of the audit: a (workload, container, running digest, policy)
//! with pass / fail / warn / error / skip, the authorities tried and the
//! cause exactly as a denial words it. Turning a container's verdict into
//! findings is here, so the reports, the metrics and `sigil audit` print
//! the same thing. A `mode: audit` policy's findings carry mode `audit`:
//! what it would deny if it were enforced, never what admission does.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::Serialize;
use sigil_judge::judge::{PolicyOutcome, Verdict};
use sigil_policy::model::Mode;

use crate::scope::Coverage;
use crate::workload::{ContainerList, Workload};

/// The pseudo-policy of images no ClusterImagePolicy selects: what
/// `noMatchPolicy` decides about them.
pub const NO_MATCH_POLICY: &str = "noMatchPolicy";
/// The pseudo-policy of containers whose running digest cannot be told.
pub const RUNNING_DIGEST_POLICY: &str = "runningDigest";
/// The pseudo-policy of a verification that failed before any policy
/// could say anything (no policy selecting the image was known).
pub const VERIFICATION_POLICY: &str = "verification";

/// The longest message kept per result, in bytes: a denial line is at most
/// 4 KiB, and a report holds hundreds of results within the API server's
/// object size limit.
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// What a policy decided, in the report API's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The policy's requirements are met.
    Pass,
    /// Met, with warnings (Rego `warning`, `noMatchPolicy: warn`).
    Warn,
    /// Not met: admission would deny (or warn, in `mode: warn`).
    Fail,
    /// Could not be evaluated: a registry did not answer, the running
    /// digest is unknown, or the time ran out. Never a pass.
    Error,
    /// Not applicable: no policy selects the image and `noMatchPolicy` is
    /// `allow`.
    Skip,
}

impl Outcome {
    /// The report API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Warn => "warn",
            Self::Fail => "fail",
            Self::Error => "error",
            Self::Skip => "skip",
        }
    }

    /// How bad it is, for "the worst of": fail > error > warn > pass > skip.
    pub fn severity(self) -> u8 {
        match self {
            Self::Skip => 0,
            Self::Pass => 1,
            Self::Warn => 2,
            Self::Error => 3,
            Self::Fail => 4,
        }
    }

    /// Every outcome, in report-summary order.
    pub const ALL: [Outcome; 5] = [
        Outcome::Pass,
        Outcome::Fail,
        Outcome::Warn,
        Outcome::Error,
        Outcome::Skip,
    ];
}

/// One result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The pod's namespace.
    pub namespace: String,
    /// The workload the pods belong to.
    pub workload: Workload,
    /// The container's list.
    #[serde(serialize_with = "list_label")]
    pub list: ContainerList,
    /// The container's name.
    pub container: String,
    /// The image as the pod spec names it.
    pub image: String,
    /// The digest that runs (empty when unknown).
    pub digest: String,
    /// The ClusterImagePolicy, or one of the pseudo-policies
    /// ([`NO_MATCH_POLICY`], [`RUNNING_DIGEST_POLICY`], [`VERIFICATION_POLICY`]).
    pub policy: String,
    /// `enforce`, `warn` or `audit` for a ClusterImagePolicy; for
    /// `noMatchPolicy` its value (`deny`, `warn`, `allow`); `audit` for a
    /// `mode: audit` judgement that failed before any policy answered;
    /// empty otherwise.
    pub mode: String,
    /// The authorities tried (`name (kind)`), passing ones only on a pass.
    pub authorities: Vec<String>,
    /// The outcome.
    pub outcome: Outcome,
    /// The cause as a denial (or admission warning) words it.
    pub message: String,
    /// Whether admission guards the namespace.
    pub enforced: bool,
    /// Pods of the workload running this container at this digest.
    pub pods: usize,
}

fn list_label<S: serde::Serializer>(list: &ContainerList, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(list.label())
}

impl Finding {
    /// Whether admission denies what this finding says (a `fail` or `error`
    /// of an enforcing policy, a denying `noMatchPolicy`, an unknown
    /// digest), wherever admission guards the namespace; `warn` and
    /// `audit` policies never deny.
    pub fn denies(&self) -> bool {
        !matches!(self.mode.as_str(), "warn" | "audit")
            && matches!(self.outcome, Outcome::Fail | Outcome::Error)
    }
}

/// What identifies a finding across audits.
pub type FindingKey = (
    String,
    String,
    String,
    ContainerList,
    String,
    String,
    String,
);

impl Finding {
    /// `(namespace, workload kind, workload name, list, container, digest,
    /// policy)`.
    pub fn key(&self) -> FindingKey {
        (
            self.namespace.clone(),
            self.workload.kind.clone(),
            self.workload.name.clone(),
            self.list,
            self.container.clone(),
            self.digest.clone(),
            self.policy.clone(),
        )
    }
}

/// Orders findings as reports and `sigil audit` list them.
pub fn report_order(a: &Finding, b: &Finding) -> Ordering {
    a.key().cmp(&b.key())
}

/// `s` on one line, control characters written as `\u{..}` (text from pods
/// and registries reaches reports and logs), cut to [`MAX_MESSAGE_BYTES`].
pub fn printable_line(s: &str) -> String {
    // The webhook's flattening of a denial line: each line trimmed, joined
    // by spaces, control characters escaped.
    let flat = s
        .split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut out = String::with_capacity(flat.len());
    for c in flat.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    if out.len() <= MAX_MESSAGE_BYTES {
        return out;
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !out.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} more bytes)",
        out.get(..end).unwrap_or_default(),
        out.len() - end
    )
}

/// How the audit judged one container.
#[derive(Debug, Clone)]
pub enum Judgement {
    /// The running digest is unknown.
    UnknownDigest(String),
    /// No policy selects the image: `noMatchPolicy`'s verdict.
    NoMatch {
        /// `deny`, `warn` or `allow`.
        setting: &'static str,
        /// The verdict admission gives such images.
        verdict: std::sync::Arc<Verdict>,
    },
    /// Policies select the image.
    Judged {
        /// Names of the policies whose globs select it (for errors that
        /// come before any policy answered).
        selecting: Vec<String>,
        /// The verdict, or why there is none (a deadline, pull secrets
        /// that cannot be read).
        verdict: Result<std::sync::Arc<Verdict>, String>,
    },
}

/// Where a container's findings go.
#[derive(Debug, Clone)]
pub struct Site<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Workload.
    pub workload: &'a Workload,
    /// The container's list.
    pub list: ContainerList,
    /// The container's name.
    pub container: &'a str,
    /// Its image as written.
    pub image: &'a str,
    /// Its running digest, when known.
    pub digest: &'a str,
    /// Whether admission guards the namespace.
    pub coverage: Coverage,
}

impl Site<'_> {
    fn finding(
        &self,
        policy: &str,
        mode: &str,
        authorities: Vec<String>,
        outcome: Outcome,
        message: &str,
    ) -> Finding {
        Finding {
            namespace: self.namespace.to_string(),
            workload: self.workload.clone(),
            list: self.list,
            container: self.container.to_string(),
            image: self.image.to_string(),
            digest: self.digest.to_string(),
            policy: policy.to_string(),
            mode: mode.to_string(),
            authorities,
            outcome,
            message: printable_line(message),
            enforced: self.coverage == Coverage::Enforced,
            pods: 1,
        }
    }
}

/// The findings of one container judged as `judgement`.
pub fn findings(site: &Site<'_>, judgement: &Judgement) -> Vec<Finding> {
    match judgement {
        Judgement::UnknownDigest(why) => {
            vec![site.finding(RUNNING_DIGEST_POLICY, "", Vec::new(), Outcome::Error, why)]
        }
        Judgement::NoMatch { setting, verdict } => {
            let outcome = match verdict.outcome() {
                sigil_judge::judge::Outcome::Denied => Outcome::Fail,
                sigil_judge::judge::Outcome::Warned => Outcome::Warn,
                sigil_judge::judge::Outcome::Allowed => Outcome::Skip,
            };
            let message = verdict
                .reasons
                .iter()
                .chain(&verdict.warnings)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            let message = if message.is_empty() {
                "no ClusterImagePolicy selects this image and noMatchPolicy is allow".to_string()
            } else {
                message
            };
            vec![site.finding(NO_MATCH_POLICY, setting, Vec::new(), outcome, &message)]
        }
        Judgement::Judged {
            selecting,
            verdict: Err(cause),
        } => errors(site, selecting, cause),
        Judgement::Judged {
            selecting,
            verdict: Ok(v),
        } if v.results.is_empty() => {
            // The judge answered before any policy did (not ready, a
            // deadline, an unparsable name): nothing was verified.
            let cause = v
                .reasons
                .iter()
                .chain(&v.warnings)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            errors(site, selecting, &cause)
        }
        Judgement::Judged { verdict: Ok(v), .. } => policy_findings(site, v),
    }
}

/// The findings of the `mode: audit` policies that judged one container
/// (`None`: none selects its image): one per policy, mode `audit`, or one
/// error when the judgement failed before any policy answered.
pub fn audit_mode_findings(
    site: &Site<'_>,
    verdict: Option<&Result<std::sync::Arc<Verdict>, String>>,
) -> Vec<Finding> {
    match verdict {
        None => Vec::new(),
        Some(Ok(v)) => policy_findings(site, v),
        Some(Err(cause)) => vec![site.finding(
            VERIFICATION_POLICY,
            Mode::Audit.as_str(),
            Vec::new(),
            Outcome::Error,
            cause,
        )],
    }
}

/// One finding per policy result of `verdict`.
fn policy_findings(site: &Site<'_>, verdict: &Verdict) -> Vec<Finding> {
    verdict
        .results
        .iter()
        .map(|p| {
            let outcome = match p.outcome {
                PolicyOutcome::Pass => Outcome::Pass,
                PolicyOutcome::Warn => Outcome::Warn,
                PolicyOutcome::Inconclusive => Outcome::Error,
                PolicyOutcome::Fail => Outcome::Fail,
                PolicyOutcome::Skipped => Outcome::Skip,
            };
            let passed = matches!(p.outcome, PolicyOutcome::Pass | PolicyOutcome::Warn);
            let authorities = p
                .authorities
                .iter()
                .filter(|a| !passed || a.passed)
                .map(|a| format!("{} ({})", a.name, a.kind))
                .collect();
            site.finding(&p.policy, p.mode.as_str(), authorities, outcome, &p.message)
        })
        .collect()
}

fn errors(site: &Site<'_>, selecting: &[String], cause: &str) -> Vec<Finding> {
    let cause = if cause.is_empty() {
        "the verification gave no answer"
    } else {
        cause
    };
    if selecting.is_empty() {
        return vec![site.finding(VERIFICATION_POLICY, "", Vec::new(), Outcome::Error, cause)];
    }
    selecting
        .iter()
        .map(|p| site.finding(p, "", Vec::new(), Outcome::Error, cause))
        .collect()
}

/// Merges findings of the same key (pods of one workload running the same
/// container at the same digest), counting the pods, in report order.
pub fn aggregate(findings: impl IntoIterator<Item = Finding>) -> Vec<Finding> {
    let mut by_key: BTreeMap<FindingKey, Finding> = BTreeMap::new();
    for f in findings {
        match by_key.get_mut(&f.key()) {
            Some(held) => {
                held.pods += f.pods;
                // Pods of one workload judged under different snapshots in
                // the same pass cannot happen, but a worse outcome wins.
                if f.outcome.severity() > held.outcome.severity() {
                    held.outcome = f.outcome;
                    held.message = f.message;
                }
            }
            None => {
                by_key.insert(f.key(), f);
            }
        }
    }
    by_key.into_values().collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::sync::Arc;

    use sigil_judge::judge::{AuthorityVerdict, PolicyVerdict};

    use super::*;

    fn site(workload: &Workload) -> Site<'_> {
        Site {
            namespace: "shop",
            workload,
            list: ContainerList::Main,
            container: "app",
            image: "r.example/app:1",
            digest: "sha256:aa",
            coverage: Coverage::Enforced,
        }
    }

    fn deployment() -> Workload {
        Workload {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "d1".into(),
        }
    }

    fn verdict(results: Vec<PolicyVerdict>) -> Arc<Verdict> {
        Arc::new(Verdict {
            allowed: results.iter().all(|r| r.outcome != PolicyOutcome::Fail),
            results,
            ..Verdict::default()
        })
    }

    fn policy(name: &str, outcome: PolicyOutcome, message: &str) -> PolicyVerdict {
        PolicyVerdict {
            policy: name.into(),
            mode: Mode::Enforce,
            outcome,
            authorities: vec![
                AuthorityVerdict {
                    name: "a".into(),
                    kind: "key",
                    passed: outcome == PolicyOutcome::Pass,
                },
                AuthorityVerdict {
                    name: "b".into(),
                    kind: "keyless",
                    passed: false,
                },
            ],
            message: message.into(),
        }
    }

    #[test]
    fn each_policy_becomes_one_result_with_the_denial_text() {
        let w = deployment();
        let v = verdict(vec![
            policy("signed", PolicyOutcome::Pass, ""),
            policy(
                "attested",
                PolicyOutcome::Fail,
                "policy attested failed: authority a (key): no signature found\n  - looked in x",
            ),
            policy(
                "remote",
                PolicyOutcome::Inconclusive,
                "policy remote failed: authority a (key): cannot reach registry",
            ),
        ]);
        let got = findings(
            &site(&w),
            &Judgement::Judged {
                selecting: vec![],
                verdict: Ok(v),
            },
        );
        let outcomes: Vec<(&str, Outcome)> =
            got.iter().map(|f| (f.policy.as_str(), f.outcome)).collect();
        assert_eq!(
            outcomes,
            [
                ("signed", Outcome::Pass),
                ("attested", Outcome::Fail),
                ("remote", Outcome::Error)
            ]
        );
        assert_eq!(got[0].authorities, ["a (key)"], "a pass names who vouched");
        assert_eq!(got[1].authorities, ["a (key)", "b (keyless)"]);
        assert_eq!(
            got[1].message,
            "policy attested failed: authority a (key): no signature found - looked in x"
        );
        assert!(got.iter().all(|f| f.enforced && f.mode == "enforce"));
    }

    #[test]
    fn unselected_images_follow_no_match_policy_and_unknown_digests_are_errors() {
        let w = deployment();
        let deny = Arc::new(Verdict::deny(
            vec![],
            vec!["no ClusterImagePolicy matches it and noMatchPolicy is deny".into()],
        ));
        let f = &findings(
            &site(&w),
            &Judgement::NoMatch {
                setting: "deny",
                verdict: deny,
            },
        )[0];
        assert_eq!(
            (f.policy.as_str(), f.outcome),
            (NO_MATCH_POLICY, Outcome::Fail)
        );
        assert_eq!(f.mode, "deny");
        let allow = Arc::new(Verdict::allow(vec![]));
        let f = &findings(
            &site(&w),
            &Judgement::NoMatch {
                setting: "allow",
                verdict: allow,
            },
        )[0];
        assert_eq!(f.outcome, Outcome::Skip);
        let f = &findings(&site(&w), &Judgement::UnknownDigest("no digest".into()))[0];
        assert_eq!(
            (f.policy.as_str(), f.outcome),
            (RUNNING_DIGEST_POLICY, Outcome::Error)
        );
    }

    #[test]
    fn a_lookup_that_gave_no_answer_is_an_error_for_every_selecting_policy_never_a_pass() {
        let w = deployment();
        let got = findings(
            &site(&w),
            &Judgement::Judged {
                selecting: vec!["p1".into(), "p2".into()],
                verdict: Err("registry r.example did not answer before the deadline".into()),
            },
        );
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|f| f.outcome == Outcome::Error));
        let not_ready = Arc::new(Verdict::deny(
            vec![],
            vec!["no policy snapshot is loaded yet".into()],
        ));
        let got = findings(
            &site(&w),
            &Judgement::Judged {
                selecting: vec![],
                verdict: Ok(not_ready),
            },
        );
        assert_eq!(
            (got[0].policy.as_str(), got[0].outcome),
            (VERIFICATION_POLICY, Outcome::Error)
        );
    }

    #[test]
    fn pods_of_one_workload_at_one_digest_are_one_result_counting_them() {
        let w = deployment();
        let one = findings(&site(&w), &Judgement::UnknownDigest("x".into()));
        let merged = aggregate(one.iter().cloned().chain(one.iter().cloned()));
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].pods, 2);
    }

    #[test]
    fn messages_are_one_printable_bounded_line() {
        assert_eq!(printable_line("a\n  b\u{1b}[2K"), "a b\\u{1b}[2K");
        let long = "é".repeat(5000);
        let cut = printable_line(&long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES + 32, "{}", cut.len());
        assert!(cut.ends_with("more bytes)"));
    }
}

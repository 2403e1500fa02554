//! Certificate-claim flags shared by `sigil verify` and `sigil verify-bundle`:
//! the Fulcio extensions a keyless signer's certificate must carry beyond its
//! identity and issuer (source repository, ref, build signer, runner, …),
//! what `gh attestation verify --repo/--owner/--signer-workflow` checks.

use anyhow::{Context as _, Result, bail};
use clap::Args;
use sigil_verifier::identity::{Claim, ClaimPolicy, IdentityMatcher};

/// Flags that require certificate claims.
#[derive(Args, Debug, Default, Clone)]
pub(crate) struct ClaimArgs {
    /// Require a Fulcio certificate claim to equal a value: NAME=VALUE, NAME
    /// as sigstore-go names it (sourceRepositoryURI, sourceRepositoryRef,
    /// sourceRepositoryOwnerURI, sourceRepositoryVisibilityAtSigning,
    /// buildSignerURI, buildSignerDigest, runnerEnvironment, buildTrigger, …).
    /// Repeatable; every claim given must match.
    #[arg(long = "certificate-claim", value_name = "NAME=VALUE")]
    claim: Vec<String>,
    /// Require a Fulcio certificate claim to match a regular expression
    /// (unanchored, as --certificate-identity-regexp): NAME=RE. Repeatable.
    #[arg(long = "certificate-claim-regexp", value_name = "NAME=RE")]
    claim_regexp: Vec<String>,
    /// Expected GitHub workflow trigger (cosign's flag; claim githubWorkflowTrigger, 1.3.6.1.4.1.57264.1.2).
    #[arg(long, value_name = "EVENT")]
    certificate_github_workflow_trigger: Option<String>,
    /// Expected GitHub workflow commit SHA (cosign's flag; claim githubWorkflowSHA, .1.3).
    #[arg(long, value_name = "SHA")]
    certificate_github_workflow_sha: Option<String>,
    /// Expected GitHub workflow name (cosign's flag; claim githubWorkflowName, .1.4).
    #[arg(long, value_name = "NAME")]
    certificate_github_workflow_name: Option<String>,
    /// Expected GitHub repository, `owner/repo` (cosign's flag; claim githubWorkflowRepository, .1.5).
    #[arg(long, value_name = "OWNER/REPO")]
    certificate_github_workflow_repository: Option<String>,
    /// Expected GitHub workflow ref, e.g. refs/heads/main (cosign's flag; claim githubWorkflowRef, .1.6).
    #[arg(long, value_name = "REF")]
    certificate_github_workflow_ref: Option<String>,
}

impl ClaimArgs {
    /// Whether any claim flag was given.
    pub(crate) fn any(&self) -> bool {
        !self.claim.is_empty()
            || !self.claim_regexp.is_empty()
            || self.certificate_github_workflow_trigger.is_some()
            || self.certificate_github_workflow_sha.is_some()
            || self.certificate_github_workflow_name.is_some()
            || self.certificate_github_workflow_repository.is_some()
            || self.certificate_github_workflow_ref.is_some()
    }

    /// The claims the flags require, checked for unknown names and
    /// conflicting values.
    pub(crate) fn policies(&self) -> Result<Vec<ClaimPolicy>> {
        let mut out: Vec<ClaimPolicy> = Vec::new();
        let mut add = |claim: Claim, expected: IdentityMatcher, flag: &str| -> Result<()> {
            if let Some(earlier) = out.iter().find(|p| p.claim == claim) {
                bail!(
                    "claim {} is required twice ({} and {flag} {expected}); give it once",
                    claim.name(),
                    earlier.expected
                );
            }
            out.push(ClaimPolicy { claim, expected });
            Ok(())
        };
        let named = [
            (
                Claim::GithubWorkflowTrigger,
                &self.certificate_github_workflow_trigger,
                "--certificate-github-workflow-trigger",
            ),
            (
                Claim::GithubWorkflowSha,
                &self.certificate_github_workflow_sha,
                "--certificate-github-workflow-sha",
            ),
            (
                Claim::GithubWorkflowName,
                &self.certificate_github_workflow_name,
                "--certificate-github-workflow-name",
            ),
            (
                Claim::GithubWorkflowRepository,
                &self.certificate_github_workflow_repository,
                "--certificate-github-workflow-repository",
            ),
            (
                Claim::GithubWorkflowRef,
                &self.certificate_github_workflow_ref,
                "--certificate-github-workflow-ref",
            ),
        ];
        for (claim, value, flag) in named {
            if let Some(v) = value {
                add(claim, IdentityMatcher::Exact(v.clone()), flag)?;
            }
        }
        for arg in &self.claim {
            let (claim, value) = split(arg, "--certificate-claim")?;
            add(
                claim,
                IdentityMatcher::Exact(value.to_owned()),
                "--certificate-claim",
            )?;
        }
        for arg in &self.claim_regexp {
            let (claim, value) = split(arg, "--certificate-claim-regexp")?;
            let re = regex::RegexBuilder::new(value)
                .size_limit(1 << 20)
                .build()
                .with_context(|| {
                    format!(
                        "invalid regular expression for claim {}: `{value}`",
                        claim.name()
                    )
                })?;
            add(
                claim,
                IdentityMatcher::Regex(re),
                "--certificate-claim-regexp",
            )?;
        }
        Ok(out)
    }
}

/// Splits `NAME=VALUE` and resolves NAME to a claim.
fn split<'a>(arg: &'a str, flag: &str) -> Result<(Claim, &'a str)> {
    let Some((name, value)) = arg.split_once('=') else {
        bail!("{flag} takes NAME=VALUE, got `{arg}`");
    };
    let Some(claim) = Claim::from_name(name.trim()) else {
        let known: Vec<&str> = Claim::all().map(Claim::name).collect();
        bail!(
            "{flag}: unknown certificate claim `{name}`; use one of {}",
            known.join(", ")
        );
    };
    Ok((claim, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(claim: &[&str], regexp: &[&str]) -> ClaimArgs {
        ClaimArgs {
            claim: claim.iter().map(|s| (*s).to_owned()).collect(),
            claim_regexp: regexp.iter().map(|s| (*s).to_owned()).collect(),
            ..ClaimArgs::default()
        }
    }

    #[test]
    fn claims_are_named_as_sigstore_go_names_them_in_any_case() {
        let p = args(
            &["sourceRepositoryURI=https://github.com/acme/app"],
            &["buildsigneruri=^https://github.com/acme/app/"],
        )
        .policies()
        .unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].claim, Claim::SourceRepositoryUri);
        assert!(p[0].expected.matches("https://github.com/acme/app"));
        assert_eq!(p[1].claim, Claim::BuildSignerUri);
        assert!(
            p[1].expected
                .matches("https://github.com/acme/app/.github/workflows/x.yml@refs/heads/main")
        );
        assert!(!p[1].expected.matches("https://github.com/other/app/"));
    }

    #[test]
    fn an_unknown_claim_is_refused_with_the_known_names() {
        let err = args(&["sourceRepo=x"], &[])
            .policies()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown certificate claim `sourceRepo`"),
            "{err}"
        );
        assert!(err.contains("sourceRepositoryURI"), "{err}");
    }

    #[test]
    fn a_claim_without_a_value_is_refused() {
        let err = args(&["sourceRepositoryURI"], &[])
            .policies()
            .unwrap_err()
            .to_string();
        assert!(err.contains("NAME=VALUE"), "{err}");
    }

    #[test]
    fn the_same_claim_twice_is_refused() {
        let a = ClaimArgs {
            certificate_github_workflow_repository: Some("acme/app".into()),
            ..args(&["githubWorkflowRepository=acme/other"], &[])
        };
        let err = a.policies().unwrap_err().to_string();
        assert!(err.contains("required twice"), "{err}");
    }

    #[test]
    fn cosigns_github_workflow_flags_map_to_the_deprecated_extensions() {
        let a = ClaimArgs {
            certificate_github_workflow_repository: Some("acme/app".into()),
            certificate_github_workflow_ref: Some("refs/heads/main".into()),
            ..ClaimArgs::default()
        };
        assert!(a.any());
        let p = a.policies().unwrap();
        let oids: Vec<&str> = p.iter().map(|c| c.claim.oid()).collect();
        assert_eq!(oids, ["1.3.6.1.4.1.57264.1.5", "1.3.6.1.4.1.57264.1.6"]);
        assert!(!ClaimArgs::default().any());
    }
}

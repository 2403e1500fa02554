//! Who signed: the identity a Fulcio certificate vouches for (its subject
//! alternative name and OIDC issuer), the Fulcio extensions that describe the
//! signing workload (GitHub workflow, source repository, build), and matching
//! all of that against a policy's expected subject and issuer.
//!
//! The extension OIDs and their encodings follow Fulcio's
//! `docs/oid-info.md`: `.1.1`–`.1.6` hold the raw string bytes (deprecated),
//! `.1.8` onwards hold a DER UTF8String.

use serde::Serialize;

use crate::sct::{
    TAG_EXPLICIT_0, TAG_IA5_STRING, TAG_PRINTABLE_STRING, TAG_UTF8_STRING, describe, read_tlv,
};
use crate::x509::Certificate;

/// OID prefix of every Fulcio extension.
const FULCIO_OID_PREFIX: &str = "1.3.6.1.4.1.57264.1.";
/// Deprecated issuer extension (raw bytes).
const OID_ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";
/// Issuer extension (DER UTF8String).
const OID_ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
/// Fulcio's username SAN (an otherName holding a UTF8String).
const OID_SAN_USERNAME: &str = "1.3.6.1.4.1.57264.1.7";

/// The Fulcio extensions beyond the issuer, each present only when the
/// certificate carries it. Serialised with sigstore-go's JSON names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FulcioExtensions {
    /// 1.3.6.1.4.1.57264.1.2 (deprecated): the GitHub `event_name` claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github_workflow_trigger: Option<String>,
    /// 1.3.6.1.4.1.57264.1.3 (deprecated): the GitHub `sha` claim.
    #[serde(rename = "githubWorkflowSHA", skip_serializing_if = "Option::is_none")]
    pub github_workflow_sha: Option<String>,
    /// 1.3.6.1.4.1.57264.1.4 (deprecated): the GitHub `workflow` claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github_workflow_name: Option<String>,
    /// 1.3.6.1.4.1.57264.1.5 (deprecated): the GitHub `repository` claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github_workflow_repository: Option<String>,
    /// 1.3.6.1.4.1.57264.1.6 (deprecated): the GitHub `ref` claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github_workflow_ref: Option<String>,
    /// 1.3.6.1.4.1.57264.1.9: the build instructions that signed.
    #[serde(rename = "buildSignerURI", skip_serializing_if = "Option::is_none")]
    pub build_signer_uri: Option<String>,
    /// 1.3.6.1.4.1.57264.1.10: immutable reference to those build instructions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_signer_digest: Option<String>,
    /// 1.3.6.1.4.1.57264.1.11: platform-hosted or self-hosted runner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_environment: Option<String>,
    /// 1.3.6.1.4.1.57264.1.12: the source repository URL.
    #[serde(
        rename = "sourceRepositoryURI",
        skip_serializing_if = "Option::is_none"
    )]
    pub source_repository_uri: Option<String>,
    /// 1.3.6.1.4.1.57264.1.13: the source commit digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_repository_digest: Option<String>,
    /// 1.3.6.1.4.1.57264.1.14: the source ref.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_repository_ref: Option<String>,
    /// 1.3.6.1.4.1.57264.1.15: immutable identifier of the source repository.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_repository_identifier: Option<String>,
    /// 1.3.6.1.4.1.57264.1.16: URL of the source repository's owner.
    #[serde(
        rename = "sourceRepositoryOwnerURI",
        skip_serializing_if = "Option::is_none"
    )]
    pub source_repository_owner_uri: Option<String>,
    /// 1.3.6.1.4.1.57264.1.17: immutable identifier of the owner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_repository_owner_identifier: Option<String>,
    /// 1.3.6.1.4.1.57264.1.18: the top-level build instructions.
    #[serde(rename = "buildConfigURI", skip_serializing_if = "Option::is_none")]
    pub build_config_uri: Option<String>,
    /// 1.3.6.1.4.1.57264.1.19: immutable reference to those instructions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_config_digest: Option<String>,
    /// 1.3.6.1.4.1.57264.1.20: the event that started the build.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_trigger: Option<String>,
    /// 1.3.6.1.4.1.57264.1.21: URL of this build run.
    #[serde(rename = "runInvocationURI", skip_serializing_if = "Option::is_none")]
    pub run_invocation_uri: Option<String>,
    /// 1.3.6.1.4.1.57264.1.22: repository visibility when signing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_repository_visibility_at_signing: Option<String>,
    /// 1.3.6.1.4.1.57264.1.23: the CI deployment environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment_environment: Option<String>,
}

/// How each Fulcio extension is encoded.
#[derive(Clone, Copy)]
enum Encoding {
    /// The extension value is the string's bytes.
    Raw,
    /// The extension value is a DER string.
    Der,
}

/// A Fulcio certificate extension beyond the issuer: a claim about the
/// signing workload that a policy can require (source repository, ref,
/// build signer, runner, visibility, …). Named as sigstore-go names them in
/// JSON, which is also how [`FulcioExtensions`] serialises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Claim {
    /// 1.3.6.1.4.1.57264.1.2 (deprecated): the GitHub `event_name` claim.
    GithubWorkflowTrigger,
    /// 1.3.6.1.4.1.57264.1.3 (deprecated): the GitHub `sha` claim.
    GithubWorkflowSha,
    /// 1.3.6.1.4.1.57264.1.4 (deprecated): the GitHub `workflow` claim.
    GithubWorkflowName,
    /// 1.3.6.1.4.1.57264.1.5 (deprecated): the GitHub `repository` claim.
    GithubWorkflowRepository,
    /// 1.3.6.1.4.1.57264.1.6 (deprecated): the GitHub `ref` claim.
    GithubWorkflowRef,
    /// 1.3.6.1.4.1.57264.1.9: the build instructions that signed.
    BuildSignerUri,
    /// 1.3.6.1.4.1.57264.1.10: immutable reference to those instructions.
    BuildSignerDigest,
    /// 1.3.6.1.4.1.57264.1.11: platform-hosted or self-hosted runner.
    RunnerEnvironment,
    /// 1.3.6.1.4.1.57264.1.12: the source repository URL.
    SourceRepositoryUri,
    /// 1.3.6.1.4.1.57264.1.13: the source commit digest.
    SourceRepositoryDigest,
    /// 1.3.6.1.4.1.57264.1.14: the source ref.
    SourceRepositoryRef,
    /// 1.3.6.1.4.1.57264.1.15: immutable identifier of the source repository.
    SourceRepositoryIdentifier,
    /// 1.3.6.1.4.1.57264.1.16: URL of the source repository's owner.
    SourceRepositoryOwnerUri,
    /// 1.3.6.1.4.1.57264.1.17: immutable identifier of the owner.
    SourceRepositoryOwnerIdentifier,
    /// 1.3.6.1.4.1.57264.1.18: the top-level build instructions.
    BuildConfigUri,
    /// 1.3.6.1.4.1.57264.1.19: immutable reference to those instructions.
    BuildConfigDigest,
    /// 1.3.6.1.4.1.57264.1.20: the event that started the build.
    BuildTrigger,
    /// 1.3.6.1.4.1.57264.1.21: URL of this build run.
    RunInvocationUri,
    /// 1.3.6.1.4.1.57264.1.22: repository visibility when signing.
    SourceRepositoryVisibilityAtSigning,
    /// 1.3.6.1.4.1.57264.1.23: the CI deployment environment.
    DeploymentEnvironment,
}

/// Each claim with its JSON name, OID and encoding.
const CLAIMS: [(Claim, &str, &str, Encoding); 20] = [
    (
        Claim::GithubWorkflowTrigger,
        "githubWorkflowTrigger",
        "1.3.6.1.4.1.57264.1.2",
        Encoding::Raw,
    ),
    (
        Claim::GithubWorkflowSha,
        "githubWorkflowSHA",
        "1.3.6.1.4.1.57264.1.3",
        Encoding::Raw,
    ),
    (
        Claim::GithubWorkflowName,
        "githubWorkflowName",
        "1.3.6.1.4.1.57264.1.4",
        Encoding::Raw,
    ),
    (
        Claim::GithubWorkflowRepository,
        "githubWorkflowRepository",
        "1.3.6.1.4.1.57264.1.5",
        Encoding::Raw,
    ),
    (
        Claim::GithubWorkflowRef,
        "githubWorkflowRef",
        "1.3.6.1.4.1.57264.1.6",
        Encoding::Raw,
    ),
    (
        Claim::BuildSignerUri,
        "buildSignerURI",
        "1.3.6.1.4.1.57264.1.9",
        Encoding::Der,
    ),
    (
        Claim::BuildSignerDigest,
        "buildSignerDigest",
        "1.3.6.1.4.1.57264.1.10",
        Encoding::Der,
    ),
    (
        Claim::RunnerEnvironment,
        "runnerEnvironment",
        "1.3.6.1.4.1.57264.1.11",
        Encoding::Der,
    ),
    (
        Claim::SourceRepositoryUri,
        "sourceRepositoryURI",
        "1.3.6.1.4.1.57264.1.12",
        Encoding::Der,
    ),
    (
        Claim::SourceRepositoryDigest,
        "sourceRepositoryDigest",
        "1.3.6.1.4.1.57264.1.13",
        Encoding::Der,
    ),
    (
        Claim::SourceRepositoryRef,
        "sourceRepositoryRef",
        "1.3.6.1.4.1.57264.1.14",
        Encoding::Der,
    ),
    (
        Claim::SourceRepositoryIdentifier,
        "sourceRepositoryIdentifier",
        "1.3.6.1.4.1.57264.1.15",
        Encoding::Der,
    ),
    (
        Claim::SourceRepositoryOwnerUri,
        "sourceRepositoryOwnerURI",
        "1.3.6.1.4.1.57264.1.16",
        Encoding::Der,
    ),
    (
        Claim::SourceRepositoryOwnerIdentifier,
        "sourceRepositoryOwnerIdentifier",
        "1.3.6.1.4.1.57264.1.17",
        Encoding::Der,
    ),
    (
        Claim::BuildConfigUri,
        "buildConfigURI",
        "1.3.6.1.4.1.57264.1.18",
        Encoding::Der,
    ),
    (
        Claim::BuildConfigDigest,
        "buildConfigDigest",
        "1.3.6.1.4.1.57264.1.19",
        Encoding::Der,
    ),
    (
        Claim::BuildTrigger,
        "buildTrigger",
        "1.3.6.1.4.1.57264.1.20",
        Encoding::Der,
    ),
    (
        Claim::RunInvocationUri,
        "runInvocationURI",
        "1.3.6.1.4.1.57264.1.21",
        Encoding::Der,
    ),
    (
        Claim::SourceRepositoryVisibilityAtSigning,
        "sourceRepositoryVisibilityAtSigning",
        "1.3.6.1.4.1.57264.1.22",
        Encoding::Der,
    ),
    (
        Claim::DeploymentEnvironment,
        "deploymentEnvironment",
        "1.3.6.1.4.1.57264.1.23",
        Encoding::Der,
    ),
];

impl Claim {
    /// Every claim, in OID order.
    pub fn all() -> impl Iterator<Item = Claim> {
        CLAIMS.iter().map(|(c, ..)| *c)
    }

    /// The claim named `name` (sigstore-go's JSON name, e.g.
    /// `sourceRepositoryURI`; ASCII case is ignored).
    pub fn from_name(name: &str) -> Option<Claim> {
        CLAIMS
            .iter()
            .find(|(_, n, ..)| n.eq_ignore_ascii_case(name))
            .map(|(c, ..)| *c)
    }

    /// The claim carried by the extension with this dotted OID.
    fn from_oid(oid: &str) -> Option<(Claim, Encoding)> {
        CLAIMS
            .iter()
            .find(|(_, _, o, _)| *o == oid)
            .map(|(c, _, _, e)| (*c, *e))
    }

    /// CLAIMS lists every variant in declaration order (a test checks it),
    /// so the row is found at the variant's index.
    fn row(self) -> Option<&'static (Claim, &'static str, &'static str, Encoding)> {
        CLAIMS.get(self as usize).filter(|r| r.0 == self)
    }

    /// sigstore-go's JSON name of the claim, e.g. `sourceRepositoryURI`.
    pub fn name(self) -> &'static str {
        self.row().map_or("", |r| r.1)
    }

    /// The dotted OID of the Fulcio extension that carries it.
    pub fn oid(self) -> &'static str {
        self.row().map_or("", |r| r.2)
    }

    /// The claim's value in `extensions`, when the certificate carries it.
    pub fn value(self, e: &FulcioExtensions) -> Option<&str> {
        let v = match self {
            Claim::GithubWorkflowTrigger => &e.github_workflow_trigger,
            Claim::GithubWorkflowSha => &e.github_workflow_sha,
            Claim::GithubWorkflowName => &e.github_workflow_name,
            Claim::GithubWorkflowRepository => &e.github_workflow_repository,
            Claim::GithubWorkflowRef => &e.github_workflow_ref,
            Claim::BuildSignerUri => &e.build_signer_uri,
            Claim::BuildSignerDigest => &e.build_signer_digest,
            Claim::RunnerEnvironment => &e.runner_environment,
            Claim::SourceRepositoryUri => &e.source_repository_uri,
            Claim::SourceRepositoryDigest => &e.source_repository_digest,
            Claim::SourceRepositoryRef => &e.source_repository_ref,
            Claim::SourceRepositoryIdentifier => &e.source_repository_identifier,
            Claim::SourceRepositoryOwnerUri => &e.source_repository_owner_uri,
            Claim::SourceRepositoryOwnerIdentifier => &e.source_repository_owner_identifier,
            Claim::BuildConfigUri => &e.build_config_uri,
            Claim::BuildConfigDigest => &e.build_config_digest,
            Claim::BuildTrigger => &e.build_trigger,
            Claim::RunInvocationUri => &e.run_invocation_uri,
            Claim::SourceRepositoryVisibilityAtSigning => {
                &e.source_repository_visibility_at_signing
            }
            Claim::DeploymentEnvironment => &e.deployment_environment,
        };
        v.as_deref()
    }

    fn slot(self, e: &mut FulcioExtensions) -> &mut Option<String> {
        match self {
            Claim::GithubWorkflowTrigger => &mut e.github_workflow_trigger,
            Claim::GithubWorkflowSha => &mut e.github_workflow_sha,
            Claim::GithubWorkflowName => &mut e.github_workflow_name,
            Claim::GithubWorkflowRepository => &mut e.github_workflow_repository,
            Claim::GithubWorkflowRef => &mut e.github_workflow_ref,
            Claim::BuildSignerUri => &mut e.build_signer_uri,
            Claim::BuildSignerDigest => &mut e.build_signer_digest,
            Claim::RunnerEnvironment => &mut e.runner_environment,
            Claim::SourceRepositoryUri => &mut e.source_repository_uri,
            Claim::SourceRepositoryDigest => &mut e.source_repository_digest,
            Claim::SourceRepositoryRef => &mut e.source_repository_ref,
            Claim::SourceRepositoryIdentifier => &mut e.source_repository_identifier,
            Claim::SourceRepositoryOwnerUri => &mut e.source_repository_owner_uri,
            Claim::SourceRepositoryOwnerIdentifier => &mut e.source_repository_owner_identifier,
            Claim::BuildConfigUri => &mut e.build_config_uri,
            Claim::BuildConfigDigest => &mut e.build_config_digest,
            Claim::BuildTrigger => &mut e.build_trigger,
            Claim::RunInvocationUri => &mut e.run_invocation_uri,
            Claim::SourceRepositoryVisibilityAtSigning => {
                &mut e.source_repository_visibility_at_signing
            }
            Claim::DeploymentEnvironment => &mut e.deployment_environment,
        }
    }
}

impl std::fmt::Display for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.oid())
    }
}

/// The identity a Fulcio certificate vouches for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FulcioIdentity {
    /// The signer: the SAN URI, else e-mail, else Fulcio username.
    pub subject: String,
    /// Every SAN value the certificate carries, `subject` first. Fulcio issues
    /// exactly one, but a policy accepts the certificate if any matches.
    pub subjects: Vec<String>,
    /// The OIDC issuer (extension .1.8, else the deprecated .1.1).
    pub issuer: Option<String>,
    /// The other Fulcio extensions.
    pub extensions: FulcioExtensions,
}

/// Why an identity could not be read or does not match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The certificate has no SAN URI, e-mail or Fulcio username.
    #[error(
        "certificate {cert} has no subject alternative name (URI, e-mail or Fulcio username), so \
         it names no signer; it is not a Fulcio signing certificate"
    )]
    NoSubject {
        /// Description of the certificate.
        cert: String,
    },
    /// A Fulcio extension or SAN value is not encoded as Fulcio encodes it.
    #[error("certificate {cert}: Fulcio extension {oid} is malformed: {reason}")]
    MalformedExtension {
        /// Description of the certificate.
        cert: String,
        /// Dotted OID of the extension.
        oid: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No SAN value matches the policy's subject.
    #[error(
        "certificate identity {found} does not match the expected subject {expected}; check the \
         policy's subject/subjectRegExp against who signed the image"
    )]
    SubjectMismatch {
        /// The policy's matcher, as displayed.
        expected: String,
        /// The certificate's SAN values.
        found: String,
    },
    /// The certificate's issuer does not match the policy's issuer.
    #[error(
        "certificate OIDC issuer `{found}` does not match the expected issuer {expected}; check \
         the policy's issuer/issuerRegExp"
    )]
    IssuerMismatch {
        /// The policy's matcher, as displayed.
        expected: String,
        /// The certificate's issuer.
        found: String,
    },
    /// A certificate claim the policy requires has another value.
    #[error(
        "certificate claim {claim} is `{found}`, which does not match the expected {expected}; \
         check the policy's claims against the repository and workflow that signed"
    )]
    ClaimMismatch {
        /// The claim, with its OID.
        claim: Claim,
        /// The policy's matcher, as displayed.
        expected: String,
        /// The certificate's value.
        found: String,
    },
    /// The certificate lacks a claim the policy requires.
    #[error(
        "certificate has no claim {claim}, so it cannot match the expected {expected}; the \
         signer's Fulcio did not issue that extension (an older Fulcio, or an identity that is \
         not a CI workflow)"
    )]
    ClaimMissing {
        /// The claim, with its OID.
        claim: Claim,
        /// The policy's matcher, as displayed.
        expected: String,
    },
    /// The certificate names no OIDC issuer but the policy expects one.
    #[error(
        "certificate has no OIDC issuer extension (1.3.6.1.4.1.57264.1.8 or .1.1), so it cannot \
         match the expected issuer {expected}"
    )]
    IssuerMissing {
        /// The policy's matcher, as displayed.
        expected: String,
    },
}

/// Reads the signer identity and Fulcio extensions of a leaf certificate.
pub fn fulcio_identity(leaf: &Certificate) -> Result<FulcioIdentity, IdentityError> {
    let malformed = |oid: &str, reason: String| IdentityError::MalformedExtension {
        cert: describe(leaf),
        oid: oid.to_owned(),
        reason,
    };

    let mut subjects: Vec<String> = leaf
        .san_uris
        .iter()
        .chain(&leaf.san_emails)
        .cloned()
        .collect();
    for (oid, value) in &leaf.san_other {
        if oid == OID_SAN_USERNAME {
            subjects.push(other_name_string(value).map_err(|r| malformed(oid, r))?);
        }
    }
    let subject = subjects
        .first()
        .cloned()
        .ok_or_else(|| IdentityError::NoSubject {
            cert: describe(leaf),
        })?;

    let mut extensions = FulcioExtensions::default();
    let mut issuer_v1 = None;
    let mut issuer_v2 = None;
    for ext in leaf
        .extensions
        .iter()
        .filter(|e| e.oid.starts_with(FULCIO_OID_PREFIX))
    {
        if ext.oid == OID_ISSUER_V1 {
            issuer_v1 = Some(raw_string(&ext.value).map_err(|r| malformed(&ext.oid, r))?);
        } else if ext.oid == OID_ISSUER_V2 {
            issuer_v2 = Some(der_string(&ext.value).map_err(|r| malformed(&ext.oid, r))?);
        } else if let Some((claim, encoding)) = Claim::from_oid(&ext.oid) {
            let value = match encoding {
                Encoding::Raw => raw_string(&ext.value),
                Encoding::Der => der_string(&ext.value),
            }
            .map_err(|r| malformed(&ext.oid, r))?;
            *claim.slot(&mut extensions) = Some(value);
        }
    }

    Ok(FulcioIdentity {
        subject,
        subjects,
        issuer: issuer_v2.or(issuer_v1),
        extensions,
    })
}

fn raw_string(value: &[u8]) -> Result<String, String> {
    String::from_utf8(value.to_vec()).map_err(|_| "value is not UTF-8".to_owned())
}

/// Reads a whole-input DER string. Fulcio writes UTF8String; PrintableString
/// and IA5String are accepted too because they are subsets that other
/// Sigstore clients also accept.
fn der_string(value: &[u8]) -> Result<String, String> {
    let (tlv, rest) = read_tlv(value).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err("trailing bytes after the DER string".into());
    }
    if ![TAG_UTF8_STRING, TAG_PRINTABLE_STRING, TAG_IA5_STRING].contains(&tlv.tag) {
        return Err(format!(
            "expected a DER UTF8String, found tag 0x{:02x}",
            tlv.tag
        ));
    }
    raw_string(tlv.content)
}

/// Reads the `[0] EXPLICIT UTF8String` value of Fulcio's username otherName.
fn other_name_string(value: &[u8]) -> Result<String, String> {
    let (tlv, rest) = read_tlv(value).map_err(|e| e.to_string())?;
    if tlv.tag != TAG_EXPLICIT_0 || !rest.is_empty() {
        return Err("otherName value is not a single [0] EXPLICIT field".into());
    }
    der_string(tlv.content)
}

/// How a policy names an expected subject or issuer.
#[derive(Debug, Clone)]
pub enum IdentityMatcher {
    /// The value must equal this string.
    Exact(String),
    /// The value must match this regular expression. As in cosign
    /// (`--certificate-identity-regexp`), the pattern is NOT anchored: `foo`
    /// matches `xfoox`. Callers who want a full match write `^…$`.
    Regex(regex::Regex),
}

impl IdentityMatcher {
    /// Whether `value` satisfies this matcher.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Self::Exact(s) => s == value,
            Self::Regex(r) => r.is_match(value),
        }
    }
}

impl std::fmt::Display for IdentityMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exact(s) => write!(f, "`{s}`"),
            Self::Regex(r) => write!(f, "regular expression `{}`", r.as_str()),
        }
    }
}

/// The identity a keyless authority requires.
#[derive(Debug, Clone)]
pub struct IdentityPolicy {
    /// The expected signer (SAN).
    pub subject: IdentityMatcher,
    /// The expected OIDC issuer.
    pub issuer: IdentityMatcher,
    /// Certificate claims that must also match (all of them).
    pub claims: Vec<ClaimPolicy>,
}

impl IdentityPolicy {
    /// A subject and issuer, with no claims required.
    pub fn new(subject: IdentityMatcher, issuer: IdentityMatcher) -> Self {
        Self {
            subject,
            issuer,
            claims: Vec::new(),
        }
    }
}

/// One certificate claim a policy requires, and its expected value.
#[derive(Debug, Clone)]
pub struct ClaimPolicy {
    /// Which claim.
    pub claim: Claim,
    /// What its value must be.
    pub expected: IdentityMatcher,
}

/// Checks `id` against `policy`: some SAN value must match the subject, and
/// the issuer must be present and match.
pub fn check_identity(id: &FulcioIdentity, policy: &IdentityPolicy) -> Result<(), IdentityError> {
    let subject_ok = if id.subjects.is_empty() {
        policy.subject.matches(&id.subject)
    } else {
        id.subjects.iter().any(|s| policy.subject.matches(s))
    };
    if !subject_ok {
        let found = if id.subjects.len() > 1 {
            id.subjects
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            format!("`{}`", id.subject)
        };
        return Err(IdentityError::SubjectMismatch {
            expected: policy.subject.to_string(),
            found,
        });
    }
    match &id.issuer {
        None => {
            return Err(IdentityError::IssuerMissing {
                expected: policy.issuer.to_string(),
            });
        }
        Some(issuer) if !policy.issuer.matches(issuer) => {
            return Err(IdentityError::IssuerMismatch {
                expected: policy.issuer.to_string(),
                found: issuer.clone(),
            });
        }
        Some(_) => {}
    }
    for required in &policy.claims {
        match required.claim.value(&id.extensions) {
            None => {
                return Err(IdentityError::ClaimMissing {
                    claim: required.claim,
                    expected: required.expected.to_string(),
                });
            }
            Some(found) if !required.expected.matches(found) => {
                return Err(IdentityError::ClaimMismatch {
                    claim: required.claim,
                    expected: required.expected.to_string(),
                    found: found.to_owned(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{case_leaf_and_root, conformance_dir};

    /// The leaf of a conformance case.
    fn leaf(case: &str) -> Certificate {
        case_leaf_and_root(case).0.remove(0)
    }

    const DEFAULT_IDENTITY: &str = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main";
    const DEFAULT_ISSUER: &str = "https://token.actions.githubusercontent.com";

    fn exact(subject: &str, issuer: &str) -> IdentityPolicy {
        IdentityPolicy {
            subject: IdentityMatcher::Exact(subject.into()),
            issuer: IdentityMatcher::Exact(issuer.into()),
            claims: Vec::new(),
        }
    }

    #[test]
    fn the_claims_table_lists_every_claim_in_declaration_order_with_distinct_names_and_oids() {
        let claims: Vec<Claim> = Claim::all().collect();
        assert_eq!(claims.len(), CLAIMS.len());
        for (i, c) in claims.iter().enumerate() {
            assert_eq!(*c as usize, i, "{c:?}");
            assert!(!c.name().is_empty() && c.oid().starts_with(FULCIO_OID_PREFIX));
            assert_eq!(Claim::from_name(c.name()), Some(*c));
            assert_eq!(Claim::from_oid(c.oid()).map(|(c, _)| c), Some(*c));
        }
        let mut names: Vec<&str> = claims.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), claims.len());
        // The JSON names are those FulcioExtensions serialises.
        let mut ext = FulcioExtensions::default();
        for c in &claims {
            *c.slot(&mut ext) = Some(c.name().to_owned());
        }
        let json = serde_json::to_value(&ext).unwrap();
        for c in &claims {
            assert_eq!(json[c.name()], c.name(), "{c:?}");
            assert_eq!(c.value(&ext), Some(c.name()));
        }
    }

    #[test]
    fn claims_must_all_match_and_a_missing_one_is_named() {
        let id = FulcioIdentity {
            subject: "s".into(),
            subjects: vec!["s".into()],
            issuer: Some("i".into()),
            extensions: FulcioExtensions {
                source_repository_uri: Some("https://github.com/acme/app".into()),
                ..FulcioExtensions::default()
            },
        };
        let mut policy = exact("s", "i");
        policy.claims = vec![ClaimPolicy {
            claim: Claim::SourceRepositoryUri,
            expected: IdentityMatcher::Exact("https://github.com/acme/app".into()),
        }];
        check_identity(&id, &policy).unwrap();
        policy.claims.push(ClaimPolicy {
            claim: Claim::RunnerEnvironment,
            expected: IdentityMatcher::Exact("github-hosted".into()),
        });
        let err = check_identity(&id, &policy).unwrap_err();
        assert!(
            matches!(
                err,
                IdentityError::ClaimMissing {
                    claim: Claim::RunnerEnvironment,
                    ..
                }
            ),
            "{err}"
        );
        policy.claims[0].expected = IdentityMatcher::Exact("https://github.com/acme/other".into());
        let err = check_identity(&id, &policy).unwrap_err();
        assert!(
            matches!(
                err,
                IdentityError::ClaimMismatch {
                    claim: Claim::SourceRepositoryUri,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn happy_path_v0_3_identity_is_the_conformance_default() {
        // The conformance suite's README names these defaults; the case has
        // no `identity`/`issuer` file overriding them.
        let dir = conformance_dir();
        assert!(!dir.join("happy-path-v0.3/identity").exists());
        let id = fulcio_identity(&leaf("happy-path-v0.3")).unwrap();
        assert_eq!(id.subject, DEFAULT_IDENTITY);
        assert_eq!(id.subjects, vec![DEFAULT_IDENTITY.to_owned()]);
        assert_eq!(id.issuer.as_deref(), Some(DEFAULT_ISSUER));
        check_identity(&id, &exact(DEFAULT_IDENTITY, DEFAULT_ISSUER)).unwrap();
    }

    #[test]
    fn happy_path_v0_3_github_extensions_are_read() {
        let ext = fulcio_identity(&leaf("happy-path-v0.3"))
            .unwrap()
            .extensions;
        let sha = "c7b3dfb335f051e1c86bda4c716fac97df62ad81";
        let repo = "sigstore-conformance/extremely-dangerous-public-oidc-beacon";
        assert_eq!(
            ext.github_workflow_trigger.as_deref(),
            Some("workflow_dispatch")
        );
        assert_eq!(ext.github_workflow_sha.as_deref(), Some(sha));
        assert_eq!(
            ext.github_workflow_name.as_deref(),
            Some("Extremely dangerous OIDC beacon")
        );
        assert_eq!(ext.github_workflow_repository.as_deref(), Some(repo));
        assert_eq!(ext.github_workflow_ref.as_deref(), Some("refs/heads/main"));
        assert_eq!(ext.build_signer_uri.as_deref(), Some(DEFAULT_IDENTITY));
        assert_eq!(ext.build_signer_digest.as_deref(), Some(sha));
        assert_eq!(ext.runner_environment.as_deref(), Some("github-hosted"));
        assert_eq!(
            ext.source_repository_uri.as_deref(),
            Some(format!("https://github.com/{repo}").as_str())
        );
        assert_eq!(ext.source_repository_digest.as_deref(), Some(sha));
        assert_eq!(
            ext.source_repository_ref.as_deref(),
            Some("refs/heads/main")
        );
        assert_eq!(
            ext.source_repository_identifier.as_deref(),
            Some("632596897")
        );
        assert_eq!(
            ext.source_repository_owner_uri.as_deref(),
            Some("https://github.com/sigstore-conformance")
        );
        assert_eq!(
            ext.source_repository_owner_identifier.as_deref(),
            Some("131804563")
        );
        assert_eq!(ext.build_config_uri.as_deref(), Some(DEFAULT_IDENTITY));
        assert_eq!(ext.build_config_digest.as_deref(), Some(sha));
        assert_eq!(ext.build_trigger.as_deref(), Some("workflow_dispatch"));
        assert!(
            ext.run_invocation_uri
                .as_deref()
                .is_some_and(|u| u.starts_with(&format!("https://github.com/{repo}/actions/runs/")))
        );
        assert_eq!(
            ext.source_repository_visibility_at_signing.as_deref(),
            Some("public")
        );
        assert_eq!(ext.deployment_environment, None);
    }

    #[test]
    fn extensions_serialise_with_sigstore_go_names_and_skip_absent_ones() {
        let ext = fulcio_identity(&leaf("happy-path-v0.3"))
            .unwrap()
            .extensions;
        let json = serde_json::to_value(&ext).unwrap();
        assert_eq!(
            json["githubWorkflowSHA"],
            "c7b3dfb335f051e1c86bda4c716fac97df62ad81"
        );
        assert_eq!(
            json["sourceRepositoryURI"],
            "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon"
        );
        assert_eq!(json["sourceRepositoryVisibilityAtSigning"], "public");
        assert!(json.get("deploymentEnvironment").is_none());
    }

    #[test]
    fn the_deprecated_issuer_is_used_when_the_der_one_is_absent() {
        let mut cert = leaf("happy-path-v0.3");
        cert.extensions.retain(|e| e.oid != OID_ISSUER_V2);
        let id = fulcio_identity(&cert).unwrap();
        assert_eq!(id.issuer.as_deref(), Some(DEFAULT_ISSUER));
        cert.extensions.retain(|e| e.oid != OID_ISSUER_V1);
        let id = fulcio_identity(&cert).unwrap();
        assert_eq!(id.issuer, None);
        let err = check_identity(&id, &exact(DEFAULT_IDENTITY, DEFAULT_ISSUER)).unwrap_err();
        assert!(matches!(err, IdentityError::IssuerMissing { .. }), "{err}");
    }

    #[test]
    fn the_der_issuer_wins_over_the_deprecated_one() {
        let mut cert = leaf("happy-path-v0.3");
        for e in &mut cert.extensions {
            if e.oid == OID_ISSUER_V1 {
                e.value = b"https://old.example".to_vec();
            }
        }
        assert_eq!(
            fulcio_identity(&cert).unwrap().issuer.as_deref(),
            Some(DEFAULT_ISSUER)
        );
    }

    #[test]
    fn a_malformed_der_extension_is_an_error_naming_it() {
        let mut cert = leaf("happy-path-v0.3");
        for e in &mut cert.extensions {
            if e.oid == "1.3.6.1.4.1.57264.1.12" {
                e.value.truncate(e.value.len() - 1);
            }
        }
        let err = fulcio_identity(&cert).unwrap_err();
        assert!(err.to_string().contains("1.3.6.1.4.1.57264.1.12"), "{err}");
    }

    #[test]
    fn email_and_username_sans_are_subjects_when_there_is_no_uri() {
        let mut cert = leaf("happy-path-v0.3");
        cert.san_uris.clear();
        cert.san_emails = vec!["dev@example.com".into()];
        assert_eq!(fulcio_identity(&cert).unwrap().subject, "dev@example.com");
        cert.san_emails.clear();
        // [0] EXPLICIT UTF8String "octocat"
        let mut value = vec![0xa0, 0x09, 0x0c, 0x07];
        value.extend_from_slice(b"octocat");
        cert.san_other = vec![(OID_SAN_USERNAME.into(), value)];
        assert_eq!(fulcio_identity(&cert).unwrap().subject, "octocat");
        cert.san_other.clear();
        let err = fulcio_identity(&cert).unwrap_err();
        assert!(matches!(err, IdentityError::NoSubject { .. }), "{err}");
    }

    #[test]
    fn any_of_several_sans_may_match() {
        let mut cert = leaf("happy-path-v0.3");
        cert.san_emails = vec!["dev@example.com".into()];
        let id = fulcio_identity(&cert).unwrap();
        assert_eq!(id.subject, DEFAULT_IDENTITY, "URI comes first");
        check_identity(&id, &exact("dev@example.com", DEFAULT_ISSUER)).unwrap();
        let err = check_identity(&id, &exact("nobody@example.com", DEFAULT_ISSUER)).unwrap_err();
        assert!(err.to_string().contains("dev@example.com"), "{err}");
    }

    #[test]
    fn regexes_are_unanchored_like_cosign() {
        let id = fulcio_identity(&leaf("happy-path-v0.3")).unwrap();
        let policy = |s: &str, i: &str| IdentityPolicy {
            subject: IdentityMatcher::Regex(regex::Regex::new(s).unwrap()),
            issuer: IdentityMatcher::Regex(regex::Regex::new(i).unwrap()),
            claims: Vec::new(),
        };
        check_identity(&id, &policy("sigstore-conformance/", "githubusercontent")).unwrap();
        check_identity(
            &id,
            &policy(
                r"^https://github\.com/sigstore-conformance/.*@refs/heads/main$",
                r"^https://token\.actions\.githubusercontent\.com$",
            ),
        )
        .unwrap();
        let err = check_identity(&id, &policy("^sigstore-conformance/", ".")).unwrap_err();
        assert!(
            matches!(err, IdentityError::SubjectMismatch { .. }),
            "{err}"
        );
    }

    #[test]
    fn mismatches_name_what_was_expected_and_found() {
        let id = fulcio_identity(&leaf("happy-path-v0.3")).unwrap();
        let err = check_identity(&id, &exact("https://github.com/other/repo", DEFAULT_ISSUER))
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("https://github.com/other/repo") && msg.contains(DEFAULT_IDENTITY),
            "{msg}"
        );
        let err = check_identity(&id, &exact(DEFAULT_IDENTITY, "https://accounts.google.com"))
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, IdentityError::IssuerMismatch { .. }));
        assert!(
            msg.contains("https://accounts.google.com") && msg.contains(DEFAULT_ISSUER),
            "{msg}"
        );
        let regex = IdentityMatcher::Regex(regex::Regex::new("^a.*$").unwrap());
        assert!(regex.to_string().contains("^a.*$"));
    }

    #[test]
    fn conformance_identity_files_agree_with_the_certificates() {
        // Cases that override the identity must still read back what the
        // override names.
        for case in [
            "bundle-with-sct-with-extensions",
            "happy-path-v0.1",
            "happy-path-intoto-in-dsse-v3",
        ] {
            let dir = conformance_dir();
            let dir = dir.join(case);
            let subject = std::fs::read_to_string(dir.join("identity"))
                .unwrap_or_else(|_| DEFAULT_IDENTITY.into());
            let issuer = std::fs::read_to_string(dir.join("issuer"))
                .unwrap_or_else(|_| DEFAULT_ISSUER.into());
            let id = fulcio_identity(&leaf(case)).unwrap();
            check_identity(&id, &exact(subject.trim(), issuer.trim()))
                .unwrap_or_else(|e| panic!("{case}: {e}"));
        }
    }
}

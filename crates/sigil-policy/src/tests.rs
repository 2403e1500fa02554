//! Evaluation and rendering tests over a fake [`AuthorityVerifier`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::future::Future;

use crate::eval::{
    AuthorityOutcome, AuthorityVerifier, ConfigFiles, ImageReadError, PlatformImage, evaluate_image,
};
use crate::glob::{Glob, ImageName};
use crate::model::{
    AuthorityKind, CaTrust, CipPolicy, CompiledAttestation, CompiledAuthority, CompiledPolicy,
    KeyAuthority, KeyMaterial, KeylessAuthority, Mode, NoMatchPolicy, Platforms, PolicyProgram,
    ResourceInfo, ResourceMatch, SecretRef, StaticAction, TlogPolicy, VerifiedAttestation,
    VerifiedSignature,
};
use crate::rego::RegoPolicy;
use crate::render::render;
use sigil_verifier::crypto::HashAlgorithm;
use sigil_verifier::dsse::Statement;
use sigil_verifier::identity::{FulcioExtensions, FulcioIdentity, IdentityMatcher, IdentityPolicy};

const DIGEST: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const SLSA: &str = include_str!("../tests/data/policy/slsa-provenance-v1.statement.json");
const VULN: &str = include_str!("../tests/data/policy/vuln.statement.json");
const GHA_ISSUER: &str = "https://token.actions.githubusercontent.com";

/// Runs a future to its end on this thread (the fake verifier never
/// pends; Rego and CUE evaluations wait for their workers).
fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
        .block_on(f)
}

/// Answers by authority name; serves `configs` as the image's config files
/// (and counts how often they were asked for).
/// Outcomes set for one digest (`at`) take precedence; `index` lists the
/// image's platform images (none: it is not an index).
#[derive(Default)]
struct FakeVerifier {
    outcomes: HashMap<String, AuthorityOutcome>,
    at_digest: HashMap<(String, String), AuthorityOutcome>,
    configs: Option<Result<ConfigFiles, ImageReadError>>,
    config_reads: std::sync::atomic::AtomicUsize,
    index: Option<Result<Vec<PlatformImage>, ImageReadError>>,
    index_reads: std::sync::atomic::AtomicUsize,
}

impl FakeVerifier {
    fn with(mut self, authority: &str, outcome: AuthorityOutcome) -> Self {
        self.outcomes.insert(authority.into(), outcome);
        self
    }

    fn at(mut self, digest: &str, authority: &str, outcome: AuthorityOutcome) -> Self {
        self.at_digest
            .insert((digest.into(), authority.into()), outcome);
        self
    }
}

impl AuthorityVerifier for FakeVerifier {
    fn verify(
        &self,
        image: &ImageName,
        authority: &CompiledAuthority,
    ) -> impl Future<Output = AuthorityOutcome> + Send {
        assert!(image.digest.is_some(), "only digests reach the verifier");
        let digest = image.digest.clone().unwrap_or_default();
        let outcome = self
            .at_digest
            .get(&(digest, authority.name.clone()))
            .or_else(|| self.outcomes.get(&authority.name))
            .cloned()
            .unwrap_or_else(|| AuthorityOutcome::Failed("no signature found".into()));
        std::future::ready(outcome)
    }

    fn config_files(
        &self,
        image: &ImageName,
    ) -> impl Future<Output = Result<ConfigFiles, ImageReadError>> + Send {
        assert!(image.digest.is_some(), "only digests reach the verifier");
        self.config_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::future::ready(self.configs.clone().unwrap_or_else(|| {
            Err(ImageReadError {
                reason: "this fake serves no config files".into(),
                inconclusive: false,
            })
        }))
    }

    fn platform_images(
        &self,
        image: &ImageName,
    ) -> impl Future<Output = Result<Option<Vec<PlatformImage>>, ImageReadError>> + Send {
        assert_eq!(
            image.digest.as_deref(),
            Some(DIGEST),
            "only the index is listed"
        );
        self.index_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::future::ready(self.index.clone().transpose())
    }
}

fn identity(subject: &str) -> FulcioIdentity {
    FulcioIdentity {
        subject: subject.into(),
        subjects: vec![subject.into()],
        issuer: Some(GHA_ISSUER.into()),
        extensions: FulcioExtensions {
            github_workflow_repository: Some("sigil-dev/demo".into()),
            ..FulcioExtensions::default()
        },
    }
}

fn signed_by(subject: &str) -> AuthorityOutcome {
    AuthorityOutcome::Verified {
        signatures: vec![VerifiedSignature {
            id: format!("sig-{subject}"),
            identity: Some(identity(subject)),
        }],
        attestations: vec![],
        rejected: vec![],
    }
}

fn attested(statements: &[&str]) -> AuthorityOutcome {
    AuthorityOutcome::Verified {
        signatures: vec![],
        attestations: statements
            .iter()
            .enumerate()
            .map(|(i, s)| VerifiedAttestation {
                id: format!("att-{i}"),
                identity: Some(identity("https://github.com/sigil-dev/demo/.github/workflows/release.yml@refs/heads/main")),
                statement: serde_json::from_str::<Statement>(s).unwrap(),
            })
            .collect(),
        rejected: vec![],
    }
}

fn keyless(name: &str) -> CompiledAuthority {
    CompiledAuthority {
        name: name.into(),
        kind: AuthorityKind::Keyless(KeylessAuthority {
            identities: vec![IdentityPolicy {
                subject: IdentityMatcher::Regex(
                    regex::Regex::new("^https://github.com/sigil-dev/").unwrap(),
                ),
                issuer: IdentityMatcher::Exact(GHA_ISSUER.into()),
                claims: Vec::new(),
            }],
            trust: CaTrust::Default,
            require_sct: true,
        }),
        sources: vec![],
        tlog: TlogPolicy::Required { trust_root: None },
        timestamp_trust_root: None,
        attestations: vec![],
    }
}

fn static_authority(name: &str, action: StaticAction) -> CompiledAuthority {
    CompiledAuthority {
        kind: AuthorityKind::Static(action),
        ..keyless(name)
    }
}

fn policy(name: &str, glob: &str, authorities: Vec<CompiledAuthority>) -> CompiledPolicy {
    CompiledPolicy {
        name: name.into(),
        namespace: None,
        images: vec![Glob::compile(glob).unwrap()],
        authorities,
        policy: None,
        mode: Mode::Enforce,
        matches: vec![],
        platforms: Platforms::Named,
    }
}

fn image() -> ImageName {
    ImageName::parse(&format!("ghcr.io/sigil-dev/demo@{DIGEST}")).unwrap()
}

fn pod() -> ResourceInfo {
    ResourceInfo {
        version: "v1".into(),
        resource: "pods".into(),
        kind: "Pod".into(),
        name: "web".into(),
        namespace: "default".into(),
        ..ResourceInfo::default()
    }
}

fn eval(
    verifier: &FakeVerifier,
    policies: &[CompiledPolicy],
    no_match: NoMatchPolicy,
) -> crate::eval::ImageResult {
    block_on(evaluate_image(
        verifier,
        policies,
        &image(),
        &pod(),
        no_match,
    ))
}

fn rego(source: &str) -> RegoPolicy {
    RegoPolicy::compile("test", source).unwrap()
}

#[test]
fn any_authority_within_a_policy_suffices() {
    let v = FakeVerifier::default().with("second", signed_by("https://github.com/sigil-dev/demo"));
    let p = policy(
        "p",
        "ghcr.io/sigil-dev/**",
        vec![keyless("first"), keyless("second")],
    );
    let r = eval(&v, &[p], NoMatchPolicy::Deny);
    assert!(r.allowed());
    let a = &r.policies[0].authorities;
    assert_eq!(a[0].outcome, Err("no signature found".into()));
    assert!(a[1].outcome.is_ok());
}

#[test]
fn every_matching_policy_must_pass() {
    let v = FakeVerifier::default().with("ok", signed_by("https://github.com/sigil-dev/demo"));
    let passing = policy("passing", "ghcr.io/**", vec![keyless("ok")]);
    let failing = policy("failing", "ghcr.io/sigil-dev/*", vec![keyless("missing")]);
    let unrelated = policy("unrelated", "quay.io/**", vec![keyless("missing")]);
    let r = eval(&v, &[passing, failing, unrelated], NoMatchPolicy::Deny);
    assert_eq!(r.policies.len(), 2, "the quay.io policy does not apply");
    assert!(!r.allowed());
    let verdict = render("pod default/web", &[r]);
    let message = verdict.message.unwrap();
    assert!(
        message.starts_with("sigil denied pod default/web:"),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "image ghcr.io/sigil-dev/demo@{DIGEST}: policy failing failed:"
        )),
        "{message}"
    );
    assert!(
        message.contains("authority missing (keyless): no signature found"),
        "{message}"
    );
    assert!(!message.contains("policy passing"), "{message}");
}

#[test]
fn static_pass_and_fail_need_no_verification() {
    let v = FakeVerifier::default();
    let pass = policy(
        "base",
        "ghcr.io/**",
        vec![static_authority("trusted", StaticAction::Pass)],
    );
    assert!(eval(&v, &[pass], NoMatchPolicy::Deny).allowed());
    let fail = policy(
        "blocked",
        "ghcr.io/**",
        vec![static_authority(
            "no",
            StaticAction::Fail {
                message: Some("images from ghcr.io are banned".into()),
            },
        )],
    );
    let r = eval(&v, &[fail], NoMatchPolicy::Deny);
    assert!(!r.allowed());
    assert!(
        render("pod default/web", &[r])
            .message
            .unwrap()
            .contains("images from ghcr.io are banned")
    );
}

#[test]
fn warn_mode_turns_failures_into_warnings() {
    let mut p = policy("audit", "ghcr.io/**", vec![keyless("gha")]);
    p.mode = Mode::Warn;
    let r = eval(&FakeVerifier::default(), &[p], NoMatchPolicy::Deny);
    assert!(r.allowed());
    let verdict = render("pod default/web", &[r]);
    assert!(verdict.allowed && verdict.message.is_none());
    assert_eq!(verdict.warnings.len(), 1);
    assert!(
        verdict.warnings[0].contains(
            "policy audit (mode: warn) failed: authority gha (keyless): no signature found"
        ),
        "{:?}",
        verdict.warnings
    );
}

#[test]
fn audit_mode_failures_neither_deny_nor_warn_but_keep_their_words() {
    let mut audit = policy("preview", "ghcr.io/**", vec![keyless("gha")]);
    audit.mode = Mode::Audit;
    let passing = policy(
        "gate",
        "ghcr.io/**",
        vec![static_authority("ok", StaticAction::Pass)],
    );
    let r = eval(
        &FakeVerifier::default(),
        &[audit.clone(), passing],
        NoMatchPolicy::Deny,
    );
    assert!(r.allowed());
    assert_eq!(r.no_match, None);
    let verdict = render("pod default/web", std::slice::from_ref(&r));
    assert!(verdict.allowed && verdict.message.is_none());
    assert!(verdict.warnings.is_empty(), "{:?}", verdict.warnings);
    let failed = r.policies.iter().find(|p| p.name == "preview").unwrap();
    assert!(!failed.passed);
    let words = crate::render::policy_failure(failed).unwrap();
    assert!(
        words.starts_with(
            "policy preview (mode: audit) failed: authority gha (keyless): no signature found"
        ),
        "{words}"
    );
}

#[test]
fn an_image_only_audit_mode_policies_select_follows_no_match_policy() {
    let mut audit = policy("preview", "ghcr.io/**", vec![keyless("gha")]);
    audit.mode = Mode::Audit;
    let v = FakeVerifier::default();
    let deny = eval(&v, std::slice::from_ref(&audit), NoMatchPolicy::Deny);
    assert_eq!(deny.no_match, Some(NoMatchPolicy::Deny));
    assert!(!deny.allowed());
    assert_eq!(deny.policies.len(), 1, "the audit-mode result is kept");
    let message = render("pod default/web", &[deny]).message.unwrap();
    assert!(
        message.contains(crate::render::NO_MATCH_DENIED),
        "{message}"
    );
    assert!(!message.contains("preview"), "{message}");
    let allow = eval(&v, &[audit], NoMatchPolicy::Allow);
    assert!(allow.allowed());
    let verdict = render("pod default/web", &[allow]);
    assert!(verdict.allowed && verdict.warnings.is_empty());
}

#[test]
fn no_match_policy_decides_for_unmatched_images() {
    let p = policy("other", "quay.io/**", vec![keyless("gha")]);
    let v = FakeVerifier::default();
    let deny = eval(&v, std::slice::from_ref(&p), NoMatchPolicy::Deny);
    assert!(!deny.allowed());
    assert!(
        render("pod default/web", &[deny])
            .message
            .unwrap()
            .contains("no ClusterImagePolicy matches it")
    );
    let warn = render(
        "pod default/web",
        &[eval(&v, std::slice::from_ref(&p), NoMatchPolicy::Warn)],
    );
    assert!(warn.allowed && warn.warnings[0].contains("noMatchPolicy: warn"));
    let allow = render("pod default/web", &[eval(&v, &[p], NoMatchPolicy::Allow)]);
    assert!(allow.allowed && allow.warnings.is_empty());
}

#[test]
fn resource_match_limits_where_a_policy_applies() {
    let mut p = policy("deployments-only", "ghcr.io/**", vec![keyless("gha")]);
    p.matches = vec![ResourceMatch {
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        selector: None,
    }];
    let r = eval(&FakeVerifier::default(), &[p], NoMatchPolicy::Allow);
    assert!(r.policies.is_empty(), "a pod is not a deployment");
    assert_eq!(r.no_match, Some(NoMatchPolicy::Allow));
}

#[test]
fn an_image_without_digest_fails_verifying_authorities_but_not_statics() {
    let p = policy(
        "p",
        "ghcr.io/**",
        vec![keyless("gha"), static_authority("s", StaticAction::Pass)],
    );
    let tagged = ImageName::parse("ghcr.io/sigil-dev/demo:v1").unwrap();
    let r = block_on(evaluate_image(
        &FakeVerifier::default(),
        &[p],
        &tagged,
        &pod(),
        NoMatchPolicy::Deny,
    ));
    assert!(r.allowed(), "the static pass suffices");
    let reason = r.policies[0].authorities[0].outcome.clone().unwrap_err();
    assert!(reason.contains("not pinned to a digest"), "{reason}");
}

#[test]
fn an_unresolved_key_secret_is_handed_to_the_verifier_unchanged() {
    let authority = CompiledAuthority {
        kind: AuthorityKind::Key(KeyAuthority {
            key: KeyMaterial::Secret(SecretRef {
                namespace: "sigil".into(),
                name: "cosign-pub".into(),
            }),
            hash: Some(HashAlgorithm::Sha256),
        }),
        ..keyless("key")
    };
    let v = FakeVerifier::default().with(
        "key",
        AuthorityOutcome::Failed("secret sigil/cosign-pub is not resolved yet".into()),
    );
    let r = eval(
        &v,
        &[policy("p", "ghcr.io/**", vec![authority])],
        NoMatchPolicy::Deny,
    );
    let message = render("pod default/web", &[r]).message.unwrap();
    assert!(
        message.contains("authority key (key): secret sigil/cosign-pub"),
        "{message}"
    );
}

#[test]
fn an_authority_a_registry_could_not_answer_fails_the_policy_but_marks_it_inconclusive() {
    let outage = FakeVerifier::default().with(
        "a",
        AuthorityOutcome::Inconclusive(
            "cannot reach registry at https://ghcr.io/v2/: refused".into(),
        ),
    );
    let r = eval(
        &outage,
        &[policy("p", "ghcr.io/**", vec![keyless("a"), keyless("b")])],
        NoMatchPolicy::Deny,
    );
    assert!(!r.allowed(), "an outage never admits");
    assert!(r.policies[0].inconclusive(), "{r:?}");
    assert!(r.policies[0].authorities[0].inconclusive);
    assert!(!r.policies[0].authorities[1].inconclusive);
    let message = render("pod default/web", &[r]).message.unwrap();
    assert!(
        message.contains("authority a (keyless): cannot reach registry"),
        "the denial names the outage: {message}"
    );

    let definite = FakeVerifier::default();
    let r = eval(
        &definite,
        &[policy("p", "ghcr.io/**", vec![keyless("a")])],
        NoMatchPolicy::Deny,
    );
    assert!(!r.policies[0].inconclusive(), "no signature is an answer");

    let other_passes = FakeVerifier::default()
        .with("a", AuthorityOutcome::Inconclusive("timeout".into()))
        .with("b", signed_by("https://github.com/sigil-dev/demo"));
    let r = eval(
        &other_passes,
        &[policy("p", "ghcr.io/**", vec![keyless("a"), keyless("b")])],
        NoMatchPolicy::Deny,
    );
    assert!(r.allowed() && !r.policies[0].inconclusive(), "{r:?}");
}

const SLSA_POLICY: &str = r#"package sigstore
import rego.v1

default isCompliant := false

isCompliant if {
    input.predicateType == "https://slsa.dev/provenance/v1"
    input.predicate.runDetails.builder.id == "https://github.com/actions/runner/github-hosted"
    input.predicate.buildDefinition.externalParameters.workflow.ref == "refs/heads/main"
}
"#;

const VULN_POLICY: &str = r#"package sigstore
import future.keywords.in

default isCompliant = false

blocking := [v |
    some r in input.predicate.scanner.result.Results
    some v in r.Vulnerabilities
    v.Severity in {"HIGH", "CRITICAL"}
]

isCompliant = {"result": count(blocking) == 0, "error": sprintf("%d HIGH/CRITICAL vulnerabilities", [count(blocking)]), "warning": ""} {
    true
}
"#;

fn attesting(name: &str, wanted: Vec<CompiledAttestation>) -> CompiledAuthority {
    CompiledAuthority {
        attestations: wanted,
        ..keyless(name)
    }
}

#[test]
fn rego_over_slsa_provenance_admits_a_main_branch_build() {
    let a = attesting(
        "provenance",
        vec![CompiledAttestation {
            name: "slsa".into(),
            predicate_type: "https://slsa.dev/provenance/v1".into(),
            predicate_type_name: "slsaprovenance1".into(),
            policy: Some(PolicyProgram::Rego(rego(SLSA_POLICY))),
        }],
    );
    let v = FakeVerifier::default().with("provenance", attested(&[SLSA, VULN]));
    let r = eval(
        &v,
        &[policy("p", "ghcr.io/**", vec![a.clone()])],
        NoMatchPolicy::Deny,
    );
    assert!(r.allowed(), "{r:?}");

    let branch_build = SLSA.replace(
        "refs/heads/main\",\n          \"repository",
        "refs/heads/dev\",\n          \"repository",
    );
    let v = FakeVerifier::default().with("provenance", attested(&[&branch_build]));
    let r = eval(
        &v,
        &[policy("p", "ghcr.io/**", vec![a])],
        NoMatchPolicy::Deny,
    );
    assert!(!r.allowed());
    let message = render("pod default/web", &[r]).message.unwrap();
    assert!(
        message.contains(
            "attestation slsa: no https://slsa.dev/provenance/v1 attestation satisfies its policy"
        ),
        "{message}"
    );
}

#[test]
fn rego_over_a_vuln_attestation_reports_the_policy_error() {
    let a = attesting(
        "scan",
        vec![CompiledAttestation {
            name: "no-high-cves".into(),
            predicate_type: crate::model::predicate_type_uri("vuln").into(),
            predicate_type_name: "vuln".into(),
            policy: Some(PolicyProgram::Rego(rego(VULN_POLICY))),
        }],
    );
    let v = FakeVerifier::default().with("scan", attested(&[VULN]));
    assert!(
        eval(
            &v,
            &[policy("p", "ghcr.io/**", vec![a.clone()])],
            NoMatchPolicy::Deny
        )
        .allowed()
    );

    let high = VULN.replace("\"MEDIUM\"", "\"CRITICAL\"");
    let v = FakeVerifier::default().with("scan", attested(&[&high]));
    let r = eval(
        &v,
        &[policy("p", "ghcr.io/**", vec![a])],
        NoMatchPolicy::Deny,
    );
    let message = render("pod default/web", &[r]).message.unwrap();
    assert!(
        message.contains("1 HIGH/CRITICAL vulnerabilities"),
        "{message}"
    );
}

#[test]
fn a_missing_attestation_names_the_predicate_types_that_were_found() {
    let a = attesting(
        "sbom",
        vec![CompiledAttestation {
            name: "sbom".into(),
            predicate_type: "https://cyclonedx.org/bom".into(),
            predicate_type_name: "cyclonedx".into(),
            policy: None,
        }],
    );
    let v = FakeVerifier::default().with("sbom", attested(&[SLSA]));
    let r = eval(
        &v,
        &[policy("p", "ghcr.io/**", vec![a])],
        NoMatchPolicy::Deny,
    );
    let reason = r.policies[0].authorities[0].outcome.clone().unwrap_err();
    assert!(
        reason.contains("no verified attestation with predicateType https://cyclonedx.org/bom"),
        "{reason}"
    );
    assert!(
        reason.contains("verified predicate types: https://slsa.dev/provenance/v1"),
        "{reason}"
    );
}

const TWO_SIGNATURES: &str = r#"package sigstore
import rego.v1

default isCompliant := false

isCompliant if {
    count(input.authorityMatches.release.signatures) > 0
    count(input.authorityMatches.security.signatures) > 0
    input.authorityMatches.release.signatures[0].githubWorkflowRepo == "sigil-dev/demo"
}
"#;

fn two_signature_policy() -> CompiledPolicy {
    let mut p = policy(
        "two-signatures",
        "ghcr.io/**",
        vec![keyless("release"), keyless("security")],
    );
    p.policy = Some(CipPolicy {
        program: PolicyProgram::Rego(rego(TWO_SIGNATURES)),
        include_spec: false,
        include_object_meta: false,
        include_type_meta: false,
        fetch_config_file: false,
    });
    p
}

#[test]
fn a_cip_level_policy_can_require_two_signatures() {
    let both = FakeVerifier::default()
        .with("release", signed_by("https://github.com/sigil-dev/demo/.github/workflows/release.yml@refs/heads/main"))
        .with("security", signed_by("https://github.com/sigil-dev/security/.github/workflows/review.yml@refs/heads/main"));
    let r = eval(&both, &[two_signature_policy()], NoMatchPolicy::Deny);
    assert!(r.allowed(), "{r:?}");

    let one = FakeVerifier::default().with(
        "release",
        signed_by(
            "https://github.com/sigil-dev/demo/.github/workflows/release.yml@refs/heads/main",
        ),
    );
    let r = eval(&one, &[two_signature_policy()], NoMatchPolicy::Deny);
    assert!(!r.allowed(), "one signature is not enough");
    let message = render("pod default/web", &[r]).message.unwrap();
    assert!(
        message.contains("authority release (keyless): passed"),
        "{message}"
    );
    assert!(
        message.contains("authority security (keyless): no signature found"),
        "{message}"
    );
    assert!(
        message.contains("policy: the ClusterImagePolicy's policy is not compliant"),
        "{message}"
    );
}

#[test]
fn the_cip_policy_document_includes_object_fields_on_request() {
    let mut p = policy(
        "meta",
        "ghcr.io/**",
        vec![static_authority("s", StaticAction::Pass)],
    );
    // policy-controller's document: the workload's duck-typed spec, its
    // metadata, its TypeMeta under `typemeta`, and for a static authority
    // `static: true` without signatures.
    p.policy = Some(CipPolicy {
        program: PolicyProgram::Rego(rego(
            "package sigstore\nimport rego.v1\nisCompliant if {\n input.metadata.labels.team == \"a\"\n input.typemeta.kind == \"Deployment\"\n input.typemeta.apiVersion == \"apps/v1\"\n input.spec.template.spec.serviceAccountName == \"web\"\n input.authorityMatches.s.static == true\n not input.authorityMatches.s.signatures\n}\n",
        )),
        include_spec: true,
        include_object_meta: true,
        include_type_meta: true,
        fetch_config_file: false,
    });
    let resource = ResourceInfo {
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        kind: "Deployment".into(),
        name: "web".into(),
        namespace: "default".into(),
        metadata: serde_json::json!({"labels": {"team": "a"}}),
        spec: serde_json::json!({"replicas": 1, "template": {"spec": {"serviceAccountName": "web"}}}),
        ..ResourceInfo::default()
    };
    let r = block_on(evaluate_image(
        &FakeVerifier::default(),
        &[p],
        &image(),
        &resource,
        NoMatchPolicy::Deny,
    ));
    assert!(r.allowed(), "{r:?}");
}

/// A CIP-level Rego policy over the image's config files (`fetchConfigFile`).
fn config_policy(fetch: bool) -> CompiledPolicy {
    let mut p = policy(
        "nonroot",
        "ghcr.io/**",
        vec![
            keyless("signed"),
            static_authority("never", StaticAction::Fail { message: None }),
        ],
    );
    p.policy = Some(CipPolicy {
        program: PolicyProgram::Rego(rego(
            "package sigstore\nimport rego.v1\ndefault isCompliant := false\nisCompliant if {\n count(input.config) == 2\n every _, c in input.config { c.config.User == \"65532\" }\n}\n",
        )),
        include_spec: false,
        include_object_meta: false,
        include_type_meta: false,
        fetch_config_file: fetch,
    });
    p
}

fn configs(users: &[(&str, &str)]) -> ConfigFiles {
    users
        .iter()
        .map(|(platform, user)| {
            (
                (*platform).to_owned(),
                serde_json::json!({"os": "linux", "config": {"User": user}}),
            )
        })
        .collect()
}

#[test]
fn a_cip_level_policy_with_fetch_config_file_reads_the_config_of_every_platform() {
    let signed = || signed_by("https://github.com/sigil-dev/demo");
    let nonroot = FakeVerifier {
        configs: Some(Ok(configs(&[
            ("linux/amd64", "65532"),
            ("linux/arm64", "65532"),
        ]))),
        ..FakeVerifier::default()
    }
    .with("signed", signed());
    assert!(eval(&nonroot, &[config_policy(true)], NoMatchPolicy::Deny).allowed());
    assert_eq!(
        nonroot
            .config_reads
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );

    let one_root = FakeVerifier {
        configs: Some(Ok(configs(&[
            ("linux/amd64", "65532"),
            ("linux/arm64", "0"),
        ]))),
        ..FakeVerifier::default()
    }
    .with("signed", signed());
    let r = eval(&one_root, &[config_policy(true)], NoMatchPolicy::Deny);
    assert!(!r.allowed());
    assert!(!r.policies[0].inconclusive());

    // Without the flag the document has no `config` (and nothing is read).
    let r = eval(&nonroot, &[config_policy(false)], NoMatchPolicy::Deny);
    assert!(!r.allowed());
    assert_eq!(
        nonroot
            .config_reads
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[test]
fn config_files_are_read_only_after_an_authority_passed_and_their_failure_denies() {
    let unsigned = FakeVerifier {
        configs: Some(Ok(configs(&[
            ("linux/amd64", "65532"),
            ("linux/arm64", "65532"),
        ]))),
        ..FakeVerifier::default()
    };
    assert!(!eval(&unsigned, &[config_policy(true)], NoMatchPolicy::Deny).allowed());
    assert_eq!(
        unsigned
            .config_reads
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );

    let outage = FakeVerifier {
        configs: Some(Err(ImageReadError {
            reason: "reading the config files of ghcr.io/sigil-dev/demo: registry timed out".into(),
            inconclusive: true,
        })),
        ..FakeVerifier::default()
    }
    .with("signed", signed_by("https://github.com/sigil-dev/demo"));
    let r = eval(&outage, &[config_policy(true)], NoMatchPolicy::Deny);
    assert!(!r.allowed());
    let policy = &r.policies[0];
    assert!(policy.inconclusive(), "{policy:?}");
    assert_eq!(
        policy.policy_error.as_deref(),
        Some("reading the config files of ghcr.io/sigil-dev/demo: registry timed out")
    );
    let message = render("pod default/web", &[r]).message.unwrap_or_default();
    assert!(message.contains("registry timed out"), "{message}");
}

#[test]
fn rego_warnings_surface_as_admission_warnings() {
    let mut p = policy(
        "w",
        "ghcr.io/**",
        vec![static_authority("s", StaticAction::Pass)],
    );
    p.policy = Some(CipPolicy {
        program: PolicyProgram::Rego(rego(
            "package sigstore\nisCompliant := {\"result\": true, \"warning\": \"image is older than 30 days\"}\n",
        )),
        include_spec: false,
        include_object_meta: false,
        include_type_meta: false,
        fetch_config_file: false,
    });
    let verdict = render(
        "pod default/web",
        &[eval(&FakeVerifier::default(), &[p], NoMatchPolicy::Deny)],
    );
    assert!(verdict.allowed);
    assert_eq!(
        verdict.warnings,
        vec![format!(
            "image ghcr.io/sigil-dev/demo@{DIGEST}: policy w: image is older than 30 days"
        )]
    );
}

#[test]
fn compiled_policies_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledPolicy>();
}

const AMD64: &str = "sha256:a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const ARM64: &str = "sha256:b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

/// An index of linux/amd64 and linux/arm64 images, each signed (or not)
/// on its own, and the index itself signed (or not).
fn index_verifier(index: bool, amd64: bool, arm64: bool) -> FakeVerifier {
    let images = [("linux/amd64", AMD64), ("linux/arm64", ARM64)]
        .iter()
        .map(|(platform, digest)| PlatformImage {
            platform: (*platform).into(),
            digest: sigil_registry::Digest::parse(digest).unwrap(),
        })
        .collect();
    let mut v = FakeVerifier {
        index: Some(Ok(images)),
        ..FakeVerifier::default()
    };
    for (signed, digest) in [(index, DIGEST), (amd64, AMD64), (arm64, ARM64)] {
        if signed {
            v = v.at(digest, "ci", signed_by("https://github.com/sigil-dev/demo"));
        }
    }
    v
}

fn platforms_policy(platforms: Platforms) -> CompiledPolicy {
    CompiledPolicy {
        platforms,
        ..policy("multi-arch", "ghcr.io/**", vec![keyless("ci")])
    }
}

#[test]
fn what_must_be_signed_of_an_index_follows_the_policys_platforms() {
    // (index signed, amd64 signed, arm64 signed) → allowed under named,
    // every, namedOrEvery: the four ways publishers sign an index.
    let cases = [
        ("index only", (true, false, false), [true, false, true]),
        ("platforms only", (false, true, true), [false, true, true]),
        ("recursively", (true, true, true), [true, true, true]),
        (
            "one unsigned platform",
            (true, true, false),
            [true, false, true],
        ),
        ("nothing", (false, false, false), [false, false, false]),
    ];
    let rules = [Platforms::Named, Platforms::Every, Platforms::NamedOrEvery];
    for (what, (index, amd64, arm64), allowed) in cases {
        for (rule, want) in rules.iter().zip(allowed) {
            let r = eval(
                &index_verifier(index, amd64, arm64),
                &[platforms_policy(*rule)],
                NoMatchPolicy::Deny,
            );
            assert_eq!(
                r.allowed(),
                want,
                "signed {what}, platforms {rule:?}: {r:?}"
            );
        }
    }
}

#[test]
fn a_denial_names_the_platform_that_failed_and_its_digest() {
    let v = index_verifier(true, true, false);
    let r = eval(
        &v,
        &[platforms_policy(Platforms::Every)],
        NoMatchPolicy::Deny,
    );
    let message = render("pod default/web", &[r]).message.unwrap();
    assert_eq!(
        message,
        format!(
            "sigil denied pod default/web: 1 of 1 image(s) failed verification\n- image \
             ghcr.io/sigil-dev/demo@{DIGEST}: policy multi-arch failed: platform linux/arm64 \
             ({ARM64}): authority ci (keyless): no signature found"
        )
    );
    // namedOrEvery: the index failed first, then a platform.
    let v = index_verifier(false, true, false);
    let r = eval(
        &v,
        &[platforms_policy(Platforms::NamedOrEvery)],
        NoMatchPolicy::Deny,
    );
    let message = render("pod default/web", &[r]).message.unwrap();
    assert!(
        message.ends_with(&format!(
            "policy multi-arch failed: the index itself: authority ci (keyless): no signature \
             found; and not every platform passed; platform linux/arm64 ({ARM64}): authority ci \
             (keyless): no signature found"
        )),
        "{message}"
    );
}

#[test]
fn every_platform_reads_the_index_only_when_the_policy_needs_it() {
    let signed = index_verifier(true, true, true);
    eval(
        &signed,
        &[platforms_policy(Platforms::Named)],
        NoMatchPolicy::Deny,
    );
    eval(
        &signed,
        &[platforms_policy(Platforms::NamedOrEvery)],
        NoMatchPolicy::Deny,
    );
    assert_eq!(
        signed
            .index_reads
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "named, and namedOrEvery whose index passed, never list platforms"
    );
    eval(
        &signed,
        &[platforms_policy(Platforms::Every)],
        NoMatchPolicy::Deny,
    );
    assert_eq!(
        signed
            .index_reads
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[test]
fn an_image_that_is_not_an_index_is_judged_by_its_own_digest() {
    let plain = FakeVerifier {
        index: None,
        ..FakeVerifier::default()
    }
    .at(DIGEST, "ci", signed_by("https://github.com/sigil-dev/demo"));
    for rule in [Platforms::Every, Platforms::NamedOrEvery] {
        let r = eval(&plain, &[platforms_policy(rule)], NoMatchPolicy::Deny);
        assert!(r.allowed(), "{rule:?}: {r:?}");
        assert!(r.policies[0].platforms.is_none());
    }
}

#[test]
fn an_index_whose_platforms_cannot_be_read_is_denied_and_an_outage_is_inconclusive() {
    for inconclusive in [false, true] {
        let v = FakeVerifier {
            index: Some(Err(ImageReadError {
                reason: "reading the platforms of ghcr.io/sigil-dev/demo: registry timed out"
                    .into(),
                inconclusive,
            })),
            ..FakeVerifier::default()
        }
        .with("ci", signed_by("https://github.com/sigil-dev/demo"));
        let r = eval(
            &v,
            &[platforms_policy(Platforms::Every)],
            NoMatchPolicy::Deny,
        );
        assert!(
            !r.allowed(),
            "a signed index does not stand in for its platforms"
        );
        assert_eq!(r.policies[0].inconclusive(), inconclusive);
        let message = render("pod default/web", &[r]).message.unwrap();
        assert!(
            message.ends_with(
                "policy multi-arch failed: platforms: reading the platforms of \
                 ghcr.io/sigil-dev/demo: registry timed out"
            ),
            "{message}"
        );
    }
    // One platform unanswered and none refused: inconclusive; one refused:
    // a failure whatever the other says.
    let outage = || AuthorityOutcome::Inconclusive("registry timed out".into());
    let v = index_verifier(false, true, false).at(ARM64, "ci", outage());
    let r = eval(
        &v,
        &[platforms_policy(Platforms::Every)],
        NoMatchPolicy::Deny,
    );
    assert!(r.policies[0].inconclusive());
    let v = index_verifier(false, false, false).at(ARM64, "ci", outage());
    let r = eval(
        &v,
        &[platforms_policy(Platforms::Every)],
        NoMatchPolicy::Deny,
    );
    assert!(!r.allowed());
    assert!(!r.policies[0].inconclusive());
}

//! CUE policies through the whole evaluation of an image: attestation
//! statements as a verifier returns them, the documents policy-controller
//! builds from them, the CUE module deciding, and the denial a user reads.
//! Policies that policy-controller's examples define are read from its test
//! data at run time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::future::Future;

use serde_json::Value;
use sigil_cue::{CueEngine, testing};
use sigil_policy::eval::{
    AuthorityOutcome, AuthorityVerifier, ConfigFiles, ImageReadError, PlatformImage,
};
use sigil_policy::glob::{Glob, ImageName};
use sigil_policy::model::{
    AuthorityKind, CipPolicy, CompiledAttestation, CompiledAuthority, CompiledPolicy, KeyAuthority,
    KeyMaterial, Mode, NoMatchPolicy, Platforms, PolicyProgram, ResourceInfo, SecretRef,
    StaticAction, TlogPolicy, VerifiedAttestation, predicate_type_uri,
};
use sigil_policy::{CuePolicy, ImageResult, VerifiedSignature, evaluate_image, render};
use sigil_verifier::crypto::HashAlgorithm;
use sigil_verifier::dsse::Statement;

const IMAGE: &str = "registry.local:5000/policy-controller/demo@sha256:416cc82c76114b1744ea58bcbf2f411a0f2de4b0456703bf1bb83d33656951bc";

fn engine() -> CueEngine {
    testing::engine().unwrap_or_else(|e| panic!("{e}"))
}

/// The CUE text at `pointer` in the first document of an example file of
/// policy-controller's test data.
fn example_policy(file: &str, pointer: &str) -> String {
    let dir = sigil_testdata::policy_controller_testdata().unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    docs.first()
        .and_then(|d| d.pointer(pointer))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{file} has no text at {pointer}"))
        .to_owned()
}

/// Answers by authority name; serves the image's config files when given.
#[derive(Default)]
struct Fake(HashMap<String, AuthorityOutcome>, Option<ConfigFiles>);

impl Fake {
    fn with(mut self, authority: &str, outcome: AuthorityOutcome) -> Self {
        self.0.insert(authority.into(), outcome);
        self
    }
}

impl AuthorityVerifier for Fake {
    fn verify(
        &self,
        _image: &ImageName,
        authority: &CompiledAuthority,
    ) -> impl Future<Output = AuthorityOutcome> + Send {
        let outcome = self
            .0
            .get(&authority.name)
            .cloned()
            .unwrap_or_else(|| AuthorityOutcome::Failed("no signature found".into()));
        std::future::ready(outcome)
    }

    fn config_files(
        &self,
        _image: &ImageName,
    ) -> impl Future<Output = Result<ConfigFiles, ImageReadError>> + Send {
        std::future::ready(self.1.clone().ok_or_else(|| ImageReadError {
            reason: "this fake serves no config files".into(),
            inconclusive: false,
        }))
    }

    /// No image here is an index.
    fn platform_images(
        &self,
        _image: &ImageName,
    ) -> impl Future<Output = Result<Option<Vec<PlatformImage>>, ImageReadError>> + Send {
        std::future::ready(Ok(None))
    }
}

fn statement(predicate_type: &str, predicate: Value) -> Statement {
    serde_json::from_value(serde_json::json!({
        "_type": "https://in-toto.io/Statement/v0.1",
        "predicateType": predicate_type,
        "subject": [{"name": "registry.local:5000/policy-controller/demo",
                     "digest": {"sha256": "416cc82c76114b1744ea58bcbf2f411a0f2de4b0456703bf1bb83d33656951bc"}}],
        "predicate": predicate,
    }))
    .unwrap()
}

fn attested(statements: Vec<Statement>) -> AuthorityOutcome {
    AuthorityOutcome::Verified {
        signatures: vec![],
        attestations: statements
            .into_iter()
            .enumerate()
            .map(|(i, statement)| VerifiedAttestation {
                id: format!("sha256:{i:064x}"),
                identity: None,
                statement,
            })
            .collect(),
        rejected: vec![],
    }
}

fn signed(count: usize) -> AuthorityOutcome {
    AuthorityOutcome::Verified {
        signatures: (0..count)
            .map(|i| VerifiedSignature {
                id: format!("sha256:{i:064x}"),
                identity: None,
            })
            .collect(),
        attestations: vec![],
        rejected: vec![],
    }
}

fn key_authority(name: &str, attestations: Vec<CompiledAttestation>) -> CompiledAuthority {
    CompiledAuthority {
        name: name.into(),
        kind: AuthorityKind::Key(KeyAuthority {
            key: KeyMaterial::Secret(SecretRef {
                namespace: String::new(),
                name: "unused".into(),
            }),
            hash: Some(HashAlgorithm::Sha256),
        }),
        sources: vec![],
        tlog: TlogPolicy::Disabled,
        timestamp_trust_root: None,
        attestations,
    }
}

fn cue(name: &str, field: &str, text: &str) -> PolicyProgram {
    PolicyProgram::Cue(CuePolicy::compile_with(&engine(), name, field, text).unwrap())
}

fn wanted(name: &str, predicate_type: &str, text: &str) -> CompiledAttestation {
    CompiledAttestation {
        name: name.into(),
        predicate_type: predicate_type_uri(predicate_type).into(),
        predicate_type_name: predicate_type.into(),
        policy: Some(cue(
            name,
            "spec.authorities[0].attestations[0].policy.data",
            text,
        )),
    }
}

fn policy(authorities: Vec<CompiledAuthority>, cip: Option<CipPolicy>) -> CompiledPolicy {
    CompiledPolicy {
        name: "cue".into(),
        namespace: None,
        images: vec![Glob::compile("**demo**").unwrap()],
        authorities,
        policy: cip,
        mode: Mode::Enforce,
        matches: vec![],
        platforms: Platforms::Named,
    }
}

fn pod() -> ResourceInfo {
    ResourceInfo {
        version: "v1".into(),
        resource: "pods".into(),
        kind: "Pod".into(),
        name: "demo".into(),
        namespace: "default".into(),
        ..ResourceInfo::default()
    }
}

async fn judge(verifier: &Fake, p: &CompiledPolicy, resource: &ResourceInfo) -> ImageResult {
    evaluate_image(
        verifier,
        std::slice::from_ref(p),
        &ImageName::parse(IMAGE).unwrap(),
        resource,
        NoMatchPolicy::Deny,
    )
    .await
}

fn denial(result: ImageResult) -> String {
    render("pod default/demo", &[result])
        .message
        .unwrap_or_else(|| panic!("admitted"))
}

#[tokio::test]
async fn a_custom_attestation_is_judged_by_policy_controllers_example_cue() {
    let text = example_policy(
        "e2e/cip-key-with-attestations.yaml",
        "/spec/authorities/0/attestations/0/policy/data",
    );
    let p = policy(
        vec![key_authority(
            "keyatt",
            vec![wanted("custom-match-predicate", "custom", &text)],
        )],
        None,
    );
    let custom = |data: &str| {
        statement(
            "https://cosign.sigstore.dev/attestation/v1",
            serde_json::json!({"Data": data, "Timestamp": "2022-04-20T18:17:19Z"}),
        )
    };
    let ok = Fake::default().with("keyatt", attested(vec![custom("foobar key e2e test")]));
    assert!(judge(&ok, &p, &pod()).await.allowed());

    let wrong = Fake::default().with("keyatt", attested(vec![custom("something else")]));
    let message = denial(judge(&wrong, &p, &pod()).await);
    assert!(
        message.contains(
            "failed evaluating cue policy for custom-match-predicate: failed to evaluate the \
             policy with error: predicate.Data: conflicting values"
        ),
        "{message}"
    );
    assert!(
        message.contains("(policy at spec.authorities[0].attestations[0].policy.data, line "),
        "{message}"
    );
}

#[tokio::test]
async fn a_vuln_attestation_is_seen_as_cosign_retypes_it_for_the_short_name_only() {
    let text = example_policy(
        "e2e/cip-requires-two-signatures-and-two-attestations.yaml",
        "/spec/authorities/0/attestations/1/policy/data",
    );
    // No scan times: under `vuln` cosign's typed struct writes the zero
    // time, which is not after 2022-03-09; under the URI the times are
    // absent and the bounds pass.
    let scan = statement(
        "https://cosign.sigstore.dev/attestation/vuln/v1",
        serde_json::json!({
            "invocation": {"uri": "invocation.example.com/cosign-testing"},
            "scanner": {"uri": "fakescanner.example.com/cosign-testing"},
        }),
    );
    let verifier = Fake::default().with("keylessatt", attested(vec![scan]));

    let by_name = policy(
        vec![key_authority(
            "keylessatt",
            vec![wanted("vulnkeyless", "vuln", &text)],
        )],
        None,
    );
    let message = denial(judge(&verifier, &by_name, &pod()).await);
    assert!(
        message
            .contains("predicate.metadata.scanStartedOn: invalid value \"0001-01-01T00:00:00Z\""),
        "{message}"
    );

    let by_uri = policy(
        vec![key_authority(
            "keylessatt",
            vec![wanted(
                "vulnkeyless",
                "https://cosign.sigstore.dev/attestation/vuln/v1",
                &text,
            )],
        )],
        None,
    );
    assert!(judge(&verifier, &by_uri, &pod()).await.allowed());
}

fn two_signatures_policy() -> CompiledPolicy {
    let text = example_policy(
        "e2e/cip-requires-two-signatures-and-two-attestations.yaml",
        "/spec/policy/data",
    );
    let custom = "predicateType: \"https://cosign.sigstore.dev/attestation/v1\"\n";
    policy(
        vec![
            key_authority(
                "keylessatt",
                vec![
                    wanted("customkeyless", "custom", custom),
                    wanted("vulnkeyless", "custom", custom),
                ],
            ),
            key_authority(
                "keyatt",
                vec![wanted("custom-match-predicate", "custom", custom)],
            ),
            key_authority("keysignature", vec![]),
            key_authority("keylesssignature", vec![]),
        ],
        Some(CipPolicy {
            program: cue("ClusterImagePolicy", "spec.policy.data", &text),
            include_spec: false,
            include_object_meta: false,
            include_type_meta: false,
            fetch_config_file: false,
        }),
    )
}

#[tokio::test]
async fn a_cip_level_cue_policy_counts_signatures_and_attestations_per_authority() {
    let custom = || {
        statement(
            "https://cosign.sigstore.dev/attestation/v1",
            serde_json::json!({"Data": "x"}),
        )
    };
    let all = Fake::default()
        .with("keylessatt", attested(vec![custom()]))
        .with("keyatt", attested(vec![custom()]))
        .with("keysignature", signed(1))
        .with("keylesssignature", signed(1));
    let p = two_signatures_policy();
    assert!(judge(&all, &p, &pod()).await.allowed());

    let two_key_signatures = Fake::default()
        .with("keylessatt", attested(vec![custom()]))
        .with("keyatt", attested(vec![custom()]))
        .with("keysignature", signed(2))
        .with("keylesssignature", signed(1));
    let message = denial(judge(&two_key_signatures, &p, &pod()).await);
    assert!(
        message.contains(
            "failed evaluating cue policy for ClusterImagePolicy: failed to evaluate the policy \
             with error: authorityMatches.keysignature.signatures: invalid value"
        ),
        "{message}"
    );
    assert!(
        message.contains("(policy at spec.policy.data, line "),
        "{message}"
    );

    // An authority that did not pass is absent from the document: its
    // constraints stay incomplete and pass, as in policy-controller.
    let without_keyless_signature = Fake::default()
        .with("keylessatt", attested(vec![custom()]))
        .with("keyatt", attested(vec![custom()]))
        .with("keysignature", signed(1));
    assert!(
        judge(&without_keyless_signature, &p, &pod())
            .await
            .allowed()
    );
}

/// A static `pass` authority under the CIP-level CUE policy of an example
/// file, its include flags set by `flags`.
fn static_pass_with(file: &str, flags: impl FnOnce(&mut CipPolicy)) -> CompiledPolicy {
    let text = example_policy(file, "/spec/policy/data");
    let mut cip = CipPolicy {
        program: cue("ClusterImagePolicy", "spec.policy.data", &text),
        include_spec: false,
        include_object_meta: false,
        include_type_meta: false,
        fetch_config_file: false,
    };
    flags(&mut cip);
    policy(
        vec![CompiledAuthority {
            kind: AuthorityKind::Static(StaticAction::Pass),
            ..key_authority("authority-0", vec![])
        }],
        Some(cip),
    )
}

#[tokio::test]
async fn include_type_meta_shows_a_job_but_nothing_for_a_pod() {
    let p = static_pass_with("e2e/cip-include-typemeta.yaml", |cip| {
        cip.include_type_meta = true;
    });
    assert!(judge(&Fake::default(), &p, &pod()).await.allowed());
    let job = ResourceInfo {
        group: "batch".into(),
        version: "v1".into(),
        resource: "jobs".into(),
        kind: "Job".into(),
        ..pod()
    };
    let message = denial(judge(&Fake::default(), &p, &job).await);
    assert!(
        message.contains("typemeta.kind: conflicting values \"Job\" and \"Pod\""),
        "{message}"
    );
}

/// The config files of a two-platform image as go-containerregistry leaves
/// them, each run as `user`.
fn two_platforms(user: &str) -> ConfigFiles {
    [("amd64", None), ("arm", Some("v7"))]
        .into_iter()
        .map(|(arch, variant)| {
            let mut raw = serde_json::json!({
                "architecture": arch,
                "os": "linux",
                "config": {"User": user, "Env": ["PATH=/usr/local/bin:/usr/bin"]},
                "rootfs": {"type": "layers", "diff_ids": []}
            })
            .as_object()
            .cloned()
            .unwrap_or_default();
            if let Some(v) = variant {
                raw.insert("variant".into(), Value::from(v));
            }
            (
                sigil_registry::config::platform_key(&raw),
                sigil_registry::config::config_file(raw),
            )
        })
        .collect()
}

fn config_file_policy(file: &str) -> CompiledPolicy {
    static_pass_with(file, |cip| cip.fetch_config_file = true)
}

#[tokio::test]
async fn policy_controllers_config_file_policies_judge_the_user_of_every_platform() {
    let nonroot = Fake(HashMap::new(), Some(two_platforms("65532")));
    let passes = config_file_policy("e2e/cip-config-file-policy.yaml");
    assert!(judge(&nonroot, &passes, &pod()).await.allowed());

    let fails = config_file_policy("e2e/cip-config-file-policy-fails.yaml");
    let message = denial(judge(&nonroot, &fails, &pod()).await);
    assert!(
        message.contains("config.\"linux/amd64\".config.User: conflicting values"),
        "{message}"
    );

    let root = Fake(HashMap::new(), Some(two_platforms("0")));
    let message = denial(judge(&root, &passes, &pod()).await);
    assert!(
        message.contains("config.\"linux/arm/v7\".config.User: conflicting values")
            || message.contains("config.\"linux/amd64\".config.User: conflicting values"),
        "{message}"
    );

    let unreadable = Fake::default();
    let message = denial(judge(&unreadable, &passes, &pod()).await);
    assert!(
        message.contains("this fake serves no config files"),
        "{message}"
    );
}

//! The documents against what Go itself writes: every expected string here
//! was produced by Go 1.26's `encoding/json` with cosign v3.0.5's and
//! in-toto-golang v0.9.0's struct definitions, from the same input.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;

use serde_json::json;
use sigil_verifier::dsse::Statement;
use sigil_verifier::identity::{FulcioExtensions, FulcioIdentity};

use super::*;
use crate::model::{
    AuthorityMatch, AuthorityResult, CipPolicy, PolicyProgram, ResourceInfo, VerifiedAttestation,
    VerifiedSignature,
};
use crate::rego::RegoPolicy;

const HEADER: &str = r#""_type":"https://in-toto.io/Statement/v1","predicateType":"P","subject":[{"digest":{"sha256":"ab"}}]"#;
const GO_HEADER: &str = r#"{"_type":"https://in-toto.io/Statement/v1","predicateType":"P","subject":[{"name":"","digest":{"sha256":"ab"}}],"predicate":"#;

fn statement(predicate: &str) -> Statement {
    serde_json::from_str(&format!("{{{HEADER},\"predicate\":{predicate}}}")).unwrap()
}

fn go(shape: StatementShape, predicate: &str) -> Result<String, String> {
    attestation_document(&statement(predicate), shape).map(|d| d.bytes)
}

fn want(predicate: &str) -> Result<String, String> {
    Ok(format!("{GO_HEADER}{predicate}}}"))
}

#[test]
fn numbers_strings_and_map_keys_are_written_as_go_writes_them() {
    let got = go(
        StatementShape::Generic,
        r#"{"n":[1,1.0,1.5,100000000000000000000,1e21,1e-6,1e-7,0.000001234,-0.0,9007199254740993,123456789012345678901234567890,3.14159265358979323846,2.5e-10,-1e-7],"s":"a<b>&c\u2028\u0001\b\f\n\"\\é\u00e9","z":{"b":1,"a":2,"B":3}}"#,
    );
    assert_eq!(
        got,
        want(
            r#"{"n":[1,1,1.5,100000000000000000000,1e+21,0.000001,1e-7,0.000001234,-0,9007199254740992,1.2345678901234568e+29,3.141592653589793,2.5e-10,-1e-7],"s":"a\u003cb\u003e\u0026c\u2028\u0001\b\f\n\"\\éé","z":{"B":3,"a":2,"b":1}}"#
        )
    );
}

#[test]
fn a_vuln_statement_gets_cosigns_typed_fields_and_normalised_times() {
    assert_eq!(
        go(
            StatementShape::Vuln,
            r#"{"scanner":{"uri":"u","extra":1,"result":{"x":1}},"Metadata":{"scanStartedOn":"2022-04-12T00:00:00.120Z","scanFinishedOn":"2022-04-12T02:00:00+02:00"}}"#
        ),
        want(
            r#"{"invocation":{"parameters":null,"uri":"","event_id":"","builder.id":""},"scanner":{"uri":"u","version":"","db":{"uri":"","version":""},"result":{"x":1}},"metadata":{"scanStartedOn":"2022-04-12T00:00:00.12Z","scanFinishedOn":"2022-04-12T02:00:00+02:00"}}"#
        )
    );
    assert_eq!(
        go(
            StatementShape::Vuln,
            r#"{"invocation":{"uri":"u"},"metadata":{"scanStartedOn":"2022-04-12T00:00:00+00:00","scanFinishedOn":"2022-04-12T00:00:00.000000000-00:00"}}"#
        ),
        want(
            r#"{"invocation":{"parameters":null,"uri":"u","event_id":"","builder.id":""},"scanner":{"uri":"","version":"","db":{"uri":"","version":""},"result":null},"metadata":{"scanStartedOn":"2022-04-12T00:00:00Z","scanFinishedOn":"2022-04-12T00:00:00Z"}}"#
        )
    );
    assert_eq!(
        go(
            StatementShape::Vuln,
            r#"{"metadata":{"scanStartedOn":"2022-04-12T00:00:00.1234567891Z","scanFinishedOn":null}}"#
        ),
        want(
            r#"{"invocation":{"parameters":null,"uri":"","event_id":"","builder.id":""},"scanner":{"uri":"","version":"","db":{"uri":"","version":""},"result":null},"metadata":{"scanStartedOn":"2022-04-12T00:00:00.123456789Z","scanFinishedOn":"0001-01-01T00:00:00Z"}}"#
        )
    );
}

#[test]
fn a_vuln_statement_that_go_cannot_decode_fails_the_attestation() {
    let err = go(StatementShape::Vuln, r#"{"scanner":{"uri":5}}"#).unwrap_err();
    assert_eq!(
        err,
        "unmarshaling CosignVulnStatement: json: cannot unmarshal number into Go struct field \
         Scanner.predicate.scanner.uri of type string"
    );
    let err = go(
        StatementShape::Vuln,
        r#"{"metadata":{"scanStartedOn":"2022-04-12"}}"#,
    )
    .unwrap_err();
    assert!(
        err.starts_with("unmarshaling CosignVulnStatement: parsing time \"2022-04-12\""),
        "{err}"
    );
}

#[test]
fn slsa_provenance_v02_drops_empty_optional_fields_and_unknown_ones() {
    assert_eq!(
        go(
            StatementShape::SlsaProvenance02,
            r#"{"builder":{"id":"b"},"buildType":"t","invocation":{"configSource":{"uri":"git","digest":{"sha1":"x"}}},"metadata":{"buildStartedOn":"2022-01-01T00:00:00Z","completeness":{"parameters":true}},"materials":[{"uri":"m"},{}],"extra":true}"#
        ),
        want(
            r#"{"builder":{"id":"b"},"buildType":"t","invocation":{"configSource":{"uri":"git","digest":{"sha1":"x"}}},"metadata":{"buildStartedOn":"2022-01-01T00:00:00Z","completeness":{"parameters":true,"environment":false,"materials":false},"reproducible":false},"materials":[{"uri":"m"},{}]}"#
        )
    );
    assert_eq!(
        go(
            StatementShape::SlsaProvenance02,
            r#"{"builder":{"id":"b"},"materials":[]}"#
        ),
        want(r#"{"builder":{"id":"b"},"buildType":"","invocation":{"configSource":{}}}"#)
    );
    assert_eq!(
        go(
            StatementShape::SlsaProvenance02,
            r#"{"builder":{"id":"b"},"metadata":null,"buildConfig":{"a":1},"invocation":{"parameters":{"p":1},"environment":null}}"#
        ),
        want(
            r#"{"builder":{"id":"b"},"buildType":"","invocation":{"configSource":{},"parameters":{"p":1}},"buildConfig":{"a":1}}"#
        )
    );
}

#[test]
fn a_link_statement_writes_absent_maps_and_lists_as_null() {
    assert_eq!(
        go(
            StatementShape::Link,
            r#"{"name":"n","command":["a","b"],"materials":{"f":{"sha256":"1"}},"extra":1}"#
        ),
        want(
            r#"{"_type":"","name":"n","materials":{"f":{"sha256":"1"}},"products":null,"byproducts":null,"command":["a","b"],"environment":null}"#
        )
    );
    assert_eq!(
        go(StatementShape::Link, "{}"),
        want(
            r#"{"_type":"","name":"","materials":null,"products":null,"byproducts":null,"command":null,"environment":null}"#
        )
    );
}

#[test]
fn the_shape_follows_the_name_the_policy_writes_not_the_uri() {
    assert_eq!(
        StatementShape::for_predicate_type("vuln"),
        StatementShape::Vuln
    );
    assert_eq!(
        StatementShape::for_predicate_type("https://cosign.sigstore.dev/attestation/vuln/v1"),
        StatementShape::Generic
    );
    assert_eq!(
        StatementShape::for_predicate_type("slsaprovenance"),
        StatementShape::SlsaProvenance02
    );
    // cosign's switch names only `slsaprovenance`, not its aliases.
    assert_eq!(
        StatementShape::for_predicate_type("slsaprovenance02"),
        StatementShape::Generic
    );
}

fn cip(include: bool) -> CipPolicy {
    CipPolicy {
        program: PolicyProgram::Rego(
            RegoPolicy::compile("t", "package sigstore\nisCompliant := true\n").unwrap(),
        ),
        include_spec: include,
        include_object_meta: include,
        include_type_meta: include,
        fetch_config_file: false,
    }
}

fn keyless_identity() -> FulcioIdentity {
    FulcioIdentity {
        subject: "https://github.com/o/r/.github/workflows/w.yml@refs/heads/main".into(),
        subjects: vec![],
        issuer: Some("https://token.actions.githubusercontent.com".into()),
        extensions: FulcioExtensions {
            github_workflow_repository: Some("o/r".into()),
            ..FulcioExtensions::default()
        },
    }
}

fn passed(name: &str, kind: &'static str, m: AuthorityMatch) -> AuthorityResult {
    AuthorityResult {
        name: name.into(),
        kind,
        outcome: Ok(m),
        inconclusive: false,
    }
}

#[test]
fn the_cip_document_omits_what_policy_controller_omits() {
    let att = VerifiedAttestation {
        id: "sha256:cd".into(),
        identity: None,
        statement: statement(r#"{"secret":"not in the CIP document"}"#),
    };
    let authorities = vec![
        passed(
            "keyless",
            "keyless",
            AuthorityMatch {
                signatures: vec![VerifiedSignature {
                    id: "sha256:ab".into(),
                    identity: Some(keyless_identity()),
                }],
                ..AuthorityMatch::default()
            },
        ),
        passed(
            "key-att",
            "key",
            AuthorityMatch {
                attestations: BTreeMap::from([("custom-att".to_owned(), vec![att])]),
                predicate_types: BTreeMap::from([("custom-att".to_owned(), "custom".to_owned())]),
                ..AuthorityMatch::default()
            },
        ),
        passed("allow", "static", AuthorityMatch::default()),
        AuthorityResult {
            name: "failed".into(),
            kind: "key",
            outcome: Err("no signature".into()),
            inconclusive: false,
        },
    ];
    let doc = policy_document(&authorities, &cip(false), &ResourceInfo::default(), None);
    assert_eq!(
        doc.bytes,
        r#"{"authorityMatches":{"allow":{"static":true},"key-att":{"attestations":{"custom-att":[{"id":"sha256:cd","predicateType":"custom","digest":"sha256:cd"}]}},"keyless":{"signatures":[{"id":"sha256:ab","subject":"https://github.com/o/r/.github/workflows/w.yml@refs/heads/main","issuer":"https://token.actions.githubusercontent.com","githubWorkflowRepo":"o/r"}]}}}"#
    );
}

fn workload(kind: &str, group: &str) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        metadata: json!({"name": "web", "labels": {"team": "a"}}),
        spec: json!({"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {"spec": {"serviceAccountName": "web"}}, "strategy": {"type": "RollingUpdate"}}),
        ..ResourceInfo::default()
    }
}

#[test]
fn the_cip_document_carries_the_objects_duck_typed_spec_metadata_and_typemeta() {
    let allow = vec![passed("allow", "static", AuthorityMatch::default())];
    let doc = policy_document(&allow, &cip(true), &workload("Deployment", "apps"), None);
    assert_eq!(
        doc.json,
        json!({
            "authorityMatches": {"allow": {"static": true}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {"spec": {"serviceAccountName": "web"}}},
            "metadata": {"name": "web", "labels": {"team": "a"}},
            "typemeta": {"kind": "Deployment", "apiVersion": "apps/v1"},
        })
    );
    assert!(
        doc.bytes
            .contains(r#""typemeta":{"kind":"Deployment","apiVersion":"apps/v1"}"#)
    );

    let job = policy_document(&allow, &cip(true), &workload("Job", "batch"), None);
    assert_eq!(
        job.json["spec"],
        json!({"template": {"spec": {"serviceAccountName": "web"}}})
    );

    let mut pod = workload("Pod", "");
    pod.spec = json!({"serviceAccountName": "web"});
    let pod = policy_document(&allow, &cip(true), &pod, None);
    assert_eq!(pod.json["spec"], json!({"serviceAccountName": "web"}));
    assert!(
        pod.json.get("typemeta").is_none(),
        "policy-controller has no TypeMeta for Pods"
    );

    let none = policy_document(&allow, &cip(false), &workload("Deployment", "apps"), None);
    assert_eq!(
        none.json,
        json!({"authorityMatches": {"allow": {"static": true}}})
    );
}

#[test]
fn the_cip_document_carries_config_files_by_platform_after_the_authority_matches() {
    let allow = vec![passed("allow", "static", AuthorityMatch::default())];
    let config: crate::eval::ConfigFiles = [
        (
            "linux/amd64".to_owned(),
            json!({"os": "linux", "config": {"User": "65532"}}),
        ),
        (
            "linux/arm/v7".to_owned(),
            json!({"os": "linux", "config": {"User": "0"}}),
        ),
    ]
    .into_iter()
    .collect();
    let doc = policy_document(&allow, &cip(false), &ResourceInfo::default(), Some(&config));
    assert_eq!(
        doc.bytes,
        r#"{"authorityMatches":{"allow":{"static":true}},"config":{"linux/amd64":{"config":{"User":"65532"},"os":"linux"},"linux/arm/v7":{"config":{"User":"0"},"os":"linux"}}}"#
    );
    // An empty map is omitted, as Go's omitempty omits it.
    let empty = policy_document(
        &allow,
        &cip(false),
        &ResourceInfo::default(),
        Some(&Default::default()),
    );
    assert!(empty.json.get("config").is_none(), "{}", empty.bytes);
}

#[test]
fn go_times_are_parsed_strictly() {
    for bad in [
        "2022-04-12",
        "2022-04-12t00:00:00Z",
        "2022-04-12T24:00:00Z",
        "2022-02-30T00:00:00Z",
        "2022-04-12T00:00:00",
        "2022-04-12T00:00:00+2:00",
        "2022-04-12T00:00:00z",
        "2022-04-12T00:00:00.Z",
    ] {
        assert_eq!(go_time(bad), None, "{bad}");
    }
    assert_eq!(
        go_time("2024-02-29T23:59:59.500-07:30").as_deref(),
        Some("2024-02-29T23:59:59.5-07:30")
    );
    assert_eq!(
        go_time("2022-04-12T00:00:00,5Z").as_deref(),
        Some("2022-04-12T00:00:00.5Z")
    );
}

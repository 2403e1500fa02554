//! Every `deploy/examples/` policy kind evaluated live, through `sigil policy
//! test` and `sigil verify --policy` (so through `evaluate_image` over the
//! `RegistryVerifier`, as the webhook evaluates), against images in real
//! local registries: olareg (referrers API) and docker-registry (fallback
//! tags), signed by cosign v3 in both formats (`e2e/registry-fixtures.sh`
//! makes them and runs these ignored tests with `SIGIL_REGISTRY_FIXTURES`)
//! or, for keyless, by the testkit and pushed here. policy-controller's own
//! private-Sigstore policy (`../shared/policy-controller-testdata`, read at
//! run time) is converted by `sigil policy convert` and judged under a
//! default trust root.
//!
//! The examples are loaded from `deploy/examples/` and changed only where a
//! local registry cannot play their part: globs point at 127.0.0.1, and where
//! an example names a public-good identity or a corporate key the test
//! substitutes the harness's cosign key or the testkit's trust root (each
//! test says which). No test resolves a public registry name: images are
//! pinned by digest on 127.0.0.1, and globs of untouched examples never
//! select them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sigil_testkit::cosign::{self, OciManifest};
use sigil_testkit::registry::Pusher;
use sigil_testkit::{BundleSpec, GithubWorkflow, Identity, Testkit};

const REGS: [&str; 2] = ["OLAREG", "DOCKREG"];

fn fixtures() -> HashMap<String, String> {
    let path =
        std::env::var("SIGIL_REGISTRY_FIXTURES").expect("run through e2e/registry-fixtures.sh");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The ClusterImagePolicy documents of an example file, as JSON.
fn example(name: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/examples")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    docs.into_iter()
        .filter(|d| d["kind"] == "ClusterImagePolicy")
        .collect()
}

/// The single ClusterImagePolicy of an example, its globs replaced by `glob`.
fn example_at(name: &str, glob: &str) -> Value {
    let mut docs = example(name);
    assert_eq!(docs.len(), 1, "{name}");
    let mut doc = docs.remove(0);
    doc["spec"]["images"] = json!([{ "glob": glob }]);
    doc
}

/// A scratch directory for one test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sigil-policy-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `doc` (JSON is YAML) where `sigil` can read it.
fn write(dir: &Path, name: &str, doc: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    path.display().to_string()
}

/// The harness's cosign public key `KEY1`/`KEY2` as PEM.
fn key(f: &HashMap<String, String>, which: &str) -> String {
    std::fs::read_to_string(&f[which]).unwrap()
}

/// A key authority on the harness key: cosign signed offline, so there is no
/// log entry and the policy waives it with `ctlog: {}` (the only knob; the
/// default requires one).
fn key_authority(name: &str, pem: &str) -> Value {
    json!({ "name": name, "key": { "data": pem }, "ctlog": {} })
}

/// The exit status and combined output of `sigil ARGS`, killed after 60 s,
/// with the CUE module built from this checkout.
fn sigil(args: &[&str]) -> (i32, String) {
    let cue_module = sigil_cue::testing::module_path().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(args)
        .env("DOCKER_CONFIG", "/nonexistent")
        .env(sigil_cue::MODULE_ENV, cue_module)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("sigil {args:?} ran for more than 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    (status.code().unwrap_or(-1), out)
}

/// `sigil policy test` of `image` against `policy` on `registry`.
fn policy_test(registry: &str, policy: &str, extra: &[&str], image: &str) -> (i32, String) {
    let mut args = vec![
        "policy",
        "test",
        "--policy",
        policy,
        "--insecure-registry",
        registry,
    ];
    args.extend_from_slice(extra);
    args.push(image);
    sigil(&args)
}

/// `sigil verify --policy` of `image` against `policy` on `registry`.
fn verify_policy(registry: &str, policy: &str, extra: &[&str], image: &str) -> (i32, String) {
    let mut args = vec![
        "verify",
        "--policy",
        policy,
        "--insecure-registry",
        registry,
    ];
    args.extend_from_slice(extra);
    args.push(image);
    sigil(&args)
}

#[track_caller]
fn expect(got: &(i32, String), status: i32, needles: &[&str]) {
    let (code, out) = got;
    assert_eq!(*code, status, "exit status; output:\n{out}");
    for n in needles {
        assert!(out.contains(n), "expected {n:?} in:\n{out}");
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn the_key_based_example_needs_a_log_entry_unless_ctlog_waives_it_and_then_admits_both_formats() {
    let f = fixtures();
    let dir = scratch("key");
    for r in REGS {
        let reg = &f[r];
        // The example with the harness key in place of the platform team's.
        let mut doc = example_at("key-based.yaml", &format!("{reg}/test/**"));
        doc["spec"]["authorities"][0]["key"]["data"] = json!(key(&f, "KEY1"));
        let strict = write(&dir, &format!("{r}-strict.yaml"), &doc);
        expect(
            &policy_test(reg, &strict, &[], &f[&format!("{r}_NEW")]),
            1,
            &[
                "deny: sigil denied image",
                "policy platform-key failed",
                "transparency log",
            ],
        );

        doc["spec"]["authorities"][0]["ctlog"] = json!({});
        let waived = write(&dir, &format!("{r}-waived.yaml"), &doc);
        for image in ["NEW", "LEGACY"] {
            expect(
                &policy_test(reg, &waived, &[], &f[&format!("{r}_{image}")]),
                0,
                &["allow:", "platform-key passed"],
            );
        }
        expect(
            &policy_test(reg, &waived, &[], &format!("{reg}/test/app:new")),
            0,
            &["allow:", "@sha256:"],
        );
        for image in ["UNSIGNED", "OTHER", "MOVED", "ATT"] {
            expect(
                &policy_test(reg, &waived, &[], &f[&format!("{r}_{image}")]),
                1,
                &["policy platform-key failed", "authority platform-key (key)"],
            );
        }
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn sigil_verify_with_a_policy_gives_the_verdicts_of_policy_test() {
    let f = fixtures();
    let dir = scratch("verify");
    for r in REGS {
        let reg = &f[r];
        let mut doc = example_at("key-based.yaml", &format!("{reg}/test/**"));
        doc["spec"]["authorities"] = json!([key_authority("platform-key", &key(&f, "KEY1"))]);
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        expect(
            &verify_policy(reg, &policy, &[], &f[&format!("{r}_LEGACY")]),
            0,
            &["allow:", "platform-key passed"],
        );
        expect(
            &verify_policy(reg, &policy, &[], &f[&format!("{r}_UNSIGNED")]),
            1,
            &["deny: sigil denied image", "policy platform-key failed"],
        );
        let key1 = f["KEY1"].clone();
        expect(
            &verify_policy(reg, &policy, &["--key", &key1], &f[&format!("{r}_NEW")]),
            1,
            &["--policy takes the signers from the ClusterImagePolicies"],
        );
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn signature_pull_secrets_are_left_to_the_webhook_and_the_cli_says_it_uses_the_docker_config() {
    let f = fixtures();
    let dir = scratch("pull-secrets");
    for r in REGS {
        let reg = &f[r];
        let mut authority = key_authority("platform-key", &key(&f, "KEY1"));
        authority["source"] = json!([{
            "oci": format!("{reg}/test/app"),
            "signaturePullSecrets": [{ "name": "regcred" }],
        }]);
        let mut doc = example_at("key-based.yaml", &format!("{reg}/test/**"));
        doc["spec"]["authorities"] = json!([authority]);
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        for run in [policy_test, verify_policy] {
            expect(
                &run(reg, &policy, &[], &f[&format!("{r}_NEW")]),
                0,
                &[
                    "note: policy platform-key authority platform-key source[0]: \
                     signaturePullSecrets (regcred) are read by the webhook",
                    "pulls with anonymous access (no docker config found) instead",
                    "allow:",
                ],
            );
        }
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn the_attestation_example_admits_main_branch_provenance_and_denies_what_its_rego_rejects() {
    let f = fixtures();
    let dir = scratch("attest");
    for r in REGS {
        let reg = &f[r];
        // The example's attestations and Rego verbatim; the harness key in
        // place of its public-good GitHub Actions identity.
        let mut doc = example_at("attestation-rego.yaml", &format!("{reg}/test/**"));
        let attestations = doc["spec"]["authorities"][0]["attestations"].clone();
        let mut authority = key_authority("github-actions", &key(&f, "KEY1"));
        authority["attestations"] = attestations;
        doc["spec"]["authorities"] = json!([authority]);
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_PROV_GOOD")]),
            0,
            &["allow:", "provenance-and-scan passed"],
        );
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_PROV_BAD")]),
            1,
            &[
                "policy provenance-and-scan failed",
                "attestation provenance: no https://slsa.dev/provenance/v1 attestation satisfies its policy",
            ],
        );
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_PROV_VULN")]),
            1,
            &[
                "attestation scan:",
                "blocking vulnerabilities",
                "CVE-2024-0001",
            ],
        );
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_NEW")]),
            1,
            &[
                "authority github-actions (key): no attestation of type https://slsa.dev/provenance/v1 found",
            ],
        );
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn the_warn_mode_example_admits_a_failing_image_with_a_warning_and_exit_status_3() {
    let f = fixtures();
    let dir = scratch("warn");
    for r in REGS {
        let reg = &f[r];
        // The example as written (public-good GitHub identities) over the
        // local registry: nothing there is signed that way.
        let doc = example_at("warn-mode.yaml", &format!("{reg}/**"));
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        for run in [policy_test, verify_policy] {
            expect(
                &run(reg, &policy, &[], &f[&format!("{r}_UNSIGNED")]),
                3,
                &[
                    "warn: image",
                    "policy quay-audit (mode: warn) failed",
                    "allow:",
                ],
            );
        }
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn the_static_pass_example_admits_unsigned_images_it_selects() {
    let f = fixtures();
    let dir = scratch("static");
    for r in REGS {
        let reg = &f[r];
        let doc = example_at("static-pass.yaml", &format!("{reg}/test/**"));
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_UNSIGNED")]),
            0,
            &["allow:", "trusted-base-images passed"],
        );
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn a_cip_level_policy_requires_signatures_by_two_keys_in_either_format() {
    let f = fixtures();
    let dir = scratch("two-keys");
    let rego = r#"package sigstore
import rego.v1

required := ["first-key", "second-key"]
missing := [name | some name in required; not input.authorityMatches[name]]

isCompliant := {
  "result": count(missing) == 0,
  "error": sprintf("signatures missing from: %v", [missing]),
  "warning": "",
}
"#;
    for r in REGS {
        let reg = &f[r];
        let doc = json!({
            "apiVersion": "policy.sigil.dev/v1alpha1",
            "kind": "ClusterImagePolicy",
            "metadata": { "name": "two-keys" },
            "spec": {
                "images": [{ "glob": format!("{reg}/test/**") }],
                "authorities": [
                    key_authority("first-key", &key(&f, "KEY1")),
                    key_authority("second-key", &key(&f, "KEY2")),
                ],
                "policy": { "type": "rego", "data": rego },
            },
        });
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        for image in ["TWICE", "TWICE_LEGACY"] {
            expect(
                &policy_test(reg, &policy, &[], &f[&format!("{r}_{image}")]),
                0,
                &["allow:", "two-keys passed"],
            );
        }
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_NEW")]),
            1,
            &[
                "policy two-keys failed",
                "signatures missing from: [\"second-key\"]",
            ],
        );
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_OTHER")]),
            1,
            &["signatures missing from: [\"first-key\"]"],
        );
    }
}

/// A ClusterImagePolicy selecting `{reg}/test/**` with `authorities`.
fn policy_doc(name: &str, reg: &str, authorities: Value) -> Value {
    json!({
        "apiVersion": "policy.sigil.dev/v1alpha1",
        "kind": "ClusterImagePolicy",
        "metadata": { "name": name },
        "spec": {
            "images": [{ "glob": format!("{reg}/test/**") }],
            "authorities": authorities,
        },
    })
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn a_key_authoritys_hash_algorithm_admits_signatures_over_that_digest_only() {
    let f = fixtures();
    let dir = scratch("hash");
    for r in REGS {
        let reg = &f[r];
        let cases: [(&str, &str, Option<&str>, &[&str]); 7] = [
            // cosign's P-384 signatures, both formats: sigil's default (the
            // key type's digest) and an explicit sha384 admit them; sha256,
            // policy-controller's default, does not.
            (
                "P384KEY",
                "sha384-default",
                None,
                &["SHA384", "SHA384_LEGACY"],
            ),
            (
                "P384KEY",
                "sha384",
                Some("sha384"),
                &["SHA384", "SHA384_LEGACY"],
            ),
            ("HASHKEY", "sha224", Some("sha224"), &["SHA224_LEGACY"]),
            ("HASHKEY", "sha512", Some("SHA512"), &["SHA512_LEGACY"]),
            (
                "RSAKEY",
                "rsa-sha512",
                Some("sha512"),
                &["RSA_SHA512_LEGACY"],
            ),
            ("P384KEY", "sha256", Some("sha256"), &[]),
            ("HASHKEY", "default", None, &[]),
        ];
        for (key_name, label, hash, admitted) in cases {
            let mut authority = key_authority("hash-key", &key(&f, key_name));
            if let Some(hash) = hash {
                authority["key"]["hashAlgorithm"] = json!(hash);
            }
            let policy = write(
                &dir,
                &format!("{r}-{label}.yaml"),
                &policy_doc("hash", reg, json!([authority])),
            );
            for image in [
                "SHA384",
                "SHA384_LEGACY",
                "SHA224_LEGACY",
                "SHA512_LEGACY",
                "RSA_SHA512_LEGACY",
            ] {
                let got = policy_test(reg, &policy, &[], &f[&format!("{r}_{image}")]);
                if admitted.contains(&image) {
                    expect(&got, 0, &["allow:", "hash passed"]);
                } else {
                    expect(&got, 1, &["policy hash failed"]);
                }
            }
        }
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn a_source_with_only_signature_pull_secrets_reads_the_images_own_repository() {
    let f = fixtures();
    let dir = scratch("source-secrets-only");
    for r in REGS {
        let reg = &f[r];
        let mut authority = key_authority("platform-key", &key(&f, "KEY1"));
        authority["source"] = json!([{ "signaturePullSecrets": [{ "name": "regcred" }] }]);
        let policy = write(
            &dir,
            &format!("{r}.yaml"),
            &policy_doc("own-repo", reg, json!([authority])),
        );
        for image in ["NEW", "LEGACY"] {
            expect(
                &policy_test(reg, &policy, &[], &f[&format!("{r}_{image}")]),
                0,
                &[
                    "allow:",
                    "own-repo passed",
                    "signaturePullSecrets (regcred)",
                ],
            );
        }
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_OTHER")]),
            1,
            &["policy own-repo failed"],
        );
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn a_converted_policy_controller_key_policy_keeps_its_verdict_on_signatures_without_a_log_entry() {
    // policy-controller admits `cosign sign --tlog-upload=false` signatures
    // through a key authority without ctlog; changing only apiVersion would
    // make sigil deny them; `sigil policy convert` keeps the admission.
    let f = fixtures();
    let dir = scratch("convert");
    for r in REGS {
        let reg = &f[r];
        let mut doc = policy_doc(
            "pc-key",
            reg,
            json!([{ "name": "pc-key", "key": { "data": key(&f, "KEY1") } }]),
        );
        doc["apiVersion"] = json!("policy.sigstore.dev/v1beta1");
        let original = write(&dir, &format!("{r}-pc.yaml"), &doc);

        let (status, out) = sigil(&["policy", "convert", &original]);
        assert_eq!(status, 0, "{out}");
        assert!(
            out.contains("changed: document 0 (ClusterImagePolicy pc-key): spec.authorities[0].ctlog: added `ctlog: {}`"),
            "{out}"
        );
        let yaml = out
            .lines()
            .filter(|l| !l.contains(": changed: "))
            .collect::<Vec<_>>()
            .join("\n");
        let converted = dir.join(format!("{r}-converted.yaml"));
        std::fs::write(&converted, &yaml).unwrap();
        let converted = converted.display().to_string();
        for image in ["NEW", "LEGACY"] {
            expect(
                &policy_test(reg, &converted, &[], &f[&format!("{r}_{image}")]),
                0,
                &["allow:", "pc-key passed"],
            );
        }

        doc["apiVersion"] = json!("policy.sigil.dev/v1alpha1");
        let renamed = write(&dir, &format!("{r}-renamed.yaml"), &doc);
        expect(
            &policy_test(reg, &renamed, &[], &f[&format!("{r}_LEGACY")]),
            1,
            &["policy pc-key failed", "transparency log"],
        );
        let (status, lint) = sigil(&["policy", "lint", &original]);
        assert_eq!(status, 1, "{lint}");
        assert!(
            lint.contains("warning: spec.authorities[0].ctlog: `sigil policy convert` keeps policy-controller's verdict here"),
            "{lint}"
        );
    }
}

/// `sigil policy convert`'s output without its change and warning lines,
/// written where `sigil policy test` reads it.
fn converted(dir: &Path, name: &str, out: &str) -> String {
    let yaml = out
        .lines()
        .filter(|l| !l.contains(": changed: ") && !l.contains(": warning: "))
        .collect::<Vec<_>>()
        .join("\n");
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn converted_kyverno_policies_judge_signatures_and_provenance_conditions_as_kyverno_would() {
    // Kyverno ClusterPolicies as their users write them, on the harness key
    // (cosign signed offline: `rekor.ignoreTlog`), Kyverno's `*` spanning
    // the repository path: a signature rule, and an attestation rule with
    // conditions on the provenance. Each image's expected verdict is the
    // one Kyverno's documented semantics give.
    let f = fixtures();
    let dir = scratch("kyverno");
    let pem = |indent: usize| -> String {
        key(&f, "KEY1")
            .lines()
            .map(|l| format!("{}{l}\n", " ".repeat(indent)))
            .collect()
    };
    for r in REGS {
        let reg = &f[r];
        let head = |name: &str| {
            format!(
                "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata:\n  name: {name}\nspec:\n  \
                 rules:\n  - name: check\n    match:\n      any:\n      - resources:\n          \
                 kinds: [Pod]\n    verifyImages:\n    - imageReferences: [\"{reg}/*\"]\n      \
                 failureAction: Enforce\n"
            )
        };
        let signed = format!(
            "{}      attestors:\n      - entries:\n        - keys:\n            publicKeys: |-\n{}            \
             rekor: {{ignoreTlog: true}}\n",
            head("kyv-signed"),
            pem(14)
        );
        let provenance = format!(
            "{}      attestations:\n      - type: https://slsa.dev/provenance/v1\n        attestors:\n        \
             - entries:\n          - keys:\n              publicKeys: |-\n{}              \
             rekor: {{ignoreTlog: true}}\n        conditions:\n        - all:\n          \
             - key: \"{{{{ buildDefinition.externalParameters.workflow.ref }}}}\"\n            \
             operator: Equals\n            value: refs/heads/main\n          \
             - key: \"{{{{ runDetails.builder.id }}}}\"\n            operator: In\n            \
             value: [\"https://github.com/actions/runner/github-hosted\"]\n",
            head("kyv-provenance"),
            pem(16)
        );
        for (name, kyverno, verdicts) in [
            (
                "signed",
                signed,
                vec![
                    ("NEW", 0, vec!["allow:", "kyv-signed-check passed"]),
                    ("LEGACY", 0, vec!["allow:", "kyv-signed-check passed"]),
                    ("UNSIGNED", 1, vec!["policy kyv-signed-check failed"]),
                    ("OTHER", 1, vec!["policy kyv-signed-check failed"]),
                ],
            ),
            (
                "provenance",
                provenance,
                vec![
                    (
                        "PROV_GOOD",
                        0,
                        vec!["allow:", "kyv-provenance-check passed"],
                    ),
                    (
                        "PROV_BAD",
                        1,
                        vec![
                            "policy kyv-provenance-check failed",
                            "no https://slsa.dev/provenance/v1 attestation satisfies its policy",
                        ],
                    ),
                    ("NEW", 1, vec!["policy kyv-provenance-check failed"]),
                ],
            ),
        ] {
            let source = dir.join(format!("{r}-{name}-kyverno.yaml"));
            std::fs::write(&source, &kyverno).unwrap();
            let (status, out) = sigil(&["policy", "convert", source.to_str().unwrap()]);
            assert_eq!(status, 0, "{out}");
            assert!(
                out.contains(&format!("written as the glob `{reg}/**`")),
                "{out}"
            );
            let policy = converted(&dir, &format!("{r}-{name}-converted.yaml"), &out);
            for (image, status, needles) in verdicts {
                expect(
                    &policy_test(reg, &policy, &[], &f[&format!("{r}_{image}")]),
                    status,
                    &needles,
                );
            }
        }
    }
}

/// One of policy-controller's own example policies (its e2e test data, read
/// at run time), with only `apiVersion` and the globs changed.
fn policy_controller_example(file: &str, glob: &str) -> Value {
    let dir = sigil_testdata::policy_controller_testdata().unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let mut doc: Value = serde_saphyr::from_str(&text).unwrap();
    doc["apiVersion"] = json!("policy.sigil.dev/v1alpha1");
    doc["spec"]["images"] = json!([{ "glob": glob }]);
    doc
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn policy_controllers_fetch_config_file_policies_judge_the_config_of_every_platform() {
    let f = fixtures();
    let dir = scratch("config-file");
    for r in REGS {
        let reg = &f[r];
        let glob = format!("{reg}/test/**");
        let doc = policy_controller_example("e2e/cip-config-file-policy.yaml", &glob);
        let passes = write(&dir, &format!("{r}-passes.yaml"), &doc);
        let doc = policy_controller_example("e2e/cip-config-file-policy-fails.yaml", &glob);
        let fails = write(&dir, &format!("{r}-fails.yaml"), &doc);
        let (nonroot, mixed) = (
            &f[&format!("{r}_CONFIG_NONROOT")],
            &f[&format!("{r}_CONFIG_MIXED")],
        );
        expect(
            &policy_test(reg, &passes, &[], nonroot),
            0,
            &["allow:", "image-policy-config-file passed"],
        );
        expect(
            &policy_test(reg, &passes, &[], mixed),
            1,
            &[
                "policy image-policy-config-file failed",
                "config.\"linux/arm/v7\".config.User: conflicting values",
            ],
        );
        expect(
            &policy_test(reg, &fails, &[], nonroot),
            1,
            &[
                "policy image-policy-config-file-fail failed",
                "config.\"linux/amd64\".config.User: conflicting values",
            ],
        );

        // The same check behind a key: the signature and the config files
        // are read from the same registry with the same client.
        let mut keyed = policy_controller_example("e2e/cip-config-file-policy.yaml", &glob);
        keyed["spec"]["authorities"] = json!([key_authority("platform-key", &key(&f, "KEY1"))]);
        let keyed = write(&dir, &format!("{r}-keyed.yaml"), &keyed);
        expect(
            &verify_policy(reg, &keyed, &[], nonroot),
            0,
            &["allow:", "image-policy-config-file passed"],
        );
        expect(
            &verify_policy(reg, &keyed, &[], mixed),
            1,
            &[
                "deny: sigil denied image",
                "config.\"linux/arm/v7\".config.User",
            ],
        );
        expect(
            &verify_policy(reg, &keyed, &[], &f[&format!("{r}_UNSIGNED")]),
            1,
            &[
                "policy image-policy-config-file failed",
                "authority platform-key",
            ],
        );
    }
}

/// Serves `body` over HTTP on 127.0.0.1 to every request, on a thread that
/// lives as long as the test process; returns the URL.
fn serve(body: &'static str) -> String {
    use std::io::Write as _;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/policy.rego", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = std::io::Read::read(&mut stream, &mut request);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn policy_test_fetches_a_remote_policy_and_checks_its_sha256() {
    const REGO: &str = "package sigstore\nimport rego.v1\n\nisCompliant := {\"result\": false, \"error\": \"remote policy says no\", \"warning\": \"\"}\n";
    let url = serve(REGO);
    let sum = hex::encode(sigil_verifier::crypto::sha256(REGO.as_bytes()));
    let f = fixtures();
    let dir = scratch("remote");
    for r in REGS {
        let reg = &f[r];
        let mut doc = policy_doc(
            "remote",
            reg,
            json!([key_authority("platform-key", &key(&f, "KEY1"))]),
        );
        doc["spec"]["policy"] =
            json!({ "type": "rego", "remote": { "url": url, "sha256sum": sum } });
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_NEW")]),
            1,
            &["policy remote failed", "remote policy says no"],
        );
        doc["spec"]["policy"]["remote"]["sha256sum"] = json!("0".repeat(64));
        let wrong = write(&dir, &format!("{r}-wrong.yaml"), &doc);
        let (status, out) = policy_test(reg, &wrong, &[], &f[&format!("{r}_NEW")]);
        assert_eq!(status, 1, "{out}");
        assert!(
            out.contains(&format!(
                "spec.policy.remote: {url}: the content's sha256 is {sum}"
            )),
            "{out}"
        );
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn cue_attestation_policies_judge_cosign_attestations_in_both_formats() {
    let f = fixtures();
    let dir = scratch("cue");
    // The same requirements as the Rego example, written in CUE; `vuln` is
    // the short name, so the scan is judged as cosign re-encodes it.
    let provenance = "predicateType: \"https://slsa.dev/provenance/v1\"\npredicate: {\n  runDetails: builder: id: \"https://github.com/actions/runner/github-hosted\"\n  buildDefinition: externalParameters: workflow: ref: \"refs/heads/main\"\n}\n";
    let scan = "predicate: scanner: result: Results: [...{\n  Vulnerabilities: [...{Severity: !=\"CRITICAL\" & !=\"HIGH\"}]\n}]\n";
    for r in REGS {
        let reg = &f[r];
        let mut authority = key_authority("builder", &key(&f, "KEY1"));
        authority["attestations"] = json!([
            { "name": "provenance", "predicateType": "slsaprovenance1",
              "policy": { "type": "cue", "data": provenance } },
            { "name": "scan", "predicateType": "vuln",
              "policy": { "type": "cue", "data": scan } },
        ]);
        let doc = json!({
            "apiVersion": "policy.sigil.dev/v1alpha1",
            "kind": "ClusterImagePolicy",
            "metadata": { "name": "cue-attestations" },
            "spec": {
                "images": [{ "glob": format!("{reg}/test/**") }],
                "authorities": [authority],
            },
        });
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_PROV_GOOD")]),
            0,
            &["allow:", "cue-attestations passed"],
        );
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_PROV_BAD")]),
            1,
            &[
                "failed evaluating cue policy for provenance: failed to evaluate the policy with \
                 error: predicate.buildDefinition.externalParameters.workflow.ref: conflicting values",
                "(policy at spec.authorities[0].attestations[0].policy.data, line 4 column",
            ],
        );
        expect(
            &policy_test(reg, &policy, &[], &f[&format!("{r}_PROV_VULN")]),
            1,
            &[
                "failed evaluating cue policy for scan: failed to evaluate the policy with error: \
                 predicate.scanner.result.Results.0.Vulnerabilities.0.Severity: invalid value \"CRITICAL\"",
                "spec.authorities[0].attestations[1].policy.data",
            ],
        );
    }
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn no_match_policy_denies_warns_or_allows_images_no_policy_selects() {
    let f = fixtures();
    let dir = scratch("no-match");
    // The static-pass example untouched: it selects gcr.io/distroless only.
    let doc = example("static-pass.yaml").remove(0);
    let policy = write(&dir, "static.yaml", &doc);
    for r in REGS {
        let reg = &f[r];
        let image = &f[&format!("{r}_UNSIGNED")];
        expect(
            &policy_test(reg, &policy, &[], image),
            1,
            &["no ClusterImagePolicy matches it and noMatchPolicy is deny"],
        );
        expect(
            &policy_test(reg, &policy, &["--no-match", "warn"], image),
            3,
            &[
                "matches no ClusterImagePolicy (noMatchPolicy: warn)",
                "allow:",
            ],
        );
        expect(
            &policy_test(reg, &policy, &["--no-match", "allow"], image),
            0,
            &["allow:", "no policy matches; noMatchPolicy allow"],
        );
    }
}

// ---- keyless: testkit-signed images pushed to the local registries ----

const KEYLESS_REPO: &str = "test/keyless-policy";

/// Pushes a fresh image and its keyless signatures by `spec` in both
/// formats (one image each); returns (new-format ref, legacy ref).
async fn keyless_images(
    registry: &str,
    kit: &Testkit,
    spec: &BundleSpec,
    label: &str,
) -> [String; 2] {
    let push = Pusher::new(registry, KEYLESS_REPO).unwrap();
    let image = |l: &str| cosign::image(&format!("{label}-{l}"));
    let (new, legacy): (OciManifest, OciManifest) = (image("new"), image("legacy"));
    for img in [&new, &legacy] {
        push.manifest(img, &img.digest()).await.unwrap();
    }
    let minted = cosign::image_signature_bundle(kit, spec, &new.sha256()).unwrap();
    let referrer = cosign::bundle_referrer(
        minted.json.as_bytes(),
        cosign::COSIGN_SIGN_PREDICATE,
        new.descriptor(),
    );
    push.referrer(&referrer, &new.digest()).await.unwrap();
    let repo = format!("{registry}/{KEYLESS_REPO}");
    let sig = cosign::legacy_signature(kit, spec, &repo, &legacy.digest()).unwrap();
    let m = cosign::legacy_signature_manifest(std::slice::from_ref(&sig));
    push.manifest(&m, &cosign::legacy_signature_tag(&legacy.digest()))
        .await
        .unwrap();
    [
        format!("{repo}@{}", new.digest()),
        format!("{repo}@{}", legacy.digest()),
    ]
}

/// The default keyless spec signed by another identity and issuer.
fn signed_as(identity: Identity, issuer: &str, github: Option<GithubWorkflow>) -> BundleSpec {
    BundleSpec {
        identity,
        oidc_issuer: issuer.to_owned(),
        github,
        ..BundleSpec::default()
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn the_custom_trust_root_example_admits_its_ci_identity_under_that_trust_root_in_both_formats()
 {
    let f = fixtures();
    let dir = scratch("trustroot");
    let kit = Testkit::new(41);
    let root = dir.join("corp-sigstore.json");
    std::fs::write(&root, kit.trusted_root_json()).unwrap();
    let trust_root = format!("corp-sigstore={}", root.display());
    // The example's identities verbatim; the testkit's CA and log stand in
    // for the corporate Sigstore its TrustRoot describes (given to the CLI
    // as a trusted_root.json under the TrustRoot's name).
    let corp = signed_as(
        Identity::Uri(
            "https://gitlab.corp.example.com/platform/app//.gitlab-ci.yml@refs/heads/main".into(),
        ),
        "https://gitlab.corp.example.com",
        None,
    );
    let outsider = signed_as(
        Identity::Uri(
            "https://gitlab.example.org/someone/app//.gitlab-ci.yml@refs/heads/main".into(),
        ),
        "https://gitlab.corp.example.com",
        None,
    );
    for r in REGS {
        let reg = &f[r];
        let doc = example_at(
            "keyless-custom-trustroot.yaml",
            &format!("{reg}/{KEYLESS_REPO}"),
        );
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        for image in keyless_images(reg, &kit, &corp, &format!("{r}-corp")).await {
            expect(
                &policy_test(reg, &policy, &["--trust-root", &trust_root], &image),
                0,
                &["allow:", "corp-keyless passed"],
            );
            expect(
                &policy_test(reg, &policy, &[], &image),
                1,
                &["authority corp-ci (keyless): TrustRoot corp-sigstore is not loaded"],
            );
        }
        for image in keyless_images(reg, &kit, &outsider, &format!("{r}-outsider")).await {
            expect(
                &policy_test(reg, &policy, &["--trust-root", &trust_root], &image),
                1,
                &[
                    "policy corp-keyless failed",
                    "authority corp-ci (keyless)",
                    "gitlab.example.org",
                ],
            );
        }
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn the_github_actions_example_admits_main_branch_workflows_with_the_testkit_as_public_good() {
    let f = fixtures();
    let dir = scratch("github");
    let kit = Testkit::new(42);
    let root = dir.join("testkit-root.json");
    std::fs::write(&root, kit.trusted_root_json()).unwrap();
    let root = root.display().to_string();
    // The example's identity regex verbatim; the testkit's root replaces the
    // public-good one (`--trusted-root`), which cannot sign here.
    let main = BundleSpec::default();
    let gh = GithubWorkflow::new(
        "sigil-dev/example",
        ".github/workflows/release.yml",
        "refs/heads/feature",
        "0123456789abcdef0123456789abcdef01234567",
    );
    let feature = signed_as(gh.identity(), sigil_testkit::GITHUB_ISSUER, Some(gh));
    for r in REGS {
        let reg = &f[r];
        let doc = example_at(
            "keyless-github-actions.yaml",
            &format!("{reg}/{KEYLESS_REPO}"),
        );
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        for image in keyless_images(reg, &kit, &main, &format!("{r}-main")).await {
            expect(
                &verify_policy(reg, &policy, &["--trusted-root", &root], &image),
                0,
                &["allow:", "github-actions-keyless passed"],
            );
            // Under the real public-good root the testkit's CA is unknown.
            expect(
                &verify_policy(reg, &policy, &[], &image),
                1,
                &["policy github-actions-keyless failed"],
            );
        }
        for image in keyless_images(reg, &kit, &feature, &format!("{r}-feature")).await {
            expect(
                &verify_policy(reg, &policy, &["--trusted-root", &root], &image),
                1,
                &["policy github-actions-keyless failed", "refs/heads/feature"],
            );
        }
    }
}

/// A policy-controller test-data file (`../shared/policy-controller-testdata`,
/// read at run time, found above the crate as from worktrees).
fn policy_controller_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared/policy-controller-testdata").join(relative))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("../shared/policy-controller-testdata/{relative} is missing"))
}

/// The testkit as a private Sigstore reached at the in-cluster URLs that
/// policy-controller's examples name; its Rekor v1 signs checkpoints under
/// its pod name.
fn private_sigstore_kit() -> Testkit {
    let mut kit = Testkit::new(43);
    kit.fulcio = sigil_testkit::fulcio::FulcioCa::new(
        43,
        "fulcio",
        "http://fulcio.fulcio-system.svc",
        sigil_testkit::EPOCH_2020,
        sigil_testkit::EPOCH_2040,
    );
    kit.rekor_v1 =
        sigil_testkit::rekor::RekorV1::new(43, "rekor-v1", "http://rekor.rekor-system.svc")
            .with_hostname("rekor-server-7d9c8b5f4-x2x4l");
    kit
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn policy_controllers_private_sigstore_policy_admits_under_a_default_trust_root_as_converted()
{
    let f = fixtures();
    let dir = scratch("private-sigstore");
    let kit = private_sigstore_kit();
    let root = dir.join("private-sigstore.json");
    std::fs::write(&root, kit.trusted_root_json()).unwrap();
    let trust_root = format!("private-sigstore={}", root.display());
    // policy-controller's own keyless example, converted by the CLI:
    // Fulcio and Rekor by in-cluster URL, no trustRootRef.
    let original = policy_controller_file("e2e/cip-keyless.yaml");
    let (status, out) = sigil(&["policy", "convert", original.to_str().unwrap()]);
    assert_eq!(status, 0, "{out}");
    let converted: Value = serde_saphyr::from_str(&out).unwrap();
    assert_eq!(
        converted["spec"]["authorities"][0]["keyless"]["url"],
        "http://fulcio.fulcio-system.svc"
    );
    let service_account = signed_as(
        Identity::Uri("https://kubernetes.io/namespaces/default/serviceaccounts/default".into()),
        "https://kubernetes.default.svc.cluster.local",
        None,
    );
    for r in REGS {
        let reg = &f[r];
        let mut doc = converted.clone();
        doc["spec"]["images"] = json!([{ "glob": format!("{reg}/{KEYLESS_REPO}") }]);
        let policy = write(&dir, &format!("{r}.yaml"), &doc);
        for image in keyless_images(reg, &kit, &service_account, &format!("{r}-sa")).await {
            expect(
                &policy_test(
                    reg,
                    &policy,
                    &[
                        "--trust-root",
                        &trust_root,
                        "--default-trust-root",
                        "private-sigstore",
                    ],
                    &image,
                ),
                0,
                &["allow:", "image-policy-keyless passed"],
            );
            // Without a default trust root the URLs name no instance of the
            // public-good root: refused before any registry request.
            expect(
                &policy_test(reg, &policy, &["--trust-root", &trust_root], &image),
                1,
                &[
                    "spec.authorities[0].keyless.url: `http://fulcio.fulcio-system.svc` is not a Fulcio of the default trust root",
                    "--default-trust-root NAME",
                ],
            );
        }
    }
    // With explicit references instead (`convert --trust-root`), no default
    // is needed.
    let (status, out) = sigil(&[
        "policy",
        "convert",
        "--trust-root",
        "private-sigstore",
        original.to_str().unwrap(),
    ]);
    assert_eq!(status, 0, "{out}");
    // The YAML on standard output, then one line per reference added.
    let (yaml, notes) = out.split_at(
        out.find(&format!("{}: changed:", original.display()))
            .unwrap(),
    );
    assert!(
        notes.contains("changed: document 0 (ClusterImagePolicy image-policy-keyless): spec.authorities[0].keyless.trustRootRef: set to `private-sigstore`"),
        "{notes}"
    );
    let explicit: Value = serde_saphyr::from_str(yaml).unwrap();
    assert_eq!(
        explicit["spec"]["authorities"][0]["ctlog"]["trustRootRef"],
        "private-sigstore"
    );
    let reg = &f["OLAREG"];
    let mut doc = explicit;
    doc["spec"]["images"] = json!([{ "glob": format!("{reg}/{KEYLESS_REPO}") }]);
    let policy = write(&dir, "explicit.yaml", &doc);
    let [image, _] = keyless_images(reg, &kit, &service_account, "explicit").await;
    expect(
        &policy_test(reg, &policy, &["--trust-root", &trust_root], &image),
        0,
        &["allow:", "image-policy-keyless passed"],
    );
}

#[test]
#[ignore = "needs e2e/registry-fixtures.sh"]
fn platforms_chooses_whether_an_index_or_each_of_its_platform_images_must_be_signed() {
    let f = fixtures();
    let dir = scratch("platforms");
    for r in REGS {
        let reg = &f[r];
        let at = |name: &str| f[&format!("{r}_MULTI_{name}")].clone();
        let (index, platforms, recursive, one) = (
            at("INDEX"),
            at("PLATFORMS"),
            at("RECURSIVE"),
            at("ONE_PLATFORM"),
        );
        let policy = |rule: &str| {
            let mut doc = policy_doc(
                &format!("multi-{rule}"),
                reg,
                json!([key_authority("release", &key(&f, "KEY1"))]),
            );
            doc["spec"]["platforms"] = json!(rule);
            write(&dir, &format!("{r}-{rule}.yaml"), &doc)
        };
        let (named, every, either) = (policy("named"), policy("every"), policy("namedOrEvery"));
        // Signed at the index only: enough for named and namedOrEvery;
        // every names the first platform that has no signature.
        expect(&policy_test(reg, &named, &[], &index), 0, &["allow:"]);
        expect(&policy_test(reg, &either, &[], &index), 0, &["allow:"]);
        expect(
            &policy_test(reg, &every, &[], &index),
            1,
            &[
                "policy multi-every failed: platform linux/amd64",
                &format!("({}): authority release (key):", at("INDEX_AMD64")),
                &format!(
                    "platform linux/arm/v7 ({}): authority release",
                    at("INDEX_ARM")
                ),
            ],
        );
        // Signed at each platform image only.
        expect(
            &policy_test(reg, &named, &[], &platforms),
            1,
            &["policy multi-named failed: authority release (key):"],
        );
        expect(&policy_test(reg, &every, &[], &platforms), 0, &["allow:"]);
        expect(&policy_test(reg, &either, &[], &platforms), 0, &["allow:"]);
        // cosign sign --recursive: every rule admits it.
        for rule in [&named, &every, &either] {
            expect(&policy_test(reg, rule, &[], &recursive), 0, &["allow:"]);
        }
        // The index and one platform image signed: every denies, naming
        // the unsigned platform only.
        let denied = policy_test(reg, &every, &[], &one);
        expect(
            &denied,
            1,
            &[&format!(
                "policy multi-every failed: platform linux/arm/v7 ({}): authority release (key):",
                at("ONE_PLATFORM_ARM")
            )],
        );
        assert!(!denied.1.contains("platform linux/amd64"), "{}", denied.1);
        expect(&policy_test(reg, &either, &[], &one), 0, &["allow:"]);
        // sigil verify --policy gives the same verdicts.
        expect(
            &verify_policy(reg, &every, &[], &one),
            1,
            &["deny: sigil denied image", "platform linux/arm/v7"],
        );
        expect(&verify_policy(reg, &every, &[], &platforms), 0, &["allow:"]);
        // An image that is not an index is judged by its own digest.
        expect(
            &policy_test(reg, &every, &[], &f[&format!("{r}_NEW")]),
            0,
            &["allow:"],
        );
        expect(
            &policy_test(reg, &every, &[], &f[&format!("{r}_UNSIGNED")]),
            1,
            &["policy multi-every failed: authority release (key):"],
        );
    }
}

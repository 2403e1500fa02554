//! `key.kms` end to end against real KMS servers on 127.0.0.1: OpenBao's
//! transit engine (`hashivault://`) and moto's AWS KMS (`awskms://`), started
//! by `e2e/kms-fixtures.sh`, which also has cosign make a key in each and
//! sign images with them. `sigil policy test` and `sigil verify --policy`
//! fetch the public key the policy names from the KMS (credentials from the
//! environment, as cosign takes them) and judge the images with it.
//!
//! Google Cloud KMS and Azure Key Vault cannot run here; their clients are
//! checked against mock servers in `sigil-kms`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// The variables of the KMS servers' environment that a run may pass on.
const KMS_ENV: [&str; 7] = [
    "VAULT_ADDR",
    "VAULT_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_SESSION_TOKEN",
];

fn fixtures() -> HashMap<String, String> {
    let path = std::env::var("SIGIL_KMS_FIXTURES").expect("run through e2e/kms-fixtures.sh");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sigil-kms-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A policy over the fixture repository with one `key.kms` authority. cosign
/// signed offline, so the log entry is waived with `ctlog: {}`.
fn kms_policy(dir: &std::path::Path, f: &HashMap<String, String>, uri: &str) -> String {
    let doc = json!({
        "apiVersion": "policy.sigil.dev/v1alpha1",
        "kind": "ClusterImagePolicy",
        "metadata": { "name": "release-kms" },
        "spec": {
            "images": [{ "glob": format!("{}/kms/**", f["REG"]) }],
            "authorities": [{ "name": "release", "key": { "kms": uri }, "ctlog": {} }],
        },
    });
    let path = dir.join(format!("{}.yaml", uri.replace([':', '/'], "_")));
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    path.display().to_string()
}

/// `sigil ARGS` with the KMS settings of `env` (and no others from this
/// process); exit status and combined output, killed after 60 s.
fn sigil(args: &[&str], env: &HashMap<String, String>) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sigil"));
    cmd.args(args).env("DOCKER_CONFIG", "/nonexistent");
    for k in KMS_ENV {
        cmd.env_remove(k);
    }
    cmd.envs(env);
    let mut child = cmd
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

/// The KMS credentials of the fixtures, as the servers expect them.
fn kms_env(f: &HashMap<String, String>) -> HashMap<String, String> {
    KMS_ENV
        .iter()
        .filter_map(|k| f.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect()
}

fn policy_test(
    f: &HashMap<String, String>,
    policy: &str,
    image: &str,
    env: &HashMap<String, String>,
) -> (i32, String) {
    sigil(
        &[
            "policy",
            "test",
            "--policy",
            policy,
            "--insecure-registry",
            &f["REG"],
            image,
        ],
        env,
    )
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
#[ignore = "needs e2e/kms-fixtures.sh"]
fn an_openbao_transit_key_admits_what_cosign_signed_with_it_in_both_formats_and_nothing_else() {
    let f = fixtures();
    let dir = scratch("vault");
    let env = kms_env(&f);
    let policy = kms_policy(&dir, &f, &f["VAULT_URI"]);
    for image in ["VAULT_SIGNED", "VAULT_SIGNED_LEGACY"] {
        expect(
            &policy_test(&f, &policy, &f[image], &env),
            0,
            &["allow:", "release-kms passed"],
        );
    }
    for image in ["AWS_SIGNED", "OTHER_SIGNED", "UNSIGNED"] {
        expect(
            &policy_test(&f, &policy, &f[image], &env),
            1,
            &["deny: sigil denied image", "policy release-kms failed"],
        );
    }
}

#[test]
#[ignore = "needs e2e/kms-fixtures.sh"]
fn an_aws_kms_key_from_moto_admits_what_cosign_signed_with_it_and_denies_other_keys() {
    let f = fixtures();
    let dir = scratch("aws");
    let env = kms_env(&f);
    let policy = kms_policy(&dir, &f, &f["AWS_URI"]);
    expect(
        &policy_test(&f, &policy, &f["AWS_SIGNED"], &env),
        0,
        &["allow:", "release-kms passed"],
    );
    for image in ["VAULT_SIGNED", "OTHER_SIGNED", "UNSIGNED"] {
        expect(
            &policy_test(&f, &policy, &f[image], &env),
            1,
            &["deny: sigil denied image", "policy release-kms failed"],
        );
    }
    // `sigil verify --policy` reaches the same verdict through the same path.
    let verify = |image: &str| {
        sigil(
            &[
                "verify",
                "--policy",
                &policy,
                "--insecure-registry",
                &f["REG"],
                image,
            ],
            &env,
        )
    };
    expect(&verify(&f["AWS_SIGNED"]), 0, &["allow:"]);
    expect(&verify(&f["OTHER_SIGNED"]), 1, &["deny:"]);
}

#[test]
#[ignore = "needs e2e/kms-fixtures.sh"]
fn a_kms_that_refuses_the_credentials_is_an_error_naming_the_key_not_a_verdict() {
    let f = fixtures();
    let dir = scratch("refused");
    let mut env = kms_env(&f);
    env.insert("VAULT_TOKEN".into(), "not-a-token".into());
    let policy = kms_policy(&dir, &f, &f["VAULT_URI"]);
    let (code, out) = policy_test(&f, &policy, &f["VAULT_SIGNED"], &env);
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("allow:"), "{out}");
    assert!(out.contains("spec.authorities[0].key.kms"), "{out}");
    assert!(out.contains("sigil-release"), "{out}");
    assert!(out.contains("403"), "{out}");

    // Without any AWS credentials the AWS client says which are missing.
    let mut env = kms_env(&f);
    env.remove("AWS_ACCESS_KEY_ID");
    env.remove("AWS_SECRET_ACCESS_KEY");
    let policy = kms_policy(&dir, &f, &f["AWS_URI"]);
    let (code, out) = policy_test(&f, &policy, &f["AWS_SIGNED"], &env);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("AWS_ACCESS_KEY_ID"), "{out}");
}

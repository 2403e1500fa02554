//! ImagePolicyExceptions in `sigil policy test`: an exception among the
//! --policy files waives the policies it names for the --workload and
//! images it names, in its namespace, with the admission warning; expired,
//! outside the allowed namespaces or beyond the maximum, it waives nothing
//! or is refused naming why.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{scratch, sigil};

const SIDECAR: &str = "registry.test/vendor/sidecar@sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd";

fn files(dir: &std::path::Path, expires: &str) -> String {
    let text = format!(
        r#"apiVersion: policy.sigil.dev/v1alpha1
kind: ClusterImagePolicy
metadata: {{name: signed}}
spec:
  images: [{{glob: "registry.test/vendor/**"}}]
  authorities: [{{name: gate, static: {{action: fail}}}}]
---
apiVersion: policy.sigil.dev/v1alpha1
kind: ImagePolicyException
metadata: {{name: vendor-sidecar, namespace: shop}}
spec:
  policies: [signed]
  images: ["registry.test/vendor/sidecar*"]
  workloads: [{{kind: Deployment, name: web}}]
  expiresAt: "{expires}"
  reason: vendor signs from 2.0
"#
    );
    let file = dir.join("policies.yaml");
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_owned()
}

fn in_hours(hours: i64) -> String {
    let t = time::OffsetDateTime::now_utc() + time::Duration::hours(hours);
    t.replace_nanosecond(0)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn test(dir: &std::path::Path, file: &str, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["policy", "test", "--policy", file, "--namespace", "shop"];
    args.extend_from_slice(extra);
    args.push(SIDECAR);
    sigil(dir, &args)
}

#[test]
fn an_exception_admits_the_workload_it_names_with_a_warning_and_nothing_else() {
    let dir = scratch("exception-admits");
    let expires = in_hours(24);
    let file = files(&dir, &expires);

    let (code, out) = test(&dir, &file, &["--workload", "Deployment/web"]);
    assert_eq!(code, Some(3), "admitted with a warning: {out}");
    assert!(
        out.contains(&format!(
            "warn: image {SIDECAR}: policy signed waived: admitted by exception \
             shop/vendor-sidecar until {expires} (vendor signs from 2.0)"
        )),
        "{out}"
    );
    assert!(
        out.contains("(policies waived by exception: signed)"),
        "{out}"
    );

    // Another workload, no workload, another namespace: denied.
    let (code, out) = test(&dir, &file, &["--workload", "Deployment/api"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("policy signed failed"), "{out}");
    let (code, out) = test(&dir, &file, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("give --workload KIND/NAME"), "{out}");
    let (code, out) = sigil(
        &dir,
        &[
            "policy",
            "test",
            "--policy",
            &file,
            "--namespace",
            "tools",
            "--workload",
            "Deployment/web",
            SIDECAR,
        ],
    );
    assert_eq!(code, Some(1), "{out}");
}

#[test]
fn an_expired_exception_waives_nothing_and_a_refused_one_says_why() {
    let dir = scratch("exception-refused");
    let file = files(&dir, &in_hours(-1));
    let (code, out) = test(&dir, &file, &["--workload", "Deployment/web"]);
    assert_eq!(code, Some(1), "expired: {out}");
    assert!(out.contains("policy signed failed"), "{out}");

    let file = files(&dir, &in_hours(24 * 8));
    let (code, out) = test(&dir, &file, &["--workload", "Deployment/web"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("shop/vendor-sidecar waives nothing: spec.expiresAt")
            && out.contains("maximum of 7d"),
        "{out}"
    );

    let file = files(&dir, &in_hours(24));
    let (code, out) = test(
        &dir,
        &file,
        &[
            "--workload",
            "Deployment/web",
            "--exception-namespace",
            "exceptions",
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "exceptions count only in the namespaces the cluster's admin allows (exceptions)"
        ),
        "{out}"
    );

    let (code, out) = test(&dir, &file, &["--workload", "web"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("expected KIND/NAME"), "{out}");
}

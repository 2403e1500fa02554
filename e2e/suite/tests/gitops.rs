//! Tag pinning that GitOps tools can live with: by default `/mutate` pins
//! tags in Pods only and leaves workload templates as written, so a
//! Deployment applied twice with server-side apply shows no diff, while the
//! Pods its ReplicaSet creates (Pending: the local control plane has no
//! node, but they exist) name their images by digest.
//!
//! Run through `e2e/run-local.sh`, which puts `kubectl` on PATH and
//! exports `KUBECONFIG`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use sigil_e2e::{Cluster, key_authority, policy, wait_for};

const NS: &str = "e2e-gitops";
const SETTLE: Duration = Duration::from_secs(60);

/// Runs kubectl with `args` and the manifest on standard input: exit
/// status, stdout and stderr.
fn kubectl(args: &[&str], manifest: &str) -> (Option<i32>, String, String) {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run kubectl (on PATH through e2e/run-local.sh): {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
#[ignore = "needs a cluster with sigil: e2e/run-local.sh"]
async fn a_deployment_applied_twice_server_side_shows_no_diff_and_its_pods_run_by_digest() {
    if std::env::var("SIGIL_E2E_NO_CONTROLLER_MANAGER").is_ok() {
        eprintln!("skipped: SIGIL_E2E_NO_CONTROLLER_MANAGER says no controller-manager runs");
        return;
    }
    let (cluster, fx) = Cluster::fresh_scenario(NS).await.unwrap();
    let glob = format!("{}/test/**", fx.get("OLAREG").unwrap());
    cluster
        .apply_policy(&policy(
            "e2e-gitops",
            &glob,
            json!([key_authority("harness-key1", &fx.key_pem("KEY1").unwrap())]),
        ))
        .await
        .unwrap();
    let signed = fx.get("OLAREG_NEW").unwrap();
    let digest = signed.rsplit_once('@').unwrap().1.to_owned();
    let tagged = format!("{}/test/app:new", fx.get("OLAREG").unwrap());
    wait_for("the policy to admit the tag", SETTLE, async || {
        let reply = cluster.try_pod(NS, &[&tagged]).await?;
        Ok(if reply.ok() {
            Ok(())
        } else {
            Err(reply.describe())
        })
    })
    .await
    .unwrap();

    let name = "gitops-app";
    let manifest = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": {"sigil-e2e": "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": tagged}]},
            },
        },
    })
    .to_string();
    let apply = [
        "apply",
        "--server-side",
        "--field-manager",
        "gitops",
        "-f",
        "-",
    ];
    let (code, out, err) = kubectl(&apply, &manifest);
    assert_eq!(code, Some(0), "first apply: {out}{err}");
    let (code, out, err) = kubectl(&apply, &manifest);
    assert_eq!(code, Some(0), "second apply: {out}{err}");
    let (code, out, err) = kubectl(
        &[
            "diff",
            "--server-side",
            "--field-manager",
            "gitops",
            "-f",
            "-",
        ],
        &manifest,
    );
    assert_eq!(code, Some(0), "kubectl diff reports drift:\n{out}{err}");

    let path = format!("/apis/apps/v1/namespaces/{NS}/deployments/{name}");
    let live = cluster.get(&path).await.unwrap().expect_ok(&path).unwrap();
    assert_eq!(
        live.body["spec"]["template"]["spec"]["containers"][0]["image"], tagged,
        "the template stays as written"
    );
    assert_eq!(
        live.body["metadata"]["generation"], 1,
        "the second apply changed nothing"
    );

    let pods = format!("/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{name}");
    let image = wait_for("the ReplicaSet's pod", SETTLE, async || {
        let list = cluster.get(&pods).await?.expect_ok("listing pods")?;
        Ok(
            match list.body["items"][0]["spec"]["containers"][0]["image"].as_str() {
                Some(image) => Ok(image.to_owned()),
                None => Err(format!(
                    "no pod yet; ReplicaSet events: {:?}",
                    cluster.events(NS, "ReplicaSet").await?
                )),
            },
        )
    })
    .await
    .unwrap();
    cluster.delete(&path).await.unwrap();
    cluster.clear_policies().await.unwrap();
    assert_eq!(
        image,
        format!("{tagged}@{digest}"),
        "the pod is pinned to the digest sigil verified"
    );
}

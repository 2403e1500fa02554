//! sigil in a restricted namespace on a real node (`make e2e-node`,
//! `e2e/run-node.sh`, last phase): sigil's namespace enforces the Pod
//! Security Standard `restricted`, and `helm upgrade --reuse-values` set
//! `securityContext.fixedIds=false` with the pods' user and group IDs
//! assigned from outside the chart, as OpenShift's `restricted-v2` SCC
//! assigns them (`SIGIL_E2E_RESTRICTED_UID`). Every sigil pod must run,
//! confined, under that ID, and admission must still judge.
//!
//! Needs, besides what `tests/node.rs` needs: `SIGIL_E2E_RESTRICTED_UID`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::time::Duration;

use serde_json::json;
use sigil_e2e::node::{self, ContainerRef};
use sigil_e2e::{Cluster, Fixtures, key_authority, policy, wait_for};

/// sigil's components and how many ready pods each has in this run.
const COMPONENTS: [(&str, usize); 3] = [
    ("app.kubernetes.io%2Fcomponent%3Dwebhook", 2),
    ("app.kubernetes.io%2Fcomponent%3Dcontroller", 2),
    ("app.kubernetes.io%2Fcomponent%3Daudit", 1),
];
/// A scenario namespace outside sigil's own, where admission judges.
const NS: &str = "e2e-node-restricted";
/// Bound on each wait: pods rolled by the upgrade, a policy taking effect.
const WAIT: Duration = Duration::from_secs(240);

fn assigned_uid() -> u32 {
    std::env::var("SIGIL_E2E_RESTRICTED_UID")
        .expect("SIGIL_E2E_RESTRICTED_UID is not set: run through e2e/run-node.sh")
        .parse()
        .expect("SIGIL_E2E_RESTRICTED_UID is not a number")
}

/// The ready containers of `selector` in sigil's namespace, `count` of them
/// and no others (the upgrade's old pods gone).
async fn ready(cluster: &Cluster, selector: &str, count: usize) -> Vec<ContainerRef> {
    wait_for(
        &format!("{count} ready {selector} pods"),
        WAIT,
        async || {
            let all = node::containers(cluster, &cluster.sigil_namespace, selector).await?;
            Ok(if all.len() == count && all.iter().all(|c| c.ready) {
                Ok(all)
            } else {
                Err(format!("{all:?}"))
            })
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node, in a restricted namespace: e2e/run-node.sh"]
async fn a_namespace_enforcing_restricted_runs_sigil_under_an_assigned_uid_and_admission_judges() {
    let cluster = Cluster::connect().await.unwrap();
    let fx = Fixtures::from_env().unwrap();
    let ns = cluster.sigil_namespace.clone();
    let uid = assigned_uid();

    // The namespace enforces `restricted`, and the API server applies it:
    // a pod with none of the standard's settings is refused there.
    let namespace = cluster
        .get(&format!("/api/v1/namespaces/{ns}"))
        .await
        .unwrap()
        .expect_ok("sigil's namespace")
        .unwrap();
    let labels = &namespace.body["metadata"]["labels"];
    assert_eq!(
        labels["pod-security.kubernetes.io/enforce"], "restricted",
        "{labels}"
    );
    let plain = cluster
        .try_pod(&ns, &[&fx.get("OLAREG_NEW").unwrap()])
        .await
        .unwrap();
    assert!(
        !plain.ok()
            && plain
                .message()
                .contains("violates PodSecurity \"restricted"),
        "a pod without the standard's settings in {ns}: {}",
        plain.describe()
    );
    println!("restricted: {ns} refuses a plain pod: {}", plain.message());

    // Every sigil pod runs under the assigned IDs, confined as the chart
    // asks, without a restart.
    let mut seen = Vec::new();
    for (selector, count) in COMPONENTS {
        for c in ready(&cluster, selector, count).await {
            assert_eq!(c.restarts, 0, "{} restarted", c.pod);
            let pid = node::container_pid(&c.id).await.unwrap();
            let confined = node::confinement(pid).unwrap();
            assert_eq!(confined.uids, vec![uid; 4], "{}: {confined:?}", c.pod);
            assert_eq!(confined.gids, vec![uid; 4], "{}: {confined:?}", c.pod);
            assert!(
                confined.unhardened().is_empty(),
                "{}: {:?}: {confined:?}",
                c.pod,
                confined.unhardened()
            );
            seen.push(c.pod);
        }
    }
    println!(
        "restricted: {} sigil pods run as {uid}:{uid}, read-only /, no capabilities, seccomp: {seen:?}",
        seen.len()
    );

    // Admission judges as before: the controller under the new ID publishes
    // a new policy, and the webhooks under it verify.
    cluster.namespace(NS, true).await.unwrap();
    let olareg = fx.get("OLAREG").unwrap();
    cluster
        .apply_policy(&policy(
            "e2e-restricted",
            &format!("{olareg}/test/**"),
            json!([key_authority("harness-key1", &fx.key_pem("KEY1").unwrap())]),
        ))
        .await
        .unwrap();
    let signed = fx.get("OLAREG_NEW").unwrap();
    let unsigned = fx.get("OLAREG_UNSIGNED").unwrap();
    wait_for(
        "the signed image admitted and the unsigned one denied",
        WAIT,
        async || {
            let ok = cluster.try_pod(NS, &[&signed]).await?;
            let denied = cluster.try_pod(NS, &[&unsigned]).await?;
            Ok(if ok.ok() && !denied.ok() {
                Ok(denied)
            } else {
                Err(format!(
                    "signed: {}; unsigned: {}",
                    ok.describe(),
                    denied.describe()
                ))
            })
        },
    )
    .await
    .map(|denied| {
        assert!(
            denied.message().contains("sigil denied"),
            "{}",
            denied.describe()
        );
        println!(
            "restricted: signed admitted; unsigned: {}",
            denied.message()
        );
    })
    .unwrap();
    cluster.webhook_replicas_agree(WAIT).await.unwrap();
    for _ in 0..6 {
        assert!(cluster.try_pod(NS, &[&signed]).await.unwrap().ok());
        assert!(!cluster.try_pod(NS, &[&unsigned]).await.unwrap().ok());
    }
    cluster.clear_policies().await.unwrap();
}

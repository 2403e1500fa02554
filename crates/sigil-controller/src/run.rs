//! Wiring: the HTTP endpoints and the elector run all the time; the
//! reconcilers (policies, trust roots, the built-in Sigstore root's TUF
//! refresh, webhook TLS, WorkloadKinds and their webhook rules) run only while this
//! replica leads, and stop as soon as it does not. SIGTERM or Ctrl-C stops
//! the reconcilers after their in-flight work, releases the Lease and stops
//! the endpoints.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use kube::Client;
use sigil_api::{ClusterImagePolicy, ImagePolicy};
use sigil_runtime::admin::AdminListener;
use sigil_runtime::shutdown::{self, Shutdown};
use tokio::sync::{mpsc, watch};

use crate::config::Args;
use crate::context::{Context, TrustChange};
use crate::error::{Error, Result};
use crate::leader::Elector;
use crate::metrics::Metrics;
use crate::{policy, server, sigstore_objects, sigstore_root, tls, trustroot, workload_kinds};

/// Resolves when `rx` holds `want` (or its sender is gone).
async fn until(mut rx: watch::Receiver<bool>, want: bool) {
    let _ = rx.wait_for(|v| *v == want).await;
}

/// Runs the controller with the in-cluster (or kubeconfig) client until
/// SIGTERM or Ctrl-C (sigil-runtime's shutdown token, as the webhook's and
/// the audit's); when the handlers cannot be installed the controller runs
/// on, as it did, and says so.
pub async fn run(args: Args) -> Result<()> {
    let client = Client::try_default()
        .await
        .map_err(|e| Error::kube("connecting (in-cluster config or KUBECONFIG)", e))?;
    let shutdown = shutdown::on_termination().unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot wait for SIGTERM; the controller runs until it is killed");
        Shutdown::never()
    });
    run_with(client, args, shutdown).await
}

/// Runs with `client` until `stop` is requested.
pub async fn run_with(client: Client, args: Args, stop: Shutdown) -> Result<()> {
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let (leading_tx, leading_rx) = watch::channel(false);

    // Bound before anything else runs: a taken port stops the start.
    let admin = AdminListener::bind(args.listen.as_str(), "listen").await?;
    let server = tokio::spawn(server::serve(
        admin,
        metrics.clone(),
        ready.clone(),
        stop.clone(),
    ));
    let elector = Elector::new(client.clone(), &args, leading_tx, metrics.clone(), ready);
    let elector = tokio::spawn(elector.run(stop.wait()));

    while !stop.is_requested() {
        tokio::select! {
            () = until(leading_rx.clone(), true) => {}
            () = stop.requested() => break,
        }
        if stop.is_requested() {
            break;
        }
        lead(
            client.clone(),
            &args,
            metrics.clone(),
            leading_rx.clone(),
            stop.clone(),
        )
        .await;
    }
    let _ = elector.await;
    match server.await {
        Ok(result) => result,
        Err(e) => Err(Error::Serve {
            addr: args.listen.clone(),
            reason: e.to_string(),
        }),
    }
}

/// Runs the reconcilers until leadership is lost or `stop` is requested.
pub async fn lead(
    client: Client,
    args: &Args,
    metrics: Arc<Metrics>,
    leading: watch::Receiver<bool>,
    stop: Shutdown,
) {
    let (tr_tx, tr_rx) = mpsc::unbounded_channel();
    let ctx = Arc::new(Context::new(
        client,
        args.clone(),
        metrics,
        leading.clone(),
        tr_tx,
    ));
    let done = {
        let (leading, stop) = (leading.clone(), stop.clone());
        move || {
            let (leading, stop) = (leading.clone(), stop.clone());
            async move {
                tokio::select! {
                    () = until(leading, false) => {}
                    () = stop.requested() => {}
                }
            }
        }
    };
    // The last good policies must be known before anything is reconciled,
    // or the first write would drop them; the TUF state before any update,
    // or a mirror could roll sigil back past what it already verified.
    let mut attempts = 0u32;
    loop {
        let recovered = match ctx.publisher.recover().await {
            Ok(revision) => ctx.tuf.recover().await.map(|tuf| (revision, tuf)),
            Err(e) => Err(e),
        };
        match recovered {
            Ok((revision, tuf)) => {
                tracing::info!(
                    ?revision,
                    tuf_repositories = tuf,
                    "policy snapshot and TUF state recovered"
                );
                break;
            }
            Err(e) => {
                attempts = attempts.saturating_add(1);
                tracing::warn!(error = %e, attempts, "could not read the policy snapshot or the TUF state; retrying");
                tokio::select! {
                    () = done() => return,
                    () = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                }
            }
        }
    }
    // Both policy kinds hear every trust change.
    let (cluster_tx, cluster_rx) = mpsc::unbounded_channel();
    let (namespaced_tx, namespaced_rx) = mpsc::unbounded_channel();
    let fan_out = async move {
        let mut tr_rx = tr_rx;
        while let Some(change) = tr_rx.recv().await {
            let _ = cluster_tx.send(change.clone());
            let _ = namespaced_tx.send(change);
        }
    };
    let triggers = |rx: mpsc::UnboundedReceiver<TrustChange>| {
        futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|change| (change, rx))
        })
    };
    let fan_out = async {
        tokio::select! {
            () = fan_out => {}
            () = done() => {}
        }
    };
    tokio::join!(
        fan_out,
        policy::run::<ClusterImagePolicy>(ctx.clone(), triggers(cluster_rx), done()),
        policy::run::<ImagePolicy>(ctx.clone(), triggers(namespaced_rx), done()),
        trustroot::run(ctx.clone(), done()),
        sigstore_root::run(ctx.clone(), done()),
        tls::run(ctx.clone(), done()),
        workload_kinds::run(ctx.clone(), done()),
        sigstore_objects::run(ctx.clone(), &done),
    );
    tracing::info!("reconcilers stopped");
}

#[cfg(test)]
mod tests {

    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::fixtures::*;

    #[tokio::test]
    async fn losing_the_lease_stops_the_reconcilers() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, leading_tx) = context(client.clone(), true);
        api.put(
            &cip_path("p"),
            cip(
                "p",
                1,
                json!({"images": [{"glob": "**"}], "authorities": [{"key": {"data": P256_PUB}}]}),
            ),
        );
        let (_trigger, stop) = sigil_runtime::shutdown::channel();
        let task = tokio::spawn({
            let (args, metrics, leading) =
                (ctx.args.clone(), ctx.metrics.clone(), ctx.leading.clone());
            async move { lead(client, &args, metrics, leading, stop).await }
        });
        // The leader reconciles: the policy gets its status.
        tokio::time::timeout(Duration::from_secs(10), async {
            while api.get(&cip_path("p")).unwrap()["status"].is_null() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap();

        leading_tx.send(false).unwrap();

        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap();
        let writes = |api: &FakeApi| {
            api.requests()
                .iter()
                .filter(|r| r.method != http::Method::GET)
                .count()
        };
        let after = writes(&api);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            writes(&api),
            after,
            "nothing is written once the lease is lost"
        );
    }
}

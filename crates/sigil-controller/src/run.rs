//! Wiring: the HTTP endpoints and the elector run all the time; the
//! reconcilers (policies, trust roots, the built-in Sigstore root's TUF
//! refresh, webhook TLS, WorkloadKinds and their webhook rules) run only while this
//! replica leads, and stop as soon as it does not. A new leader first
//! recovers the stored policy snapshot and TUF state, retrying read errors
//! with backoff: it never starts from empty policies because one read
//! failed. SIGTERM or Ctrl-C stops the reconcilers after their in-flight
//! work, and only then releases the Lease (the elector keeps renewing it
//! meanwhile), so a standby never writes while this replica still does;
//! then the endpoints stop.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType};
use sigil_api::{ClusterImagePolicy, ImagePolicy};
use sigil_runtime::admin::AdminListener;
use sigil_runtime::shutdown::{self, Shutdown};
use tokio::sync::{mpsc, watch};

use crate::config::Args;
use crate::context::{Context, TrustChange};
use crate::error::{Error, Result};
use crate::leader::Elector;
use crate::metrics::Metrics;
use crate::publish::Recovered;
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
    // The elector lets go of the Lease once the reconcilers stopped, not
    // when the stop is asked for.
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
    let elector = tokio::spawn(elector.run(async move {
        let _ = stopped_rx.await;
    }));

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
    let _ = stopped_tx.send(());
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
    let mut backoff = Backoff::default();
    loop {
        let recovered = match ctx.publisher.recover().await {
            Ok(snapshot) => ctx.tuf.recover().await.map(|tuf| (snapshot, tuf)),
            Err(e) => Err(e),
        };
        match recovered {
            Ok((snapshot, tuf)) => {
                report_recovery(&ctx, &snapshot, tuf).await;
                break;
            }
            Err(e) => {
                let wait = backoff.next_wait();
                tracing::warn!(error = %e, attempts = backoff.attempts, retry_in_ms = wait.as_millis(),
                    "could not read the policy snapshot or the TUF state; nothing is reconciled or published until they are read");
                tokio::select! {
                    () = done() => return,
                    () = tokio::time::sleep(wait) => {}
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

/// Exponential backoff between retries of a read: 250 ms doubling to at
/// most 15 s.
#[derive(Debug, Default)]
pub struct Backoff {
    /// Retries so far.
    pub attempts: u32,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(15);

    /// How long to wait before the next retry.
    pub fn next_wait(&mut self) -> Duration {
        let wait = Self::FIRST.saturating_mul(1u32 << self.attempts.min(16));
        self.attempts = self.attempts.saturating_add(1);
        wait.min(Self::MAX)
    }
}

/// Logs what recovery found; a discarded snapshot also gets a Warning Event
/// on its Secret and counts in `sigil_controller_snapshot_discarded_total`.
async fn report_recovery(ctx: &Context, snapshot: &Recovered, tuf: usize) {
    match snapshot {
        Recovered::FirstStart => tracing::info!(
            tuf_repositories = tuf,
            "no policy snapshot stored yet (first start); TUF state recovered"
        ),
        Recovered::Snapshot(revision) => tracing::info!(
            revision,
            tuf_repositories = tuf,
            "policy snapshot and TUF state recovered"
        ),
        Recovered::Discarded { reason, floor } => {
            ctx.metrics.snapshot_discarded();
            let note = format!(
                "the stored policy snapshot is corrupt ({reason}) and was replaced: revision {} \
                 and later hold what the reconcilers accept from now on, so a policy is enforced \
                 again once it is reconciled; check that every policy is Ready",
                floor.saturating_add(1)
            );
            tracing::error!(
                reason,
                floor,
                "stored policy snapshot is corrupt; starting afresh"
            );
            let event = Event {
                type_: EventType::Warning,
                reason: "SnapshotDiscarded".to_owned(),
                note: Some(note.chars().take(1000).collect()),
                action: "Recover".to_owned(),
                secondary: None,
            };
            let secret = ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Secret".to_owned()),
                namespace: Some(ctx.args.namespace.clone()),
                name: Some(sigil_api::snapshot::SECRET_NAME.to_owned()),
                ..Default::default()
            };
            if let Err(e) = ctx.recorder.publish(&event, &secret).await {
                tracing::warn!(error = %e, "could not publish an Event");
            }
        }
    }
}

#[cfg(test)]
mod tests {

    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::fixtures::*;

    #[test]
    fn recovery_retries_back_off_from_a_quarter_second_to_fifteen() {
        let mut backoff = Backoff::default();
        let waits: Vec<u128> = (0..10).map(|_| backoff.next_wait().as_millis()).collect();
        assert_eq!(
            waits,
            [250, 500, 1000, 2000, 4000, 8000, 15000, 15000, 15000, 15000]
        );
        assert_eq!(backoff.attempts, 10);
    }

    #[tokio::test]
    async fn a_discarded_snapshot_is_reported_in_an_event_on_its_secret_and_a_metric() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);

        let discarded = Recovered::Discarded {
            reason: "policy snapshot does not decompress".into(),
            floor: 41,
        };
        report_recovery(&ctx, &discarded, 0).await;

        let events = api.event_notes();
        assert_eq!(events.len(), 1, "{events:?}");
        let (reason, note) = &events[0];
        assert_eq!(reason, "SnapshotDiscarded");
        assert!(note.contains("does not decompress"), "{note}");
        assert!(note.contains("revision 42"), "{note}");
        let event = api
            .requests()
            .into_iter()
            .find(|r| r.path.contains("/events"))
            .unwrap();
        assert_eq!(event.body["regarding"]["kind"], "Secret");
        assert_eq!(
            event.body["regarding"]["name"],
            sigil_api::snapshot::SECRET_NAME
        );
        assert!(
            ctx.metrics
                .encode(0)
                .contains("sigil_controller_snapshot_discarded_total 1"),
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_releases_the_lease_only_after_the_reconcilers_stopped() {
        use std::sync::atomic::{AtomicUsize, Ordering};

        use axum::extract::{Path, State};
        let (client, api) = FakeApi::start();
        // A TrustRoot whose mirror answers slowly: its reconcile is in
        // flight when the stop comes.
        let repo = TufRepo::new(sigil_verifier::trust::PUBLIC_GOOD_JSON.as_bytes());
        let served = Arc::new((repo.files(), AtomicUsize::new(0)));
        type Served = Arc<(std::collections::BTreeMap<String, Vec<u8>>, AtomicUsize)>;
        async fn slow(
            State(served): State<Served>,
            Path(path): Path<String>,
        ) -> Result<Vec<u8>, axum::http::StatusCode> {
            served.1.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            served
                .0
                .get(&path)
                .cloned()
                .ok_or(axum::http::StatusCode::NOT_FOUND)
        }
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::get(slow))
            .with_state(served.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mirror = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        api.put(
            &trustroot_path("slow"),
            json!({"apiVersion": "policy.sigil.dev/v1alpha1", "kind": "TrustRoot",
                "metadata": {"name": "slow", "generation": 1, "uid": "uid-slow"},
                "spec": {"remote": {"mirror": mirror, "root": repo.root_base64()}}}),
        );
        let args = Args {
            namespace: NS.into(),
            identity: "replica-a".into(),
            listen: "127.0.0.1:0".into(),
            tuf_offline: true,
            ..Args::default()
        };
        let (trigger, stop) = sigil_runtime::shutdown::channel();
        let task = tokio::spawn(run_with(client, args, stop));
        // Leading, recovering and reaching the reconcile take a second or
        // two; bounded generously for a loaded machine.
        tokio::time::timeout(Duration::from_secs(180), async {
            while served.1.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the TrustRoot's mirror is asked");

        trigger.trigger();
        // About two seconds; bounded generously for a loaded machine.
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("the controller stops")
            .unwrap()
            .unwrap();

        let requests = api.requests();
        let lease = lease_path("sigil-controller");
        let released = requests
            .iter()
            .position(|r| {
                r.method == http::Method::PUT
                    && r.path == lease
                    && r.body["spec"]["holderIdentity"].is_null()
            })
            .expect("the Lease is released");
        let status = format!("{}/status", trustroot_path("slow"));
        let last_status = requests
            .iter()
            .rposition(|r| r.method == http::Method::PATCH && r.path == status)
            .expect("the reconcile in flight finished and wrote its status");
        assert!(
            last_status < released,
            "status written at request {last_status}, Lease released at {released}"
        );
        assert_eq!(
            requests.len(),
            released + 1,
            "nothing is written after the release"
        );
    }

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

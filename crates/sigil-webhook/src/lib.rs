//! sigil-webhook: the admission server. It pins image tags to digests
//! (`/mutate`) and verifies the digests that will run (`/validate`) through an
//! [`judge::ImageJudge`], with caching, deadlines and metrics around it.
//!
//! Layout: [`review`] reads and writes AdmissionReviews; [`images`] finds the
//! images of each supported kind; [`admit`] is the decision as plain code;
//! [`server`] is axum over rustls with graceful shutdown; [`tls`] reloads the
//! serving certificate; [`static_judge`] is the judge for a policy given by
//! flags. The judgement itself is `sigil-judge`'s, shared with the audit and
//! re-exported here under its old paths: [`judge`] (the seam), [`cache`]
//! (moka caches and single flight), [`policy_judge`] (the controller's policy
//! snapshot, read by [`snapshot_source`]) and [`secrets`] (pull secrets).
//! [`audit`] runs the same binary and judge as the in-cluster audit
//! (`--audit`, `sigil-audit`'s loop) instead of the admission server.
#![forbid(unsafe_code)]

pub mod admit;
pub mod audit;
pub mod config;
pub mod error;
pub mod images;
pub mod memory_budget;
pub mod metrics;
pub mod review;
pub mod server;
pub mod static_judge;
pub mod tls;

pub use sigil_judge::{cache, judge, policy_judge, secrets, snapshot_source};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{Args, LogFormat};
pub use error::Error;

use crate::admit::{Admission, AdmissionConfig};
use crate::judge::{ImageJudge, PullSecretSource};
use crate::metrics::Metrics;
use crate::server::{AppState, ServeLimits};
use crate::tls::{CertFiles, ReloadingCert};

/// Installs the log subscriber (`RUST_LOG` filters; info by default).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // A second call (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Everything a server needs besides its judge.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// HTTPS address.
    pub listen: SocketAddr,
    /// Plain metrics address.
    pub metrics_listen: SocketAddr,
    /// Serving certificate files.
    pub cert: CertFiles,
    /// Certificate poll interval.
    pub cert_poll: Duration,
    /// Admission settings.
    pub admission: AdmissionConfig,
    /// Server bounds.
    pub limits: ServeLimits,
}

/// A started server.
pub struct Running<J, S> {
    /// The HTTPS address actually bound.
    pub addr: SocketAddr,
    /// The metrics address actually bound.
    pub metrics_addr: SocketAddr,
    /// Shared state (metrics, caches, readiness).
    pub state: Arc<AppState<J, S>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl<J, S> Running<J, S> {
    /// Begins shutdown: `/readyz` fails, accepting stops, in-flight reviews
    /// finish within the drain bound. Resolves when both servers stopped.
    pub async fn shutdown(self) {
        self.state.shutting_down.store(true, Ordering::Relaxed);
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// Ends when `true` is sent or the sender is gone.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Binds both ports and serves `judge` until [`Running::shutdown`].
pub async fn start<J: ImageJudge, S: PullSecretSource>(
    judge: Arc<J>,
    secrets: S,
    settings: ServerSettings,
) -> Result<Running<J, S>, Error> {
    start_with_metrics(judge, secrets, settings, Arc::new(Metrics::new())).await
}

/// [`start`] exporting `metrics`, which may already be wired into the
/// judge's registry client (registry requests by host and status).
pub async fn start_with_metrics<J: ImageJudge, S: PullSecretSource>(
    judge: Arc<J>,
    secrets: S,
    settings: ServerSettings,
    metrics: Arc<Metrics>,
) -> Result<Running<J, S>, Error> {
    let admission = Admission::new(judge, secrets, settings.admission.clone(), metrics);
    let state = AppState::new(admission);
    let cert = ReloadingCert::load(settings.cert.clone())?;
    let tls = tls::server_config(cert.clone())?;
    let listener = bind(settings.listen).await?;
    let metrics_listener = bind(settings.metrics_listen).await?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: settings.listen,
        source,
    })?;
    let metrics_addr = metrics_listener
        .local_addr()
        .map_err(|source| Error::Bind {
            addr: settings.metrics_listen,
            source,
        })?;
    let (stop, rx) = watch::channel(false);
    let watcher = tokio::spawn(cert.watch(settings.cert_poll));
    let https = tokio::spawn(server::serve_tls(
        listener,
        tls,
        server::router(state.clone()),
        settings.limits.clone(),
        stopped(rx.clone()),
    ));
    let plain_router = server::metrics_router(state.clone());
    let plain_stop = stopped(rx);
    let plain = tokio::spawn(async move {
        let serve = axum::serve(metrics_listener, plain_router).with_graceful_shutdown(plain_stop);
        if let Err(e) = serve.await {
            tracing::warn!(error = %e, "metrics server stopped");
        }
    });
    let stop_watcher = {
        let rx = stop.subscribe();
        tokio::spawn(async move {
            stopped(rx).await;
            watcher.abort();
        })
    };
    tracing::info!(%addr, %metrics_addr, "sigil-webhook serving");
    Ok(Running {
        addr,
        metrics_addr,
        state,
        stop,
        tasks: vec![https, plain, stop_watcher],
    })
}

/// Resolves on SIGTERM or Ctrl-C.
async fn termination() -> Result<(), Error> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(Error::Signal)?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r.map_err(Error::Signal)?,
    }
    Ok(())
}

/// Serves `judge` until SIGTERM, then drains.
async fn serve<J: ImageJudge>(
    judge: Arc<J>,
    secrets: secrets::AnyPullSecrets,
    settings: ServerSettings,
    metrics: Arc<Metrics>,
) -> Result<(), Error> {
    let running = start_with_metrics(judge, secrets, settings, metrics).await?;
    termination().await?;
    tracing::info!("SIGTERM: draining in-flight reviews");
    running.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// One API client for everything the webhook reads from the cluster,
/// created on first use (in-cluster config or KUBECONFIG).
struct KubeClient(Option<kube::Client>);

impl KubeClient {
    async fn get(&mut self, why: &str) -> Result<kube::Client, Error> {
        if let Some(c) = &self.0 {
            return Ok(c.clone());
        }
        let client = kube::Client::try_default().await.map_err(|e| {
            Error::Config(format!(
                "cannot reach the Kubernetes API for {why}: {e}; run in a cluster or set KUBECONFIG"
            ))
        })?;
        self.0 = Some(client.clone());
        Ok(client)
    }
}

/// Runs the webhook until SIGTERM: with the policy snapshot judge when a
/// snapshot source is given, else with the static judge from `args`; with
/// `--audit`, the in-cluster audit over that same snapshot judge instead.
pub async fn run(args: Args) -> Result<(), Error> {
    // Before any policy compiles; the module itself is read only when a
    // policy uses CUE.
    sigil_cue::configure_shared(args.cue_config()).map_err(|e| Error::Config(e.to_string()))?;
    memory_budget::check(&args)?;
    let metrics = Arc::new(Metrics::new());
    let mut client_config = args.client_config()?;
    client_config.observer = Some(metrics.clone());
    let mut kube = KubeClient(None);
    let secrets = match args.pull_secrets {
        config::PullSecretsArg::None => secrets::AnyPullSecrets::None(secrets::NoPullSecrets),
        config::PullSecretsArg::Kube => {
            let mut source = secrets::KubePullSecrets::new(
                kube.get("--pull-secrets kube").await?,
                &args.namespace,
                Duration::from_secs(args.pull_secret_ttl_seconds),
            );
            if !args.pull_secret_namespace.is_empty() {
                source = source.only_in(args.pull_secret_namespace.clone());
            }
            secrets::AnyPullSecrets::Kube(Box::new(source))
        }
    };
    let (root, root_id) = args.trust_root()?;
    let from = args.snapshot_from()?;
    if args.audit.audit && from.is_none() {
        return Err(Error::Config(
            "--audit judges with the policy snapshot admission enforces: give \
             --policy-snapshot-secret NAMESPACE/NAME (or --policy-snapshot-file)"
                .into(),
        ));
    }
    let Some(from) = from else {
        let judge =
            static_judge::StaticJudge::new(args.static_policy()?, root, &root_id, client_config)?;
        return serve(Arc::new(judge), secrets, server_settings(&args)?, metrics).await;
    };
    let mut judge =
        policy_judge::PolicyJudge::new(client_config, root, &root_id, args.no_match_policy())?
            .with_allowed_registries(args.allowed_registries()?);
    if args.signature_ttl_seconds > 0 {
        judge =
            judge.with_material_cache(Arc::new(sigil_registry::MaterialCache::with_byte_budget(
                Duration::from_secs(args.signature_ttl_seconds),
                MATERIAL_BYTES,
            )));
    }
    let judge = Arc::new(judge);
    let source = match from {
        config::SnapshotFrom::File(path) => {
            let poll = Duration::from_secs(args.snapshot_poll_seconds.max(1));
            tokio::spawn(snapshot_source::file_source(judge.clone(), path, poll).await)
        }
        config::SnapshotFrom::Secret { namespace, name } => {
            let client = kube.get("--policy-snapshot-secret").await?;
            let api = kube::Api::namespaced(client, &namespace);
            tokio::spawn(snapshot_source::secret_source(judge.clone(), api, name))
        }
    };
    let outcome = if args.audit.audit {
        let client = kube.get("--audit").await?;
        audit::run(&args, client, judge, secrets, metrics, args.metrics_listen).await
    } else {
        match server_settings(&args) {
            Ok(settings) => serve(judge, secrets, settings, metrics).await,
            Err(e) => Err(e),
        }
    };
    source.abort();
    outcome
}

/// The admission server's settings (it needs a serving certificate).
fn server_settings(args: &Args) -> Result<ServerSettings, Error> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Err(Error::Config(
            "the admission server needs --tls-cert and --tls-key (or run --audit)".into(),
        ));
    };
    Ok(ServerSettings {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        cert: CertFiles {
            cert: cert.clone(),
            key: key.clone(),
        },
        cert_poll: Duration::from_secs(args.cert_poll_seconds.max(1)),
        admission: args.admission(),
        limits: args.serve_limits(),
    })
}

/// Bytes of signature material the material cache keeps: a few KiB per
/// image for real signatures (thousands of images), and a hard bound
/// however large the bundles a registry serves.
const MATERIAL_BYTES: u64 = 32 << 20;

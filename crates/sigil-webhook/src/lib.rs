//! sigil-webhook: the admission server. It pins image tags to digests
//! (`/mutate`) and verifies the digests that will run (`/validate`) through an
//! [`judge::ImageJudge`], with caching, deadlines and metrics around it.
//!
//! Layout: [`review`] reads and writes AdmissionReviews; [`images`] finds the
//! images of each supported kind; [`admit`] is the decision as plain code;
//! [`server`] is axum over rustls with graceful shutdown; [`tls`] reloads the
//! serving certificate; [`static_judge`] is the judge for a policy given by
//! flags; [`external_data`] serves the same verdicts to Gatekeeper as an
//! external-data provider, on a listener of its own with mutual TLS. The
//! judgement itself is `sigil-judge`'s, shared with the audit
//! (`sigil-audit`, a program of its own) and re-exported here under its old
//! paths: [`judge`] (the seam), [`cache`] (moka caches and single flight),
//! [`policy_judge`] (the controller's policy snapshot, read by
//! [`snapshot_source`]), [`secrets`] (pull secrets) and [`metrics`]; the
//! judge's flags and their `build()` are `sigil_judge::args`.
#![forbid(unsafe_code)]
// The Gatekeeper provider's handler future (every namespace's judgement of
// every key, through the cache and the registry client's moka caches) is
// deeper than the default limit lets the compiler prove `Send`.
#![recursion_limit = "256"]

pub mod admit;
pub mod config;
pub mod error;
pub mod external_data;
pub mod images;
pub mod memory_budget;
pub mod review;
pub mod server;
pub mod static_judge;
pub mod tls;

pub use sigil_judge::{
    cache, judge, metrics, policy_judge, secrets, slots, snapshot_source, workload_kind,
};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sigil_runtime::admin::AdminListener;
use sigil_runtime::shutdown::{self, Trigger};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use config::Args;
pub use error::Error;

use crate::admit::{Admission, AdmissionConfig};
use crate::external_data::{ExternalDataSettings, ProviderState};
use crate::judge::{ImageJudge, PullSecretSource};
use crate::metrics::Metrics;
use crate::server::{AppState, ServeLimits};
use crate::tls::{CertFiles, ReloadingCert};

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
    /// The Gatekeeper external-data provider's listener; `None`: off.
    pub external_data: Option<ExternalDataSettings>,
}

/// A started server.
pub struct Running<J, S> {
    /// The HTTPS address actually bound.
    pub addr: SocketAddr,
    /// The metrics address actually bound.
    pub metrics_addr: SocketAddr,
    /// The Gatekeeper provider's address actually bound, when it is on.
    pub external_data_addr: Option<SocketAddr>,
    /// Shared state (metrics, caches, readiness).
    pub state: Arc<AppState<J, S>>,
    stop: Trigger,
    tasks: Vec<JoinHandle<()>>,
}

impl<J, S> Running<J, S> {
    /// Begins shutdown: `/readyz` fails, accepting stops, in-flight reviews
    /// finish within the drain bound (the metrics port's answers within
    /// sigil-runtime's admin drain). Resolves when both servers stopped.
    pub async fn shutdown(self) {
        self.state.shutting_down.store(true, Ordering::Relaxed);
        self.stop.trigger();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// The Gatekeeper provider's listener, bound, before it serves.
struct ProviderListener {
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: axum::Router,
    addr: SocketAddr,
    clients: Arc<tls::ReloadingClientCa>,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
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
    let admin = AdminListener::bind(settings.metrics_listen, "metrics-listen").await?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: settings.listen,
        source,
    })?;
    let metrics_addr = admin.local_addr();
    let provider = match &settings.external_data {
        Some(gk) => {
            let clients = tls::ReloadingClientCa::load(&gk.client_ca)?;
            let mtls = tls::mutual_tls_config(cert.clone(), clients.clone())?;
            let listener = bind(gk.listen).await?;
            let addr = listener.local_addr().map_err(|source| Error::Bind {
                addr: gk.listen,
                source,
            })?;
            let state = Arc::new(ProviderState {
                app: state.clone(),
                config: gk.config.clone(),
            });
            Some(ProviderListener {
                listener,
                tls: mtls,
                router: external_data::router(state),
                addr,
                clients,
            })
        }
        None => None,
    };
    let external_data_addr = provider.as_ref().map(|p| p.addr);
    let client_ca_watcher = provider
        .as_ref()
        .map(|p| tokio::spawn(p.clients.clone().watch(settings.cert_poll)));
    let (stop, stopping) = shutdown::channel();
    let watcher = tokio::spawn(cert.watch(settings.cert_poll));
    let mut tasks = Vec::new();
    if let Some(p) = provider {
        let addr = p.addr;
        tasks.push(tokio::spawn(server::serve_tls(
            p.listener,
            p.tls,
            p.router,
            settings.limits.clone(),
            state.admission.metrics().clone(),
            stopping.wait(),
        )));
        tracing::info!(%addr, "Gatekeeper external-data provider serving");
    }
    let https = tokio::spawn(server::serve_tls(
        listener,
        tls,
        server::router(state.clone()),
        settings.limits.clone(),
        state.admission.metrics().clone(),
        stopping.wait(),
    ));
    let admin = admin.serve(server::metrics_router(state.clone()), stopping.clone());
    let plain = tokio::spawn(async move {
        if let Err(e) = admin.await {
            tracing::warn!(error = %e, "metrics server stopped");
        }
    });
    let stop_watcher = tokio::spawn(async move {
        stopping.requested().await;
        watcher.abort();
        if let Some(w) = client_ca_watcher {
            w.abort();
        }
    });
    tracing::info!(%addr, %metrics_addr, "sigil-webhook serving");
    tasks.extend([https, plain, stop_watcher]);
    Ok(Running {
        addr,
        metrics_addr,
        external_data_addr,
        state,
        stop,
        tasks,
    })
}

/// Serves `judge` until SIGTERM, then drains.
async fn serve<J: ImageJudge>(
    judge: Arc<J>,
    secrets: secrets::AnyPullSecrets,
    settings: ServerSettings,
    metrics: Arc<Metrics>,
) -> Result<(), Error> {
    let running = start_with_metrics(judge, secrets, settings, metrics).await?;
    let termination = shutdown::on_termination().map_err(Error::Signal)?;
    termination.requested().await;
    tracing::info!("draining in-flight reviews");
    running.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// Runs the webhook until SIGTERM: with the policy snapshot judge when a
/// snapshot source is given, else with the static judge from `args`.
pub async fn run(args: Args) -> Result<(), Error> {
    memory_budget::check(&args)?;
    let metrics = Arc::new(Metrics::new());
    let settings = server_settings(&args);
    let judging = args.judge.build(metrics.clone()).await?;
    if let Some(table) = judging.exceptions.clone() {
        metrics.track_exceptions(table);
    }
    let secrets = judging.secrets;
    match judging.judge {
        sigil_judge::args::Judge::NoSnapshot {
            client_config,
            root,
            root_id,
        } => {
            let judge = static_judge::StaticJudge::new(
                args.static_policy()?,
                root,
                &root_id,
                *client_config,
            )?;
            serve(Arc::new(judge), secrets, settings, metrics).await
        }
        sigil_judge::args::Judge::Snapshot { judge, source } => {
            let outcome = serve(judge, secrets, settings, metrics).await;
            source.abort();
            outcome
        }
    }
}

/// The admission server's settings.
fn server_settings(args: &Args) -> ServerSettings {
    ServerSettings {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        cert: CertFiles {
            cert: args.tls_cert.clone(),
            key: args.tls_key.clone(),
        },
        cert_poll: Duration::from_secs(args.cert_poll_seconds.max(1)),
        admission: args.admission(),
        limits: args.serve_limits(),
        external_data: args.external_data(),
    }
}

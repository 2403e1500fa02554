//! How a sigil binary stops, written once: SIGTERM or SIGINT (Ctrl-C)
//! triggers one [`Shutdown`] token; everything that must stop (the admin
//! server, the webhook's servers, the controller's elector and
//! reconcilers, the audit loop) holds a clone and observes it, stops taking
//! new work, and is given a bounded time ([`within`]) to finish what is in
//! flight before the process exits.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Triggers the [`Shutdown`] tokens made from it. Dropping it triggers
/// them too: nothing could trigger them afterwards.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// A cloneable token that tells when the program is to stop.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
    // Held only by a token that is never triggered ([`Shutdown::never`]).
    _keep: Option<Arc<watch::Sender<bool>>>,
}

/// A new trigger and the token it triggers.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown { rx, _keep: None })
}

impl Trigger {
    /// Triggers every token made from this trigger (again is harmless).
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    /// One more token of this trigger.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown {
            rx: self.0.subscribe(),
            _keep: None,
        }
    }
}

impl Shutdown {
    /// A token that is never triggered (a program that cannot watch for
    /// signals runs until it is killed).
    pub fn never() -> Self {
        let (tx, rx) = watch::channel(false);
        Self {
            rx,
            _keep: Some(Arc::new(tx)),
        }
    }

    /// Whether the shutdown has begun.
    pub fn is_requested(&self) -> bool {
        *self.rx.borrow() || self.rx.has_changed().is_err()
    }

    /// Resolves once the shutdown has begun (at once if it has).
    pub async fn requested(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// [`Shutdown::requested`] as an owned future, for APIs that keep it
    /// (axum's and kube's graceful shutdown).
    pub fn wait(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let token = self.clone();
        async move { token.requested().await }
    }
}

/// Installs the SIGTERM and SIGINT handlers and returns the token they
/// trigger; the first signal is logged. Fails only when a handler cannot
/// be installed. Call it inside the Tokio runtime.
pub fn on_termination() -> std::io::Result<Shutdown> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (trigger, shutdown) = channel();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutting down");
        trigger.trigger();
    });
    Ok(shutdown)
}

/// Runs `work` (what is left in flight once the shutdown began) for at
/// most `bound`: its output when it finished, `None` (logged, naming
/// `what`) when the bound ran out first and `work` was dropped.
pub async fn within<F: Future>(bound: Duration, what: &str, work: F) -> Option<F::Output> {
    match tokio::time::timeout(bound, work).await {
        Ok(output) => Some(output),
        Err(_) => {
            tracing::warn!(
                drain_seconds = bound.as_secs_f64(),
                "{what} still running at the end of the drain period; stopping without it"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_trigger_and_a_late_one_resolves_at_once() {
        let (trigger, shutdown) = channel();
        let other = shutdown.clone();
        assert!(!shutdown.is_requested());
        let waiting = tokio::spawn(other.wait());
        trigger.trigger();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(shutdown.is_requested());
        let late = trigger.subscribe();
        tokio::time::timeout(Duration::from_secs(5), late.requested())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_dropped_trigger_stops_its_tokens_and_never_does_not() {
        let (trigger, shutdown) = channel();
        drop(trigger);
        assert!(shutdown.is_requested());
        tokio::time::timeout(Duration::from_secs(5), shutdown.requested())
            .await
            .unwrap();
        let never = Shutdown::never();
        assert!(!never.is_requested());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), never.requested())
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn work_is_given_its_bound_and_no_more() {
        let quick = within(Duration::from_secs(5), "quick", async { 7 }).await;
        assert_eq!(quick, Some(7));
        let started = tokio::time::Instant::now();
        let stuck = within(
            Duration::from_secs(5),
            "stuck",
            std::future::pending::<()>(),
        )
        .await;
        assert_eq!(stuck, None);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }
}

//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go does
//! it: the leader renews every retry period; a standby takes the Lease over
//! once its record has not changed for the lease duration (measured on the
//! standby's own clock, so clock skew between nodes does not matter); every
//! write is a compare-and-swap on `resourceVersion`. A leader that cannot
//! renew within the renew deadline (shorter than the lease duration), or
//! that sees another holder, stops leading at once. On shutdown the leader
//! releases the Lease so a standby takes over without waiting.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;

use crate::config::Args;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// The Lease record last seen and when (on this replica's clock).
struct Observed {
    holder: String,
    renew_time: Option<MicroTime>,
    at: Instant,
}

/// Acquires, renews and releases the leader Lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    observed: Option<Observed>,
    leading: watch::Sender<bool>,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl Elector {
    /// An elector for `args.lease_name` in `args.namespace`; it reports
    /// leadership on `leading` and sets `ready` once the API answered.
    pub fn new(
        client: Client,
        args: &Args,
        leading: watch::Sender<bool>,
        metrics: Arc<Metrics>,
        ready: Arc<AtomicBool>,
    ) -> Self {
        Self {
            api: Api::namespaced(client, &args.namespace),
            name: args.lease_name.clone(),
            identity: args.identity.clone(),
            lease_duration: args.lease_duration(),
            renew_deadline: args.renew_deadline(),
            retry_period: args.retry_period(),
            observed: None,
            leading,
            metrics,
            ready,
        }
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    fn err(&self, what: &str, e: kube::Error) -> Error {
        Error::kube(format!("{what} Lease {}", self.name), e)
    }

    /// One round: creates, renews or takes over the Lease when it may.
    /// Returns whether this replica holds it afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool> {
        let now = MicroTime(Timestamp::now());
        let Some(mut lease) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.err("reading", e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(self.err("creating", e)),
            };
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let unchanged = self
            .observed
            .as_ref()
            .is_some_and(|o| o.holder == holder && o.renew_time == spec.renew_time);
        if !unchanged {
            self.observed = Some(Observed {
                holder: holder.clone(),
                renew_time: spec.renew_time.clone(),
                at: Instant::now(),
            });
        }
        let held_for = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.lease_duration, Duration::from_secs);
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|o| o.at.elapsed() > held_for);
        if holder == self.identity {
            spec.renew_time = Some(now);
            spec.lease_duration_seconds = Some(self.duration_secs());
        } else if holder.is_empty() || expired {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(now.clone());
            spec.renew_time = Some(now);
            spec.lease_duration_seconds = Some(self.duration_secs());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            tracing::info!(previous = %holder, "taking over the leader Lease");
        } else {
            return Ok(false);
        }
        lease.spec = Some(spec);
        // replace carries resourceVersion: a concurrent writer makes it 409.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observed = Some(Observed {
                    holder: self.identity.clone(),
                    renew_time: written.spec.and_then(|s| s.renew_time),
                    at: Instant::now(),
                });
                Ok(true)
            }
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(self.err("updating", e)),
        }
    }

    /// Gives the Lease up (when held) so a standby takes over at once.
    pub async fn release(&self) -> Result<()> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.err("reading", e))?
        else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        lease.spec = Some(spec);
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.err("releasing", e))?;
        Ok(())
    }

    fn set_leading(&self, leading: bool) {
        self.leading.send_if_modified(|l| {
            let changed = *l != leading;
            *l = leading;
            changed
        });
        self.metrics.leading(leading);
    }

    /// Runs election rounds every retry period until `shutdown` resolves,
    /// then releases the Lease.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut last_renewal: Option<Instant> = None;
        loop {
            let round =
                tokio::time::timeout(self.renew_deadline, self.try_acquire_or_renew()).await;
            match round {
                Ok(Ok(true)) => {
                    self.ready.store(true, Ordering::Relaxed);
                    last_renewal = Some(Instant::now());
                    if !*self.leading.borrow() {
                        tracing::info!(identity = %self.identity, "became the leader");
                    }
                    self.set_leading(true);
                }
                Ok(Ok(false)) => {
                    self.ready.store(true, Ordering::Relaxed);
                    if *self.leading.borrow() {
                        tracing::warn!("lost the leader Lease to another replica; stopping");
                    }
                    last_renewal = None;
                    self.set_leading(false);
                }
                Ok(Err(e)) => self.renewal_failed(&e.to_string(), &mut last_renewal),
                Err(_) => self.renewal_failed("timed out", &mut last_renewal),
            }
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(self.retry_period) => {}
            }
        }
        let was_leading = *self.leading.borrow();
        self.set_leading(false);
        if was_leading && let Err(e) = self.release().await {
            tracing::warn!(error = %e, "could not release the leader Lease; a standby takes over when it expires");
        }
    }

    fn renewal_failed(&self, why: &str, last_renewal: &mut Option<Instant>) {
        tracing::warn!(error = why, "leader election round failed");
        if last_renewal.is_some_and(|t| t.elapsed() >= self.renew_deadline) {
            tracing::warn!("could not renew the leader Lease within the renew deadline; stopping");
            *last_renewal = None;
            self.set_leading(false);
        }
    }
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::fixtures::*;

    fn elector(client: Client, identity: &str) -> (Elector, watch::Receiver<bool>) {
        let args = Args {
            namespace: NS.into(),
            identity: identity.into(),
            lease_duration_secs: 1,
            renew_deadline_secs: 1,
            retry_period_secs: 1,
            ..Args::default()
        };
        let (tx, rx) = watch::channel(false);
        let e = Elector::new(
            client,
            &args,
            tx,
            Arc::new(Metrics::default()),
            Arc::default(),
        );
        (e, rx)
    }

    fn holder(api: &FakeApi) -> Option<String> {
        api.get(&lease_path("sigil-controller")).unwrap()["spec"]["holderIdentity"]
            .as_str()
            .map(str::to_owned)
    }

    #[tokio::test]
    async fn the_first_replica_creates_the_lease_and_leads_and_a_second_stands_by() {
        let (client, api) = FakeApi::start();
        let (mut a, _) = elector(client.clone(), "a");
        let (mut b, _) = elector(client, "b");

        assert!(a.try_acquire_or_renew().await.unwrap());
        assert!(!b.try_acquire_or_renew().await.unwrap());
        assert!(a.try_acquire_or_renew().await.unwrap(), "the leader renews");
        assert!(
            !b.try_acquire_or_renew().await.unwrap(),
            "a renewed lease is not taken"
        );

        assert_eq!(holder(&api).as_deref(), Some("a"));
    }

    #[tokio::test]
    async fn a_standby_takes_over_once_the_lease_is_not_renewed_for_its_duration() {
        let (client, api) = FakeApi::start();
        let (mut a, _) = elector(client.clone(), "a");
        let (mut b, _) = elector(client, "b");
        assert!(a.try_acquire_or_renew().await.unwrap());
        assert!(!b.try_acquire_or_renew().await.unwrap());

        // The leader dies: no more renewals.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(b.try_acquire_or_renew().await.unwrap());

        assert_eq!(holder(&api).as_deref(), Some("b"));
        let lease = api.get(&lease_path("sigil-controller")).unwrap();
        assert_eq!(lease["spec"]["leaseTransitions"], 1);
    }

    #[tokio::test]
    async fn a_released_lease_is_taken_at_once() {
        let (client, api) = FakeApi::start();
        let (mut a, _) = elector(client.clone(), "a");
        let (mut b, _) = elector(client, "b");
        assert!(a.try_acquire_or_renew().await.unwrap());
        assert!(!b.try_acquire_or_renew().await.unwrap());

        a.release().await.unwrap();

        assert_eq!(holder(&api), None);
        assert!(b.try_acquire_or_renew().await.unwrap());
    }

    #[tokio::test]
    async fn a_leader_that_sees_another_holder_stops_leading() {
        let (client, api) = FakeApi::start();
        let (a, leading) = elector(client, "a");
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let task = tokio::spawn(a.run(async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        }));
        let mut l = leading.clone();
        tokio::time::timeout(Duration::from_secs(5), l.wait_for(|v| *v))
            .await
            .unwrap()
            .unwrap();

        // Another replica wrote the Lease (e.g. after a network partition).
        let mut lease = api.get(&lease_path("sigil-controller")).unwrap();
        lease["spec"]["holderIdentity"] = json!("b");
        lease["spec"]["renewTime"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
        api.put(&lease_path("sigil-controller"), lease);

        tokio::time::timeout(Duration::from_secs(5), l.wait_for(|v| !*v))
            .await
            .unwrap()
            .unwrap();
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(
            holder(&api).as_deref(),
            Some("b"),
            "a replica that lost does not release another's lease"
        );
    }
}

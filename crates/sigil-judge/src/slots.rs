//! Registry request slots shared fairly among namespaces: [`HostSlots`]
//! gives each registry host a number of slots (`--per-host-concurrency`),
//! taken per request by the registry client for the host it actually
//! contacts and held only while that request runs. So a hanging registry
//! (a `source.oci` a tenant names, a registry that is down) holds its own
//! slots only, and policy code that runs slowly holds none.
//!
//! While a host's slots are all taken, the next one freed goes to the
//! waiting namespace that holds the fewest of them (oldest waiter first
//! among equals): one namespace may use every slot of an idle host, but a
//! namespace with many cold images cannot keep another's requests to the
//! same registry waiting behind its own. The namespace of a request is the
//! one its judgement runs for ([`crate::tenant`]).
//!
//! The table of hosts is bounded ([`MAX_HOSTS`]): idle hosts are pruned when
//! it fills, and hosts beyond it while all are busy share one overflow
//! entry.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use sigil_registry::{RequestSlots, Slot};
use tokio::sync::oneshot;

/// Registry hosts tracked at once; beyond this, while every tracked host
/// is busy, new hosts share one overflow entry.
pub const MAX_HOSTS: usize = 1024;

/// Request slots per registry host, shared fairly among namespaces.
#[derive(Debug)]
pub struct HostSlots {
    per_host: usize,
    hosts: Mutex<HashMap<String, Arc<Host>>>,
    overflow: Arc<Host>,
}

/// One host's slots.
#[derive(Debug)]
struct Host {
    state: Mutex<HostState>,
}

#[derive(Debug, Default)]
struct HostState {
    free: usize,
    /// Slots held, per namespace (entries at zero are removed).
    held: HashMap<Arc<str>, usize>,
    /// Waiters per namespace, oldest first, each with its arrival number.
    waiting: HashMap<Arc<str>, VecDeque<(u64, oneshot::Sender<()>)>>,
    arrivals: u64,
}

impl Host {
    fn new(slots: usize) -> Self {
        Self {
            state: Mutex::new(HostState {
                free: slots,
                ..HostState::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HostState> {
        // The state is consistent after every statement that touches it: a
        // panic elsewhere while it was held leaves nothing half-done.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether no slot is taken and no one waits.
    fn idle(&self, slots: usize) -> bool {
        let state = self.lock();
        state.free == slots && state.waiting.is_empty()
    }

    /// Gives `namespace`'s slot back and hands it to the next waiter.
    fn release(&self, namespace: &Arc<str>) {
        let mut state = self.lock();
        if let Some(n) = state.held.get_mut(namespace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.held.remove(namespace);
            }
        }
        state.free += 1;
        state.hand_over();
    }
}

impl HostState {
    /// While a slot is free and someone waits: gives it to the waiting
    /// namespace holding the fewest slots, its oldest waiter first.
    fn hand_over(&mut self) {
        while self.free > 0 {
            let next = self
                .waiting
                .iter()
                .filter_map(|(ns, queue)| {
                    let (arrival, _) = queue.front()?;
                    Some((
                        self.held.get(ns).copied().unwrap_or(0),
                        *arrival,
                        ns.clone(),
                    ))
                })
                .min();
            let Some((_, _, namespace)) = next else {
                return;
            };
            let Some(queue) = self.waiting.get_mut(&namespace) else {
                return;
            };
            let sender = queue.pop_front();
            if queue.is_empty() {
                self.waiting.remove(&namespace);
            }
            // A waiter that gave up has dropped its receiver: skip it.
            if let Some((_, sender)) = sender
                && sender.send(()).is_ok()
            {
                self.free -= 1;
                *self.held.entry(namespace).or_default() += 1;
            }
        }
    }
}

/// A held slot; dropping it gives the slot back.
struct Held {
    host: Arc<Host>,
    namespace: Arc<str>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.host.release(&self.namespace);
    }
}

/// A waiter: if it is dropped after the slot was handed to it but before
/// it took it, the slot goes back.
struct Waiting {
    receiver: oneshot::Receiver<()>,
    host: Arc<Host>,
    namespace: Arc<str>,
    taken: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.taken && self.receiver.try_recv().is_ok() {
            self.host.release(&self.namespace);
        }
    }
}

impl HostSlots {
    /// `per_host` slots for each registry host (at least one).
    pub fn new(per_host: usize) -> Self {
        let per_host = per_host.max(1);
        Self {
            per_host,
            hosts: Mutex::new(HashMap::new()),
            overflow: Arc::new(Host::new(per_host)),
        }
    }

    /// Hosts tracked now (for tests and metrics).
    pub fn tracked_hosts(&self) -> usize {
        self.hosts.lock().map(|h| h.len()).unwrap_or(0)
    }

    fn host(&self, name: &str) -> Arc<Host> {
        let Ok(mut hosts) = self.hosts.lock() else {
            return self.overflow.clone();
        };
        if let Some(h) = hosts.get(name) {
            return h.clone();
        }
        if hosts.len() >= MAX_HOSTS {
            // Idle hosts nobody refers to are dropped: a slot or a waiter
            // holds a reference to its host.
            let per_host = self.per_host;
            hosts.retain(|_, h| Arc::strong_count(h) > 1 || !h.idle(per_host));
        }
        if hosts.len() >= MAX_HOSTS {
            return self.overflow.clone();
        }
        let h = Arc::new(Host::new(self.per_host));
        hosts.insert(name.to_owned(), h.clone());
        h
    }

    /// Waits for a slot of `host` for the current namespace: it queues,
    /// and is served at once when a slot is free and no namespace holding
    /// fewer waits.
    async fn take(&self, host: &str) -> Held {
        let host = self.host(&host.to_ascii_lowercase());
        let namespace = crate::tenant::current();
        loop {
            let receiver = {
                let mut state = host.lock();
                let (sender, receiver) = oneshot::channel();
                state.arrivals += 1;
                let arrival = state.arrivals;
                state
                    .waiting
                    .entry(namespace.clone())
                    .or_default()
                    .push_back((arrival, sender));
                state.hand_over();
                receiver
            };
            let mut waiting = Waiting {
                receiver,
                host: host.clone(),
                namespace: namespace.clone(),
                taken: false,
            };
            // The sender lives in the queue until it is handed a slot, and
            // the queue as long as this reference to its host: an error
            // cannot happen here, and would only mean waiting again.
            if (&mut waiting.receiver).await.is_ok() {
                waiting.taken = true;
                return Held {
                    host: host.clone(),
                    namespace: namespace.clone(),
                };
            }
        }
    }
}

impl RequestSlots for HostSlots {
    fn acquire<'a>(&'a self, host: &'a str) -> Pin<Box<dyn Future<Output = Slot> + Send + 'a>> {
        Box::pin(async move { Box::new(self.take(host).await) as Slot })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::*;
    use crate::tenant::in_namespace;

    async fn slot(slots: &Arc<HostSlots>, namespace: &str, host: &str) -> Slot {
        in_namespace(namespace, slots.acquire(host)).await
    }

    /// Spawns a waiter of `namespace` for `host`; the channel says when it
    /// got its slot, which it then holds until told to let go.
    fn waiter(
        slots: &Arc<HostSlots>,
        namespace: &'static str,
        host: &'static str,
    ) -> (
        tokio::sync::mpsc::UnboundedReceiver<&'static str>,
        oneshot::Sender<()>,
    ) {
        let (got, got_rx) = tokio::sync::mpsc::unbounded_channel();
        let (release, release_rx) = oneshot::channel::<()>();
        let slots = slots.clone();
        tokio::spawn(async move {
            let held = slot(&slots, namespace, host).await;
            let _ = got.send(namespace);
            let _ = release_rx.await;
            drop(held);
        });
        (got_rx, release)
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn one_namespace_alone_may_use_every_slot_of_a_host() {
        let slots = Arc::new(HostSlots::new(3));
        let held: Vec<Slot> = futures_util::future::join_all(
            (0..3).map(|_| slot(&slots, "busy", "registry.example")),
        )
        .await;
        assert_eq!(held.len(), 3);
        // Another host is not affected by this one being full.
        let other = tokio::time::timeout(
            Duration::from_secs(5),
            slot(&slots, "busy", "other.example"),
        )
        .await;
        assert!(other.is_ok());
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_namespace_holding_fewest_not_to_a_busy_ones_queue() {
        let slots = Arc::new(HostSlots::new(2));
        let a = slot(&slots, "busy", "registry.example").await;
        let _b = slot(&slots, "busy", "registry.example").await;
        // The busy namespace queues five more, then a quiet one arrives.
        let mut busy: Vec<_> = (0..5)
            .map(|_| waiter(&slots, "busy", "registry.example"))
            .collect();
        settle().await;
        let (mut quiet, _release_quiet) = waiter(&slots, "quiet", "registry.example");
        settle().await;
        assert!(quiet.try_recv().is_err(), "every slot is taken");

        drop(a);
        let first = tokio::time::timeout(Duration::from_secs(5), quiet.recv())
            .await
            .unwrap();
        assert_eq!(first, Some("quiet"));
        settle().await;
        assert!(
            busy.iter_mut().all(|(got, _)| got.try_recv().is_err()),
            "the busy namespace's queue waits"
        );
        // Its own waiters are served as its slots come back, oldest first.
        drop(_b);
        let (got, _) = busy.first_mut().unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), got.recv())
            .await
            .unwrap();
        assert_eq!(next, Some("busy"));
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_loses_no_slot() {
        let slots = Arc::new(HostSlots::new(1));
        let held = slot(&slots, "a", "registry.example").await;
        for _ in 0..3 {
            let gave_up = tokio::time::timeout(
                Duration::from_millis(20),
                slot(&slots, "b", "registry.example"),
            )
            .await;
            assert!(gave_up.is_err());
        }
        drop(held);
        let again = tokio::time::timeout(
            Duration::from_secs(5),
            slot(&slots, "c", "registry.example"),
        )
        .await;
        assert!(
            again.is_ok(),
            "the slot came back despite the waiters that left"
        );
        drop(again);
        // And the host is idle again: nothing held, nobody waiting.
        let host = slots.host("registry.example");
        assert!(host.idle(1));
    }

    #[tokio::test]
    async fn idle_hosts_are_pruned_so_a_new_host_gets_slots_of_its_own() {
        let slots = Arc::new(HostSlots::new(1));
        for i in 0..MAX_HOSTS + 50 {
            drop(slot(&slots, "ns", &format!("host-{i}.example")).await);
        }
        assert!(slots.tracked_hosts() <= MAX_HOSTS);
        let new = tokio::time::timeout(
            Duration::from_secs(5),
            slot(&slots, "ns", "new-host.example"),
        )
        .await;
        assert!(new.is_ok());
        assert!(
            !Arc::ptr_eq(&slots.host("new-host.example"), &slots.overflow),
            "the new host is tracked, not sent to the overflow entry"
        );
    }
}

//! Rate limits: a registry's 429 with Retry-After waited out within the
//! deadline and counted per host, refused at once when the deadline has no
//! room for it, and sigil's own per-host request budget spent before the
//! registry's quota is. Mock registries on 127.0.0.1.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{reply, serve};
use sigil_registry::ratelimit::RequestBudget;
use sigil_registry::{
    ClientConfig, Limits, RegistryClient, RegistryError, Repository, RequestObserver,
    RequestOutcome,
};

/// Counts rate-limit outcomes by host.
#[derive(Debug, Default)]
struct Limited(Mutex<Vec<(String, &'static str)>>);

impl RequestObserver for Limited {
    fn observe(&self, _: &str, _: RequestOutcome, _: Duration) {}
    fn rate_limited(&self, host: &str, outcome: &'static str) {
        self.0.lock().unwrap().push((host.to_string(), outcome));
    }
}

fn client(
    observer: Arc<Limited>,
    budget: Option<Arc<RequestBudget>>,
    deadline: Duration,
) -> RegistryClient {
    RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        observer: Some(observer),
        request_budget: budget,
        limits: Limits {
            request_timeout: deadline,
            total_deadline: deadline,
            ..Limits::default()
        },
        ..ClientConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_within_the_deadline_and_counted() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let (host, _) = serve(Arc::new(move |_, _, _, _| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            reply(429, &[("retry-after", "1")], "slow down")
        } else {
            reply(404, &[], "")
        }
    }))
    .await;
    let limited = Arc::new(Limited::default());
    let client = client(limited.clone(), None, Duration::from_secs(5));
    let repo = Repository::parse(&format!("{host}/a/b")).unwrap();
    assert_eq!(
        client.session().resolve_tag(&repo, "v1").await.unwrap(),
        None
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(*limited.0.lock().unwrap(), vec![(host, "retried")]);
}

#[tokio::test]
async fn a_429_asking_for_more_than_the_deadline_leaves_is_a_denial_at_once() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let (host, _) = serve(Arc::new(move |_, _, _, _| {
        seen.fetch_add(1, Ordering::SeqCst);
        reply(429, &[("retry-after", "3600")], "")
    }))
    .await;
    let limited = Arc::new(Limited::default());
    let client = client(limited.clone(), None, Duration::from_secs(5));
    let repo = Repository::parse(&format!("{host}/a/b")).unwrap();
    let err = client.session().resolve_tag(&repo, "v1").await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::RateLimited {
                retry_after: Some(3600),
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_inconclusive());
    let text = err.to_string();
    assert!(
        text.contains("Retry-After 3600 s") && text.contains("mirror"),
        "{text}"
    );
    // HEAD then the GET fallback: each answered 429, neither waited out.
    assert!(calls.load(Ordering::SeqCst) <= 2);
    assert!(
        limited
            .0
            .lock()
            .unwrap()
            .iter()
            .all(|(_, o)| *o == "gave-up")
    );
}

#[tokio::test]
async fn the_request_budget_of_a_host_is_spent_before_the_registrys_quota() {
    let (host, seen) = serve(Arc::new(|_, _, _, _| reply(404, &[], ""))).await;
    let (other, _) = serve(Arc::new(|_, _, _, _| reply(404, &[], ""))).await;
    // Two requests a minute for `host`; none for the other one.
    let budget = Arc::new(RequestBudget::new(0, vec![(host.clone(), 2)]));
    let limited = Arc::new(Limited::default());
    let client = client(limited.clone(), Some(budget), Duration::from_secs(3));
    let repo = Repository::parse(&format!("{host}/a/b")).unwrap();
    // Two HEADs answered 404, then the budget is spent: the next one would
    // go in 30 s, past the 3 s deadline.
    assert_eq!(
        client.session().resolve_tag(&repo, "v1").await.unwrap(),
        None
    );
    assert_eq!(
        client.session().resolve_tag(&repo, "v2").await.unwrap(),
        None
    );
    let err = client.session().resolve_tag(&repo, "v3").await.unwrap_err();
    assert!(
        matches!(err, RegistryError::RateBudget { per_minute: 2, .. }),
        "{err}"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "the registry saw a request past the budget"
    );
    let other_repo = Repository::parse(&format!("{other}/a/b")).unwrap();
    for tag in ["a", "b", "c", "d"] {
        assert_eq!(
            client
                .session()
                .resolve_tag(&other_repo, tag)
                .await
                .unwrap(),
            None
        );
    }
    assert_eq!(*limited.0.lock().unwrap(), vec![(host, "spent")]);
}

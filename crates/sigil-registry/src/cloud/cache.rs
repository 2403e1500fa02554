//! Tokens with an expiry, cached by key: one exchange in flight per key
//! (callers asking meanwhile wait for it, each no longer than its own
//! deadline), a token handed out only while it has some life left, and a
//! refresh started in the background once a token enters the last part of
//! its life, so that under steady use no caller waits for a refresh. A
//! failed exchange is remembered briefly, so a provider that is down is not
//! asked again by every admission.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared};
use tokio::time::Instant;

use super::{CloudError, ErrorKind, ProviderId};

/// The longest life a cached token is given, whatever its issuer says.
pub const MAX_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// How long before expiry a token stops being handed out, at most: the
/// time to use it, and clock skew between us and its issuer.
const MAX_SKEW: Duration = Duration::from_secs(30);
/// How long before expiry a background refresh starts, at most.
const MAX_REFRESH_WINDOW: Duration = Duration::from_secs(600);
/// How long a failed exchange answers for its key before it is tried again.
pub const FAILURE_HOLD: Duration = Duration::from_secs(5);

/// A token and when it stops being valid.
#[derive(Clone, Debug)]
pub struct Timed<V> {
    /// The token.
    pub value: V,
    /// When it was obtained.
    pub obtained: Instant,
    /// When its issuer says it expires (capped at [`MAX_LIFETIME`]).
    pub expires: Instant,
}

impl<V> Timed<V> {
    /// `value`, obtained now, valid for `life` (capped at [`MAX_LIFETIME`]).
    pub fn new(value: V, life: Duration) -> Self {
        let now = Instant::now();
        Self {
            value,
            obtained: now,
            expires: now + life.min(MAX_LIFETIME),
        }
    }

    /// Same expiry, another value.
    pub fn map<W>(self, f: impl FnOnce(V) -> W) -> Timed<W> {
        Timed {
            value: f(self.value),
            obtained: self.obtained,
            expires: self.expires,
        }
    }
}

/// What a held token is good for at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Hand it out.
    Fresh,
    /// Hand it out, and refresh it in the background.
    Refresh,
    /// Too close to expiry (or past it): get a new one first.
    Expired,
}

/// How `t` stands at `now`: unusable within `min(30 s, life / 10)` of
/// expiry, refreshed in the background within `min(10 min, life / 2)`.
pub fn freshness<V>(t: &Timed<V>, now: Instant) -> Freshness {
    let life = t.expires.saturating_duration_since(t.obtained);
    let skew = (life / 10).min(MAX_SKEW);
    let window = (life / 2).min(MAX_REFRESH_WINDOW);
    if now + skew >= t.expires {
        Freshness::Expired
    } else if now + window >= t.expires {
        Freshness::Refresh
    } else {
        Freshness::Fresh
    }
}

/// How a [`TokenCache::get`] was answered, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// A new token was obtained (no usable one was held).
    Issued,
    /// A held token was replaced before it expired.
    Refreshed,
    /// The exchange failed.
    Failed,
}

type Flight<V> = Shared<BoxFuture<'static, Result<Timed<V>, CloudError>>>;

struct Slot<V> {
    held: Option<Timed<V>>,
    flight: Option<Flight<V>>,
    failed: Option<(Instant, CloudError)>,
}

impl<V> Default for Slot<V> {
    fn default() -> Self {
        Self {
            held: None,
            flight: None,
            failed: None,
        }
    }
}

/// Receives the outcome of every exchange the cache starts.
pub type OnExchange = Arc<dyn Fn(&str, Exchange) + Send + Sync>;

/// Tokens by key. Cheap to clone (shared state).
pub struct TokenCache<V> {
    slots: Arc<Mutex<HashMap<String, Slot<V>>>>,
    provider: ProviderId,
    /// How long one exchange may take, whoever waits for it.
    exchange_bound: Duration,
    on_exchange: Option<OnExchange>,
}

impl<V> std::fmt::Debug for TokenCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = self.slots.lock().map(|s| s.len()).unwrap_or(0);
        f.debug_struct("TokenCache")
            .field("provider", &self.provider)
            .field("keys", &keys)
            .finish_non_exhaustive()
    }
}

impl<V> Clone for TokenCache<V> {
    fn clone(&self) -> Self {
        Self {
            slots: self.slots.clone(),
            provider: self.provider,
            exchange_bound: self.exchange_bound,
            on_exchange: self.on_exchange.clone(),
        }
    }
}

/// Most keys held: one per identity and registry, so a few in practice; a
/// bound all the same, as registry hosts come from images.
pub const MAX_KEYS: usize = 1024;

impl<V: Clone + Send + Sync + 'static> TokenCache<V> {
    /// An empty cache for `provider`'s tokens; each exchange is cut off
    /// after `exchange_bound`.
    pub fn new(provider: ProviderId, exchange_bound: Duration) -> Self {
        Self {
            slots: Arc::new(Mutex::new(HashMap::new())),
            provider,
            exchange_bound,
            on_exchange: None,
        }
    }

    /// Tells `f` the key and outcome of every exchange.
    pub fn on_exchange(mut self, f: OnExchange) -> Self {
        self.on_exchange = Some(f);
        self
    }

    fn poisoned(&self) -> CloudError {
        CloudError::new(
            self.provider,
            ErrorKind::Config,
            "token cache",
            "its lock is poisoned by an earlier panic",
            "restart sigil",
        )
    }

    /// The token for `key`: a held one while it is usable (starting a
    /// background refresh near its end), else the result of the exchange
    /// in flight for `key`, started with `fetch` when there is none. The
    /// caller waits at most `wait`; the exchange itself goes on, within its
    /// own bound, for whoever asks next.
    pub async fn get<F, Fut>(&self, key: &str, wait: Duration, fetch: F) -> Result<V, CloudError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Timed<V>, CloudError>> + Send + 'static,
    {
        let flight = {
            let mut slots = self.slots.lock().map_err(|_| self.poisoned())?;
            if slots.len() >= MAX_KEYS && !slots.contains_key(key) {
                // Drop what can be fetched again; flights in progress finish.
                slots.retain(|_, s| s.flight.is_some());
            }
            let slot = slots.entry(key.to_string()).or_default();
            let now = Instant::now();
            let recently_failed = slot
                .failed
                .as_ref()
                .filter(|(at, _)| now.saturating_duration_since(*at) < FAILURE_HOLD)
                .map(|(_, e)| e.clone());
            match slot.held.as_ref().map(|t| (freshness(t, now), t)) {
                Some((Freshness::Fresh, t)) => return Ok(t.value.clone()),
                Some((Freshness::Refresh, t)) => {
                    let value = t.value.clone();
                    if slot.flight.is_none() && recently_failed.is_none() {
                        slot.flight = Some(self.start(key, fetch(), true));
                    }
                    return Ok(value);
                }
                Some((Freshness::Expired, _)) | None => {}
            }
            match (&slot.flight, recently_failed) {
                (Some(f), _) => f.clone(),
                (None, Some(e)) => return Err(e),
                (None, None) => {
                    let f = self.start(key, fetch(), slot.held.is_some());
                    slot.flight = Some(f.clone());
                    f
                }
            }
        };
        match tokio::time::timeout(wait, flight).await {
            Ok(result) => result.map(|t| t.value),
            Err(_) => Err(CloudError::new(
                self.provider,
                ErrorKind::Timeout,
                "waiting for a token",
                format!(
                    "no token within the {} ms left of this review's deadline (the exchange \
                     goes on and the next review gets its token)",
                    wait.as_millis()
                ),
                "check that the provider's endpoints answer quickly from sigil's pods; raise \
                 webhook.timeoutSeconds if they are just slow",
            )),
        }
    }

    /// Spawns the exchange: bounded, storing its result for `key` when done.
    fn start<Fut>(&self, key: &str, fetch: Fut, refresh: bool) -> Flight<V>
    where
        Fut: Future<Output = Result<Timed<V>, CloudError>> + Send + 'static,
    {
        let slots = self.slots.clone();
        let bound = self.exchange_bound;
        let provider = self.provider;
        let on_exchange = self.on_exchange.clone();
        let key = key.to_string();
        let task = tokio::spawn(async move {
            let result = match tokio::time::timeout(bound, fetch).await {
                Ok(r) => r,
                Err(_) => Err(CloudError::new(
                    provider,
                    ErrorKind::Timeout,
                    "token exchange",
                    format!("no answer within {} ms", bound.as_millis()),
                    "check that the provider's endpoints are reachable from sigil's pods",
                )),
            };
            if let Ok(mut slots) = slots.lock() {
                let slot = slots.entry(key.clone()).or_default();
                slot.flight = None;
                match &result {
                    Ok(t) => {
                        slot.held = Some(t.clone());
                        slot.failed = None;
                    }
                    Err(e) => slot.failed = Some((Instant::now(), e.clone())),
                }
            }
            if let Some(f) = &on_exchange {
                let outcome = match (&result, refresh) {
                    (Err(_), _) => Exchange::Failed,
                    (Ok(_), true) => Exchange::Refreshed,
                    (Ok(_), false) => Exchange::Issued,
                };
                f(&key, outcome);
            }
            result
        });
        async move {
            task.await.unwrap_or_else(|e| {
                Err(CloudError::new(
                    provider,
                    ErrorKind::Config,
                    "token exchange",
                    format!("the exchange task ended abnormally: {e}"),
                    "restart sigil",
                ))
            })
        }
        .boxed()
        .shared()
    }

    /// The held token for `key` and its remaining life, if any (for
    /// `sigil doctor`'s report; the token itself stays here).
    pub fn held_life(&self, key: &str) -> Option<Duration> {
        let slots = self.slots.lock().ok()?;
        let t = slots.get(key)?.held.as_ref()?;
        Some(t.expires.saturating_duration_since(Instant::now()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn timed(life_secs: u64) -> Timed<u32> {
        Timed::new(1, Duration::from_secs(life_secs))
    }

    #[test]
    fn a_token_is_fresh_then_refreshed_in_the_background_then_expired_before_its_end() {
        // 12 h (an ECR token): refresh in the last 10 minutes, unusable in the last 30 s.
        let t = timed(12 * 3600);
        let at = |secs_before_end: u64| t.expires - Duration::from_secs(secs_before_end);
        assert_eq!(freshness(&t, t.obtained), Freshness::Fresh);
        assert_eq!(freshness(&t, at(601)), Freshness::Fresh);
        assert_eq!(freshness(&t, at(600)), Freshness::Refresh);
        assert_eq!(freshness(&t, at(31)), Freshness::Refresh);
        assert_eq!(freshness(&t, at(30)), Freshness::Expired);
        assert_eq!(freshness(&t, t.expires), Freshness::Expired);
        assert_eq!(
            freshness(&t, t.expires + Duration::from_secs(1)),
            Freshness::Expired
        );
        // 2 minutes: refresh in the last minute, unusable in the last 12 s.
        let t = timed(120);
        assert_eq!(
            freshness(&t, t.expires - Duration::from_secs(61)),
            Freshness::Fresh
        );
        assert_eq!(
            freshness(&t, t.expires - Duration::from_secs(60)),
            Freshness::Refresh
        );
        assert_eq!(
            freshness(&t, t.expires - Duration::from_secs(12)),
            Freshness::Expired
        );
        // Already expired on arrival, or a zero life: never handed out.
        assert_eq!(freshness(&timed(0), Instant::now()), Freshness::Expired);
    }

    #[test]
    fn an_issuers_life_is_capped_at_twelve_hours() {
        let t = timed(10 * 365 * 24 * 3600);
        assert_eq!(t.expires - t.obtained, MAX_LIFETIME);
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_exchange_and_a_held_token_answers_the_next() {
        let cache: TokenCache<u32> = TokenCache::new(ProviderId::Ecr, Duration::from_secs(5));
        let calls = Arc::new(AtomicU32::new(0));
        let fetch = || {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(Timed::new(7, Duration::from_secs(3600)))
            }
        };
        let wait = Duration::from_secs(2);
        let (a, b, c) = tokio::join!(
            cache.get("k", wait, fetch),
            cache.get("k", wait, fetch),
            cache.get("k", wait, fetch)
        );
        assert_eq!((a, b, c), (Ok(7), Ok(7), Ok(7)));
        assert_eq!(cache.get("k", wait, fetch).await, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Another key is another token.
        assert_eq!(cache.get("other", wait, fetch).await, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_caller_gives_up_at_its_deadline_while_the_exchange_finishes_for_the_next() {
        let cache: TokenCache<u32> = TokenCache::new(ProviderId::Acr, Duration::from_secs(5));
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(Timed::new(9, Duration::from_secs(3600)))
        };
        let err = cache
            .get("k", Duration::from_millis(20), slow)
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert!(err.to_string().contains("acr"), "{err}");
        // The next caller joins the same flight (no second exchange).
        let never = || async { Err(CloudError::config(ProviderId::Acr, "x", "y", "z")) };
        assert_eq!(cache.get("k", Duration::from_secs(2), never).await, Ok(9));
    }

    #[tokio::test]
    async fn an_exchange_that_never_answers_is_cut_off_at_its_bound() {
        let cache: TokenCache<u32> = TokenCache::new(ProviderId::Gcp, Duration::from_millis(50));
        let hang = || std::future::pending::<Result<Timed<u32>, CloudError>>();
        let err = cache
            .get("k", Duration::from_secs(5), hang)
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert!(err.to_string().contains("within 50 ms"), "{err}");
    }

    #[tokio::test]
    async fn a_failure_answers_briefly_without_asking_the_provider_again() {
        let cache: TokenCache<u32> = TokenCache::new(ProviderId::Ecr, Duration::from_secs(5));
        let calls = Arc::new(AtomicU32::new(0));
        let failing = || {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(CloudError::config(
                    ProviderId::Ecr,
                    "AWS credentials",
                    "none found",
                    "set them",
                ))
            }
        };
        let wait = Duration::from_secs(1);
        assert!(cache.get("k", wait, failing).await.is_err());
        let again = cache.get("k", wait, failing).await.unwrap_err();
        assert_eq!(again.step, "AWS credentials");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_token_near_its_end_is_handed_out_while_one_refresh_runs_behind_it() {
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let seen = outcomes.clone();
        let cache: TokenCache<u32> = TokenCache::new(ProviderId::Ecr, Duration::from_secs(5))
            .on_exchange(Arc::new(move |_, o| seen.lock().unwrap().push(o)));
        // Life 10 s: refresh window 5 s, so it is in the window at once
        // after 5.1 s; build it with an `obtained` in the past instead.
        let now = Instant::now();
        let old = Timed {
            value: 1,
            obtained: now - Duration::from_secs(8),
            expires: now + Duration::from_secs(2),
        };
        cache.slots.lock().unwrap().insert(
            "k".into(),
            Slot {
                held: Some(old),
                ..Slot::default()
            },
        );
        let fresh = || async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(Timed::new(2, Duration::from_secs(3600)))
        };
        let wait = Duration::from_secs(1);
        assert_eq!(cache.get("k", wait, fresh).await, Ok(1));
        assert_eq!(cache.get("k", wait, fresh).await, Ok(1));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(cache.get("k", wait, fresh).await, Ok(2));
        assert_eq!(*outcomes.lock().unwrap(), vec![Exchange::Refreshed]);
        assert!(cache.held_life("k").unwrap() > Duration::from_secs(3500));
    }
}

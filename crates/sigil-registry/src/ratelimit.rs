//! Registry rate limits, from both sides: a request budget per registry
//! host that all of a process's sessions share (so a storm of new images
//! cannot spend a registry's quota, Docker Hub's anonymous pulls above all),
//! and a registry's own `429 Too Many Requests` with `Retry-After`, waited
//! out when the review's deadline leaves room and never beyond it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::auth::normalize_host;

/// Requests per minute per registry host, refilled continuously; a host
/// may spend its whole minute at once (a burst), then one request every
/// `60 s / N`.
#[derive(Debug)]
pub struct RequestBudget {
    default_per_minute: u32,
    per_host: HashMap<String, u32>,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

/// Most hosts a budget tracks; beyond it, the oldest are forgotten (and
/// start again with a full minute): hosts come from images.
pub const MAX_HOSTS: usize = 4096;

impl RequestBudget {
    /// `default_per_minute` for every host (0: no bound) and the hosts of
    /// `per_host` with their own (0: no bound for that host).
    pub fn new(default_per_minute: u32, per_host: Vec<(String, u32)>) -> Self {
        Self {
            default_per_minute,
            per_host: per_host
                .into_iter()
                .map(|(h, n)| (normalize_host(&h), n))
                .collect(),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The budget of `host`, requests per minute (0: none).
    pub fn per_minute(&self, host: &str) -> u32 {
        self.per_host
            .get(&normalize_host(host))
            .copied()
            .unwrap_or(self.default_per_minute)
    }

    /// Takes one request of `host`'s budget at `now`: `Ok(wait)` reserves
    /// it, to be sent after `wait` (zero when one is at hand); `Err(wait)`
    /// when the next one comes later than `within`, and nothing is taken.
    pub fn reserve(
        &self,
        host: &str,
        now: Instant,
        within: Duration,
    ) -> Result<Duration, Duration> {
        let per_minute = self.per_minute(host);
        if per_minute == 0 {
            return Ok(Duration::ZERO);
        }
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(Duration::ZERO);
        };
        if buckets.len() >= MAX_HOSTS && !buckets.contains_key(host) {
            buckets.clear();
        }
        let capacity = f64::from(per_minute);
        let rate = capacity / 60.0;
        let (tokens, at) = buckets
            .entry(normalize_host(host))
            .or_insert((capacity, now));
        let elapsed = now.saturating_duration_since(*at).as_secs_f64();
        *tokens = (*tokens + elapsed * rate).min(capacity);
        *at = now;
        let wait = if *tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - *tokens) / rate)
        };
        if wait > within {
            return Err(wait);
        }
        *tokens -= 1.0;
        Ok(wait)
    }
}

/// The wait a `Retry-After` header asks for at `now_unix` (seconds, or an
/// HTTP date); `None` when absent or unreadable.
pub fn retry_after(value: Option<&str>, now_unix: i64) -> Option<Duration> {
    let v = value?.trim();
    if let Ok(seconds) = v.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = time::PrimitiveDateTime::parse(
        v,
        time::macros::format_description!(
            "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
        ),
    )
    .ok()?
    .assume_utc()
    .unix_timestamp();
    Some(Duration::from_secs(
        u64::try_from(at - now_unix).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_host_spends_its_minute_then_waits_for_the_refill_and_never_past_the_deadline() {
        let budget = RequestBudget::new(0, vec![("docker.io".into(), 6)]);
        let t0 = Instant::now();
        let long = Duration::from_secs(30);
        for _ in 0..6 {
            assert_eq!(
                budget.reserve("index.docker.io", t0, long),
                Ok(Duration::ZERO)
            );
        }
        // The seventh waits for a refill: one every 10 s.
        assert_eq!(
            budget.reserve("index.docker.io", t0, long),
            Ok(Duration::from_secs(10))
        );
        // The eighth would wait 20 s: more than a 15 s deadline; nothing taken.
        assert_eq!(
            budget.reserve("index.docker.io", t0, Duration::from_secs(15)),
            Err(Duration::from_secs(20))
        );
        assert_eq!(
            budget.reserve("index.docker.io", t0 + Duration::from_secs(20), long),
            Ok(Duration::ZERO)
        );
        // Other hosts: the default, here no bound.
        for _ in 0..100 {
            assert_eq!(budget.reserve("ghcr.io", t0, long), Ok(Duration::ZERO));
        }
        assert_eq!(budget.per_minute("registry-1.docker.io"), 6);
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        assert_eq!(retry_after(Some(" 7 "), 0), Some(Duration::from_secs(7)));
        // 2026-01-01T00:00:10Z, ten seconds from now.
        assert_eq!(
            retry_after(Some("Thu, 01 Jan 2026 00:00:10 GMT"), 1_767_225_600),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            retry_after(Some("Thu, 01 Jan 2026 00:00:00 GMT"), 1_767_225_700),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(Some("soon"), 0), None);
        assert_eq!(retry_after(None, 0), None);
    }
}

//! What the fakes issued and counted: credentials and tokens with their
//! expiry (a front accepts only what was issued and has not expired), the
//! counters the tests read, and which services are switched off.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use p256::ecdsa::VerifyingKey;

use crate::Config;

/// What a token was issued as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The password of ECR's `AWS` user.
    EcrPassword,
    /// A Google access token (metadata server, STS, impersonation).
    GoogleAccess,
    /// An Entra ID (or Azure IMDS) token for an audience.
    Entra(String),
    /// An ACR refresh token for a registry host.
    AcrRefresh(String),
    /// A registry's own bearer token (GCP and ACR fronts) for a host.
    Registry(String),
}

/// Temporary AWS credentials.
#[derive(Debug, Clone)]
pub struct AwsCredential {
    /// Its secret key.
    pub secret: String,
    /// Its session token (`None` for static keys).
    pub session: Option<String>,
    /// When it expires (Unix seconds).
    pub expires: i64,
}

/// The fakes' shared state.
pub struct State {
    /// The configuration.
    pub config: Config,
    /// The API server's keys.
    pub keys: Vec<VerifyingKey>,
    aws: Mutex<HashMap<String, AwsCredential>>,
    tokens: Mutex<HashMap<String, (Kind, i64)>>,
    counts: Mutex<BTreeMap<String, u64>>,
    down: Mutex<BTreeSet<String>>,
    serial: AtomicU64,
}

/// Unix seconds now.
pub fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

impl State {
    /// Empty state for `config`.
    pub fn new(config: Config, keys: Vec<VerifyingKey>) -> Self {
        let mut aws = HashMap::new();
        for (id, secret) in &config.static_aws_keys {
            aws.insert(
                id.clone(),
                AwsCredential {
                    secret: secret.clone(),
                    session: None,
                    expires: i64::MAX,
                },
            );
        }
        Self {
            config,
            keys,
            aws: Mutex::new(aws),
            tokens: Mutex::new(HashMap::new()),
            counts: Mutex::new(BTreeMap::new()),
            down: Mutex::new(BTreeSet::new()),
            serial: AtomicU64::new(1),
        }
    }

    /// A fresh value with `prefix`, unique in this process.
    pub fn fresh(&self, prefix: &str) -> String {
        let n = self.serial.fetch_add(1, Ordering::Relaxed);
        let nanos = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
        format!(
            "{prefix}{n:06}x{:x}",
            nanos as u64 ^ (n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        )
    }

    /// Adds one to `key`.
    pub fn count(&self, key: &str) {
        if let Ok(mut c) = self.counts.lock() {
            *c.entry(key.to_string()).or_insert(0) += 1;
        }
    }

    /// Every counter.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Whether `service` is switched off.
    pub fn is_down(&self, service: &str) -> bool {
        self.down
            .lock()
            .map(|d| d.contains(service))
            .unwrap_or(false)
    }

    /// Switches `service` off or on.
    pub fn set_down(&self, service: &str, down: bool) {
        if let Ok(mut d) = self.down.lock() {
            if down {
                d.insert(service.to_string());
            } else {
                d.remove(service);
            }
        }
    }

    /// Issues temporary AWS credentials: (id, secret, session, expiry).
    pub fn issue_aws(&self, life: i64) -> (String, AwsCredential) {
        let id = self.fresh("ASIAFAKE").to_ascii_uppercase();
        let credential = AwsCredential {
            secret: self.fresh("secret-"),
            session: Some(self.fresh("session-")),
            expires: now() + life,
        };
        if let Ok(mut aws) = self.aws.lock() {
            aws.insert(id.clone(), credential.clone());
        }
        (id, credential)
    }

    /// The credential of access key `id`, while it is valid.
    pub fn aws(&self, id: &str) -> Option<AwsCredential> {
        let aws = self.aws.lock().ok()?;
        aws.get(id).filter(|c| c.expires > now()).cloned()
    }

    /// Issues a token of `kind` valid `life` seconds.
    pub fn issue(&self, kind: Kind, prefix: &str, life: i64) -> (String, i64) {
        let token = self.fresh(prefix);
        let expires = now() + life;
        if let Ok(mut t) = self.tokens.lock() {
            t.insert(token.clone(), (kind, expires));
        }
        (token, expires)
    }

    /// Records `token` (made elsewhere, e.g. a JWT) as issued.
    pub fn record(&self, token: &str, kind: Kind, expires: i64) {
        if let Ok(mut t) = self.tokens.lock() {
            t.insert(token.to_string(), (kind, expires));
        }
    }

    /// What `token` was issued as, while it is valid.
    pub fn token(&self, token: &str) -> Option<Kind> {
        let t = self.tokens.lock().ok()?;
        t.get(token)
            .filter(|(_, expires)| *expires > now())
            .map(|(k, _)| k.clone())
    }

    /// Whether `token` was issued as `kind` and has expired.
    pub fn expired(&self, token: &str) -> bool {
        self.tokens
            .lock()
            .ok()
            .and_then(|t| t.get(token).map(|(_, e)| *e <= now()))
            .unwrap_or(false)
    }
}

//! The shared cache: discovery results ([`Discovery`]) kept in one Redis or
//! Valkey that every webhook replica and the audit read and write, so that
//! signatures one process fetched are warm in all of them.
//!
//! Nothing read from it is trusted. An entry's name is an HMAC-SHA256 of
//! what it is for (credential identity, repository, digest, wanted kind, tag
//! prefix) under a key only sigil's pods hold, so the server never sees a
//! repository or credential identity and several clusters with different
//! keys can share one server. An entry's value carries an HMAC-SHA256 over
//! its name, its expiry and its content: one written by anyone else, moved
//! from another name, or kept past its expiry is ignored (counted as
//! `rejected`) and the registry is asked instead. What an entry holds is
//! signature material, which the judge verifies again as if it came from
//! the registry.
//!
//! Slow or down never fails an admission: a read waits at most
//! [`SharedCacheConfig::read_wait`], a write runs in the background for at
//! most [`SharedCacheConfig::write_wait`], and after a failure the cache is
//! not asked for a while (doubling up to [`MAX_BACKOFF`]), so a dead server
//! costs one wait per back-off period, not one per admission. Replies are
//! read up to [`SharedCacheConfig::max_value_bytes`].

mod resp;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use self::resp::{Connection, Endpoint, Reply};
use crate::client::RequestObserver;
pub use crate::client::SharedCacheEvent;
use crate::discover::{Candidate, CandidateFormat, Discovery, Material, MaterialKey, Want};

/// The shortest MAC key accepted, in bytes.
pub const MIN_KEY_BYTES: usize = 32;
/// The longest pause after failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Connections kept open to the server; more concurrent requests wait for one.
const POOL: usize = 4;
/// Writes in flight at once; more are dropped (the next miss writes again).
const MAX_WRITES: usize = 16;
/// Clock difference between pods tolerated when an entry's expiry is
/// checked against the longest lifetime an entry may have.
const CLOCK_SKEW: Duration = Duration::from_secs(5);
/// Marks the value layout: magic, then the MAC, then the JSON content.
const MAGIC: &[u8; 4] = b"sgl1";
const TAG_LEN: usize = 32;
const NAME_PREFIX: &str = "sigil:material:v1:";

/// How to reach the shared cache and the key that signs its entries.
#[derive(Clone)]
pub struct SharedCacheConfig {
    /// `redis://[user[:password]@]host[:port][/db]`, or `rediss://` for TLS.
    pub url: String,
    /// The password (`AUTH`), overriding one in the URL.
    pub password: Option<String>,
    /// The HMAC key, at least [`MIN_KEY_BYTES`] bytes, the same in every
    /// process that shares entries.
    pub mac_key: Vec<u8>,
    /// PEM CA certificates trusted for `rediss://` besides the web roots
    /// (empty: the web roots only).
    pub ca_pem: Vec<u8>,
    /// The longest a read may take before the registry is asked instead.
    pub read_wait: Duration,
    /// The longest a background write may take.
    pub write_wait: Duration,
    /// The pause after a first failure (doubled after each further one).
    pub backoff: Duration,
    /// The largest entry written or read.
    pub max_value_bytes: usize,
}

impl SharedCacheConfig {
    /// The defaults for `url` and `mac_key`: reads wait 25 ms, writes
    /// 250 ms, a 1 s pause after a failure, entries up to 1 MiB.
    pub fn new(url: impl Into<String>, mac_key: Vec<u8>) -> Self {
        Self {
            url: url.into(),
            password: None,
            mac_key,
            ca_pem: Vec::new(),
            read_wait: Duration::from_millis(25),
            write_wait: Duration::from_millis(250),
            backoff: Duration::from_secs(1),
            max_value_bytes: 1 << 20,
        }
    }
}

impl fmt::Debug for SharedCacheConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Neither the key nor the password.
        f.debug_struct("SharedCacheConfig")
            .field("url", &redacted(&self.url))
            .field("read_wait", &self.read_wait)
            .field("write_wait", &self.write_wait)
            .finish_non_exhaustive()
    }
}

/// Why the shared cache could not be set up or asked.
#[derive(Debug, thiserror::Error)]
pub enum SharedCacheError {
    /// The URL or another setting is invalid.
    #[error("{0}")]
    Config(String),
    /// The MAC key is unusable (too short).
    #[error("{0}")]
    Key(String),
    /// The CA certificates for `rediss://` are unusable.
    #[error("{0}")]
    CaFile(String),
    /// The server could not be reached or the connection broke.
    #[error("connection failed: {0}")]
    Connect(String),
    /// The TLS handshake failed.
    #[error("TLS handshake failed: {0}; check the server's certificate and the CA file")]
    Tls(String),
    /// The server refused the password.
    #[error("the server refused the password: {0}; check the password file")]
    Auth(String),
    /// The server answered a command with an error.
    #[error("the server answered with an error: {0}")]
    Server(String),
    /// The server's answer is not RESP as sigil reads it.
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// A reply was larger than the bound.
    #[error("a reply is larger than {limit} bytes")]
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    /// No answer within the bound.
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
}

impl SharedCacheError {
    /// A stable reason string for logs and tests.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Config(_) => "config",
            Self::Key(_) => "key",
            Self::CaFile(_) => "ca-file",
            Self::Connect(_) => "connect",
            Self::Tls(_) => "tls",
            Self::Auth(_) => "auth",
            Self::Server(_) => "server",
            Self::Protocol(_) => "protocol",
            Self::TooLarge { .. } => "too-large",
            Self::Timeout(_) => "timeout",
        }
    }
}

/// The shared cache client (cheap to clone; clones share connections).
#[derive(Clone)]
pub struct SharedCache {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: Endpoint,
    /// The URL without its password, for messages.
    shown: String,
    mac: hmac::Key,
    read_wait: Duration,
    write_wait: Duration,
    max_value: usize,
    pool: Vec<tokio::sync::Mutex<Option<Connection>>>,
    next: AtomicUsize,
    backoff: Mutex<Backoff>,
    first_backoff: Duration,
    writes: Arc<Semaphore>,
    observer: Option<Arc<dyn RequestObserver>>,
}

#[derive(Default)]
struct Backoff {
    until: Option<Instant>,
    pause: Duration,
}

impl fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedCache")
            .field("url", &self.inner.shown)
            .finish_non_exhaustive()
    }
}

impl SharedCache {
    /// A client for the server `config` names; nothing is contacted yet.
    /// Uses are reported to `observer`.
    pub fn new(
        config: SharedCacheConfig,
        observer: Option<Arc<dyn RequestObserver>>,
    ) -> Result<Self, SharedCacheError> {
        if config.mac_key.len() < MIN_KEY_BYTES {
            return Err(SharedCacheError::Key(format!(
                "the MAC key has {} bytes; it needs at least {MIN_KEY_BYTES} random bytes (e.g. `head -c 32 /dev/urandom | base64`)",
                config.mac_key.len()
            )));
        }
        let endpoint = endpoint(&config)?;
        Ok(Self {
            inner: Arc::new(Inner {
                endpoint,
                shown: redacted(&config.url),
                mac: hmac::Key::new(hmac::HMAC_SHA256, &config.mac_key),
                read_wait: config.read_wait,
                write_wait: config.write_wait,
                max_value: config.max_value_bytes,
                pool: (0..POOL).map(|_| tokio::sync::Mutex::new(None)).collect(),
                next: AtomicUsize::new(0),
                backoff: Mutex::new(Backoff::default()),
                first_backoff: config.backoff.max(Duration::from_millis(1)),
                writes: Arc::new(Semaphore::new(MAX_WRITES)),
                observer,
            }),
        })
    }

    /// The name of `key`'s entry on the server: a MAC of its parts, so the
    /// server learns nothing of them.
    pub fn entry_name(&self, key: &MaterialKey) -> String {
        let mut ctx = hmac::Context::with_key(&self.inner.mac);
        ctx.update(b"sigil/shared-cache/name/v1");
        let want = match &key.want {
            Want::Signatures => "signatures".to_string(),
            Want::Attestations(p) => format!("attestations:{p}"),
        };
        let digest = key.digest.to_string();
        for part in [
            key.credentials.as_bytes(),
            key.repository.as_bytes(),
            digest.as_bytes(),
            want.as_bytes(),
            key.tag_prefix.as_bytes(),
        ] {
            // Length-prefixed: no two different keys share a message.
            ctx.update(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
            ctx.update(part);
        }
        format!("{NAME_PREFIX}{}", hex::encode(ctx.sign().as_ref()))
    }

    /// `key`'s discovery and how long it may still be kept, when the server
    /// holds a valid entry for it that expires within `max_life` (the local
    /// cache's TTL); `None` on a miss, an invalid entry, a failure, or
    /// while pausing after failures.
    pub async fn get(
        &self,
        key: &MaterialKey,
        max_life: Duration,
    ) -> Option<(Discovery, Duration)> {
        if !self.inner.available() {
            self.inner.heard(SharedCacheEvent::Skipped);
            return None;
        }
        let name = self.entry_name(key);
        let reply = self
            .inner
            .run(&[b"GET", name.as_bytes()], self.inner.read_wait)
            .await;
        match reply {
            Ok(Reply::Bulk(None)) => {
                self.inner.succeeded();
                self.inner.heard(SharedCacheEvent::Miss);
                None
            }
            Ok(Reply::Bulk(Some(value))) => {
                self.inner.succeeded();
                match self.open(&name, &value, max_life) {
                    Ok(found) => {
                        self.inner.heard(SharedCacheEvent::Hit);
                        Some(found)
                    }
                    Err(why) => {
                        tracing::debug!(entry = %name, why, "shared cache entry ignored");
                        self.inner.heard(SharedCacheEvent::Rejected);
                        None
                    }
                }
            }
            Ok(other) => {
                self.inner.failed(&reply_error("GET", &other));
                self.inner.heard(SharedCacheEvent::Error);
                None
            }
            Err(e) => {
                self.inner.failed(&e);
                self.inner.heard(SharedCacheEvent::Error);
                None
            }
        }
    }

    /// Writes `found` as `key`'s entry, expiring after `ttl`, in the
    /// background (bounded by the write wait); dropped while pausing after
    /// failures or when too many writes are in flight.
    pub fn put(&self, key: &MaterialKey, found: &Discovery, ttl: Duration) {
        if !self.inner.available() {
            self.inner.heard(SharedCacheEvent::WriteSkipped);
            return;
        }
        let Ok(permit) = self.inner.writes.clone().try_acquire_owned() else {
            self.inner.heard(SharedCacheEvent::WriteSkipped);
            return;
        };
        let name = self.entry_name(key);
        let Some(value) = self.seal(&name, found, ttl) else {
            self.inner.heard(SharedCacheEvent::WriteSkipped);
            return;
        };
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = inner.write(&name, &value, ttl).await;
        });
    }

    /// Writes `found` as `key`'s entry, expiring after `ttl`, and waits for
    /// the server's answer (bounded by the write wait).
    pub async fn store(
        &self,
        key: &MaterialKey,
        found: &Discovery,
        ttl: Duration,
    ) -> Result<(), SharedCacheError> {
        let name = self.entry_name(key);
        let value = self.seal(&name, found, ttl).ok_or_else(|| {
            SharedCacheError::Config(format!(
                "the entry is larger than {} bytes",
                self.inner.max_value
            ))
        })?;
        self.inner.write(&name, &value, ttl).await
    }

    /// The entry's value: magic, MAC, then the content with its expiry;
    /// `None` when larger than the bound.
    fn seal(&self, name: &str, found: &Discovery, ttl: Duration) -> Option<Vec<u8>> {
        let expires_ms = unix_ms(SystemTime::now() + ttl);
        let content = serde_json::to_vec(&Entry::from_discovery(found, expires_ms)).ok()?;
        if MAGIC.len() + TAG_LEN + content.len() > self.inner.max_value {
            return None;
        }
        let tag = self.value_tag(name, &content);
        let mut value = Vec::with_capacity(MAGIC.len() + TAG_LEN + content.len());
        value.extend_from_slice(MAGIC);
        value.extend_from_slice(tag.as_ref());
        value.extend_from_slice(&content);
        Some(value)
    }

    /// The discovery in `value` read from entry `name`, and how long it may
    /// be kept, or why it is not accepted.
    fn open(
        &self,
        name: &str,
        value: &[u8],
        max_life: Duration,
    ) -> Result<(Discovery, Duration), &'static str> {
        let rest = value.strip_prefix(MAGIC).ok_or("not a sigil entry")?;
        if rest.len() < TAG_LEN {
            return Err("too short for a MAC");
        }
        let (tag, content) = rest.split_at(TAG_LEN);
        hmac::verify(&self.inner.mac, &value_message(name, content), tag).map_err(
            |_| "MAC mismatch (written without this cluster's key, or for another entry)",
        )?;
        let entry: Entry = serde_json::from_slice(content).map_err(|_| "content unreadable")?;
        let now = unix_ms(SystemTime::now());
        let left = entry
            .expires_ms
            .checked_sub(now)
            .filter(|left| *left > 0)
            .ok_or("expired")?;
        let left = Duration::from_millis(left);
        if left > max_life + CLOCK_SKEW {
            return Err("expires later than an entry may live");
        }
        Ok((entry.into_discovery(), left.min(max_life)))
    }

    fn value_tag(&self, name: &str, content: &[u8]) -> hmac::Tag {
        hmac::sign(&self.inner.mac, &value_message(name, content))
    }
}

/// What a value's MAC covers: its domain, the entry's name, the content.
fn value_message(name: &str, content: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(32 + name.len() + content.len());
    m.extend_from_slice(b"sigil/shared-cache/value/v1\0");
    m.extend_from_slice(name.as_bytes());
    m.push(0);
    m.extend_from_slice(content);
    m
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn reply_error(command: &str, reply: &Reply) -> SharedCacheError {
    match reply {
        Reply::Error(e) => SharedCacheError::Server(format!("{command}: {e}")),
        other => resp::unexpected(command, other),
    }
}

impl Inner {
    fn heard(&self, event: SharedCacheEvent) {
        if let Some(o) = &self.observer {
            o.shared_cache(event);
        }
    }

    fn available(&self) -> bool {
        let Ok(mut b) = self.backoff.lock() else {
            return false;
        };
        match b.until {
            Some(until) if Instant::now() < until => false,
            Some(_) => {
                // The pause is over: the next request tries again; a
                // failure doubles the pause.
                b.until = None;
                true
            }
            None => true,
        }
    }

    fn succeeded(&self) {
        if let Ok(mut b) = self.backoff.lock() {
            *b = Backoff::default();
        }
    }

    fn failed(&self, error: &SharedCacheError) {
        let Ok(mut b) = self.backoff.lock() else {
            return;
        };
        if b.until.is_some_and(|u| Instant::now() < u) {
            // Requests in flight when the first failed: one pause.
            return;
        }
        b.pause = if b.pause.is_zero() {
            self.first_backoff
        } else {
            (b.pause * 2).min(MAX_BACKOFF)
        };
        b.until = Some(Instant::now() + b.pause);
        tracing::warn!(
            server = %self.shown,
            reason = error.reason(),
            pause_ms = u64::try_from(b.pause.as_millis()).unwrap_or(u64::MAX),
            "shared cache at {} failed: {error}; signatures are read from the registries until it answers again (check that the server is up and reachable from sigil's pods)",
            self.shown,
        );
    }

    async fn write(&self, name: &str, value: &[u8], ttl: Duration) -> Result<(), SharedCacheError> {
        let px = u64::try_from(ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
            .to_string();
        let reply = self
            .run(
                &[b"SET", name.as_bytes(), value, b"PX", px.as_bytes()],
                self.write_wait,
            )
            .await;
        let result = match reply {
            Ok(Reply::Status(_)) => Ok(()),
            Ok(other) => Err(reply_error("SET", &other)),
            Err(e) => Err(e),
        };
        match &result {
            Ok(()) => {
                self.succeeded();
                self.heard(SharedCacheEvent::Stored);
            }
            Err(e) => {
                self.failed(e);
                self.heard(SharedCacheEvent::WriteError);
            }
        }
        result
    }

    /// Runs one command within `wait`: on a pooled connection, or a new one
    /// (a pooled connection the server closed is replaced once). A
    /// connection whose exchange failed or was cut short by the wait is
    /// dropped, never reused mid-reply.
    async fn run(&self, args: &[&[u8]], wait: Duration) -> Result<Reply, SharedCacheError> {
        let exchange = async {
            let mut slot = self.slot().await?;
            let reused = slot.take();
            let was_reused = reused.is_some();
            let mut conn = match reused {
                Some(c) => c,
                None => Connection::open(&self.endpoint, self.max_value).await?,
            };
            let reply = match conn.call(args, self.max_value).await {
                Err(SharedCacheError::Connect(_)) if was_reused => {
                    conn = Connection::open(&self.endpoint, self.max_value).await?;
                    conn.call(args, self.max_value).await?
                }
                other => other?,
            };
            *slot = Some(conn);
            Ok(reply)
        };
        tokio::time::timeout(wait, exchange)
            .await
            .map_err(|_| SharedCacheError::Timeout(wait))?
    }

    /// A free pooled connection slot, else the next one in turn.
    async fn slot(
        &self,
    ) -> Result<tokio::sync::MutexGuard<'_, Option<Connection>>, SharedCacheError> {
        for s in &self.pool {
            if let Ok(guard) = s.try_lock() {
                return Ok(guard);
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % POOL;
        match self.pool.get(i) {
            Some(s) => Ok(s.lock().await),
            None => Err(SharedCacheError::Config("no connection slot".into())),
        }
    }
}

/// The server and login `config` names.
fn endpoint(config: &SharedCacheConfig) -> Result<Endpoint, SharedCacheError> {
    let bad = |why: String| {
        SharedCacheError::Config(format!(
            "`{}` {why}; expected redis://[user[:password]@]host[:port][/db] or rediss://...",
            redacted(&config.url)
        ))
    };
    let url = url::Url::parse(&config.url).map_err(|e| bad(format!("is not a URL ({e})")))?;
    let tls = match url.scheme() {
        "redis" => false,
        "rediss" => true,
        other => return Err(bad(format!("has scheme `{other}`"))),
    };
    let host = match url.host() {
        Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err(bad("names no host".into())),
    };
    let db = match url.path().trim_start_matches('/') {
        "" => 0,
        n => n
            .parse::<u32>()
            .map_err(|_| bad(format!("has path `/{n}`, not a database number")))?,
    };
    let username = Some(percent_decoded(url.username())).filter(|u| !u.is_empty());
    let password = config
        .password
        .clone()
        .or_else(|| url.password().map(percent_decoded));
    let tls = if tls {
        let name = ServerName::try_from(host.clone())
            .map_err(|_| bad(format!("host `{host}` is not a TLS server name")))?;
        Some((resp::tls_connector(&config.ca_pem)?, name))
    } else {
        None
    };
    Ok(Endpoint {
        host,
        port: url.port().unwrap_or(6379),
        tls,
        username,
        password,
        db,
    })
}

/// `s` with `%XX` escapes decoded (URL user info).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes.get(i), hex) {
            (Some(b'%'), Some(b)) => {
                out.push(b);
                i += 3;
            }
            (Some(b), _) => {
                out.push(*b);
                i += 1;
            }
            (None, _) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `url` without a password, for messages.
fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("REDACTED"));
            }
            u.to_string()
        }
        Err(_) => "(not a URL)".to_string(),
    }
}

/// An entry's content as stored: the discovery (only results the local
/// cache keeps, so never an error nor an unusable candidate) and when it
/// expires, in Unix milliseconds.
#[derive(Serialize, Deserialize)]
struct Entry {
    expires_ms: u64,
    round_trips: u32,
    candidates: Vec<StoredCandidate>,
    looked_in: Vec<String>,
    skipped: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct StoredCandidate {
    format: StoredFormat,
    location: String,
    material: StoredMaterial,
}

#[derive(Serialize, Deserialize)]
enum StoredFormat {
    BundleReferrer,
    BundleFallbackTag,
    LegacySignature,
    LegacyAttestation,
}

/// Bytes as base64.
#[derive(Serialize, Deserialize)]
enum StoredMaterial {
    Bundle(String),
    SimpleSigning {
        payload: String,
        annotations: BTreeMap<String, String>,
    },
    Dsse {
        envelope: String,
        annotations: BTreeMap<String, String>,
    },
    Unusable(String),
}

impl Entry {
    fn from_discovery(found: &Discovery, expires_ms: u64) -> Self {
        Self {
            expires_ms,
            round_trips: found.round_trips,
            candidates: found
                .candidates
                .iter()
                .map(|c| StoredCandidate {
                    format: match c.format {
                        CandidateFormat::BundleReferrer => StoredFormat::BundleReferrer,
                        CandidateFormat::BundleFallbackTag => StoredFormat::BundleFallbackTag,
                        CandidateFormat::LegacySignature => StoredFormat::LegacySignature,
                        CandidateFormat::LegacyAttestation => StoredFormat::LegacyAttestation,
                    },
                    location: c.location.clone(),
                    material: match &c.material {
                        Material::Bundle(b) => StoredMaterial::Bundle(B64.encode(b)),
                        Material::SimpleSigning {
                            payload,
                            annotations,
                        } => StoredMaterial::SimpleSigning {
                            payload: B64.encode(payload),
                            annotations: annotations.clone(),
                        },
                        Material::Dsse {
                            envelope,
                            annotations,
                        } => StoredMaterial::Dsse {
                            envelope: B64.encode(envelope),
                            annotations: annotations.clone(),
                        },
                        Material::Unusable(why) => StoredMaterial::Unusable(why.clone()),
                    },
                })
                .collect(),
            looked_in: found.looked_in.clone(),
            skipped: found.skipped.clone(),
        }
    }

    fn into_discovery(self) -> Discovery {
        // Material whose base64 does not decode becomes an unusable
        // candidate: the verdict names it rather than trusting it.
        let bytes = |s: &str| {
            B64.decode(s)
                .map_err(|_| "material is not base64".to_string())
        };
        Discovery {
            candidates: self
                .candidates
                .into_iter()
                .map(|c| Candidate {
                    format: match c.format {
                        StoredFormat::BundleReferrer => CandidateFormat::BundleReferrer,
                        StoredFormat::BundleFallbackTag => CandidateFormat::BundleFallbackTag,
                        StoredFormat::LegacySignature => CandidateFormat::LegacySignature,
                        StoredFormat::LegacyAttestation => CandidateFormat::LegacyAttestation,
                    },
                    location: c.location,
                    material: match c.material {
                        StoredMaterial::Bundle(b) => {
                            bytes(&b).map_or_else(Material::Unusable, Material::Bundle)
                        }
                        StoredMaterial::SimpleSigning {
                            payload,
                            annotations,
                        } => bytes(&payload).map_or_else(Material::Unusable, |payload| {
                            Material::SimpleSigning {
                                payload,
                                annotations,
                            }
                        }),
                        StoredMaterial::Dsse {
                            envelope,
                            annotations,
                        } => bytes(&envelope).map_or_else(Material::Unusable, |envelope| {
                            Material::Dsse {
                                envelope,
                                annotations,
                            }
                        }),
                        StoredMaterial::Unusable(why) => Material::Unusable(why),
                    },
                })
                .collect(),
            looked_in: self.looked_in,
            skipped: self.skipped,
            errors: Vec::new(),
            round_trips: self.round_trips,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Digest, Repository};

    fn cache(key: &[u8]) -> SharedCache {
        SharedCache::new(
            SharedCacheConfig::new("redis://127.0.0.1:1", key.to_vec()),
            None,
        )
        .unwrap()
    }

    fn key(digest_byte: char) -> MaterialKey {
        MaterialKey::new(
            "kube:0123",
            &Repository::parse("registry.example/team/app").unwrap(),
            &Digest::parse(&format!("sha256:{}", digest_byte.to_string().repeat(64))).unwrap(),
            &Want::Signatures,
            "",
        )
    }

    fn discovery() -> Discovery {
        Discovery {
            candidates: vec![Candidate {
                format: CandidateFormat::LegacySignature,
                location: "registry.example/team/app:sha256-aa.sig layer 0".into(),
                material: Material::SimpleSigning {
                    payload: b"{\"critical\":{}}".to_vec(),
                    annotations: BTreeMap::from([(
                        "dev.cosignproject.cosign/signature".into(),
                        "MEUC".into(),
                    )]),
                },
            }],
            looked_in: vec!["registry.example/team/app".into()],
            round_trips: 2,
            ..Discovery::default()
        }
    }

    const TTL: Duration = Duration::from_secs(30);

    #[test]
    fn names_reveal_nothing_of_the_key_and_differ_between_mac_keys() {
        let a = cache(&[1; 32]);
        let name = a.entry_name(&key('a'));
        assert!(name.starts_with(NAME_PREFIX));
        for clear in ["registry.example", "team/app", "kube:0123", "aaaa"] {
            assert!(!name.contains(clear), "{name} shows {clear}");
        }
        assert_ne!(name, a.entry_name(&key('b')));
        assert_ne!(name, cache(&[2; 32]).entry_name(&key('a')));
    }

    #[test]
    fn a_sealed_entry_opens_under_its_own_name_only() {
        let a = cache(&[1; 32]);
        let name = a.entry_name(&key('a'));
        let value = a.seal(&name, &discovery(), TTL).unwrap();
        let (found, left) = a.open(&name, &value, TTL).unwrap();
        assert_eq!(found.candidates.len(), 1);
        assert!(
            matches!(&found.candidates[0].material, Material::SimpleSigning { payload, .. } if payload == b"{\"critical\":{}}")
        );
        assert_eq!(found.round_trips, 2);
        assert!(left <= TTL);
        let other = a.entry_name(&key('b'));
        assert!(
            a.open(&other, &value, TTL).is_err(),
            "moved to another name"
        );
        assert!(
            cache(&[2; 32]).open(&name, &value, TTL).is_err(),
            "another cluster's key"
        );
    }

    #[test]
    fn a_changed_byte_anywhere_is_rejected() {
        let a = cache(&[1; 32]);
        let name = a.entry_name(&key('a'));
        let value = a.seal(&name, &discovery(), TTL).unwrap();
        for i in 0..value.len() {
            let mut v = value.clone();
            v[i] ^= 0x01;
            assert!(a.open(&name, &v, TTL).is_err(), "byte {i}");
        }
        for cut in [0, 3, 4, 20, 36, value.len() - 1] {
            assert!(a.open(&name, &value[..cut], TTL).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn entries_living_longer_than_the_local_ttl_are_rejected() {
        let a = cache(&[1; 32]);
        let name = a.entry_name(&key('a'));
        let value = a
            .seal(&name, &discovery(), Duration::from_secs(3600))
            .unwrap();
        assert_eq!(
            a.open(&name, &value, TTL).unwrap_err(),
            "expires later than an entry may live"
        );
        let expired = a.seal(&name, &discovery(), Duration::ZERO).unwrap();
        assert_eq!(a.open(&name, &expired, TTL).unwrap_err(), "expired");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_values_are_rejected_without_panicking(
            value in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            magic in proptest::bool::ANY,
        ) {
            let a = cache(&[1; 32]);
            let value = if magic { [&MAGIC[..], &value].concat() } else { value };
            proptest::prop_assert!(a.open("n", &value, TTL).is_err());
        }
    }

    #[test]
    fn entries_over_the_size_bound_are_not_written() {
        let mut config = SharedCacheConfig::new("redis://127.0.0.1:1", vec![1; 32]);
        config.max_value_bytes = 64;
        let small = SharedCache::new(config, None).unwrap();
        assert!(small.seal("n", &discovery(), TTL).is_none());
    }

    #[test]
    fn settings_are_checked_and_messages_hide_the_password() {
        let short = SharedCache::new(SharedCacheConfig::new("redis://h", vec![1; 16]), None);
        assert!(short.unwrap_err().to_string().contains("at least 32"));
        for bad in ["http://h:6379", "redis://", "redis://h/x", "not a url"] {
            let err = SharedCache::new(SharedCacheConfig::new(bad, vec![1; 32]), None).unwrap_err();
            assert!(
                err.to_string().contains("expected redis://"),
                "{bad}: {err}"
            );
        }
        let err = SharedCache::new(
            SharedCacheConfig::new("http://u:s3cret@h", vec![1; 32]),
            None,
        )
        .unwrap_err();
        assert!(!err.to_string().contains("s3cret"), "{err}");
        let ok = SharedCache::new(
            SharedCacheConfig::new("rediss://u:p%40ss@cache.example:6380/2", vec![1; 32]),
            None,
        )
        .unwrap();
        let e = &ok.inner.endpoint;
        assert_eq!((e.host.as_str(), e.port, e.db), ("cache.example", 6380, 2));
        assert_eq!(e.password.as_deref(), Some("p@ss"));
        assert_eq!(e.username.as_deref(), Some("u"));
        assert!(e.tls.is_some());
        assert!(!format!("{ok:?}").contains("p%40ss"));
    }
}

//! A minimal TUF client (the update workflow of the TUF specification,
//! section 5, without delegations) that fetches one target — Sigstore's
//! `trusted_root.json` — from a mirror over HTTP or from a serialized
//! repository (a gzipped tar).
//!
//! Why not a crate: `tough` (the maintained Rust TUF client) was set aside
//! because it depends on aws-lc-rs while sigil used ring; sigil now uses
//! aws-lc-rs too, so that reason is gone. `tuf` (rust-tuf) is a pre-release
//! that verifies only Ed25519 keys, while Sigstore's root signs with ECDSA
//! P-256. Signatures and hashes are checked with sigil-verifier's crypto
//! (aws-lc-rs, the process's one crypto module).
//!
//! What is verified: root rotation (each new root signed by a threshold of
//! the old root's and of its own root keys, versions consecutive, at most
//! [`MAX_ROOT_ROTATIONS`]); timestamp, snapshot and targets signed by a
//! threshold of distinct keys of their role; versions matching what the
//! role above says and never lower than the last verified ones; lengths and
//! hashes where given; expiry of every role; the target's length and hashes.
//! Canonical JSON is the OLPC form securesystemslib and go-tuf sign.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;
use sigil_verifier::crypto::{HashAlgorithm, PublicKey};
use sigil_verifier::trust::parse_rfc3339;
use time::OffsetDateTime;

/// Most root versions walked in one update.
pub const MAX_ROOT_ROTATIONS: u64 = 32;
/// Largest metadata or target file accepted.
pub const MAX_FILE_BYTES: usize = 8 * 1024 * 1024;
/// Largest serialized repository (uncompressed) accepted.
pub const MAX_ARCHIVE_BYTES: usize = 64 * 1024 * 1024;
/// Most entries in a serialized repository.
pub const MAX_ARCHIVE_ENTRIES: usize = 10_000;

/// Why a TUF update failed. Every variant names the file or role at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TufError {
    /// A file could not be fetched.
    #[error("TUF: fetching {file}: {reason}")]
    Fetch {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// A required file is not in the repository.
    #[error("TUF: {0} not found in the repository")]
    Missing(String),
    /// A file is not metadata of the expected shape.
    #[error("TUF: {file} is malformed: {reason}")]
    Malformed {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// Too few valid signatures.
    #[error(
        "TUF: {file} has {valid} valid signature(s) from {role} keys, threshold is {threshold}; the repository may be tampered with or the trusted root is wrong"
    )]
    Threshold {
        /// The file.
        file: String,
        /// The role whose keys must sign.
        role: String,
        /// Valid signatures found.
        valid: usize,
        /// Needed.
        threshold: u64,
    },
    /// A key ID is not the SHA-256 of its key's canonical form.
    #[error(
        "TUF: verifying {file}: the root lists key ID {keyid} for a key whose ID is {computed}; \
         a key ID must be the SHA-256 of its key's canonical JSON (TUF specification 4.3): the \
         repository's metadata is malformed or tampered with"
    )]
    KeyId {
        /// The file being verified.
        file: String,
        /// The key ID as written.
        keyid: String,
        /// The key ID of the key's content.
        computed: String,
    },
    /// A version is not the one expected.
    #[error("TUF: {file} has version {got}, expected {expected}")]
    Version {
        /// The file.
        file: String,
        /// Expected version.
        expected: String,
        /// Version found.
        got: u64,
    },
    /// A version went back (rollback attack or a stale mirror).
    #[error("TUF: {role} version {got} is lower than the already trusted {had} (rollback)")]
    Rollback {
        /// The role.
        role: String,
        /// Trusted version.
        had: u64,
        /// Version found.
        got: u64,
    },
    /// A role's metadata expired (freeze attack or an unmaintained mirror).
    #[error("TUF: {role} metadata expired at {expires}; the mirror serves stale metadata")]
    Expired {
        /// The role.
        role: String,
        /// Its expiry.
        expires: String,
    },
    /// A file's length or hash does not match the metadata.
    #[error("TUF: {file} does not match its {what} in the signed metadata")]
    Mismatch {
        /// The file.
        file: String,
        /// `length` or `sha256`/`sha512` hash.
        what: String,
    },
    /// The serialized repository could not be read.
    #[error("TUF: serialized repository: {0}")]
    Archive(String),
    /// A verified update is too large to keep in the TUF state Secret.
    #[error("TUF: the update of {repository} is not kept: {reason}")]
    StateTooLarge {
        /// The repository (`sigstore.public-good`, `trustroot.<name>`).
        repository: String,
        /// Which bound it passes.
        reason: String,
    },
    /// The whole update took longer than its deadline.
    #[error(
        "TUF: the update from {mirror} did not finish within {seconds} s (at most \
         {TUF_LOAD_REQUESTS} requests' worth of --tuf-timeout-seconds); the mirror is too slow, \
         or serves more root versions than one update walks"
    )]
    Deadline {
        /// The mirror.
        mirror: String,
        /// The deadline, in seconds.
        seconds: u64,
    },
}

impl TufError {
    /// A short stable label for metrics and status reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Fetch { .. } => "fetch",
            Self::Missing(_) => "missing",
            Self::Malformed { .. } => "malformed",
            Self::Threshold { .. } => "signature",
            Self::KeyId { .. } => "key_id",
            Self::Version { .. } => "version",
            Self::Rollback { .. } => "rollback",
            Self::Expired { .. } => "expired",
            Self::Mismatch { .. } => "mismatch",
            Self::Archive(_) => "archive",
            Self::StateTooLarge { .. } => "state_too_large",
            Self::Deadline { .. } => "deadline",
        }
    }
}

/// What a successful update leaves trusted, to start the next one from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TufState {
    /// The newest verified `root.json`.
    pub root: Vec<u8>,
    /// Root version.
    pub root_version: u64,
    /// Timestamp version.
    pub timestamp_version: u64,
    /// Snapshot version.
    pub snapshot_version: u64,
    /// Targets version.
    pub targets_version: u64,
    /// When the trusted timestamp metadata expires (RFC 3339, as signed).
    pub timestamp_expires: String,
}

/// Where TUF files come from.
pub enum Source {
    /// A mirror over HTTP(S): metadata at `<base>/<name>`, targets at
    /// `<base>/targets/<name>`.
    Http {
        /// The client (timeouts and redirect limits set).
        client: reqwest::Client,
        /// The mirror URL without a trailing slash.
        base: String,
        /// When the whole update must be over, and how long that was.
        deadline: (tokio::time::Instant, Duration),
    },
    /// A serialized repository, extracted in memory.
    Archive {
        /// Files by path.
        files: BTreeMap<String, Vec<u8>>,
        /// Directory of the targets.
        targets: String,
    },
}

/// How long one request to a mirror may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
/// A whole update from a mirror takes at most this many times the timeout
/// of one request: an update is four to six requests (one more per new root
/// version), so a mirror that answers each request just in time, or walks
/// sigil through many root versions slowly, cannot hold a reconcile (and a
/// leader's shutdown) for the 36 requests an update may make.
pub const TUF_LOAD_REQUESTS: u32 = 6;

impl Source {
    /// A mirror source with bounded time ([`DEFAULT_TIMEOUT`]) and redirects.
    pub fn http(mirror: &str) -> Result<Self, TufError> {
        Self::http_with_timeout(mirror, DEFAULT_TIMEOUT)
    }

    /// A mirror source whose requests each take at most `timeout` (and at
    /// most 5 s to connect), with at most 3 redirects, and whose whole
    /// update ends [`TUF_LOAD_REQUESTS`] timeouts after it was made.
    pub fn http_with_timeout(mirror: &str, timeout: Duration) -> Result<Self, TufError> {
        Self::http_with_limits(mirror, timeout, timeout.saturating_mul(TUF_LOAD_REQUESTS))
    }

    /// A mirror source whose requests each take at most `timeout` and whose
    /// whole update ends `overall` after it was made.
    pub fn http_with_limits(
        mirror: &str,
        timeout: Duration,
        overall: Duration,
    ) -> Result<Self, TufError> {
        // reqwest is built without a provider of its own: make sure sigil's is
        // installed (the binaries do it at start; tests and library users may not).
        sigil_registry::tls::default_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .map_err(|e| TufError::Fetch {
                file: mirror.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Self::Http {
            client,
            base: mirror.trim_end_matches('/').to_owned(),
            deadline: (tokio::time::Instant::now() + overall, overall),
        })
    }

    /// A serialized repository: `mirror_fs` is a base64 gzipped tar;
    /// `targets` the directory of the targets in it (`targets` when empty).
    pub fn archive(mirror_fs: &str, targets: Option<&str>) -> Result<Self, TufError> {
        let compact: String = mirror_fs
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        let gz = base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|e| TufError::Archive(format!("mirrorFS is not base64: {e}")))?;
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(gz.as_slice()));
        let mut files = BTreeMap::new();
        let mut total = 0usize;
        let entries = archive
            .entries()
            .map_err(|e| TufError::Archive(format!("mirrorFS is not a gzipped tar: {e}")))?;
        for (i, entry) in entries.enumerate() {
            if i >= MAX_ARCHIVE_ENTRIES {
                return Err(TufError::Archive(format!(
                    "more than {MAX_ARCHIVE_ENTRIES} entries"
                )));
            }
            let entry = entry.map_err(|e| TufError::Archive(e.to_string()))?;
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let path = entry
                .path()
                .map_err(|e| TufError::Archive(e.to_string()))?
                .to_string_lossy()
                .trim_start_matches("./")
                .to_owned();
            let mut data = Vec::new();
            use std::io::Read as _;
            let limit = MAX_ARCHIVE_BYTES.saturating_sub(total);
            entry
                .take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
                .read_to_end(&mut data)
                .map_err(|e| TufError::Archive(format!("{path}: {e}")))?;
            total = total.saturating_add(data.len());
            if total > MAX_ARCHIVE_BYTES {
                return Err(TufError::Archive(format!(
                    "larger than {MAX_ARCHIVE_BYTES} bytes uncompressed"
                )));
            }
            files.insert(path, data);
        }
        let targets = targets
            .filter(|t| !t.is_empty())
            .unwrap_or("targets")
            .trim_matches('/')
            .to_owned();
        Ok(Self::Archive { files, targets })
    }

    async fn metadata(&self, name: &str) -> Result<Option<Vec<u8>>, TufError> {
        match self {
            Self::Http {
                client,
                base,
                deadline,
            } => {
                within(
                    *deadline,
                    base,
                    get(client, &format!("{base}/{name}"), name),
                )
                .await
            }
            Self::Archive { files, targets } => {
                let exact = [
                    name.to_owned(),
                    format!("repository/{name}"),
                    format!("metadata/{name}"),
                    format!("repository/metadata/{name}"),
                ];
                let found = exact.iter().find_map(|p| files.get(p)).or_else(|| {
                    files.iter().find_map(|(p, v)| {
                        (p.ends_with(&format!("/{name}")) && !p.contains(&format!("{targets}/")))
                            .then_some(v)
                    })
                });
                Ok(found.cloned())
            }
        }
    }

    async fn target(&self, name: &str) -> Result<Option<Vec<u8>>, TufError> {
        match self {
            Self::Http {
                client,
                base,
                deadline,
            } => {
                let url = format!("{base}/targets/{name}");
                within(*deadline, base, get(client, &url, name)).await
            }
            Self::Archive { files, targets } => {
                let path = format!("{targets}/{name}");
                Ok(files
                    .get(&path)
                    .or_else(|| {
                        files
                            .iter()
                            .find_map(|(p, v)| p.ends_with(&format!("/{path}")).then_some(v))
                    })
                    .cloned())
            }
        }
    }
}

/// `request`, unless the update's deadline passes first.
async fn within<T>(
    (deadline, overall): (tokio::time::Instant, Duration),
    mirror: &str,
    request: impl std::future::Future<Output = Result<T, TufError>>,
) -> Result<T, TufError> {
    tokio::time::timeout_at(deadline, request)
        .await
        .unwrap_or_else(|_| {
            Err(TufError::Deadline {
                mirror: mirror.to_owned(),
                seconds: overall.as_secs(),
            })
        })
}

async fn get(client: &reqwest::Client, url: &str, file: &str) -> Result<Option<Vec<u8>>, TufError> {
    let fail = |reason: String| TufError::Fetch {
        file: file.to_owned(),
        reason,
    };
    let mut response = client
        .get(url)
        .send()
        .await
        .map_err(|e| fail(format!("{url}: {e}")))?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::FORBIDDEN {
        // S3-style mirrors answer 403 for a missing key.
        return Ok(None);
    }
    if !status.is_success() {
        return Err(fail(format!("{url}: HTTP {status}")));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| fail(format!("{url}: {e}")))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_FILE_BYTES {
            return Err(fail(format!("{url}: larger than {MAX_FILE_BYTES} bytes")));
        }
    }
    Ok(Some(body))
}

#[derive(Deserialize)]
struct Envelope {
    signed: Value,
    #[serde(default)]
    signatures: Vec<Signature>,
}

#[derive(Deserialize)]
struct Signature {
    keyid: String,
    sig: String,
}

#[derive(Deserialize, Clone)]
struct Key {
    keytype: String,
    scheme: String,
    keyval: KeyVal,
}

#[derive(Deserialize, Clone)]
struct KeyVal {
    public: String,
}

#[derive(Deserialize, Clone, PartialEq)]
struct Role {
    keyids: Vec<String>,
    threshold: u64,
}

#[derive(Deserialize, Clone)]
struct RootSigned {
    #[serde(rename = "_type")]
    type_: String,
    version: u64,
    expires: String,
    /// Each key as written, so that its key ID can be checked against the
    /// canonical form of exactly what the root signed.
    keys: BTreeMap<String, Value>,
    roles: BTreeMap<String, Role>,
    #[serde(default)]
    consistent_snapshot: bool,
}

#[derive(Deserialize, Default, Clone)]
struct MetaFile {
    version: u64,
    #[serde(default)]
    length: Option<u64>,
    #[serde(default)]
    hashes: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct MetaSigned {
    #[serde(rename = "_type")]
    type_: String,
    version: u64,
    expires: String,
    #[serde(default)]
    meta: BTreeMap<String, MetaFile>,
}

#[derive(Deserialize)]
struct TargetFile {
    length: u64,
    hashes: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct TargetsSigned {
    #[serde(rename = "_type")]
    type_: String,
    version: u64,
    expires: String,
    #[serde(default)]
    targets: BTreeMap<String, TargetFile>,
}

fn malformed(file: &str, reason: impl Into<String>) -> TufError {
    TufError::Malformed {
        file: file.to_owned(),
        reason: reason.into(),
    }
}

fn envelope(file: &str, bytes: &[u8]) -> Result<Envelope, TufError> {
    serde_json::from_slice(bytes).map_err(|e| malformed(file, e.to_string()))
}

fn parse_signed<T: serde::de::DeserializeOwned>(
    file: &str,
    env: &Envelope,
    type_: &str,
    actual: impl Fn(&T) -> &str,
) -> Result<T, TufError> {
    let signed: T =
        serde_json::from_value(env.signed.clone()).map_err(|e| malformed(file, e.to_string()))?;
    let found = actual(&signed);
    if !found.eq_ignore_ascii_case(type_) {
        return Err(malformed(
            file,
            format!("`_type` is `{found}`, expected `{type_}`"),
        ));
    }
    Ok(signed)
}

/// Appends the OLPC canonical JSON form of `v` to `out`.
pub fn canonical_json(v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.extend_from_slice(i.to_string().as_bytes());
            } else if let Some(u) = n.as_u64() {
                out.extend_from_slice(u.to_string().as_bytes());
            } else {
                return Err(format!("canonical JSON has no floats (found {n})"));
            }
        }
        Value::String(s) => canonical_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_json(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_string(k, out);
                out.push(b':');
                if let Some(value) = map.get(k) {
                    canonical_json(value, out)?;
                }
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn canonical_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for b in s.bytes() {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// Decodes a TUF key into a verifier key and the hash its scheme uses.
fn decode_key(key: &Key) -> Option<(PublicKey, HashAlgorithm)> {
    let public = key.keyval.public.trim();
    let from_text = |public: &str| {
        PublicKey::from_pem(public).ok().or_else(|| {
            hex::decode(public)
                .ok()
                .and_then(|der| PublicKey::from_spki_der(&der).ok())
        })
    };
    match (key.keytype.as_str(), key.scheme.as_str()) {
        ("ed25519", "ed25519") => {
            let bytes: [u8; 32] = hex::decode(public).ok()?.try_into().ok()?;
            Some((
                PublicKey::ed25519_from_bytes(&bytes).ok()?,
                HashAlgorithm::Sha512,
            ))
        }
        ("ecdsa" | "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256") => match from_text(public)? {
            k @ PublicKey::P256(_) => Some((k, HashAlgorithm::Sha256)),
            _ => None,
        },
        ("ecdsa" | "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp384") => match from_text(public)? {
            k @ PublicKey::P384(_) => Some((k, HashAlgorithm::Sha384)),
            _ => None,
        },
        _ => None,
    }
}

/// The key ID the TUF specification gives `key`: the hex SHA-256 of its
/// canonical JSON form (every field, extensions such as tuf-on-ci's
/// `x-tuf-on-ci-keyowner` included).
fn key_id(key: &Value) -> Result<String, String> {
    let mut canonical = Vec::new();
    canonical_json(key, &mut canonical)?;
    Ok(hex::encode(HashAlgorithm::Sha256.digest(&canonical)))
}

/// The key of `root` named `keyid`, decoded, once its key ID is checked
/// against its content (TUF 4.3: "Clients MUST calculate each KEYID to
/// verify this is correct for the associated key"). A key ID that is not
/// its key's is refused: otherwise one key listed under two IDs could be
/// counted twice towards a threshold.
fn role_key(file: &str, root: &RootSigned, keyid: &str) -> Result<Option<Key>, TufError> {
    let Some(value) = root.keys.get(keyid) else {
        return Ok(None);
    };
    let computed = key_id(value).map_err(|e| malformed(file, e))?;
    if !computed.eq_ignore_ascii_case(keyid) {
        return Err(TufError::KeyId {
            file: file.to_owned(),
            keyid: keyid.to_owned(),
            computed,
        });
    }
    // A key of a type or shape this client does not know cannot sign.
    Ok(serde_json::from_value::<Key>(value.clone()).ok())
}

/// Checks that `env` carries valid signatures from at least `threshold`
/// distinct keys of `role_name` as `root` defines it. Signers are counted
/// by verified key ID, and once per key: two IDs whose keys decode to the
/// same public key (one key written in two encodings) count once.
fn verify_role(
    file: &str,
    env: &Envelope,
    root: &RootSigned,
    role_name: &str,
) -> Result<(), TufError> {
    let role = root
        .roles
        .get(role_name)
        .ok_or_else(|| malformed("root.json", format!("no `{role_name}` role")))?;
    if role.threshold == 0 {
        return Err(malformed(
            "root.json",
            format!("`{role_name}` threshold is 0"),
        ));
    }
    let mut message = Vec::new();
    canonical_json(&env.signed, &mut message).map_err(|e| malformed(file, e))?;
    let mut signer_ids: BTreeSet<&str> = BTreeSet::new();
    let mut signer_keys: BTreeSet<Vec<u8>> = BTreeSet::new();
    for sig in &env.signatures {
        if !role.keyids.contains(&sig.keyid) || signer_ids.contains(sig.keyid.as_str()) {
            continue;
        }
        let Some(key) = role_key(file, root, &sig.keyid)? else {
            continue;
        };
        let Some((public, hash)) = decode_key(&key) else {
            continue;
        };
        let Ok(signature) = hex::decode(sig.sig.trim()) else {
            continue;
        };
        if public.verify(&message, &signature, hash).is_ok() {
            let material = public
                .canonical_spki_der()
                .unwrap_or_else(|| public.spki_der().to_vec());
            if signer_keys.insert(material) {
                signer_ids.insert(sig.keyid.as_str());
            }
        }
    }
    let valid = signer_ids.len();
    if u64::try_from(valid).unwrap_or(u64::MAX) >= role.threshold {
        Ok(())
    } else {
        Err(TufError::Threshold {
            file: file.to_owned(),
            role: role_name.to_owned(),
            valid,
            threshold: role.threshold,
        })
    }
}

fn check_expiry(role: &str, expires: &str, now: OffsetDateTime) -> Result<(), TufError> {
    let at = parse_rfc3339(expires).ok_or_else(|| {
        malformed(
            &format!("{role}.json"),
            format!("expires `{expires}` is not RFC 3339"),
        )
    })?;
    if at <= now {
        return Err(TufError::Expired {
            role: role.to_owned(),
            expires: expires.to_owned(),
        });
    }
    Ok(())
}

fn check_hashes(
    file: &str,
    bytes: &[u8],
    length: Option<u64>,
    hashes: &BTreeMap<String, String>,
    require_hash: bool,
) -> Result<(), TufError> {
    let mismatch = |what: &str| TufError::Mismatch {
        file: file.to_owned(),
        what: what.to_owned(),
    };
    if let Some(len) = length
        && u64::try_from(bytes.len()).unwrap_or(u64::MAX) != len
    {
        return Err(mismatch("length"));
    }
    let mut checked = 0;
    for (alg, expected) in hashes {
        let actual = match alg.as_str() {
            "sha256" => hex::encode(HashAlgorithm::Sha256.digest(bytes)),
            "sha512" => hex::encode(HashAlgorithm::Sha512.digest(bytes)),
            _ => continue,
        };
        if !actual.eq_ignore_ascii_case(expected) {
            return Err(mismatch(&format!("{alg} hash")));
        }
        checked += 1;
    }
    if require_hash && checked == 0 {
        return Err(mismatch("sha256 or sha512 hash (none given)"));
    }
    Ok(())
}

/// Fetches a role's metadata as its parent's `meta` entry describes it
/// (versioned file name under consistent snapshots), checks length and
/// hashes, the role's signature threshold, its `_type` and that its version
/// is the one the parent promised (TUF 5.5 and 5.6 share these steps).
async fn fetch_role<T: serde::de::DeserializeOwned>(
    source: &Source,
    root: &RootSigned,
    role: &str,
    meta: &MetaFile,
    type_of: impl Fn(&T) -> &str,
    version_of: impl Fn(&T) -> u64,
) -> Result<(String, T), TufError> {
    let file = if root.consistent_snapshot {
        format!("{}.{role}.json", meta.version)
    } else {
        format!("{role}.json")
    };
    let bytes = required(source, &file).await?;
    check_hashes(&file, &bytes, meta.length, &meta.hashes, false)?;
    let env = envelope(&file, &bytes)?;
    verify_role(&file, &env, root, role)?;
    let signed = parse_signed::<T>(&file, &env, role, type_of)?;
    let got = version_of(&signed);
    if got != meta.version {
        return Err(TufError::Version {
            file,
            expected: meta.version.to_string(),
            got,
        });
    }
    Ok((file, signed))
}

async fn required(source: &Source, name: &str) -> Result<Vec<u8>, TufError> {
    source
        .metadata(name)
        .await?
        .ok_or_else(|| TufError::Missing(name.to_owned()))
}

fn load_root(file: &str, bytes: &[u8]) -> Result<(Envelope, RootSigned), TufError> {
    let env = envelope(file, bytes)?;
    let root = parse_signed::<RootSigned>(file, &env, "root", |r| &r.type_)?;
    Ok((env, root))
}

/// Runs the TUF update workflow against `source` starting from `trusted_root`
/// (or from `previous`, the state of the last successful update, when given)
/// and returns the verified bytes of `target` with the new state.
pub async fn fetch_target(
    source: &Source,
    trusted_root: &[u8],
    previous: Option<&TufState>,
    target: &str,
    now: OffsetDateTime,
) -> Result<(Vec<u8>, TufState), TufError> {
    let start = previous.map_or(trusted_root, |p| p.root.as_slice());
    let (env, mut root) = load_root("root.json", start)?;
    verify_role("root.json", &env, &root, "root")?;
    let mut root_bytes = start.to_vec();
    let first_root = root.clone();

    // 5.3: root rotation.
    for _ in 0..MAX_ROOT_ROTATIONS {
        let next = root.version.saturating_add(1);
        let file = format!("{next}.root.json");
        let Some(bytes) = source.metadata(&file).await? else {
            break;
        };
        let (env, new_root) = load_root(&file, &bytes)?;
        verify_role(&file, &env, &root, "root")?;
        verify_role(&file, &env, &new_root, "root")?;
        if new_root.version != next {
            return Err(TufError::Version {
                file,
                expected: next.to_string(),
                got: new_root.version,
            });
        }
        root = new_root;
        root_bytes = bytes;
    }
    check_expiry("root", &root.expires, now)?;
    // 5.3.11: new timestamp or snapshot keys void the versions trusted so far.
    let rotated = |role: &str| first_root.roles.get(role) != root.roles.get(role);
    let previous = previous.filter(|_| !rotated("timestamp") && !rotated("snapshot"));

    // 5.4: timestamp.
    let bytes = required(source, "timestamp.json").await?;
    let env = envelope("timestamp.json", &bytes)?;
    verify_role("timestamp.json", &env, &root, "timestamp")?;
    let timestamp = parse_signed::<MetaSigned>("timestamp.json", &env, "timestamp", |t| &t.type_)?;
    if let Some(p) = previous
        && timestamp.version < p.timestamp_version
    {
        return Err(TufError::Rollback {
            role: "timestamp".into(),
            had: p.timestamp_version,
            got: timestamp.version,
        });
    }
    check_expiry("timestamp", &timestamp.expires, now)?;
    let snapshot_meta = timestamp
        .meta
        .get("snapshot.json")
        .cloned()
        .ok_or_else(|| malformed("timestamp.json", "no meta for snapshot.json"))?;

    // 5.5: snapshot.
    let (file, snapshot) = fetch_role::<MetaSigned>(
        source,
        &root,
        "snapshot",
        &snapshot_meta,
        |t| &t.type_,
        |t| t.version,
    )
    .await?;
    if let Some(p) = previous
        && snapshot.version < p.snapshot_version
    {
        return Err(TufError::Rollback {
            role: "snapshot".into(),
            had: p.snapshot_version,
            got: snapshot.version,
        });
    }
    check_expiry("snapshot", &snapshot.expires, now)?;
    let targets_meta = snapshot
        .meta
        .get("targets.json")
        .cloned()
        .ok_or_else(|| malformed(&file, "no meta for targets.json"))?;
    if let Some(p) = previous
        && targets_meta.version < p.targets_version
    {
        return Err(TufError::Rollback {
            role: "targets".into(),
            had: p.targets_version,
            got: targets_meta.version,
        });
    }

    // 5.6: targets (top-level only).
    let (_, targets) = fetch_role::<TargetsSigned>(
        source,
        &root,
        "targets",
        &targets_meta,
        |t| &t.type_,
        |t| t.version,
    )
    .await?;
    check_expiry("targets", &targets.expires, now)?;

    // 5.7: the target.
    let info = targets.targets.get(target).ok_or_else(|| {
        TufError::Missing(format!(
            "target {target} (delegated targets are not supported)"
        ))
    })?;
    let name = if root.consistent_snapshot {
        let digest = info
            .hashes
            .get("sha256")
            .or_else(|| info.hashes.get("sha512"))
            .ok_or_else(|| TufError::Mismatch {
                file: target.to_owned(),
                what: "sha256 or sha512 hash (none given)".into(),
            })?;
        format!("{digest}.{target}")
    } else {
        target.to_owned()
    };
    let bytes = source
        .target(&name)
        .await?
        .ok_or_else(|| TufError::Missing(format!("targets/{name}")))?;
    check_hashes(target, &bytes, Some(info.length), &info.hashes, true)?;
    let state = TufState {
        root: root_bytes,
        root_version: root.version,
        timestamp_version: timestamp.version,
        snapshot_version: snapshot.version,
        targets_version: targets.version,
        timestamp_expires: timestamp.expires,
    };
    Ok((bytes, state))
}

#[cfg(test)]
mod tests {

    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::fixtures::{TufRepo, seed_key, sign};

    fn archive(files: BTreeMap<String, Vec<u8>>) -> Source {
        Source::Archive {
            files,
            targets: "targets".into(),
        }
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    #[tokio::test]
    async fn a_repository_signed_by_its_roles_yields_the_target() {
        let repo = TufRepo::new(b"{\"hello\":1}");
        let (bytes, state) = fetch_target(
            &archive(repo.files()),
            &repo.root(),
            None,
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap();
        assert_eq!(bytes, b"{\"hello\":1}");
        assert_eq!((state.root_version, state.timestamp_version), (1, 1));
    }

    #[tokio::test]
    async fn consistent_snapshots_are_fetched_by_version_and_by_hash() {
        let mut repo = TufRepo::new(b"target");
        repo.consistent = true;
        let (bytes, _) = fetch_target(
            &archive(repo.files()),
            &repo.root(),
            None,
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap();
        assert_eq!(bytes, b"target");
    }

    #[tokio::test]
    async fn metadata_signed_by_a_key_outside_its_role_is_rejected() {
        let repo = TufRepo::new(b"t");
        let mut files = repo.files();
        let forged = sign(
            serde_json::from_slice::<Value>(&files["timestamp.json"]).unwrap()["signed"].clone(),
            &[&seed_key(9)],
        );
        files.insert("timestamp.json".into(), forged);
        let err = fetch_target(
            &archive(files),
            &repo.root(),
            None,
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, TufError::Threshold { ref role, valid: 0, .. } if role == "timestamp"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_tampered_signed_part_fails_its_signature() {
        let repo = TufRepo::new(b"t");
        let mut files = repo.files();
        let mut targets: Value = serde_json::from_slice(&files["targets.json"]).unwrap();
        targets["signed"]["targets"]["trusted_root.json"]["length"] = 2.into();
        files.insert("targets.json".into(), serde_json::to_vec(&targets).unwrap());
        let err = fetch_target(
            &archive(files),
            &repo.root(),
            None,
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, TufError::Threshold { .. }), "{err}");
    }

    #[tokio::test]
    async fn expired_metadata_is_rejected() {
        let mut repo = TufRepo::new(b"t");
        repo.expires = "2020-01-01T00:00:00Z".into();
        let err = fetch_target(
            &archive(repo.files()),
            &repo.root(),
            None,
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, TufError::Expired { ref role, .. } if role == "root"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_timestamp_older_than_the_trusted_one_is_a_rollback() {
        let mut repo = TufRepo::new(b"t");
        repo.timestamp_version = 5;
        let (_, state) = fetch_target(
            &archive(repo.files()),
            &repo.root(),
            None,
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap();
        repo.timestamp_version = 4;
        let err = fetch_target(
            &archive(repo.files()),
            &repo.root(),
            Some(&state),
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err,
            TufError::Rollback {
                role: "timestamp".into(),
                had: 5,
                got: 4
            }
        );
    }

    #[tokio::test]
    async fn a_new_root_needs_the_signatures_of_the_old_and_the_new_root_keys() {
        let repo = TufRepo::new(b"t");
        let new_key = seed_key(7);
        let rotated = repo.root_signed(2, &new_key);

        let mut files = repo.files();
        files.insert(
            "2.root.json".into(),
            sign(rotated.clone(), &[&repo.root_key, &new_key]),
        );
        let (_, state) = fetch_target(
            &archive(files),
            &repo.root(),
            None,
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap();
        assert_eq!(state.root_version, 2);

        let mut files = repo.files();
        files.insert("2.root.json".into(), sign(rotated, &[&new_key]));
        let err = fetch_target(
            &archive(files),
            &repo.root(),
            None,
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, TufError::Threshold { ref file, .. } if file == "2.root.json"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_target_whose_bytes_differ_from_its_hash_is_rejected() {
        let repo = TufRepo::new(b"good");
        let mut files = repo.files();
        files.insert("targets/trusted_root.json".into(), b"evil".to_vec());
        let err = fetch_target(
            &archive(files),
            &repo.root(),
            None,
            "trusted_root.json",
            now(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, TufError::Mismatch { .. }), "{err}");
    }

    #[tokio::test]
    async fn ecdsa_p256_keys_as_sigstore_uses_them_verify() {
        use p256::ecdsa::signature::Signer as _;
        use p256::pkcs8::EncodePublicKey as _;
        let key = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let pem = key
            .verifying_key()
            .to_public_key_pem(p256::pkcs8::LineEnding::LF)
            .unwrap();
        let public =
            json!({"keytype": "ecdsa", "scheme": "ecdsa-sha2-nistp256", "keyval": {"public": pem}});
        let id = key_id(&public).unwrap();
        let id = id.as_str();
        let sign_p256 = |signed: Value| {
            let mut message = Vec::new();
            canonical_json(&signed, &mut message).unwrap();
            let sig: p256::ecdsa::Signature = key.sign(&message);
            serde_json::to_vec(&json!({"signed": signed, "signatures": [
                {"keyid": id, "sig": hex::encode(sig.to_der().as_bytes())}]}))
            .unwrap()
        };
        let role = json!({"keyids": [id], "threshold": 1});
        let root = sign_p256(
            json!({"_type": "root", "version": 1, "expires": "2099-01-01T00:00:00Z",
            "consistent_snapshot": false,
            "keys": {id: public},
            "roles": {"root": role, "timestamp": role, "snapshot": role, "targets": role}}),
        );
        let target = b"tr".to_vec();
        let mut files = BTreeMap::new();
        files.insert(
            "targets.json".to_owned(),
            sign_p256(json!({"_type": "targets", "version": 3,
            "expires": "2099-01-01T00:00:00Z", "targets": {"trusted_root.json": {"length": 2,
            "hashes": {"sha512": hex::encode(HashAlgorithm::Sha512.digest(&target))}}}})),
        );
        files.insert(
            "snapshot.json".to_owned(),
            sign_p256(json!({"_type": "snapshot", "version": 2,
            "expires": "2099-01-01T00:00:00Z", "meta": {"targets.json": {"version": 3}}})),
        );
        files.insert(
            "timestamp.json".to_owned(),
            sign_p256(json!({"_type": "timestamp", "version": 2,
            "expires": "2099-01-01T00:00:00Z", "meta": {"snapshot.json": {"version": 2}}})),
        );
        files.insert("targets/trusted_root.json".to_owned(), target.clone());
        let (bytes, _) = fetch_target(&archive(files), &root, None, "trusted_root.json", now())
            .await
            .unwrap();
        assert_eq!(bytes, target);
    }

    /// A root whose every role is `roles` over `keys` (key ID → key),
    /// signed by `signers` (key ID → P-256 key).
    fn p256_root(
        keys: &serde_json::Map<String, Value>,
        roles: &Value,
        signers: &[(&str, &p256::ecdsa::SigningKey)],
    ) -> Vec<u8> {
        use p256::ecdsa::signature::Signer as _;
        let signed = json!({"_type": "root", "version": 1, "expires": "2099-01-01T00:00:00Z",
            "consistent_snapshot": false, "keys": keys,
            "roles": {"root": roles, "timestamp": roles, "snapshot": roles, "targets": roles}});
        let mut message = Vec::new();
        canonical_json(&signed, &mut message).unwrap();
        let signatures: Vec<Value> = signers
            .iter()
            .map(|(id, key)| {
                let sig: p256::ecdsa::Signature = key.sign(&message);
                json!({"keyid": id, "sig": hex::encode(sig.to_der().as_bytes())})
            })
            .collect();
        serde_json::to_vec(&json!({"signed": signed, "signatures": signatures})).unwrap()
    }

    #[test]
    fn a_root_with_two_key_ids_for_one_key_counts_one_signer() {
        use p256::pkcs8::EncodePublicKey as _;
        let key = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let verifying = key.verifying_key();
        // One key, written once in PEM and once as hex DER: two key objects,
        // each under the key ID of its own canonical form.
        let pem = json!({"keytype": "ecdsa", "scheme": "ecdsa-sha2-nistp256",
            "keyval": {"public": verifying.to_public_key_pem(p256::pkcs8::LineEnding::LF).unwrap()}});
        let der = json!({"keytype": "ecdsa", "scheme": "ecdsa-sha2-nistp256",
            "keyval": {"public": hex::encode(verifying.to_public_key_der().unwrap().as_bytes())}});
        let (pem_id, der_id) = (key_id(&pem).unwrap(), key_id(&der).unwrap());
        assert_ne!(pem_id, der_id);
        let mut keys = serde_json::Map::new();
        keys.insert(pem_id.clone(), pem);
        keys.insert(der_id.clone(), der);
        let two_of_two = json!({"keyids": [pem_id, der_id], "threshold": 2});
        let root = p256_root(
            &keys,
            &two_of_two,
            &[(pem_id.as_str(), &key), (der_id.as_str(), &key)],
        );

        let (env, signed) = load_root("root.json", &root).unwrap();
        let err = verify_role("root.json", &env, &signed, "root").unwrap_err();

        assert_eq!(
            err,
            TufError::Threshold {
                file: "root.json".into(),
                role: "root".into(),
                valid: 1,
                threshold: 2,
            },
            "one key signing under two IDs is one signer"
        );
    }

    #[test]
    fn a_key_id_that_is_not_its_keys_content_is_refused() {
        let key = p256::ecdsa::SigningKey::from_slice(&[9u8; 32]).unwrap();
        let public = {
            use p256::pkcs8::EncodePublicKey as _;
            json!({"keytype": "ecdsa", "scheme": "ecdsa-sha2-nistp256",
                "keyval": {"public": key.verifying_key()
                    .to_public_key_pem(p256::pkcs8::LineEnding::LF).unwrap()}})
        };
        let right = key_id(&public).unwrap();
        let wrong = "ab".repeat(32);
        let mut keys = serde_json::Map::new();
        keys.insert(wrong.clone(), public);
        let root = p256_root(
            &keys,
            &json!({"keyids": [wrong], "threshold": 1}),
            &[(wrong.as_str(), &key)],
        );

        let (env, signed) = load_root("root.json", &root).unwrap();
        let err = verify_role("root.json", &env, &signed, "root").unwrap_err();

        assert_eq!(
            err,
            TufError::KeyId {
                file: "root.json".into(),
                keyid: wrong,
                computed: right,
            }
        );
        assert_eq!(err.reason(), "key_id");
    }

    #[test]
    fn the_embedded_sigstore_roots_key_ids_are_their_keys() {
        for text in [
            sigil_verifier::trust::PUBLIC_GOOD_TUF_ROOT,
            sigil_verifier::trust::STAGING_TUF_ROOT,
        ] {
            let (_, root) = load_root("root.json", text.as_bytes()).unwrap();
            for (id, key) in &root.keys {
                assert_eq!(&key_id(key).unwrap(), id);
            }
        }
    }

    #[tokio::test]
    async fn a_mirror_that_answers_every_request_slowly_is_stopped_by_the_overall_deadline() {
        use axum::extract::{Path, State};
        let repo = TufRepo::new(b"t");
        let files = Arc::new(repo.files());
        // Each answer comes within the per-request timeout, but an update
        // makes several requests.
        async fn slow(
            State(files): State<Arc<BTreeMap<String, Vec<u8>>>>,
            Path(path): Path<String>,
        ) -> Result<Vec<u8>, axum::http::StatusCode> {
            tokio::time::sleep(Duration::from_millis(400)).await;
            files
                .get(&path)
                .cloned()
                .ok_or(axum::http::StatusCode::NOT_FOUND)
        }
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::get(slow))
            .with_state(files);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mirror = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

        let patient =
            Source::http_with_limits(&mirror, Duration::from_secs(5), Duration::from_secs(60))
                .unwrap();
        fetch_target(&patient, &repo.root(), None, "trusted_root.json", now())
            .await
            .unwrap();
        let bounded =
            Source::http_with_limits(&mirror, Duration::from_secs(5), Duration::from_secs(1))
                .unwrap();
        let err = fetch_target(&bounded, &repo.root(), None, "trusted_root.json", now())
            .await
            .unwrap_err();

        assert_eq!(err, TufError::Deadline { mirror, seconds: 1 });
        assert_eq!(err.reason(), "deadline");
    }

    #[test]
    fn the_embedded_sigstore_tuf_roots_of_trust_verify_under_their_own_root_role() {
        // Real Sigstore metadata: ECDSA P-256 keys in PEM, signatures over
        // the canonical JSON securesystemslib produces, threshold 3 of 5
        // (public-good) and 2 of 4 (staging).
        for (name, text) in [
            ("public-good", sigil_verifier::trust::PUBLIC_GOOD_TUF_ROOT),
            ("staging", sigil_verifier::trust::STAGING_TUF_ROOT),
        ] {
            let (env, root) = load_root("root.json", text.as_bytes()).unwrap();
            verify_role("root.json", &env, &root, "root").unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(root.consistent_snapshot, "{name}");
            // One signature fewer than the threshold is refused.
            let mut short = envelope("root.json", text.as_bytes()).unwrap();
            let threshold = usize::try_from(root.roles["root"].threshold).unwrap();
            let mut valid = 0;
            short.signatures.retain(|_| {
                valid += 1;
                valid < threshold
            });
            assert!(
                matches!(
                    verify_role("root.json", &short, &root, "root"),
                    Err(TufError::Threshold { .. })
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn canonical_json_sorts_keys_and_escapes_only_quotes_and_backslashes() {
        let mut out = Vec::new();
        canonical_json(&json!({"b": [1, true, null], "a": "x\"y\\z\né"}), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"a\":\"x\\\"y\\\\z\né\",\"b\":[1,true,null]}"
        );
        assert!(canonical_json(&json!({"f": 1.5}), &mut Vec::new()).is_err());
    }
}

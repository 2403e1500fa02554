//! A TUF repository (spec 1.0, the four top-level roles, one Ed25519 key
//! each from a fixed seed) that publishes a trusted root as its target, and
//! [`Mirror`], a plain HTTP server on a local address that serves its files
//! as a TUF mirror such as `tuf-repo-cdn.sigstore.dev` or
//! `tuf-repo.github.com` does.
//!
//! Metadata is signed over [`crate::json::canonical`]. For the ASCII
//! strings and integers written here that is byte for byte the OLPC
//! canonical JSON that TUF clients check.
//!
//! ```
//! use sigil_testkit::tuf::TufRepo;
//!
//! let mut repo = TufRepo::new(br#"{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}"#);
//! repo.consistent = true;
//! repo.target_name = "acme.trusted_root.json".into();
//! let files = repo.files();
//! assert!(files.contains_key("1.root.json") && files.contains_key("timestamp.json"));
//! assert!(files.keys().any(|path| path.ends_with(".acme.trusted_root.json")));
//! ```

use std::collections::BTreeMap;
use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer as _, SigningKey};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::json::canonical;

/// A repository signed with Ed25519 keys from fixed seeds, one key per
/// role, holding one target (`trusted_root.json` unless `target_name`
/// says otherwise). Change the fields, then call [`TufRepo::files`].
pub struct TufRepo {
    /// The root role's key (seed 1).
    pub root_key: SigningKey,
    /// The timestamp role's key (seed 2).
    pub timestamp_key: SigningKey,
    /// The snapshot role's key (seed 3).
    pub snapshot_key: SigningKey,
    /// The targets role's key (seed 4).
    pub targets_key: SigningKey,
    /// Every role's expiry, RFC 3339.
    pub expires: String,
    /// The target's bytes.
    pub target: Vec<u8>,
    /// The target's name.
    pub target_name: String,
    /// `consistent_snapshot`: metadata and targets under version- and
    /// hash-prefixed names, as Sigstore's and GitHub's repositories are.
    pub consistent: bool,
    /// The timestamp's version.
    pub timestamp_version: u64,
}

fn key_json(k: &SigningKey) -> Value {
    json!({"keytype": "ed25519", "scheme": "ed25519",
        "keyval": {"public": hex::encode(k.verifying_key().to_bytes())}})
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The key ID of `k` as the TUF specification defines it (and sigil's TUF
/// client checks it): SHA-256 of the canonical JSON of its key object.
pub fn keyid(k: &SigningKey) -> String {
    sha256_hex(canonical(&key_json(k)).as_bytes())
}

/// Wraps `signed` in a metadata envelope signed by `keys`.
pub fn sign(signed: Value, keys: &[&SigningKey]) -> Vec<u8> {
    let message = canonical(&signed);
    let signatures: Vec<Value> = keys
        .iter()
        .map(|k| json!({"keyid": keyid(k), "sig": hex::encode(k.sign(message.as_bytes()).to_bytes())}))
        .collect();
    let envelope = json!({"signed": signed, "signatures": signatures});
    // A `Value` of strings, numbers and maps always serializes.
    serde_json::to_vec_pretty(&envelope).unwrap_or_default()
}

/// The Ed25519 key whose 32 seed bytes are all `seed`.
pub fn seed_key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

impl TufRepo {
    /// A repository publishing `target` as `trusted_root.json`, expiring in
    /// 2099, not consistent, timestamp version 1.
    pub fn new(target: &[u8]) -> Self {
        Self {
            root_key: seed_key(1),
            timestamp_key: seed_key(2),
            snapshot_key: seed_key(3),
            targets_key: seed_key(4),
            expires: "2099-01-01T00:00:00Z".into(),
            target: target.to_vec(),
            target_name: "trusted_root.json".into(),
            consistent: false,
            timestamp_version: 1,
        }
    }

    /// The signed part of a root of `version` whose root role is `root_key`.
    pub fn root_signed(&self, version: u64, root_key: &SigningKey) -> Value {
        let mut keys = serde_json::Map::new();
        for k in [
            root_key,
            &self.timestamp_key,
            &self.snapshot_key,
            &self.targets_key,
        ] {
            keys.insert(keyid(k), key_json(k));
        }
        let role = |k: &SigningKey| json!({"keyids": [keyid(k)], "threshold": 1});
        json!({
            "_type": "root", "spec_version": "1.0", "version": version, "expires": self.expires,
            "consistent_snapshot": self.consistent, "keys": keys,
            "roles": {
                "root": role(root_key), "timestamp": role(&self.timestamp_key),
                "snapshot": role(&self.snapshot_key), "targets": role(&self.targets_key),
            },
        })
    }

    /// `1.root.json`, signed by its root key: what a client is given to
    /// trust first.
    pub fn root(&self) -> Vec<u8> {
        sign(self.root_signed(1, &self.root_key), &[&self.root_key])
    }

    /// [`TufRepo::root`] base64-encoded, as a TrustRoot's `spec.remote.root`
    /// carries it.
    pub fn root_base64(&self) -> String {
        STANDARD.encode(self.root())
    }

    /// Every metadata and target file, by its path in the repository.
    pub fn files(&self) -> BTreeMap<String, Vec<u8>> {
        let target_hash = sha256_hex(&self.target);
        let mut listed = serde_json::Map::new();
        listed.insert(
            self.target_name.clone(),
            json!({"length": self.target.len(), "hashes": {"sha256": target_hash}}),
        );
        let targets = sign(
            json!({"_type": "targets", "spec_version": "1.0", "version": 1,
                "expires": self.expires, "targets": listed}),
            &[&self.targets_key],
        );
        let snapshot = sign(
            json!({"_type": "snapshot", "spec_version": "1.0", "version": 1,
                "expires": self.expires, "meta": {"targets.json": {"version": 1}}}),
            &[&self.snapshot_key],
        );
        let timestamp = sign(
            json!({"_type": "timestamp", "spec_version": "1.0", "version": self.timestamp_version,
                "expires": self.expires,
                "meta": {"snapshot.json": {"version": 1, "length": snapshot.len(),
                    "hashes": {"sha256": sha256_hex(&snapshot)}}}}),
            &[&self.timestamp_key],
        );
        let mut files = BTreeMap::new();
        files.insert("1.root.json".into(), self.root());
        files.insert("timestamp.json".into(), timestamp);
        if self.consistent {
            files.insert("1.snapshot.json".into(), snapshot);
            files.insert("1.targets.json".into(), targets);
            files.insert(
                format!("targets/{target_hash}.{}", self.target_name),
                self.target.clone(),
            );
        } else {
            files.insert("snapshot.json".into(), snapshot);
            files.insert("targets.json".into(), targets);
            files.insert(format!("targets/{}", self.target_name), self.target.clone());
        }
        files
    }
}

/// Longest request head the mirror reads.
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// How long the mirror waits for a client's request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Served {
    files: BTreeMap<String, Vec<u8>>,
    requests: Vec<String>,
}

/// A static HTTP server for a repository's files: `GET /<path>` answers the
/// file or 404, one request per connection. It stops when dropped.
pub struct Mirror {
    addr: SocketAddr,
    state: Arc<Mutex<Served>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Mirror {
    /// Serves `files` on `bind` (for example `127.0.0.1:0`).
    pub fn serve(bind: &str, files: BTreeMap<String, Vec<u8>>) -> io::Result<Mirror> {
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(Served {
            files,
            requests: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::Builder::new()
                .name("tuf-mirror".into())
                .spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        if let Ok(stream) = stream {
                            // A client that goes away mid-answer is its own business.
                            let _ = answer(stream, &state);
                        }
                    }
                })?
        };
        Ok(Mirror {
            addr,
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves `files` from now on, in place of the previous ones.
    pub fn replace(&self, files: BTreeMap<String, Vec<u8>>) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .files = files;
    }

    /// The paths requested so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
            .clone()
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn answer(mut stream: TcpStream, state: &Mutex<Served>) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 || head.len() + n > MAX_REQUEST_HEAD {
            return Ok(());
        }
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target
        .split('?')
        .next()
        .unwrap_or("")
        .trim_start_matches('/');
    let (status, body) = if method != "GET" {
        ("405 Method Not Allowed", Vec::new())
    } else {
        let mut served = state.lock().unwrap_or_else(PoisonError::into_inner);
        served.requests.push(path.to_owned());
        match served.files.get(path) {
            Some(bytes) => ("200 OK", bytes.clone()),
            None => ("404 Not Found", b"not found\n".to_vec()),
        }
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(&body)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GET `path` from `addr` over a fresh connection: status and body.
    fn get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET /{path} HTTP/1.1\r\nHost: mirror\r\n\r\n").unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&out[..end]).into_owned();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, out[end + 4..].to_vec())
    }

    #[test]
    fn a_consistent_repository_names_files_by_version_and_hash() {
        let mut repo = TufRepo::new(b"{\"a\":1}");
        repo.consistent = true;
        repo.target_name = "acme.trusted_root.json".into();
        let files = repo.files();
        let names: Vec<&str> = files.keys().map(String::as_str).collect();
        let hash = sha256_hex(b"{\"a\":1}");
        assert_eq!(
            names,
            [
                "1.root.json",
                "1.snapshot.json",
                "1.targets.json",
                &format!("targets/{hash}.acme.trusted_root.json"),
                "timestamp.json",
            ]
        );
        let root: Value = serde_json::from_slice(&files["1.root.json"]).unwrap();
        assert_eq!(root["signed"]["consistent_snapshot"], true);
        assert_eq!(
            STANDARD.decode(repo.root_base64()).unwrap(),
            files["1.root.json"]
        );
    }

    #[test]
    fn every_role_signs_its_canonical_metadata() {
        use ed25519_dalek::Verifier as _;
        let repo = TufRepo::new(b"t");
        let files = repo.files();
        for (file, key) in [
            ("1.root.json", &repo.root_key),
            ("timestamp.json", &repo.timestamp_key),
            ("snapshot.json", &repo.snapshot_key),
            ("targets.json", &repo.targets_key),
        ] {
            let envelope: Value = serde_json::from_slice(&files[file]).unwrap();
            let message = canonical(&envelope["signed"]);
            let sig = hex::decode(envelope["signatures"][0]["sig"].as_str().unwrap()).unwrap();
            let sig = ed25519_dalek::Signature::from_slice(&sig).unwrap();
            assert_eq!(envelope["signatures"][0]["keyid"], keyid(key), "{file}");
            key.verifying_key()
                .verify(message.as_bytes(), &sig)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
        }
    }

    #[test]
    fn the_mirror_serves_files_and_says_404_for_the_rest() {
        let repo = TufRepo::new(b"target bytes");
        let mirror = Mirror::serve("127.0.0.1:0", repo.files()).unwrap();
        let addr = mirror.addr();
        let (status, body) = get(addr, "targets/trusted_root.json");
        assert_eq!((status, body.as_slice()), (200, b"target bytes".as_slice()));
        assert_eq!(get(addr, "2.root.json").0, 404);
        mirror.replace(BTreeMap::from([("2.root.json".to_owned(), b"r2".to_vec())]));
        assert_eq!(get(addr, "2.root.json").0, 200);
        assert_eq!(
            mirror.requests(),
            ["targets/trusted_root.json", "2.root.json", "2.root.json"]
        );
        assert_eq!(mirror.url(), format!("http://{addr}"));
        drop(mirror);
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_millis(500))
                .and_then(|s| {
                    let mut s = s;
                    s.write_all(b"GET / HTTP/1.1\r\n\r\n")?;
                    let mut out = Vec::new();
                    s.read_to_end(&mut out)?;
                    Ok(out)
                })
                .map_or(true, |out| out.is_empty()),
            "a dropped mirror answers nothing"
        );
    }
}

//! A registry on 127.0.0.1 that serves what the fuzzer wrote, for fuzzing
//! OCI manifests, indexes, the referrers list and legacy signature layers
//! (with their annotations) through the real client, discovery and
//! `verify_image`.
//!
//! Input (parts split by [`crate::SEPARATOR`]):
//! 0. control words: `fallback` (no referrers API: the list is served at the
//!    `sha256-<hex>` tag), `pages` (every referrers page links to another),
//!    `att` (want SLSA provenance attestations, not signatures), `key`
//!    (managed-key policy, not keyless);
//! 1. the referrers list (an index);
//! 2. the legacy `sha256-<hex>.sig`/`.att` manifest (empty: 404);
//! 3. … documents served by digest, as manifests and as blobs.
//!
//! Digests cannot be forged by a fuzzer, so the string `"@doc:N"` in any
//! part becomes the digest of document N (documents may name only later
//! documents, so the fix-up is well founded), and `"@image"` the image's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use sigil_registry::discover::Want;
use sigil_registry::image::{ImagePolicy, VerifyImageOptions, verify_image};
use sigil_registry::{ClientConfig, Limits, RegistryClient};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::{fixture, split};

/// The predicate type the `att` control word asks for.
pub const ATTESTATION_PREDICATE: &str = "https://slsa.dev/provenance/v1";
/// The image repository.
pub const REPOSITORY: &str = "fuzz/app";

/// The image every input is about (a testkit image manifest).
pub fn image_manifest() -> &'static sigil_testkit::cosign::OciManifest {
    static M: OnceLock<sigil_testkit::cosign::OciManifest> = OnceLock::new();
    M.get_or_init(|| sigil_testkit::cosign::image("fuzz"))
}

fn sha256_ref(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// What the registry serves for one input.
#[derive(Default)]
struct Content {
    referrers_api: bool,
    pages: bool,
    referrers: Vec<u8>,
    legacy: Option<Vec<u8>>,
    by_digest: HashMap<String, Vec<u8>>,
}

fn substitute(part: &[u8], docs: &[Vec<u8>], image: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(part.len());
    let mut rest = part;
    while let Some(at) = rest.iter().position(|&b| b == b'"') {
        out.extend_from_slice(&rest[..at]);
        rest = &rest[at..];
        let replacement = if rest.starts_with(b"\"@image\"") {
            Some((8, image.to_string()))
        } else if rest.starts_with(b"\"@doc:") {
            let digits = rest[6..].iter().take_while(|b| b.is_ascii_digit()).count();
            let n = std::str::from_utf8(&rest[6..6 + digits])
                .ok()
                .and_then(|s| s.parse::<usize>().ok());
            match (n, rest.get(6 + digits)) {
                (Some(n), Some(b'"')) => docs.get(n).map(|d| (7 + digits, sha256_ref(d))),
                _ => None,
            }
        } else {
            None
        };
        match replacement {
            Some((len, digest)) => {
                out.push(b'"');
                out.extend_from_slice(digest.as_bytes());
                out.push(b'"');
                rest = &rest[len..];
            }
            None => {
                out.push(b'"');
                rest = &rest[1..];
            }
        }
    }
    out.extend_from_slice(rest);
    out
}

fn content(data: &[u8], image: &str) -> (Content, Want, bool) {
    let parts = split(data);
    let control = String::from_utf8_lossy(parts.first().copied().unwrap_or_default()).into_owned();
    let raw_docs: Vec<&[u8]> = parts.iter().skip(3).take(64).copied().collect();
    // Later documents first, so each may name the ones after it.
    let mut docs: Vec<Vec<u8>> = vec![Vec::new(); raw_docs.len()];
    for i in (0..raw_docs.len()).rev() {
        let fixed = substitute(raw_docs[i], &docs, image);
        docs[i] = fixed;
    }
    // A document naming an earlier one got no digest for it; that is fine.
    let mut c = Content {
        referrers_api: !control.contains("fallback"),
        pages: control.contains("pages"),
        referrers: substitute(parts.get(1).copied().unwrap_or_default(), &docs, image),
        legacy: parts
            .get(2)
            .filter(|p| !p.is_empty())
            .map(|p| substitute(p, &docs, image)),
        by_digest: HashMap::new(),
    };
    for d in docs {
        c.by_digest.insert(sha256_ref(&d), d);
    }
    let want = if control.contains("att") {
        Want::Attestations(ATTESTATION_PREDICATE.into())
    } else {
        Want::Signatures
    };
    (c, want, control.contains("key"))
}

struct Registry {
    runtime: tokio::runtime::Runtime,
    addr: String,
    content: Arc<Mutex<Content>>,
    client: RegistryClient,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let content = Arc::new(Mutex::new(Content::default()));
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr").to_string();
        let served = content.clone();
        runtime.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, served.clone()));
            }
        });
        let client = RegistryClient::new(ClientConfig {
            insecure_hosts: vec![addr.clone()],
            limits: Limits {
                request_timeout: Duration::from_secs(5),
                total_deadline: Duration::from_secs(10),
                ..Limits::default()
            },
            ..ClientConfig::default()
        })
        .expect("registry client");
        Registry {
            runtime,
            addr,
            content,
            client,
        }
    })
}

async fn serve(mut stream: TcpStream, content: Arc<Mutex<Content>>) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.len() > 1 << 16 {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or_default().to_string();
        let target = words.next().unwrap_or_default().to_string();
        let (status, body, link) = route(&target, &content);
        let mut response = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\n",
            body.len()
        );
        if let Some(l) = link {
            response.push_str(&format!("Link: <{l}>; rel=\"next\"\r\n"));
        }
        response.push_str("\r\n");
        let mut out = response.into_bytes();
        if method != "HEAD" {
            out.extend_from_slice(&body);
        }
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

fn route(target: &str, content: &Mutex<Content>) -> (&'static str, Vec<u8>, Option<String>) {
    const NOT_FOUND: &str = "404 Not Found";
    const OK: &str = "200 OK";
    let c = content.lock().unwrap_or_else(|e| e.into_inner());
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let Some(rest) = path.strip_prefix(&format!("/v2/{REPOSITORY}/")) else {
        return (NOT_FOUND, Vec::new(), None);
    };
    if let Some(_digest) = rest.strip_prefix("referrers/") {
        if !c.referrers_api {
            return (NOT_FOUND, Vec::new(), None);
        }
        let page: usize = query
            .strip_prefix("n=")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let link = c.pages.then(|| format!("{path}?n={}", page + 1));
        return (OK, c.referrers.clone(), link);
    }
    let reference = rest
        .strip_prefix("manifests/")
        .or_else(|| rest.strip_prefix("blobs/"))
        .unwrap_or_default();
    if let Some(body) = c.by_digest.get(reference) {
        return (OK, body.clone(), None);
    }
    if reference.starts_with("sha256-") {
        if reference.ends_with(".sig") || reference.ends_with(".att") {
            if let Some(l) = &c.legacy {
                return (OK, l.clone(), None);
            }
        } else if !c.referrers_api {
            return (OK, c.referrers.clone(), None);
        }
    }
    (NOT_FOUND, Vec::new(), None)
}

/// Serves `data` and verifies the image against it; panics when a verdict
/// is inconsistent with what was served.
pub fn check(data: &[u8]) {
    let r = registry();
    let image = image_manifest().digest();
    let (c, want, managed) = content(data, &image);
    *r.content.lock().unwrap_or_else(|e| e.into_inner()) = c;
    let f = fixture();
    let policy = ImagePolicy {
        verification: if managed {
            f.key.clone()
        } else {
            f.keyless.clone()
        },
        want,
    };
    let reference = format!("{}/{REPOSITORY}@{image}", r.addr);
    let options = VerifyImageOptions {
        now: Some(f.now),
        ..VerifyImageOptions::default()
    };
    let outcome = r.runtime.block_on(verify_image(
        &reference, &policy, &f.root, &r.client, &options,
    ));
    match outcome {
        Ok(verdict) => {
            assert_eq!(
                verdict.digest.to_string(),
                image,
                "a verdict for another digest than the image's"
            );
            assert!(
                !verdict.verified.is_empty(),
                "Ok without a verified candidate"
            );
        }
        Err(e) => {
            // Every failure renders (messages are built from fuzzed text).
            let _ = e.to_string();
        }
    }
}

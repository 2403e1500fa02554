//! Pushing [`OciManifest`]s to a local registry (127.0.0.1 only), for tests
//! that put kit-signed images and signatures where the real registry client
//! finds them. A referrer pushed to a registry that does not answer
//! `OCI-Subject` (no referrers API) is also added to the subject's
//! `sha256-<hex>` fallback-tag index, as cosign does.

use std::time::Duration;

use serde_json::{Value, json};

use crate::cosign::{self, OciManifest};

/// Why a push failed: the request and what the registry answered.
#[derive(Debug, thiserror::Error)]
#[error("push to {url}: {reason}")]
pub struct PushError {
    /// The URL of the failing request.
    pub url: String,
    /// What went wrong.
    pub reason: String,
}

/// Pushes manifests and blobs to one repository of a local registry.
#[derive(Clone, Debug)]
pub struct Pusher {
    http: reqwest::Client,
    base: String,
}

fn err(url: &str, reason: impl ToString) -> PushError {
    PushError {
        url: url.to_owned(),
        reason: reason.to_string(),
    }
}

impl Pusher {
    /// A pusher for `registry` (`127.0.0.1:<port>`, plain http) and `repo`;
    /// refuses any other host so that no test reaches the network.
    pub fn new(registry: &str, repo: &str) -> Result<Self, PushError> {
        let base = format!("http://{registry}/v2/{repo}");
        if !registry.starts_with("127.0.0.1:") {
            return Err(err(
                &base,
                "only registries on 127.0.0.1 are allowed in tests",
            ));
        }
        // reqwest is built without a bundled crypto provider; the test
        // process has none installed unless a binary under test put one in.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| err(&base, e))?;
        Ok(Self { http, base })
    }

    /// Uploads `data` as a blob unless the registry has it already.
    pub async fn blob(&self, data: &[u8]) -> Result<(), PushError> {
        let digest = cosign::digest_of(data);
        let url = format!("{}/blobs/{digest}", self.base);
        let head = self
            .http
            .head(&url)
            .send()
            .await
            .map_err(|e| err(&url, e))?;
        if head.status().is_success() {
            return Ok(());
        }
        let uploads = format!("{}/blobs/uploads/", self.base);
        let start = self
            .http
            .post(&uploads)
            .send()
            .await
            .map_err(|e| err(&uploads, e))?;
        if start.status().as_u16() != 202 {
            return Err(err(&uploads, format!("status {}", start.status())));
        }
        let location = start
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| err(&uploads, "no Location header"))?;
        let mut upload = reqwest::Url::parse(&self.base)
            .and_then(|b| b.join(location))
            .map_err(|e| err(&uploads, e))?;
        upload.query_pairs_mut().append_pair("digest", &digest);
        let done = self
            .http
            .put(upload.clone())
            .header("content-type", "application/octet-stream")
            .body(data.to_vec())
            .send()
            .await
            .map_err(|e| err(upload.as_str(), e))?;
        if done.status().as_u16() != 201 {
            return Err(err(upload.as_str(), format!("status {}", done.status())));
        }
        Ok(())
    }

    /// Pushes `m` (blobs first) under `reference`; returns whether the
    /// registry took note of a `subject` (answered `OCI-Subject`).
    pub async fn manifest(&self, m: &OciManifest, reference: &str) -> Result<bool, PushError> {
        for b in &m.blobs {
            self.blob(b).await?;
        }
        self.put_manifest(reference, m.media_type, m.json.clone())
            .await
    }

    async fn put_manifest(
        &self,
        reference: &str,
        media_type: &str,
        body: Vec<u8>,
    ) -> Result<bool, PushError> {
        let url = format!("{}/manifests/{reference}", self.base);
        let r = self
            .http
            .put(&url)
            .header("content-type", media_type)
            .body(body)
            .send()
            .await
            .map_err(|e| err(&url, e))?;
        if !r.status().is_success() {
            return Err(err(&url, format!("status {}", r.status())));
        }
        Ok(r.headers().contains_key("oci-subject"))
    }

    /// Pushes a referrer of `subject_digest`, and, where the registry has no
    /// referrers API, adds it to the subject's fallback tag index.
    pub async fn referrer(&self, r: &OciManifest, subject_digest: &str) -> Result<(), PushError> {
        if self.manifest(r, &r.digest()).await? {
            return Ok(());
        }
        let tag = subject_digest.replacen(':', "-", 1);
        let url = format!("{}/manifests/{tag}", self.base);
        let existing = self
            .http
            .get(&url)
            .header("accept", cosign::OCI_INDEX)
            .send()
            .await
            .map_err(|e| err(&url, e))?;
        let mut entries: Vec<Value> = if existing.status().is_success() {
            let body = existing.bytes().await.map_err(|e| err(&url, e))?;
            let v: Value = serde_json::from_slice(&body).map_err(|e| err(&url, e))?;
            v.get("manifests")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let fresh: Value =
            serde_json::from_slice(&cosign::fallback_index(&[r])).map_err(|e| err(&url, e))?;
        for e in fresh
            .get("manifests")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !entries.iter().any(|x| x.get("digest") == e.get("digest")) {
                entries.push(e.clone());
            }
        }
        let index = json!({
            "schemaVersion": 2,
            "mediaType": cosign::OCI_INDEX,
            "manifests": entries,
        });
        self.put_manifest(&tag, cosign::OCI_INDEX, index.to_string().into_bytes())
            .await
            .map(|_| ())
    }
}

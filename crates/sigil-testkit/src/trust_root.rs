//! The `trusted_root.json` (and sigstore-python's `ClientTrustConfig`)
//! listing a [`Testkit`]'s services, with configurable validity windows.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use crate::time::rfc3339;
use crate::x509::Name;
use crate::{EPOCH_2020, Testkit};

/// A `validFor` interval (closed), Unix seconds; no end means open-ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidFor {
    /// Start.
    pub start: i64,
    /// End, if any.
    pub end: Option<i64>,
}

impl ValidFor {
    /// From `start`, open-ended.
    pub fn from(start: i64) -> Self {
        ValidFor { start, end: None }
    }

    /// `[start, end]`.
    pub fn between(start: i64, end: i64) -> Self {
        ValidFor {
            start,
            end: Some(end),
        }
    }

    fn to_json(self) -> Value {
        let mut v = json!({"start": rfc3339(self.start)});
        if let Some(end) = self.end {
            crate::json::insert(&mut v, "end", json!(rfc3339(end)));
        }
        v
    }
}

impl Default for ValidFor {
    fn default() -> Self {
        ValidFor::from(EPOCH_2020)
    }
}

/// Which services the trusted root lists, and their windows (`None`: omitted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrustRootSpec {
    /// The Fulcio CA.
    pub fulcio: Option<ValidFor>,
    /// The Rekor v1 log.
    pub rekor_v1: Option<ValidFor>,
    /// The Rekor v2 log.
    pub rekor_v2: Option<ValidFor>,
    /// The trusted CT log.
    pub ctlog: Option<ValidFor>,
    /// The TSA.
    pub tsa: Option<ValidFor>,
}

impl Default for TrustRootSpec {
    fn default() -> Self {
        TrustRootSpec {
            fulcio: Some(ValidFor::default()),
            rekor_v1: Some(ValidFor::default()),
            rekor_v2: Some(ValidFor::default()),
            ctlog: Some(ValidFor::default()),
            tsa: Some(ValidFor::default()),
        }
    }
}

impl TrustRootSpec {
    /// The Fulcio CA and the TSA only: no transparency log, no CT log, as
    /// GitHub's trusted root for private-repository attestations.
    pub fn timestamp_only() -> Self {
        TrustRootSpec {
            fulcio: Some(ValidFor::default()),
            rekor_v1: None,
            rekor_v2: None,
            ctlog: None,
            tsa: Some(ValidFor::default()),
        }
    }
}

fn subject(name: &Name) -> Value {
    json!({
        "organization": name.organization.clone().unwrap_or_default(),
        "commonName": name.common_name.clone().unwrap_or_default(),
    })
}

fn chain(certs: &[Vec<u8>]) -> Value {
    json!({"certificates": certs.iter().map(|c| json!({"rawBytes": B64.encode(c)})).collect::<Vec<_>>()})
}

fn tlog(base_url: &str, key: &crate::KeyPair, log_id: &[u8; 32], valid: ValidFor) -> Value {
    json!({
        "baseUrl": base_url,
        "hashAlgorithm": "SHA2_256",
        "publicKey": {
            "rawBytes": B64.encode(key.spki_der()),
            "keyDetails": key.key_details(),
            "validFor": valid.to_json(),
        },
        "logId": {"keyId": B64.encode(log_id)},
    })
}

/// The trusted root JSON value.
pub fn trusted_root(kit: &Testkit, spec: &TrustRootSpec) -> Value {
    let mut tlogs = Vec::new();
    if let Some(v) = spec.rekor_v1 {
        tlogs.push(tlog(
            &kit.rekor_v1.base_url,
            &kit.rekor_v1.key,
            &kit.rekor_v1.log_id(),
            v,
        ));
    }
    if let Some(v) = spec.rekor_v2 {
        tlogs.push(tlog(
            &kit.rekor_v2.base_url,
            &kit.rekor_v2.key,
            &kit.rekor_v2.log_id(),
            v,
        ));
    }
    let mut cas = Vec::new();
    if let Some(v) = spec.fulcio {
        cas.push(json!({
            "subject": subject(&kit.fulcio.root.name),
            "uri": kit.fulcio.uri,
            "certChain": chain(&kit.fulcio.chain_der()),
            "validFor": v.to_json(),
        }));
    }
    let mut ctlogs = Vec::new();
    if let Some(v) = spec.ctlog {
        ctlogs.push(tlog(
            &kit.ct_log.base_url,
            &kit.ct_log.key,
            &kit.ct_log.log_id(),
            v,
        ));
    }
    let mut tsas = Vec::new();
    if let Some(v) = spec.tsa {
        tsas.push(json!({
            "subject": subject(&kit.tsa.root.name),
            "uri": kit.tsa.uri,
            "certChain": chain(&kit.tsa.chain_der()),
            "validFor": v.to_json(),
        }));
    }
    json!({
        "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
        "tlogs": tlogs,
        "certificateAuthorities": cas,
        "ctlogs": ctlogs,
        "timestampAuthorities": tsas,
    })
}

fn service(url: &str, major: u32) -> Value {
    json!({
        "url": url,
        "majorApiVersion": major,
        "validFor": {"start": rfc3339(EPOCH_2020)},
        "operator": "sigil-testkit",
    })
}

/// A `ClientTrustConfig` (trusted root plus a v0.2 signing config naming the kit's services).
pub fn client_trust_config(kit: &Testkit, spec: &TrustRootSpec) -> Value {
    json!({
        "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
        "trustedRoot": trusted_root(kit, spec),
        "signingConfig": {
            "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
            "caUrls": [service(&kit.fulcio.uri, 1)],
            "oidcUrls": [service("https://oauth2.sigil.test/auth", 1)],
            "rekorTlogUrls": [service(&kit.rekor_v1.base_url, 1)],
            "tsaUrls": [service(&kit.tsa.uri, 1)],
            "rekorTlogConfig": {"selector": "ANY"},
            "tsaConfig": {"selector": "ANY"},
        },
    })
}

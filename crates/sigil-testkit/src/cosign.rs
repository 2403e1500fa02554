//! cosign's OCI storage of signatures, built from kit material, for tests
//! that push keyless signatures to real registries: a small image to sign,
//! the new format (an OCI 1.1 referrer manifest holding a Sigstore bundle, as
//! cosign v3 writes it) and the legacy format (a `sha256-<hex>.sig` manifest
//! whose simple-signing layer carries the signature, certificate, chain,
//! Rekor bundle and RFC 3161 annotations, as cosign writes them).
//!
//! Everything here is bytes and digests; pushing them is the caller's job.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::bundle::{BundleSpec, Content, IN_TOTO_PAYLOAD_TYPE, MintedBundle, in_toto_statement};
use crate::json::canonical;
use crate::keys::pem;
use crate::rekor::TlogEntry;
use crate::{Testkit, TestkitError};

/// OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image index media type.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI image config media type.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// The OCI empty descriptor's media type (config of artifacts).
pub const OCI_EMPTY: &str = "application/vnd.oci.empty.v1+json";
/// Media type and artifact type cosign v3 gives a bundle referrer and its layer.
pub const BUNDLE_V03: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// Layer media type of a legacy simple-signing payload.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The predicate type cosign v3 signs an image with.
pub const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";

/// Annotation: base64 signature over the payload.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Annotation: PEM leaf certificate.
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// Annotation: PEM chain above the leaf (intermediate, root).
pub const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
/// Annotation: the legacy Rekor bundle (SET and entry).
pub const REKOR_BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
/// Annotation: `{"SignedRFC3161Timestamp":"<base64 TimeStampResp>"}`.
pub const RFC3161_ANNOTATION: &str = "dev.sigstore.cosign/rfc3161timestamp";

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A manifest and the blobs (config and layers) it references, ready to push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciManifest {
    /// The manifest's media type (its `Content-Type` when pushed).
    pub media_type: &'static str,
    /// The manifest bytes, exactly as pushed.
    pub json: Vec<u8>,
    /// Config and layer blobs.
    pub blobs: Vec<Vec<u8>>,
}

impl OciManifest {
    /// `sha256:<hex>` of the manifest bytes.
    pub fn digest(&self) -> String {
        digest_of(&self.json)
    }

    /// The raw SHA-256 of the manifest bytes.
    pub fn sha256(&self) -> [u8; 32] {
        Sha256::digest(&self.json).into()
    }

    /// A descriptor of this manifest (for `subject` or an index entry).
    pub fn descriptor(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": self.digest(), "size": self.json.len()})
    }
}

fn descriptor(media_type: &str, data: &[u8]) -> Value {
    json!({"mediaType": media_type, "digest": digest_of(data), "size": data.len()})
}

fn manifest_bytes(v: &Value) -> Vec<u8> {
    canonical(v).into_bytes()
}

/// A tiny single-layer image whose content (and so digest) depends on `label`.
pub fn image(label: &str) -> OciManifest {
    let layer = format!("sigil-testkit image {label}\n").into_bytes();
    let config = manifest_bytes(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [digest_of(&layer)]},
    }));
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(OCI_CONFIG, &config),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", &layer)],
    });
    OciManifest {
        media_type: OCI_MANIFEST,
        json: manifest_bytes(&manifest),
        blobs: vec![config, layer],
    }
}

/// New format: a keyless Sigstore bundle over an in-toto statement whose
/// subject is `image_sha256` and whose predicate type is cosign's signature
/// predicate, as `cosign sign` v3 makes it.
pub fn image_signature_bundle(
    kit: &Testkit,
    spec: &BundleSpec,
    image_sha256: &[u8; 32],
) -> Result<MintedBundle, TestkitError> {
    kit.sign(
        spec,
        Content::Dsse {
            payload_type: IN_TOTO_PAYLOAD_TYPE.to_owned(),
            payload: in_toto_statement(image_sha256, COSIGN_SIGN_PREDICATE, json!({})),
        },
    )
}

/// The referrer manifest cosign v3 pushes for a bundle: artifact type and
/// layer media type `application/vnd.dev.sigstore.bundle.v0.3+json`, the
/// empty config (whose descriptor cosign v3.1 also gives the artifact type),
/// `subject` naming the image, and the content and predicate type
/// annotations.
pub fn bundle_referrer(bundle_json: &[u8], predicate_type: &str, subject: Value) -> OciManifest {
    let empty = b"{}".to_vec();
    let mut config = descriptor(OCI_EMPTY, &empty);
    if let Some(obj) = config.as_object_mut() {
        obj.insert("artifactType".into(), json!(BUNDLE_V03));
    }
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": BUNDLE_V03,
        "config": config,
        "layers": [descriptor(BUNDLE_V03, bundle_json)],
        "subject": subject,
        "annotations": {
            "dev.sigstore.bundle.content": "dsse-envelope",
            "dev.sigstore.bundle.predicateType": predicate_type,
            "org.opencontainers.image.created": "2025-10-09T08:53:20Z",
        },
    });
    OciManifest {
        media_type: OCI_MANIFEST,
        json: manifest_bytes(&manifest),
        blobs: vec![empty, bundle_json.to_vec()],
    }
}

/// The referrers tag-schema index (`sha256-<hex>` tag) listing `referrers`,
/// for registries without the referrers API.
pub fn fallback_index(referrers: &[&OciManifest]) -> Vec<u8> {
    let entries: Vec<Value> = referrers
        .iter()
        .map(|m| {
            let mut d = m.descriptor();
            let artifact_type = serde_json::from_slice::<Value>(&m.json)
                .ok()
                .and_then(|v| v.get("artifactType").cloned());
            if let (Some(t), Some(obj)) = (artifact_type, d.as_object_mut()) {
                obj.insert("artifactType".into(), t);
            }
            d
        })
        .collect();
    manifest_bytes(&json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}))
}

/// The simple-signing payload cosign signs for `image_digest`
/// (`sha256:<hex>`) pushed as `docker_reference`, byte for byte as Go's
/// `json.Marshal` writes it.
pub fn simple_signing_payload(docker_reference: &str, image_digest: &str) -> Vec<u8> {
    format!(
        "{{\"critical\":{{\"identity\":{{\"docker-reference\":{}}},\"image\":{{\"docker-manifest-digest\":{}}},\"type\":\"cosign container image signature\"}},\"optional\":null}}",
        Value::String(docker_reference.to_owned()),
        Value::String(image_digest.to_owned()),
    )
    .into_bytes()
}

/// The legacy Rekor bundle annotation of a Rekor v1 entry:
/// `{"SignedEntryTimestamp":..,"Payload":{"body","integratedTime","logIndex","logID"}}`.
/// `None` when the entry has no SET or integrated time (not a Rekor v1 entry).
pub fn rekor_bundle_annotation(entry: &TlogEntry) -> Option<String> {
    let set = entry.set.as_ref()?;
    let integrated_time = entry.integrated_time?;
    Some(
        json!({
            "SignedEntryTimestamp": B64.encode(set),
            "Payload": {
                "body": B64.encode(&entry.body),
                "integratedTime": integrated_time,
                "logIndex": entry.log_index,
                "logID": hex::encode(entry.log_id),
            },
        })
        .to_string(),
    )
}

/// The RFC 3161 annotation: Go's JSON of `{SignedRFC3161Timestamp []byte}`.
pub fn rfc3161_annotation(timestamp_response: &[u8]) -> String {
    json!({"SignedRFC3161Timestamp": B64.encode(timestamp_response)}).to_string()
}

/// A legacy `.sig` layer: the payload and its annotations.
#[derive(Clone, Debug)]
pub struct LegacySignature {
    /// The simple-signing payload (the layer blob).
    pub payload: Vec<u8>,
    /// The layer annotations.
    pub annotations: BTreeMap<String, String>,
    /// What was minted (signature, leaf, log entry, timestamp).
    pub minted: MintedBundle,
}

/// Signs the simple-signing payload of `image_digest` per `spec` (keyless
/// specs get certificate and chain annotations; a Rekor v1 log gives the
/// Rekor bundle annotation; an RFC 3161 timestamp, taken over the raw
/// signature bytes as cosign does, gives the timestamp annotation).
pub fn legacy_signature(
    kit: &Testkit,
    spec: &BundleSpec,
    docker_reference: &str,
    image_digest: &str,
) -> Result<LegacySignature, TestkitError> {
    let payload = simple_signing_payload(docker_reference, image_digest);
    let minted = kit.sign(spec, Content::Message(payload.clone()))?;
    let mut annotations = BTreeMap::new();
    annotations.insert(
        SIGNATURE_ANNOTATION.to_owned(),
        B64.encode(&minted.signature),
    );
    if let Some(leaf) = &minted.leaf {
        annotations.insert(CERTIFICATE_ANNOTATION.to_owned(), leaf.cert_pem());
        let chain = format!(
            "{}{}",
            pem("CERTIFICATE", &kit.fulcio.intermediate.cert_der),
            pem("CERTIFICATE", &kit.fulcio.root.cert_der)
        );
        annotations.insert(CHAIN_ANNOTATION.to_owned(), chain);
    }
    if let Some(bundle) = minted.tlog_entry.as_ref().and_then(rekor_bundle_annotation) {
        annotations.insert(REKOR_BUNDLE_ANNOTATION.to_owned(), bundle);
    }
    if let Some(ts) = &minted.timestamp {
        annotations.insert(RFC3161_ANNOTATION.to_owned(), rfc3161_annotation(ts));
    }
    Ok(LegacySignature {
        payload,
        annotations,
        minted,
    })
}

/// The `sha256-<hex>.sig` manifest holding `layers`, with the image config
/// go-containerregistry writes for it.
pub fn legacy_signature_manifest(layers: &[LegacySignature]) -> OciManifest {
    let config = manifest_bytes(&json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {
            "type": "layers",
            "diff_ids": layers.iter().map(|l| digest_of(&l.payload)).collect::<Vec<_>>(),
        },
        "config": {},
    }));
    let layer_descriptors: Vec<Value> = layers
        .iter()
        .map(|l| {
            let mut d = descriptor(SIMPLE_SIGNING, &l.payload);
            if let Some(obj) = d.as_object_mut() {
                obj.insert("annotations".into(), json!(l.annotations));
            }
            d
        })
        .collect();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(OCI_CONFIG, &config),
        "layers": layer_descriptors,
    });
    let mut blobs = vec![config];
    blobs.extend(layers.iter().map(|l| l.payload.clone()));
    OciManifest {
        media_type: OCI_MANIFEST,
        json: manifest_bytes(&manifest),
        blobs,
    }
}

/// The legacy signature tag of an image digest (`sha256:<hex>` → `sha256-<hex>.sig`).
pub fn legacy_signature_tag(image_digest: &str) -> String {
    format!("{}.sig", image_digest.replacen(':', "-", 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TimestampSpec;

    #[test]
    fn simple_signing_payloads_are_what_cosign_signs() {
        let p = simple_signing_payload("r.io/app", "sha256:00");
        assert_eq!(
            String::from_utf8(p).unwrap(),
            r#"{"critical":{"identity":{"docker-reference":"r.io/app"},"image":{"docker-manifest-digest":"sha256:00"},"type":"cosign container image signature"},"optional":null}"#
        );
    }

    #[test]
    fn legacy_keyless_signatures_carry_every_cosign_annotation() {
        let kit = Testkit::new(3);
        let spec = BundleSpec {
            timestamp: TimestampSpec::embedded(),
            ..BundleSpec::default()
        };
        let img = image("a");
        let sig = legacy_signature(&kit, &spec, "r.io/app", &img.digest()).unwrap();
        for a in [
            SIGNATURE_ANNOTATION,
            CERTIFICATE_ANNOTATION,
            CHAIN_ANNOTATION,
            REKOR_BUNDLE_ANNOTATION,
            RFC3161_ANNOTATION,
        ] {
            assert!(sig.annotations.contains_key(a), "{a}");
        }
        let bundle: Value =
            serde_json::from_str(&sig.annotations[REKOR_BUNDLE_ANNOTATION]).unwrap();
        assert!(bundle["Payload"]["integratedTime"].is_i64());
        let m = legacy_signature_manifest(&[sig]);
        let v: Value = serde_json::from_slice(&m.json).unwrap();
        assert_eq!(v["layers"][0]["mediaType"], SIMPLE_SIGNING);
        assert_eq!(m.blobs.len(), 2);
    }

    #[test]
    fn bundle_referrers_name_their_subject_and_list_in_the_fallback_index() {
        let img = image("b");
        let r = bundle_referrer(b"{}", COSIGN_SIGN_PREDICATE, img.descriptor());
        let v: Value = serde_json::from_slice(&r.json).unwrap();
        assert_eq!(v["subject"]["digest"], img.digest());
        assert_eq!(v["artifactType"], BUNDLE_V03);
        let idx: Value = serde_json::from_slice(&fallback_index(&[&r])).unwrap();
        assert_eq!(idx["manifests"][0]["artifactType"], BUNDLE_V03);
        assert_eq!(idx["manifests"][0]["digest"], r.digest());
    }
}

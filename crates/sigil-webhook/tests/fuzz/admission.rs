//! The admission property: whatever the AdmissionReview body, `/validate`
//! never allows an object that would run an image the judge did not approve,
//! and `/mutate` only ever pins images (tag → tag@digest) in place.
//!
//! The oracle is independent of the webhook's own JSON walking: it decodes
//! the object with k8s-openapi's typed structs, as the API server's own
//! decoding would, and lists every image the kubelet would pull (containers,
//! init and ephemeral containers, image volumes) in every workload kind.
//! Objects the typed structs cannot decode never reach a webhook from a real
//! API server, so for them only "no panic" is checked.
//!
//! Shared by the `admission_review` fuzz target (`fuzz/src/admission.rs`
//! includes this file) and `tests/fuzz_regressions.rs`, so the regression
//! tests check exactly the property the fuzzer checked.

// Test glue: a violated property or a broken harness must abort loudly.
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    unreachable_pub,
    dead_code,
    missing_docs
)]

use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, PodSpec, ReplicationController};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use sigil_webhook::admit::{Admission, AdmissionConfig, Endpoint};
use sigil_webhook::judge::{ImageJudge, ObjectInfo, PinnedImage, PullSecrets, Verdict, Versions};
use sigil_webhook::metrics::Metrics;
use sigil_webhook::review::Answer;
use sigil_webhook::secrets::NoPullSecrets;
use tokio::time::Instant;

/// Images whose name contains this are denied by the fake judge.
pub const DENIED_MARK: &str = "evil";

/// Whether the fake judge approves `image`.
pub fn approves(image: &str) -> bool {
    !image.contains(DENIED_MARK)
}

/// The digest the fake judge resolves a tag to.
pub fn digest_of(image: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(image.as_bytes())))
}

/// Selects every image; allows exactly those [`approves`] accepts.
pub struct FakeJudge;

impl ImageJudge for FakeJudge {
    async fn judge(
        &self,
        image: &PinnedImage,
        _object: &ObjectInfo,
        _secrets: &PullSecrets,
        _deadline: Instant,
    ) -> Verdict {
        if approves(&image.image) {
            Verdict::allow(vec!["fuzz".into()])
        } else {
            Verdict::deny(vec!["fuzz".into()], vec!["denied by the fuzz judge".into()])
        }
    }

    async fn resolve(
        &self,
        image: &str,
        _secrets: &PullSecrets,
        _deadline: Instant,
    ) -> Result<String, String> {
        Ok(digest_of(image))
    }

    fn matches(&self, _image: &str, _object: &ObjectInfo) -> bool {
        true
    }

    fn no_match(&self, _image: &str) -> Verdict {
        Verdict::deny(Vec::new(), vec!["no policy".into()])
    }

    fn versions(&self) -> Versions {
        Versions {
            policy_hash: "fuzz".into(),
            trust_root_version: "fuzz".into(),
        }
    }

    fn ready(&self) -> bool {
        true
    }
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    admission: Admission<FakeJudge, NoPullSecrets>,
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let admission = Admission::new(
            Arc::new(FakeJudge),
            NoPullSecrets,
            // Templates pinned too, so that every kind's patch is checked.
            AdmissionConfig {
                pin_templates: true,
                ..AdmissionConfig::default()
            },
            Arc::new(Metrics::new()),
        );
        Harness { runtime, admission }
    })
}

/// Answers `body` on `endpoint` with the real admission logic and the fake judge.
pub fn answer(endpoint: Endpoint, body: &[u8]) -> Answer {
    let h = harness();
    h.runtime
        .block_on(h.admission.review(endpoint, body, Instant::now()))
}

/// Every image a pod spec makes the kubelet pull.
fn spec_images(spec: &PodSpec) -> Vec<String> {
    let mut out = Vec::new();
    for c in spec.init_containers.iter().flatten() {
        out.extend(c.image.clone());
    }
    for c in &spec.containers {
        out.extend(c.image.clone());
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        out.extend(c.image.clone());
    }
    for v in spec.volumes.iter().flatten() {
        out.extend(v.image.as_ref().and_then(|i| i.reference.clone()));
    }
    out.retain(|i| !i.is_empty());
    out
}

fn typed<T: serde::de::DeserializeOwned>(
    mut object: Value,
    api_version: &str,
    kind: &str,
) -> Option<T> {
    // The API server always writes these; the webhook reads the kind from
    // the request, so the oracle does too.
    let map = object.as_object_mut()?;
    map.insert("apiVersion".into(), Value::from(api_version));
    map.insert("kind".into(), Value::from(kind));
    serde_json::from_value(object).ok()
}

/// The images an object of `group`/`kind` runs, or `None` when it is not a
/// kind with a pod spec or does not decode as one.
pub fn object_images(group: &str, kind: &str, object: &Value) -> Option<Vec<String>> {
    let o = object.clone();
    let spec: Option<PodSpec> = match (group, kind) {
        ("", "Pod") => typed::<Pod>(o, "v1", kind)?.spec,
        ("", "ReplicationController") => typed::<ReplicationController>(o, "v1", kind)?
            .spec
            .and_then(|s| s.template)
            .and_then(|t| t.spec),
        ("apps", "Deployment") => typed::<Deployment>(o, "apps/v1", kind)?
            .spec
            .and_then(|s| s.template.spec),
        ("apps", "ReplicaSet") => typed::<ReplicaSet>(o, "apps/v1", kind)?
            .spec
            .and_then(|s| s.template)
            .and_then(|t| t.spec),
        ("apps", "StatefulSet") => typed::<StatefulSet>(o, "apps/v1", kind)?
            .spec
            .and_then(|s| s.template.spec),
        ("apps", "DaemonSet") => typed::<DaemonSet>(o, "apps/v1", kind)?
            .spec
            .and_then(|s| s.template.spec),
        ("batch", "Job") => typed::<Job>(o, "batch/v1", kind)?
            .spec
            .and_then(|s| s.template.spec),
        ("batch", "CronJob") => typed::<CronJob>(o, "batch/v1", kind)?
            .spec
            .and_then(|s| s.job_template.spec)
            .and_then(|s| s.template.spec),
        _ => return None,
    };
    Some(spec.as_ref().map(spec_images).unwrap_or_default())
}

/// The parts of a review the oracle needs.
struct Request {
    group: String,
    kind: String,
    operation: String,
    namespace: String,
    sub_resource: String,
    object: Option<Value>,
    old_object: Option<Value>,
}

fn request(body: &[u8]) -> Option<Request> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let r = v.get("request")?;
    let s = |p: &str| {
        r.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some(Request {
        group: s("/kind/group"),
        kind: s("/kind/kind"),
        operation: s("/operation"),
        namespace: s("/namespace"),
        sub_resource: s("/subResource"),
        object: r.get("object").filter(|o| !o.is_null()).cloned(),
        old_object: r.get("oldObject").filter(|o| !o.is_null()).cloned(),
    })
}

/// Answers `body` on both endpoints and checks the properties; panics with
/// a description on a violation.
pub fn check(body: &[u8]) {
    let validate = answer(Endpoint::Validate, body);
    let mutate = answer(Endpoint::Mutate, body);
    let Some(req) = request(body) else {
        return;
    };
    // Requests the webhook legitimately leaves alone: nothing new runs.
    if !matches!(req.operation.as_str(), "CREATE" | "UPDATE")
        || AdmissionConfig::default()
            .excluded_namespaces
            .contains(&req.namespace)
        || !(req.sub_resource.is_empty()
            || (req.sub_resource == "ephemeralcontainers"
                && req.group.is_empty()
                && req.kind == "Pod"))
    {
        return;
    }
    let Some(object) = &req.object else {
        return;
    };
    let Some(images) = object_images(&req.group, &req.kind, object) else {
        return;
    };
    let old = match (&req.operation[..], &req.old_object) {
        ("UPDATE", Some(o)) => match object_images(&req.group, &req.kind, o) {
            Some(i) => i,
            // Not an object a real API server would send as oldObject.
            None => return,
        },
        _ => Vec::new(),
    };
    if validate.response.allowed {
        for image in &images {
            assert!(
                approves(image) || old.contains(image),
                "/validate allowed {} {} running image {image:?}, which the judge denies \
                 (images the object runs: {images:?}; warnings: {:?})",
                req.kind,
                req.operation,
                validate.response.warnings,
            );
        }
    }
    if let Some(patch) = &mutate.response.patch {
        assert!(mutate.response.allowed, "/mutate denied with a patch");
        check_patch(&req, object, &images, patch);
    }
}

fn check_patch(req: &Request, object: &Value, images: &[String], patch: &str) {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .expect("/mutate's patch is base64");
    let patch: json_patch::Patch =
        serde_json::from_slice(&bytes).expect("/mutate's patch is a JSONPatch");
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch)
        .unwrap_or_else(|e| panic!("/mutate's patch does not apply to the object: {e}"));
    let after =
        object_images(&req.group, &req.kind, &patched).expect("the patched object still decodes");
    assert_eq!(
        after.len(),
        images.len(),
        "/mutate changed the number of images: {images:?} -> {after:?}"
    );
    for (before, now) in images.iter().zip(&after) {
        let pinned = format!("{before}@{}", digest_of(before));
        assert!(
            now == before || *now == pinned,
            "/mutate rewrote image {before:?} into {now:?} (expected it unchanged or {pinned:?})"
        );
    }
}

//! Writes the seed corpora into `<corpus>/<target>/`: material minted by the testkit with the
//! fuzz fixture's seed, the sigstore-conformance cases (read from where
//! `sigil-testdata` finds them, never copied into the repository), and the
//! repository's own fixtures. Seeds are named `seed-*`; whatever the fuzzer
//! added to a corpus is left alone.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::tamper::{subjects, testkit_content, testkit_specs};
use crate::{ARTIFACT, case_dirs, conformance_dir, fixture, join};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use sigil_testkit::cosign;
use sigil_testkit::tsa::TimestampRequest;
use sigil_testkit::{
    BundleSpec, BundleVersion, ChainSpec, Content, DEFAULT_SIGNING_TIME, IN_TOTO_PAYLOAD_TYPE,
    SctSpec, TimestampSpec, TlogSpec, in_toto_statement,
};

struct Corpus {
    root: PathBuf,
    count: BTreeMap<&'static str, usize>,
}

impl Corpus {
    fn add(&mut self, target: &'static str, name: &str, bytes: &[u8]) {
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        std::fs::write(dir.join(format!("seed-{safe}")), bytes).expect("write seed");
        *self.count.entry(target).or_default() += 1;
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("fuzz/ is inside the repository")
        .to_path_buf()
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    out.retain(|p| p.is_file() && p.extension().is_some_and(|e| e == ext));
    out.sort();
    out
}

/// The files below `dirs`, at any depth, whose extension is one of `exts`.
fn files_under(dirs: &[PathBuf], exts: &[&str]) -> Vec<PathBuf> {
    let mut stack = dirs.to_vec();
    let mut out = Vec::new();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for p in rd.filter_map(Result::ok).map(|e| e.path()) {
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| exts.iter().any(|x| e == *x)) {
                out.push(p);
            }
        }
    }
    out
}

fn name_of(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Every string under `key` anywhere in `v`.
fn strings_at(v: &Value, key: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match v {
                    Value::String(s) if k == key => out.push(s.clone()),
                    _ => strings_at(v, key, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| strings_at(v, key, out)),
        _ => {}
    }
}

fn verifier_seeds(c: &mut Corpus) {
    let f = fixture();
    let kit = &f.kit;
    let mut bundles: Vec<(String, Value)> = Vec::new();
    let mut specs = testkit_specs();
    specs.push((
        "message-v0.2",
        BundleSpec {
            version: BundleVersion::V02,
            chain: ChainSpec::WithIntermediate,
            ..BundleSpec::default()
        },
        false,
    ));
    specs.push((
        "message-v0.3-alt-untrusted-sct",
        BundleSpec {
            version: BundleVersion::V03Alt,
            sct: SctSpec::Untrusted,
            ..BundleSpec::default()
        },
        false,
    ));
    specs.push((
        "message-sct-extensions",
        BundleSpec {
            sct: SctSpec::WithExtensions(vec![0, 1, 2, 3]),
            ..BundleSpec::default()
        },
        false,
    ));
    specs.push((
        "email-no-sct",
        BundleSpec {
            sct: SctSpec::None,
            ..BundleSpec::email("dev@sigil.test", "https://accounts.sigil.test")
        },
        false,
    ));
    specs.push((
        "no-tlog-tsa",
        BundleSpec {
            tlog: TlogSpec::None,
            timestamp: TimestampSpec::embedded(),
            ..BundleSpec::default()
        },
        false,
    ));
    for (name, spec, dsse) in &specs {
        let minted = f.mint(spec, testkit_content(*dsse));
        c.add(
            "bundle_json",
            &format!("testkit-{name}"),
            minted.json.as_bytes(),
        );
        if let Some(leaf) = &minted.leaf {
            c.add(
                "certificate_sct",
                &format!("testkit-leaf-{name}"),
                &leaf.cert_der,
            );
            c.add(
                "der_rfc3161",
                &format!("testkit-leaf-{name}"),
                &leaf.cert_der,
            );
            let pem = format!(
                "{}{}",
                leaf.cert_pem(),
                pem("CERTIFICATE", &kit.fulcio.intermediate.cert_der)
            );
            c.add(
                "certificate_sct",
                &format!("testkit-pem-{name}"),
                pem.as_bytes(),
            );
        }
        if let Some(ts) = &minted.timestamp {
            c.add(
                "der_rfc3161",
                &format!("testkit-bundle-{name}"),
                &join(&[&minted.signature, ts]),
            );
        }
        bundles.push((format!("testkit-{name}"), minted.value()));
        if *dsse && let Some(entry) = &minted.tlog_entry {
            dsse_seed(c, name, &minted.value(), &minted, entry);
        }
    }
    for der in kit
        .fulcio
        .chain_der()
        .iter()
        .chain(kit.tsa.chain_der().iter())
    {
        c.add("certificate_sct", &format!("testkit-ca-{}", der.len()), der);
    }
    for embed in [true, false] {
        let ts = kit.tsa.timestamp(&TimestampRequest {
            message: ARTIFACT.to_vec(),
            gen_time: DEFAULT_SIGNING_TIME,
            embed_certs: embed,
            imprint_override: None,
        });
        c.add("der_rfc3161", &format!("testkit-token-certs-{embed}"), &ts);
        c.add(
            "der_rfc3161",
            &format!("testkit-bare-token-{embed}"),
            &sigil_testkit::tsa::token_of(&ts),
        );
    }
    if let Some(cases) = conformance_dir() {
        for dir in case_dirs(&cases) {
            let name = name_of(&dir);
            let Ok(bytes) = std::fs::read(dir.join("bundle.sigstore.json")) else {
                continue;
            };
            c.add("bundle_json", &format!("conformance-{name}"), &bytes);
            if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                bundles.push((format!("conformance-{name}"), v));
            }
        }
    }
    for (name, v) in &bundles {
        let mut raw = Vec::new();
        strings_at(v, "rawBytes", &mut raw);
        for (i, r) in raw.iter().enumerate() {
            if let Ok(der) = B64.decode(r) {
                c.add("certificate_sct", &format!("{name}-cert{i}"), &der);
            }
        }
        let mut notes = Vec::new();
        strings_at(v, "envelope", &mut notes);
        for (i, n) in notes.iter().enumerate() {
            c.add("checkpoint", &format!("{name}-{i}"), n.as_bytes());
        }
        let mut tokens = Vec::new();
        strings_at(v, "signedTimestamp", &mut tokens);
        let mut sigs = Vec::new();
        strings_at(v, "signature", &mut sigs);
        strings_at(v, "sig", &mut sigs);
        let signature = sigs
            .first()
            .and_then(|s| B64.decode(s).ok())
            .unwrap_or_default();
        for (i, t) in tokens.iter().enumerate() {
            if let Ok(der) = B64.decode(t) {
                c.add(
                    "der_rfc3161",
                    &format!("{name}-{i}"),
                    &join(&[&signature, &der]),
                );
            }
        }
        if let Some(env) = v.get("dsseEnvelope") {
            c.add(
                "dsse_statement",
                &format!("{name}-envelope"),
                env.to_string().as_bytes(),
            );
            if let Some(p) = env
                .get("payload")
                .and_then(Value::as_str)
                .and_then(|p| B64.decode(p).ok())
            {
                c.add("dsse_statement", &format!("{name}-statement"), &p);
            }
        }
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = B64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A legacy `.att` layer: the DSSE envelope and cosign's annotations.
fn dsse_seed(
    c: &mut Corpus,
    name: &str,
    bundle: &Value,
    minted: &sigil_testkit::MintedBundle,
    entry: &sigil_testkit::rekor::TlogEntry,
) {
    let Some(env) = bundle.get("dsseEnvelope") else {
        return;
    };
    let mut annotations = BTreeMap::new();
    if let Some(leaf) = &minted.leaf {
        annotations.insert(cosign::CERTIFICATE_ANNOTATION.to_string(), leaf.cert_pem());
    }
    if let Some(a) = cosign::rekor_bundle_annotation(entry) {
        annotations.insert(cosign::REKOR_BUNDLE_ANNOTATION.to_string(), a);
    }
    let annotations = serde_json::to_vec(&annotations).unwrap();
    c.add(
        "dsse_statement",
        &format!("testkit-att-{name}"),
        &join(&[env.to_string().as_bytes(), &annotations]),
    );
}

/// A referrer manifest for `bundle` with digest placeholders (see
/// `sigil_fuzz::oci`): config `@doc:{config}`, layer `@doc:{layer}`.
fn referrer_manifest(predicate: &str, config: usize, layer: usize, artifact_type: &str) -> Vec<u8> {
    json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": artifact_type,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": format!("@doc:{config}"), "size": 2},
        "layers": [{"mediaType": artifact_type, "digest": format!("@doc:{layer}"), "size": 1}],
        "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "@image", "size": 1},
        "annotations": {"dev.sigstore.bundle.content": "dsse-envelope", "dev.sigstore.bundle.predicateType": predicate},
    })
    .to_string()
    .into_bytes()
}

fn index(entries: &[(usize, &str)]) -> Vec<u8> {
    let manifests: Vec<Value> = entries
        .iter()
        .map(|(doc, at)| {
            json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("@doc:{doc}"), "size": 1, "artifactType": at})
        })
        .collect();
    json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests})
        .to_string()
        .into_bytes()
}

fn legacy_manifest(
    layers: &[(usize, &BTreeMap<String, String>)],
    media: &str,
    config: usize,
) -> Vec<u8> {
    let layers: Vec<Value> = layers
        .iter()
        .map(|(doc, ann)| json!({"mediaType": media, "digest": format!("@doc:{doc}"), "size": 1, "annotations": ann}))
        .collect();
    json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("@doc:{config}"), "size": 2},
        "layers": layers,
    })
    .to_string()
    .into_bytes()
}

fn oci_seeds(c: &mut Corpus) {
    use crate::oci::{ATTESTATION_PREDICATE, image_manifest};
    const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
    let f = fixture();
    let image = image_manifest();
    let sha = image.sha256();
    let empty = b"{}".as_slice();
    for (label, spec, control) in [
        ("keyless", BundleSpec::default(), ""),
        ("key", BundleSpec::managed_key(), "key"),
        ("rekor2", BundleSpec::rekor_v2(), ""),
    ] {
        let sig = cosign::image_signature_bundle(&f.kit, &spec, &sha).expect("mints");
        let manifest = referrer_manifest(cosign::COSIGN_SIGN_PREDICATE, 1, 2, BUNDLE);
        let list = index(&[(0, BUNDLE)]);
        for mode in [
            control.to_string(),
            format!("{control} fallback"),
            format!("{control} pages"),
        ] {
            c.add(
                "oci_registry",
                &format!("new-sig-{label}-{}", mode.trim().replace(' ', "-")),
                &join(&[
                    mode.as_bytes(),
                    &list,
                    b"",
                    &manifest,
                    empty,
                    sig.json.as_bytes(),
                ]),
            );
        }
        // Legacy `.sig` layers, and cosign v2's OCI 1.1 referrer of them.
        let legacy = cosign::legacy_signature(&f.kit, &spec, "127.0.0.1/fuzz/app", &image.digest())
            .expect("mints");
        let m = legacy_manifest(
            &[(0, &legacy.annotations)],
            "application/vnd.dev.cosign.simplesigning.v1+json",
            1,
        );
        c.add(
            "oci_registry",
            &format!("legacy-sig-{label}"),
            &join(&[
                control.as_bytes(),
                br#"{"manifests":[]}"#,
                &m,
                &legacy.payload,
                empty,
            ]),
        );
        let exp = {
            let mut v: Value = serde_json::from_slice(&legacy_manifest(
                &[(1, &legacy.annotations)],
                "application/vnd.dev.cosign.simplesigning.v1+json",
                2,
            ))
            .unwrap();
            v["artifactType"] = json!("application/vnd.dev.cosign.artifact.sig.v1+json");
            v["subject"] = json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "@image", "size": 1});
            v.to_string().into_bytes()
        };
        c.add(
            "oci_registry",
            &format!("exp-oci11-sig-{label}"),
            &join(&[
                control.as_bytes(),
                &index(&[(0, "application/vnd.dev.cosign.artifact.sig.v1+json")]),
                b"",
                &exp,
                &legacy.payload,
                empty,
            ]),
        );
        // A new-format attestation and a legacy `.att` envelope.
        let att = f.mint(
            &spec,
            Content::Dsse {
                payload_type: IN_TOTO_PAYLOAD_TYPE.into(),
                payload: in_toto_statement(
                    &sha,
                    ATTESTATION_PREDICATE,
                    json!({"buildDefinition": {}}),
                ),
            },
        );
        let manifest = referrer_manifest(ATTESTATION_PREDICATE, 1, 2, BUNDLE);
        c.add(
            "oci_registry",
            &format!("new-att-{label}"),
            &join(&[
                format!("att {control}").as_bytes(),
                &index(&[(0, BUNDLE)]),
                b"",
                &manifest,
                empty,
                att.json.as_bytes(),
            ]),
        );
        let env = att
            .value()
            .get("dsseEnvelope")
            .map(Value::to_string)
            .unwrap_or_default();
        let mut ann = BTreeMap::new();
        ann.insert(
            "predicateType".to_string(),
            ATTESTATION_PREDICATE.to_string(),
        );
        if let Some(leaf) = &att.leaf {
            ann.insert(cosign::CERTIFICATE_ANNOTATION.to_string(), leaf.cert_pem());
        }
        if let Some(a) = att
            .tlog_entry
            .as_ref()
            .and_then(cosign::rekor_bundle_annotation)
        {
            ann.insert(cosign::REKOR_BUNDLE_ANNOTATION.to_string(), a);
        }
        let m = legacy_manifest(&[(0, &ann)], "application/vnd.dsse.envelope.v1+json", 1);
        c.add(
            "oci_registry",
            &format!("legacy-att-{label}"),
            &join(&[
                format!("att {control}").as_bytes(),
                br#"{"manifests":[]}"#,
                &m,
                env.as_bytes(),
                empty,
            ]),
        );
    }
    // Real cosign output, as the registry fixtures recorded it.
    for registry in ["olareg", "docker-registry"] {
        let dir = repo_root().join("scripts/samples").join(registry);
        let docs: Vec<Vec<u8>> = files(&dir, "json")
            .iter()
            .filter_map(|p| std::fs::read(p).ok())
            .collect();
        let referrers = std::fs::read(dir.join("referrers.json")).unwrap_or_default();
        let legacy = std::fs::read(dir.join("legacy-sig.manifest.json")).unwrap_or_default();
        let mut parts: Vec<&[u8]> = vec![b"", &referrers, &legacy];
        parts.extend(docs.iter().map(Vec::as_slice));
        c.add(
            "oci_registry",
            &format!("samples-{registry}"),
            &join(&parts),
        );
        for doc in &docs {
            c.add(
                "dsse_statement",
                &format!("samples-{registry}-{}", doc.len()),
                doc,
            );
            c.add(
                "bundle_json",
                &format!("samples-{registry}-{}", doc.len()),
                doc,
            );
        }
    }
}

fn tamper_seeds(c: &mut Corpus) {
    for (s, subject) in subjects().iter().enumerate() {
        for l in 0..subject.leaves.len() {
            let (s8, l8) = (u8::try_from(s).unwrap_or(0), u8::try_from(l).unwrap_or(0));
            // Flip the first byte; insert a byte in the middle.
            c.add(
                "bundle_tamper",
                &format!("{s}-{l}-flip"),
                &[s8, l8, 0, 0, 0, 0, 1],
            );
            c.add(
                "bundle_tamper",
                &format!("{s}-{l}-insert"),
                &[s8, l8, 0, 2, 0, 16, b'0'],
            );
        }
    }
}

fn registry_input_seeds(c: &mut Corpus) {
    let inputs: &[&str] = &[
        "nginx",
        "docker.io/library/nginx:1.27",
        "ghcr.io/sigil-dev/app@sha256:4c95a2f0b8a1e5bb0b0cba1e8b1f0e4d5c6b7a8998877665544332211000aabb",
        "localhost:5000/a/b/c:tag@sha256:4c95a2f0b8a1e5bb0b0cba1e8b1f0e4d5c6b7a8998877665544332211000aabb",
        "[::1]:5000/app:v1",
        "127.0.0.1:41999/demo/hello:unsigned",
        "sha256:4c95a2f0b8a1e5bb0b0cba1e8b1f0e4d5c6b7a8998877665544332211000aabb",
        "Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\",scope=\"repository:library/nginx:pull\"",
        "Basic realm=\"registry\"",
        "</v2/app/referrers/sha256:aa?n=2>; rel=\"next\"",
        "ghcr.io/sigil-dev/**\nghcr.io/sigil-dev/app:v1",
        "*\nnginx",
        "registry.example.com/platform/*\nregistry.example.com/platform/app@sha256:4c95a2f0b8a1e5bb0b0cba1e8b1f0e4d5c6b7a8998877665544332211000aabb",
        r#"{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"},"https://index.docker.io/v1/":{"username":"u","password":"p"}},"credHelpers":{"gcr.io":"gcloud"}}"#,
        r#"{"registry.example.com":{"auth":"dXNlcjpwYXNz","email":"a@b"}}"#,
    ];
    for (i, s) in inputs.iter().enumerate() {
        c.add("registry_inputs", &format!("{i}"), s.as_bytes());
    }
}

fn admission_seeds(c: &mut Corpus) {
    let dir = repo_root().join("crates/sigil-webhook/tests/data");
    for p in files(&dir, "json") {
        c.add(
            "admission_review",
            &name_of(&p),
            &std::fs::read(&p).unwrap(),
        );
    }
    let spec = json!({
        "initContainers": [{"name": "init", "image": "registry.example.com/init:1"}],
        "containers": [
            {"name": "app", "image": "registry.example.com/app:1"},
            {"name": "bad", "image": "registry.example.com/evil:1"}
        ],
        "ephemeralContainers": [{"name": "dbg", "image": "registry.example.com/evil-debug@sha256:4c95a2f0b8a1e5bb0b0cba1e8b1f0e4d5c6b7a8998877665544332211000aabb"}],
        "volumes": [{"name": "data", "image": {"reference": "registry.example.com/evil-volume:1"}}],
    });
    let template = json!({"metadata": {"labels": {"app": "x"}}, "spec": spec});
    let kinds: [(&str, &str, &str, &str, Value); 8] = [
        (
            "",
            "v1",
            "Pod",
            "pods",
            json!({"metadata": {"name": "p"}, "spec": spec}),
        ),
        (
            "",
            "v1",
            "ReplicationController",
            "replicationcontrollers",
            json!({"spec": {"template": template}}),
        ),
        (
            "apps",
            "v1",
            "Deployment",
            "deployments",
            json!({"spec": {"selector": {}, "template": template}}),
        ),
        (
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            json!({"spec": {"selector": {}, "template": template}}),
        ),
        (
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            json!({"spec": {"selector": {}, "serviceName": "s", "template": template}}),
        ),
        (
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            json!({"spec": {"selector": {}, "template": template}}),
        ),
        (
            "batch",
            "v1",
            "Job",
            "jobs",
            json!({"spec": {"template": template}}),
        ),
        (
            "batch",
            "v1",
            "CronJob",
            "cronjobs",
            json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}),
        ),
    ];
    for (group, version, kind, resource, object) in kinds {
        for (op, sub) in [
            ("CREATE", ""),
            ("UPDATE", ""),
            ("UPDATE", "ephemeralcontainers"),
        ] {
            let mut request = json!({
                "uid": "0000-fuzz",
                "kind": {"group": group, "version": version, "kind": kind},
                "resource": {"group": group, "version": version, "resource": resource},
                "name": "x",
                "namespace": "team",
                "operation": op,
                "userInfo": {"username": "fuzz"},
                "object": object,
                "dryRun": false,
            });
            if !sub.is_empty() {
                request["subResource"] = json!(sub);
            }
            if op == "UPDATE" {
                let mut old = object.clone();
                if let Some(s) = old.pointer_mut("/spec/containers") {
                    *s = json!([{"name": "app", "image": "registry.example.com/app:1"}]);
                }
                request["oldObject"] = old;
            }
            let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
            c.add(
                "admission_review",
                &format!("{kind}-{op}-{sub}"),
                serde_json::to_string_pretty(&review).unwrap().as_bytes(),
            );
        }
    }
}

fn policy_seeds(c: &mut Corpus) {
    let root = repo_root();
    for dir in [
        root.join("deploy/examples"),
        root.join("crates/sigil-compile/tests/data"),
    ] {
        for p in files(&dir, "yaml") {
            c.add("policy_yaml", &name_of(&p), &std::fs::read(&p).unwrap());
        }
    }
    let mut dirs = vec![root.join("crates/sigil-policy/tests/data")];
    dirs.extend(sigil_testdata::policy_controller_testdata().ok());
    for p in files_under(&dirs, &["yaml", "yml", "rego"]) {
        let rel = p
            .strip_prefix(&root)
            .unwrap_or(&p)
            .to_string_lossy()
            .into_owned();
        c.add("policy_yaml", &rel, &std::fs::read(&p).unwrap());
    }
    c.add(
        "policy_yaml",
        "empty-snapshot",
        sigil_api::snapshot::PolicySnapshot::empty()
            .to_json()
            .as_bytes(),
    );
}

/// Rego modules: those of the repository's example policies, the `.rego`
/// files of policy-controller's test data, and the blow-ups of the threat
/// model (each crosses a bound of the sandbox).
fn rego_seeds(c: &mut Corpus) {
    fn modules(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if m.get("type").and_then(|t| t.as_str()) == Some("rego")
                    && let Some(data) = m.get("data").and_then(|d| d.as_str())
                {
                    out.push(data.to_owned());
                }
                m.values().for_each(|v| modules(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| modules(v, out)),
            _ => {}
        }
    }
    let root = repo_root();
    for p in files(&root.join("deploy/examples"), "yaml") {
        let text = std::fs::read_to_string(&p).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_default();
        let mut found = Vec::new();
        docs.iter().for_each(|d| modules(d, &mut found));
        for (i, module) in found.iter().enumerate() {
            c.add(
                "rego_policy",
                &format!("{}-{i}", name_of(&p)),
                module.as_bytes(),
            );
        }
    }
    let testdata: Vec<PathBuf> = sigil_testdata::policy_controller_testdata()
        .into_iter()
        .collect();
    for p in files_under(&testdata, &["rego"]) {
        c.add("rego_policy", &name_of(&p), &std::fs::read(&p).unwrap());
    }
    let bombs = [
        (
            "range",
            "isCompliant if count(numbers.range(0, 2000000000)) > 0",
        ),
        (
            "sprintf-width",
            "isCompliant if sprintf(\"%0999999999d\", [1]) != \"\"",
        ),
        (
            "sprintf-digit",
            "isCompliant if sprintf(\"%\u{663}d\", [1]) != \"\"",
        ),
        (
            "comprehension",
            "isCompliant if count({x | some i in numbers.range(1, 50000); some j in numbers.range(1, 50000); x := (i + j) % 2}) > 5",
        ),
        ("print", "isCompliant if { print(input); true }"),
    ];
    for (name, body) in bombs {
        c.add(
            "rego_policy",
            name,
            format!("package sigstore\n{body}\n").as_bytes(),
        );
    }
}

/// Writes every target's seeds under `root` and prints how many per target.
pub fn write_all(root: &Path) {
    let mut c = Corpus {
        root: root.to_path_buf(),
        count: BTreeMap::new(),
    };
    if conformance_dir().is_none() {
        eprintln!(
            "seeds: the sigstore-conformance cases were not found; seeding from the testkit and \
             the repository only (run scripts/fetch-testdata.sh for them)"
        );
    }
    verifier_seeds(&mut c);
    oci_seeds(&mut c);
    tamper_seeds(&mut c);
    registry_input_seeds(&mut c);
    admission_seeds(&mut c);
    policy_seeds(&mut c);
    rego_seeds(&mut c);
    for (target, n) in &c.count {
        println!("seeds: {target}: {n}");
    }
}

//! Pushes keyless-signed images to a local registry for the verdict
//! differential with policy-controller's tester (bench/policy-differential.sh),
//! and writes the trust root they chain to.
//!
//! The kit plays the private Sigstore that policy-controller's own example
//! policies name by URL (`http://fulcio.fulcio-system.svc`,
//! `http://rekor.rekor-system.svc`), so those examples need only a
//! `trustRootRef` to judge these images. Each identity gets one image signed
//! in the legacy `sha256-<hex>.sig` format (the one policy-tester reads
//! without `signatureFormat: bundle`) and one signed in the bundle format as
//! an OCI referrer (cosign v3's default).
//!
//! Usage: `cargo run -p sigil-testkit --example keyless-images -- REGISTRY REPO OUT_DIR`
//! (REGISTRY is `127.0.0.1:PORT`). Writes `OUT_DIR/trusted_root.json` and
//! prints `NAME=REFERENCE` lines, one per image, for a fixtures file.

use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use sigil_testkit::cosign::{self, OciManifest};
use sigil_testkit::registry::Pusher;
use sigil_testkit::{BundleSpec, Identity, Testkit};

/// policy-controller's e2e examples name their Sigstore by these in-cluster URLs.
const FULCIO_URL: &str = "http://fulcio.fulcio-system.svc";
const REKOR_URL: &str = "http://rekor.rekor-system.svc";

/// The identities signed, by fixture name: the service account
/// policy-controller's keyless examples admit, and a GitHub Actions workflow
/// (the testkit's default identity) that they do not.
fn identities() -> Vec<(&'static str, BundleSpec)> {
    let service_account = BundleSpec {
        identity: Identity::Uri(
            "https://kubernetes.io/namespaces/default/serviceaccounts/default".into(),
        ),
        oidc_issuer: "https://kubernetes.default.svc.cluster.local".into(),
        github: None,
        ..BundleSpec::default()
    };
    vec![
        ("KEYLESS_SA", service_account),
        ("KEYLESS_GH", BundleSpec::default()),
    ]
}

fn kit() -> Testkit {
    let mut kit = Testkit::new(44);
    kit.fulcio = sigil_testkit::fulcio::FulcioCa::new(
        44,
        "fulcio",
        FULCIO_URL,
        sigil_testkit::EPOCH_2020,
        sigil_testkit::EPOCH_2040,
    );
    kit.rekor_v1 = sigil_testkit::rekor::RekorV1::new(44, "rekor-v1", REKOR_URL);
    kit
}

async fn push(registry: &str, repo: &str, kit: &Testkit) -> anyhow::Result<Vec<String>> {
    let pusher = Pusher::new(registry, repo).map_err(|e| anyhow!("{e}"))?;
    let full_repo = format!("{registry}/{repo}");
    let mut lines = Vec::new();
    for (name, spec) in identities() {
        let legacy: OciManifest = cosign::image(&format!("difftest-{name}-legacy"));
        let bundled: OciManifest = cosign::image(&format!("difftest-{name}-bundle"));
        for image in [&legacy, &bundled] {
            pusher
                .manifest(image, &image.digest())
                .await
                .map_err(|e| anyhow!("{e}"))?;
        }
        let signature = cosign::legacy_signature(kit, &spec, &full_repo, &legacy.digest())
            .map_err(|e| anyhow!("minting the legacy signature for {name}: {e}"))?;
        let manifest = cosign::legacy_signature_manifest(std::slice::from_ref(&signature));
        pusher
            .manifest(&manifest, &cosign::legacy_signature_tag(&legacy.digest()))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let minted = cosign::image_signature_bundle(kit, &spec, &bundled.sha256())
            .map_err(|e| anyhow!("minting the bundle for {name}: {e}"))?;
        let referrer = cosign::bundle_referrer(
            minted.json.as_bytes(),
            cosign::COSIGN_SIGN_PREDICATE,
            bundled.descriptor(),
        );
        pusher
            .referrer(&referrer, &bundled.digest())
            .await
            .map_err(|e| anyhow!("{e}"))?;
        lines.push(format!("{name}={full_repo}@{}", legacy.digest()));
        lines.push(format!("{name}_BUNDLE={full_repo}@{}", bundled.digest()));
    }
    Ok(lines)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [registry, repo, out] = args.as_slice() else {
        bail!("usage: keyless-images REGISTRY REPO OUT_DIR (REGISTRY is 127.0.0.1:PORT)");
    };
    let kit = kit();
    let root = Path::new(out).join("trusted_root.json");
    std::fs::write(&root, kit.trusted_root_json())
        .with_context(|| format!("writing {}", root.display()))?;
    let lines = push(registry, repo, &kit)
        .await
        .with_context(|| format!("pushing keyless images to {registry}/{repo}"))?;
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

//! How large the policy snapshot grows with the number of policies: builds
//! snapshots of 10, 100, 1,000 and 10,000 mixed ClusterImagePolicies (key,
//! keyless against TrustRoots, Rego and CUE attestations, each with its own
//! key material and text) and prints their JSON and gzip sizes beside the
//! 1 MiB a Secret holds. `bench/policy-scale.py` applies policies of the same
//! four shapes to a cluster. The stored columns are what the controller
//! writes ([`sigil_api::snapshot::stored`]). Run with
//! `cargo test -p sigil-api --test snapshot_scale -- --nocapture`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::indexing_slicing
)]

use sigil_api::snapshot::{PolicySnapshot, SECRET_NAME, SnapshotPolicy, SnapshotTrustRoot, stored};

/// Deterministic pseudo-random bytes (SplitMix64): key material and
/// certificates do not compress, and the sizes must not flatter gzip.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn base64(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        (0..len)
            .map(|_| char::from(ALPHABET[usize::try_from(self.next() % 64).unwrap()]))
            .collect()
    }

    /// A P-256 public key's PEM (91 bytes of DER).
    fn pem(&mut self) -> String {
        let b64 = self.base64(124);
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n{}\n-----END PUBLIC KEY-----\n",
            &b64[..64],
            &b64[64..]
        )
    }
}

const REGO: &str = r#"package sigstore
import rego.v1

default isCompliant := false

isCompliant if {
  input.predicate.runDetails.builder.id == "https://github.com/actions/runner/github-hosted"
  input.predicate.buildDefinition.externalParameters.workflow.ref == "refs/heads/main"
  input.predicate.buildDefinition.externalParameters.workflow.repository == "https://github.com/example/team-TEAM"
}
"#;

const CUE: &str = r#"predicateType: "https://cosign.sigstore.dev/attestation/vuln/v1"
predicate: {
  scanner: {
    uri: =~"^pkg:github/aquasecurity/trivy"
    result: Results: [...{Vulnerabilities: [...{Severity: !="CRITICAL"}]}]
  }
  metadata: scanFinishedOn: =~"^2026-"
}
"#;

/// Policy `i` of a mixed set: 40% key, 30% keyless against a TrustRoot,
/// 15% keyless with a Rego provenance attestation, 15% key with a CUE
/// vulnerability attestation.
fn policy(i: usize, noise: &mut Noise) -> SnapshotPolicy {
    let glob = format!("registry.example.com/team-{i}/**");
    let root = format!("corp-{}", i % 10);
    let identity = serde_json::json!({
        "issuer": "https://token.actions.githubusercontent.com",
        "subjectRegExp": format!("^https://github\\.com/example/team-{i}/\\.github/workflows/release\\.yml@refs/tags/v.*$"),
    });
    let authority = match i % 20 {
        0..8 => {
            serde_json::json!({"name": "release-key", "key": {"data": noise.pem(), "hashAlgorithm": "sha256"}})
        }
        8..14 => {
            serde_json::json!({"name": "ci", "keyless": {"trustRootRef": root, "identities": [identity]},
            "ctlog": {"trustRootRef": root}})
        }
        14..17 => {
            serde_json::json!({"name": "provenance", "keyless": {"trustRootRef": root, "identities": [identity]},
            "attestations": [{"name": "slsa", "predicateType": "slsaprovenance1",
                "policy": {"type": "rego", "data": REGO.replace("TEAM", &i.to_string())}}]})
        }
        _ => serde_json::json!({"name": "scan", "key": {"data": noise.pem()},
            "attestations": [{"name": "vuln", "predicateType": "vuln", "policy": {"type": "cue", "data": CUE}}]}),
    };
    SnapshotPolicy {
        name: format!("team-{i}-images"),
        namespace: String::new(),
        uid: format!(
            "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
            noise.next() as u32,
            noise.next() as u16,
            noise.next() % 4096,
            noise.next() % 4096,
            noise.next() % (1 << 48)
        ),
        generation: 1,
        resource_version: (100_000 + i).to_string(),
        spec: serde_json::from_value(
            serde_json::json!({"images": [{"glob": glob}], "authorities": [authority]}),
        )
        .unwrap(),
    }
}

/// A private Sigstore `trusted_root.json` of public-good's size (about 7 KB:
/// a CA chain, a Rekor key, a CT log key, a TSA chain).
fn trust_root(n: usize, noise: &mut Noise) -> SnapshotTrustRoot {
    let cert = |noise: &mut Noise| noise.base64(680);
    let key = |noise: &mut Noise| noise.base64(124);
    let json = serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
        "tlogs": [{"baseUrl": format!("https://rekor.corp-{n}.example.com"), "hashAlgorithm": "SHA2_256",
            "publicKey": {"rawBytes": key(noise), "keyDetails": "PKIX_ECDSA_P256_SHA_256", "validFor": {"start": "2025-01-01T00:00:00Z"}},
            "logId": {"keyId": noise.base64(44)}}],
        "certificateAuthorities": [{"subject": {"organization": "corp", "commonName": "fulcio"},
            "uri": format!("https://fulcio.corp-{n}.example.com"),
            "certChain": {"certificates": [{"rawBytes": cert(noise)}, {"rawBytes": cert(noise)}]},
            "validFor": {"start": "2025-01-01T00:00:00Z"}}],
        "ctlogs": [{"baseUrl": format!("https://ctfe.corp-{n}.example.com"), "hashAlgorithm": "SHA2_256",
            "publicKey": {"rawBytes": key(noise), "keyDetails": "PKIX_ECDSA_P256_SHA_256", "validFor": {"start": "2025-01-01T00:00:00Z"}},
            "logId": {"keyId": noise.base64(44)}}],
        "timestampAuthorities": [{"subject": {"organization": "corp", "commonName": "tsa"},
            "certChain": {"certificates": [{"rawBytes": cert(noise)}, {"rawBytes": cert(noise)}, {"rawBytes": cert(noise)}]},
            "validFor": {"start": "2025-01-01T00:00:00Z"}}],
    });
    SnapshotTrustRoot {
        name: format!("corp-{n}"),
        generation: 1,
        trusted_root_json: serde_json::to_string_pretty(&json).unwrap(),
        default: false,
    }
}

/// A snapshot of `count` mixed policies and the ten TrustRoots they use.
pub fn mixed_snapshot(count: usize) -> PolicySnapshot {
    let mut noise = Noise(u64::try_from(count).unwrap());
    PolicySnapshot {
        revision: 1,
        generated_at: "2026-12-03T05:00:00Z".into(),
        policies: (0..count).map(|i| policy(i, &mut noise)).collect(),
        trust_roots: (0..10).map(|n| trust_root(n, &mut noise)).collect(),
        ..PolicySnapshot::empty()
    }
}

#[test]
fn snapshot_sizes_by_policy_count_are_printed() {
    println!("| policies | JSON bytes | stored (gzip) bytes | ratio | Secrets | JSON / 1 MiB |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let mut sizes = Vec::new();
    for count in [10, 100, 1_000, 10_000] {
        let encoded = stored::encode(&mixed_snapshot(count), SECRET_NAME).unwrap();
        #[allow(clippy::cast_precision_loss)]
        let (raw, z) = (encoded.decoded_bytes as f64, encoded.stored_bytes as f64);
        println!(
            "| {count} | {} | {} | {:.1}x | {} | {:.2} |",
            encoded.decoded_bytes,
            encoded.stored_bytes,
            raw / z,
            1 + encoded.shards.len(),
            raw / 1_048_576.0,
        );
        sizes.push((encoded.decoded_bytes, encoded.stored_bytes));
    }
    // Sizes grow with the count: the measurement measures something.
    assert!(sizes.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
}

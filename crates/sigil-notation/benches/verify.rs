//! CPU per Notary Project signature verification, in process: one JWS and
//! one COSE envelope (P-256 leaf, three-certificate chain, an RFC 3161
//! timestamp from a trusted TSA), parsed and judged under a strict trust
//! policy, revocation skipped (its cost is the network's, not the CPU's).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use sigil_notation::payload::Descriptor;
use sigil_notation::policy::{StoreKind, TrustPolicy};
use sigil_notation::revocation::Evidence;
use sigil_notation::store::TrustStore;
use sigil_notation::verify::{Context, verify_envelope};
use sigil_testkit::notation::{self, Format, LeafSpec, NotaryPki, SignSpec};
use sigil_testkit::tsa::Tsa;
use time::OffsetDateTime;

const T0: i64 = 1_750_000_000;
const DAY: i64 = 86_400;
const DIGEST: &str = "sha256:4f2ad9e0f4a5e6b0a6a07a1bcbd1c9f1f2d4bb7e38b1bf9d0bbc1a6e2e0c0de1";

fn bench(c: &mut Criterion) {
    let leaf = LeafSpec::new("Acme", "signer", T0 - DAY, T0 + 30 * DAY);
    let pki = NotaryPki::new(7, "acme", T0 - 100 * DAY, T0 + 3650 * DAY, &leaf);
    let tsa = Tsa::new(
        7,
        "tsa",
        "https://tsa.example",
        T0 - 100 * DAY,
        T0 + 3650 * DAY,
    );
    let mut store = TrustStore::new();
    store
        .add_file(StoreKind::Ca, "acme", "root.crt", &pki.root.cert_der)
        .unwrap();
    store
        .add_file(StoreKind::Tsa, "stamps", "tsa.crt", &tsa.root.cert_der)
        .unwrap();
    let policy = TrustPolicy::parse(
        br#"{"version": "1.0", "trustPolicies": [{"name": "acme", "registryScopes": ["*"],
            "signatureVerification": {"level": "strict", "override": {"revocation": "skip"}},
            "trustStores": ["ca:acme", "tsa:stamps"], "trustedIdentities": ["x509.subject:C=US, ST=WA, O=Acme"]}]}"#,
    )
    .unwrap();
    let evidence = Evidence::new();
    let ctx = Context {
        statement: policy.applicable("registry.example/acme/app").unwrap(),
        trust_store: &store,
        revocation: &evidence,
        now: OffsetDateTime::from_unix_timestamp(T0 + 60).unwrap(),
    };
    let target = Descriptor::new("application/vnd.oci.image.manifest.v1+json", DIGEST, 1234);
    for format in [Format::Jws, Format::Cose] {
        let mut spec = SignSpec::new(format, DIGEST, 1234, T0);
        spec.timestamp = Some((tsa.clone(), T0 + 5));
        let envelope = notation::sign(&pki, &spec);
        verify_envelope(format.media_type(), &envelope, &target, &ctx).unwrap();
        c.bench_function(
            &format!("notation_verify_{format:?}_timestamped").to_lowercase(),
            |b| b.iter(|| verify_envelope(format.media_type(), &envelope, &target, &ctx).unwrap()),
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

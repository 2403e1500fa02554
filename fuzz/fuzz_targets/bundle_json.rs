//! Bundle JSON: parsing, then verification under the testkit root and the
//! sigstore-conformance roots, against the digest the bundle itself claims
//! (so that the fuzzer reaches the checks after the artifact binding).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sigil_fuzz::fixture;
use sigil_verifier::bundle::{Bundle, Content};
use sigil_verifier::dsse::Statement;
use sigil_verifier::verify::{Artifact, verify_bundle};

fn claimed_digest(bundle: &Bundle) -> [u8; 32] {
    let found = match &bundle.content {
        Content::MessageSignature { digest, .. } => digest
            .as_ref()
            .and_then(|(_, d)| <[u8; 32]>::try_from(d.as_slice()).ok()),
        Content::Dsse(env) => Statement::from_payload(&env.payload_type, &env.payload)
            .ok()
            .and_then(|s| {
                s.subject
                    .iter()
                    .find_map(|sub| sub.digest.get("sha256").cloned())
            })
            .and_then(|h| hex::decode(h).ok())
            .and_then(|d| <[u8; 32]>::try_from(d.as_slice()).ok()),
    };
    found.unwrap_or_else(|| sigil_verifier::crypto::sha256(sigil_fuzz::ARTIFACT))
}

fuzz_target!(|data: &[u8]| {
    let Ok(bundle) = Bundle::from_json(data) else {
        return;
    };
    let f = fixture();
    let artifact = Artifact::Sha256(claimed_digest(&bundle));
    for policy in [&f.keyless, &f.key] {
        if let Err(e) = verify_bundle(&bundle, artifact, policy, &f.root, f.now) {
            let _ = (e.reason(), e.to_string());
        }
    }
    let now = time::OffsetDateTime::now_utc();
    for root in &f.conformance_roots {
        if let Err(e) = verify_bundle(&bundle, artifact, &f.conformance_keyless, root, now) {
            let _ = (e.reason(), e.to_string());
        }
    }
});

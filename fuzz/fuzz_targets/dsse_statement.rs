//! In-toto statements and DSSE envelopes: a statement parses, serialises
//! and parses back to the same value; a legacy `.att` envelope with its
//! cosign annotations goes through `verify_legacy_attestation`.
//! Input: `envelope SEPARATOR annotations-json`.
#![no_main]

use std::collections::BTreeMap;

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use sigil_fuzz::{ARTIFACT, fixture, split};
use sigil_registry::Digest;
use sigil_registry::legacy::verify_legacy_attestation;
use sigil_verifier::dsse::{IN_TOTO_PAYLOAD_TYPE, Statement};

fn round_trip(payload: &[u8]) {
    let Ok(st) = Statement::from_payload(IN_TOTO_PAYLOAD_TYPE, payload) else {
        return;
    };
    let _ = st.require_subject_sha256(&[0u8; 32]);
    let again = serde_json::to_vec(&st).expect("a parsed statement serialises");
    let back = Statement::from_payload(IN_TOTO_PAYLOAD_TYPE, &again)
        .expect("a serialised statement parses again");
    assert_eq!(st, back, "statement changed in a round trip");
}

fuzz_target!(|data: &[u8]| {
    let parts = split(data);
    let envelope = parts.first().copied().unwrap_or_default();
    round_trip(envelope);
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(envelope)
        && let Some(p) = v.get("payload").and_then(|p| p.as_str())
        && let Ok(payload) = base64::engine::general_purpose::STANDARD.decode(p)
    {
        round_trip(&payload);
    }
    let annotations: BTreeMap<String, String> = parts
        .get(1)
        .and_then(|a| serde_json::from_slice(a).ok())
        .unwrap_or_default();
    let f = fixture();
    let image = Digest::of(ARTIFACT);
    for policy in [&f.keyless, &f.key] {
        if let Err(e) =
            verify_legacy_attestation(envelope, &annotations, &image, policy, &f.root, f.now)
        {
            let _ = (e.reason(), e.to_string());
        }
    }
});

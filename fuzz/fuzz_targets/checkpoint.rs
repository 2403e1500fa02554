//! Signed checkpoints (C2SP signed notes): parsing, and verification against
//! every transparency log of the testkit and sigstore-conformance roots,
//! under both origin rules (Rekor v2/C2SP host names, Rekor v1).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sigil_fuzz::fixture;
use sigil_verifier::checkpoint::{OriginRule, parse_checkpoint, verify_checkpoint};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_checkpoint(text);
    let f = fixture();
    for log in std::iter::once(&f.root)
        .chain(&f.conformance_roots)
        .flat_map(|r| r.tlogs.iter())
    {
        for rule in [OriginRule::Host, OriginRule::RekorV1] {
            if let Err(e) = verify_checkpoint(text, log, rule) {
                let _ = e.to_string();
            }
        }
    }
});

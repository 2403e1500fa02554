//! DER and RFC 3161 timestamps: sigil's DER reader over arbitrary nesting,
//! then the token verified over a message against the testkit TSA and the
//! sigstore-conformance roots. Input: `message SEPARATOR token`, or a token
//! alone (over the testkit's fixed message).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sigil_fuzz::{fixture, split, walk_der};
use sigil_verifier::tsa::verify_rfc3161;

/// The message the testkit seeds timestamp when the input has no message part.
pub const MESSAGE: &[u8] = sigil_fuzz::ARTIFACT;

fuzz_target!(|data: &[u8]| {
    let parts = split(data);
    let (message, token) = match parts.as_slice() {
        [message, token, ..] => (*message, *token),
        [token] => (MESSAGE, *token),
        [] => return,
    };
    walk_der(token, 0);
    let _ = sigil_verifier::der::parse_single(token);
    let f = fixture();
    for root in std::iter::once(&f.root).chain(&f.conformance_roots) {
        if let Err(e) = verify_rfc3161(token, message, root) {
            let _ = (e.reason(), e.to_string());
        }
    }
});

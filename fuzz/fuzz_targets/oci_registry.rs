//! OCI manifests, indexes, the referrers list, legacy signature layers and
//! their annotations, served by a registry on 127.0.0.1 to the real client,
//! discovery and `verify_image` (see `sigil_fuzz::oci` for the input format).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sigil_fuzz::oci::check(data);
});

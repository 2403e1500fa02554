//! AdmissionReview bodies through the webhook's parsing and admission
//! functions (every workload kind), with the properties of
//! `sigil_fuzz::admission`: `/validate` never allows an image the judge did
//! not approve, `/mutate` only pins images in place.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sigil_fuzz::admission::check(data);
});

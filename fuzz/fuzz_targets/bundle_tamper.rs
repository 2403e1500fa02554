//! A bundle that verifies must not verify after any change to what it
//! signs: structure-aware edits of one field of a known-good bundle (see
//! `sigil_fuzz::tamper`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sigil_fuzz::tamper::{check, read_edit};

fuzz_target!(|data: &[u8]| {
    if let Some(edit) = read_edit(data) {
        check(&edit);
    }
});

//! Not a fuzz target: writes the seed corpora (`sigil_fuzz::seeds`) into
//! `$SIGIL_FUZZ_CORPUS` (default `fuzz/corpus`) and exits. Built with the
//! targets, so the seeds are minted by exactly the fixture code they run.
#![no_main]
// `init` exits once the seeds are written: the fuzz body the macro expands
// after it is never reached, by design.
#![allow(unreachable_code)]

use std::path::PathBuf;

libfuzzer_sys::fuzz_target!(
    init: {
        let root = std::env::var_os("SIGIL_FUZZ_CORPUS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/corpus")));
        sigil_fuzz::seeds::write_all(&root);
        std::process::exit(0);
    },
    |_data: &[u8]| {}
);

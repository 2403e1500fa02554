//! Verifies one Notary Project envelope against an artifact COUNT times in
//! this process, with a Notation configuration directory, and prints how
//! many verified: the CPU per verification is the process's CPU time over
//! COUNT (bench/notation-go.sh runs it beside notation-go's verifier on the
//! same envelope). Revocation evidence is empty: give the trust policy a
//! `revocation: skip` override, or the check is undeterminable.
//!
//! Usage: `verify_loop NOTATION_DIR ENVELOPE MEDIA_TYPE DIGEST SIZE REPOSITORY COUNT`
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::process::ExitCode;

use sigil_notation::payload::Descriptor;
use sigil_notation::revocation::Evidence;
use sigil_notation::verify::{Context, verify_envelope};
use time::OffsetDateTime;

fn main() -> ExitCode {
    match run(&std::env::args().skip(1).collect::<Vec<_>>()) {
        Ok(count) => {
            println!("{count} verifications");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("verify_loop: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<u64, String> {
    let [dir, envelope, media_type, digest, size, repository, count] = args else {
        return Err(
            "usage: verify_loop NOTATION_DIR ENVELOPE MEDIA_TYPE DIGEST SIZE REPOSITORY COUNT"
                .into(),
        );
    };
    let config = sigil_notation::config::load(Path::new(dir)).map_err(|e| e.to_string())?;
    let bytes = std::fs::read(envelope).map_err(|e| format!("{envelope}: {e}"))?;
    let size: u64 = size.parse().map_err(|e| format!("SIZE {size}: {e}"))?;
    let count: u64 = count.parse().map_err(|e| format!("COUNT {count}: {e}"))?;
    let statement = config
        .policy
        .applicable(repository)
        .ok_or_else(|| format!("no trust policy statement covers {repository}"))?;
    let envelope_type = if envelope.ends_with(".cose") {
        "application/cose"
    } else {
        "application/jose+json"
    };
    let evidence = Evidence::new();
    let ctx = Context {
        statement,
        trust_store: &config.trust_store,
        revocation: &evidence,
        now: OffsetDateTime::now_utc(),
    };
    let target = Descriptor::new(media_type, digest, size);
    for _ in 0..count {
        verify_envelope(envelope_type, &bytes, &target, &ctx).map_err(|e| e.to_string())?;
    }
    Ok(count)
}

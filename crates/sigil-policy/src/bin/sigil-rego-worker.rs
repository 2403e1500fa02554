//! `sigil-rego-worker`: a Rego worker and nothing else, for tests of the
//! sandbox in processes that cannot start themselves as one (unit-test
//! binaries, fuzz targets). Production binaries start themselves again
//! instead (`sigil_policy::rego::serve_if_requested`).

fn main() {
    sigil_policy::rego::serve_if_requested();
    eprintln!(
        "sigil-rego-worker: started without `{}`; the Rego sandbox starts it",
        sigil_policy::rego::WORKER_ARG
    );
    std::process::exit(2);
}

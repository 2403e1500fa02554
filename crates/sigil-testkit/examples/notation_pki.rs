//! Writes a Notary Project signing PKI and a Notation configuration that
//! trusts it, for signers and verifiers outside the tests (the testkit's
//! notation-go signer, bench/notation-go.sh):
//!
//! - `leaf.key` (PKCS#8) and `chain.pem` (signing certificate,
//!   intermediate, root): what `notation-signer -key -chain` reads;
//! - `config/trustpolicy.json` and `config/truststore/x509/ca/acme/root.crt`:
//!   a Notation configuration directory trusting the root for
//!   `registry.example/acme/app`, signer `O=Acme`, level strict with
//!   revocation skipped (the leaf names no CRL or OCSP responder).
//!
//! Usage: `cargo run -p sigil-testkit --example notation_pki -- OUT_DIR`

use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use sigil_testkit::notation::{LeafSpec, NotaryPki};

const DAY: i64 = 86_400;

fn main() -> anyhow::Result<()> {
    let out = std::env::args()
        .nth(1)
        .context("usage: notation_pki OUT_DIR")?;
    let out = Path::new(&out);
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs())?;
    let leaf = LeafSpec::new("Acme", "release signer", now - DAY, now + 30 * DAY);
    let pki = NotaryPki::new(43, "notation-pki", now - 100 * DAY, now + 3650 * DAY, &leaf);
    let store = out.join("config/truststore/x509/ca/acme");
    fs::create_dir_all(&store)?;
    fs::write(
        out.join("leaf.key"),
        pki.leaf
            .key
            .private_key_pkcs8_pem()
            .context("the leaf key has no PKCS#8 form")?,
    )?;
    let chain: String = [&pki.leaf, &pki.intermediate, &pki.root]
        .iter()
        .map(|c| c.cert_pem())
        .collect();
    fs::write(out.join("chain.pem"), chain)?;
    fs::write(store.join("root.crt"), pki.root.cert_pem())?;
    let policy = serde_json::json!({
        "version": "1.0",
        "trustPolicies": [{
            "name": "acme-images",
            "registryScopes": ["registry.example/acme/app"],
            "signatureVerification": {"level": "strict", "override": {"revocation": "skip"}},
            "trustStores": ["ca:acme"],
            "trustedIdentities": ["x509.subject: C=US, ST=WA, O=Acme"],
        }],
    });
    fs::write(
        out.join("config/trustpolicy.json"),
        serde_json::to_vec_pretty(&policy)?,
    )?;
    println!("{}", out.display());
    Ok(())
}

//! What the fuzz targets share: the testkit material every target verifies
//! against (minted once per process from a fixed seed, so the seed corpora
//! written by `examples/seeds.rs` match it), the multi-part input format,
//! and the subjects of the structure-aware tamper target.
//!
//! Fuzz harness code: a fixture that cannot be built is a broken harness,
//! so it panics loudly rather than returning errors.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

pub mod admission;
pub mod oci;
pub mod seeds;
pub mod tamper;

use std::path::PathBuf;
use std::sync::OnceLock;

use sigil_testkit::{BundleSpec, Content, DEFAULT_SIGNING_TIME, KeySpec, Testkit};
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::VerificationPolicy;
use time::OffsetDateTime;

/// The signer identity of the sigstore-conformance cases.
pub const CONFORMANCE_IDENTITY: &str = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main";
/// The OIDC issuer of the sigstore-conformance cases.
pub const CONFORMANCE_ISSUER: &str = "https://token.actions.githubusercontent.com";

/// The testkit seed of every fixture and of the seed corpora.
pub const SEED: u64 = 2024;

/// The artifact the testkit bundles of the seed corpora sign.
pub const ARTIFACT: &[u8] = b"sigil fuzz artifact\n";

/// Separates the parts of a multi-part input (record separator between
/// newlines: never in the JSON, PEM or YAML parts, and easy to keep for the
/// mutator).
pub const SEPARATOR: &[u8] = b"\n\x1e\n";

/// Splits a multi-part input.
pub fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while let Some(at) = find(rest, SEPARATOR) {
        parts.push(&rest[..at]);
        rest = &rest[at + SEPARATOR.len()..];
    }
    parts.push(rest);
    parts
}

/// Joins parts into a multi-part input.
pub fn join(parts: &[&[u8]]) -> Vec<u8> {
    parts.join(SEPARATOR)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The testkit CA, logs and TSA, their trusted root, and policies that
/// accept the testkit's default signer.
pub struct Fixture {
    /// The testkit.
    pub kit: Testkit,
    /// Its trusted root.
    pub root: TrustedRoot,
    /// Keyless policy for [`BundleSpec::default`]'s identity and issuer.
    pub keyless: VerificationPolicy,
    /// Managed-key policy for the testkit's managed key.
    pub key: VerificationPolicy,
    /// Keyless policy for the sigstore-conformance cases' default signer.
    pub conformance_keyless: VerificationPolicy,
    /// A fixed "now", a day after the testkit's signing time.
    pub now: OffsetDateTime,
    /// Trusted roots of the sigstore-conformance cases (public-good,
    /// staging and custom ones), deduplicated; empty when the data set is
    /// not on this machine.
    pub conformance_roots: Vec<TrustedRoot>,
}

/// The fixture, built on first use.
pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let kit = Testkit::new(SEED);
        let root = TrustedRoot::from_json(&kit.trusted_root_json()).expect("testkit root");
        let spec = BundleSpec::default();
        let keyless = VerificationPolicy::keyless(IdentityPolicy {
            subject: IdentityMatcher::Exact(spec.identity.as_str().to_owned()),
            issuer: IdentityMatcher::Exact(spec.oidc_issuer.clone()),
            claims: Vec::new(),
        });
        let key = VerificationPolicy::key(
            PublicKey::from_pem(&kit.managed_public_key_pem()).expect("managed key"),
        );
        let now =
            OffsetDateTime::from_unix_timestamp(DEFAULT_SIGNING_TIME + 86_400).expect("fixed time");
        let mut conformance_roots = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        if let Some(cases) = conformance_dir() {
            for case in case_dirs(&cases) {
                if let Ok(json) = std::fs::read_to_string(case.join("trusted_root.json"))
                    && seen.insert(json.clone())
                    && let Ok(r) = TrustedRoot::from_json(&json)
                {
                    conformance_roots.push(r);
                }
            }
        }
        if let Ok(r) = TrustedRoot::public_good() {
            conformance_roots.push(r);
        }
        let conformance_keyless = VerificationPolicy::keyless(IdentityPolicy {
            subject: IdentityMatcher::Exact(CONFORMANCE_IDENTITY.into()),
            issuer: IdentityMatcher::Exact(CONFORMANCE_ISSUER.into()),
            claims: Vec::new(),
        });
        Fixture {
            kit,
            root,
            keyless,
            key,
            conformance_keyless,
            now,
            conformance_roots,
        }
    })
}

impl Fixture {
    /// A testkit bundle of `spec` over `content`.
    pub fn mint(&self, spec: &BundleSpec, content: Content) -> sigil_testkit::MintedBundle {
        self.kit.sign(spec, content).expect("testkit mints")
    }

    /// The policy that accepts bundles minted with `spec`.
    pub fn policy_for(&self, spec: &BundleSpec) -> &VerificationPolicy {
        match spec.key {
            KeySpec::Keyless => &self.keyless,
            KeySpec::ManagedKey => &self.key,
        }
    }
}

/// The sigstore-conformance `bundle-verify` directory, when present.
pub fn conformance_dir() -> Option<PathBuf> {
    sigil_testdata::sigstore_conformance().ok()
}

/// The case directories under `cases`, sorted.
pub fn case_dirs(cases: &std::path::Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cases)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// Walks `der` as nested TLVs with sigil's DER reader, decoding the
/// primitive types it knows, to a bounded depth. Returns how many elements
/// were read (so the work is not optimised away).
pub fn walk_der(der: &[u8], depth: usize) -> usize {
    walk_reader(sigil_verifier::der::Reader::new(der), depth)
}

fn walk_reader(mut reader: sigil_verifier::der::Reader<'_>, depth: usize) -> usize {
    if depth > 32 {
        return 0;
    }
    let mut n = 0;
    while !reader.is_empty() {
        let Ok(tlv) = reader.read_any() else {
            return n;
        };
        n += 1;
        let _ = match tlv.tag {
            0x02 => tlv.integer_bytes().map(|_| ()),
            0x01 => tlv.boolean().map(|_| ()),
            0x05 => tlv.null(),
            0x06 => tlv.oid().map(|_| ()),
            0x18 => tlv.generalized_time().map(|_| ()),
            _ => Ok(()),
        };
        let _ = tlv.small_uint();
        if tlv.tag & 0x20 != 0 {
            n += walk_reader(tlv.reader(), depth + 1);
        }
    }
    let _ = reader.finish();
    n
}

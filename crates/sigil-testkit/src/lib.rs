//! Offline, deterministic Sigstore material for sigil's tests.
//!
//! A [`Testkit`] holds, all derived from one `u64` seed: a Fulcio-like CA
//! ([`fulcio::FulcioCa`]), a trusted and an untrusted CT log ([`ct::CtLog`]),
//! a Rekor v1-like log ([`rekor::RekorV1`]), a Rekor v2-like log
//! ([`rekor::RekorV2`]), a timestamp authority ([`tsa::Tsa`]) and a managed
//! signing key. [`Testkit::sign`] mints a complete Sigstore bundle for a
//! [`BundleSpec`]; [`Testkit::trusted_root_json`] writes the matching trusted
//! root. The same seed always yields byte-identical output: keys come from
//! the seed and ECDSA signatures are RFC 6979 deterministic.
//!
//! ```
//! use sigil_testkit::{BundleSpec, Content, Testkit};
//!
//! let kit = Testkit::new(42);
//! let minted = kit.sign(&BundleSpec::rekor_v2(), Content::Message(b"artifact".to_vec()))?;
//! let trusted_root = kit.trusted_root_json();
//! assert!(minted.json.contains("hashedRekordV002") || minted.json.contains("canonicalizedBody"));
//! assert!(trusted_root.contains("PKIX_ED25519"));
//! # Ok::<(), sigil_testkit::TestkitError>(())
//! ```
//!
//! Independent check: `crates/sigil-testkit/scripts/check-with-sigstore-python.sh` mints every
//! scenario of `examples/mint.rs` and verifies it with sigstore-python
//! (offline, the kit's own trust config), openssl and Python `cryptography`.
//!
//! Dev-only: nothing here is meant for production, and it must never depend
//! on `sigil-verifier` (which dev-depends on it).
#![forbid(unsafe_code)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

pub mod bundle;
pub mod cosign;
pub mod ct;
pub mod der;
pub mod fulcio;
pub mod json;
pub mod keys;
pub mod metrics;
pub mod notation;
pub mod peak;
pub mod registry;
pub mod rekor;
pub mod time;
pub mod trust_root;
pub mod tsa;
pub mod tuf;
pub mod x509;

pub use bundle::{
    BundleSpec, BundleVersion, ChainSpec, Content, IN_TOTO_PAYLOAD_TYPE, KeySpec, MintedBundle,
    SctSpec, TimestampSpec, TlogSpec, TsaOptions, V1Kind, V2Kind, in_toto_statement,
    in_toto_statement_named,
};
pub use fulcio::GithubWorkflow;
pub use keys::KeyPair;
pub use rekor::TreeShape;
pub use trust_root::{TrustRootSpec, ValidFor};
pub use x509::Identity;

/// 2020-01-01T00:00:00Z: start of every default validity window.
pub const EPOCH_2020: i64 = 1_577_836_800;
/// 2040-01-01T00:00:00Z: end of the CA and TSA certificates' validity.
pub const EPOCH_2040: i64 = 2_208_988_800;
/// 2025-10-09T08:53:20Z: the default signing time of [`BundleSpec`].
pub const DEFAULT_SIGNING_TIME: i64 = 1_760_000_000;
/// The OIDC issuer of GitHub Actions tokens (the default issuer).
pub const GITHUB_ISSUER: &str = "https://token.actions.githubusercontent.com";

/// Errors from minting material.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TestkitError {
    /// The bundle spec asks for a combination no Sigstore client produces.
    #[error("unsupported bundle spec: {0}")]
    Unsupported(String),
}

/// A complete set of Sigstore services, derived from a seed.
#[derive(Clone, Debug)]
pub struct Testkit {
    /// The seed everything derives from.
    pub seed: u64,
    /// Fulcio-like CA (root + intermediate, P-384).
    pub fulcio: fulcio::FulcioCa,
    /// CT log listed in the trusted root.
    pub ct_log: ct::CtLog,
    /// CT log absent from the trusted root (for "untrusted SCT" cases).
    pub untrusted_ct_log: ct::CtLog,
    /// Rekor v1-like log (P-256).
    pub rekor_v1: rekor::RekorV1,
    /// Rekor v2-like log (Ed25519).
    pub rekor_v2: rekor::RekorV2,
    /// Timestamp authority listed in the trusted root.
    pub tsa: tsa::Tsa,
    /// The managed (non-Fulcio) signing key, P-256.
    pub managed_key: KeyPair,
}

impl Testkit {
    /// Builds every service from `seed`.
    pub fn new(seed: u64) -> Self {
        Testkit {
            seed,
            fulcio: fulcio::FulcioCa::new(
                seed,
                "fulcio",
                "https://fulcio.sigil.test",
                EPOCH_2020,
                EPOCH_2040,
            ),
            ct_log: ct::CtLog::new(seed, "ctlog", "https://ctfe.sigil.test/2022"),
            untrusted_ct_log: ct::CtLog::new(
                seed,
                "ctlog/untrusted",
                "https://ctfe.untrusted.test",
            ),
            rekor_v1: rekor::RekorV1::new(seed, "rekor-v1", "https://rekor.sigil.test"),
            rekor_v2: rekor::RekorV2::new(seed, "rekor-v2", "https://log2025-1.rekor.sigil.test"),
            tsa: tsa::Tsa::new(
                seed,
                "tsa",
                "https://timestamp.sigil.test/api/v1/timestamp",
                EPOCH_2020,
                EPOCH_2040,
            ),
            managed_key: KeyPair::p256(seed, "managed"),
        }
    }

    /// A kit shaped like GitHub's own Sigstore instance, which signs the
    /// artifact attestations of private repositories: its Fulcio issues
    /// GitHub's extension set, its timestamp authority signs with P-384 and
    /// SHA-384, and its trusted root ([`TrustRootSpec::timestamp_only`])
    /// lists neither a transparency log nor a CT log. Sign with
    /// [`BundleSpec::github_private`]. The logs of [`Testkit::new`] stay in
    /// the struct (unused) so the same kit can also mint public-good-shaped
    /// bundles for comparison.
    pub fn github_private(seed: u64) -> Self {
        let mut kit = Testkit::new(seed);
        kit.fulcio = fulcio::FulcioCa::new(
            seed,
            "github/fulcio",
            "https://fulcio.githubapp.test",
            EPOCH_2020,
            EPOCH_2040,
        );
        kit.tsa = tsa::Tsa::with_digest(
            seed,
            "github/tsa",
            "https://timestamp.githubapp.test/api/v1/timestamp",
            EPOCH_2020,
            EPOCH_2040,
            tsa::TsaDigest::Sha384,
        );
        kit
    }

    /// Replaces the TSA by one (same keys and digest) whose certificates are valid over `[not_before, not_after]`.
    pub fn with_tsa_validity(mut self, not_before: i64, not_after: i64) -> Self {
        let label = if self.tsa.digest == tsa::TsaDigest::Sha384 {
            "github/tsa"
        } else {
            "tsa"
        };
        self.tsa = tsa::Tsa::with_digest(
            self.seed,
            label,
            &self.tsa.uri,
            not_before,
            not_after,
            self.tsa.digest,
        );
        self
    }

    /// Replaces the Fulcio CA by one (same keys) whose CA certificates are valid over `[not_before, not_after]`.
    pub fn with_fulcio_validity(mut self, not_before: i64, not_after: i64) -> Self {
        self.fulcio =
            fulcio::FulcioCa::new(self.seed, "fulcio", &self.fulcio.uri, not_before, not_after);
        self
    }

    /// Signs `data` with the managed key (ECDSA P-256, SHA-256, DER signature).
    pub fn sign_blob(&self, data: &[u8]) -> Vec<u8> {
        self.managed_key.sign(data)
    }

    /// The PEM public key of the managed key.
    pub fn managed_public_key_pem(&self) -> String {
        self.managed_key.public_key_pem()
    }

    /// The ephemeral signing key a keyless signature at `signing_time` for `identity` uses.
    pub fn ephemeral_key(&self, identity: &Identity, signing_time: i64) -> KeyPair {
        KeyPair::p256(
            self.seed,
            &format!("ephemeral/{}/{signing_time}", identity.as_str()),
        )
    }

    /// The trusted root with every service, valid from 2020 with no end.
    pub fn trusted_root_json(&self) -> String {
        self.trusted_root_json_with(&TrustRootSpec::default())
    }

    /// The trusted root per `spec`.
    pub fn trusted_root_json_with(&self, spec: &TrustRootSpec) -> String {
        pretty(&trust_root::trusted_root(self, spec))
    }

    /// A `ClientTrustConfig` (trusted root + signing config) as sigstore-python's `--trust-config` reads it.
    pub fn client_trust_config_json(&self, spec: &TrustRootSpec) -> String {
        pretty(&trust_root::client_trust_config(self, spec))
    }

    /// Mints a bundle for `content` per `spec`.
    pub fn sign(&self, spec: &BundleSpec, content: Content) -> Result<MintedBundle, TestkitError> {
        bundle::mint(self, spec, content)
    }
}

fn pretty(v: &serde_json::Value) -> String {
    // Serializing a Value cannot fail (all keys are strings); fall back to compact form regardless.
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

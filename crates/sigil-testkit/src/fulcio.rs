//! A Fulcio-like certificate authority: a P-384 root and intermediate
//! (ECDSA-SHA384, codeSigning EKU on the intermediate) issuing 10-minute
//! P-256 leaf certificates with Fulcio's OID extensions and an embedded SCT.

use sha2::{Digest as _, Sha256};

use crate::ct::{CtLog, sct_list_extension};
use crate::der;
use crate::keys::{KeyPair, pem};
use crate::x509::{
    CertTemplate, CertifiedKey, Extension, Identity, Name, OID_EKU_CODE_SIGNING, self_signed_ca,
    serial_from, sign_tbs,
};

/// Fulcio's OID arc, `1.3.6.1.4.1.57264.1`.
pub const FULCIO_OID_ARC: &str = "1.3.6.1.4.1.57264.1";

/// A Fulcio-like CA: self-signed root plus intermediate.
#[derive(Clone, Debug)]
pub struct FulcioCa {
    /// The root certificate and key.
    pub root: CertifiedKey,
    /// The intermediate certificate and key; it signs leaves.
    pub intermediate: CertifiedKey,
    /// URI written into the trusted root.
    pub uri: String,
    seed: u64,
    label: String,
}

impl FulcioCa {
    /// A CA whose keys derive from `seed` and `label`, with both CA
    /// certificates valid over `[not_before, not_after]`.
    pub fn new(seed: u64, label: &str, uri: &str, not_before: i64, not_after: i64) -> Self {
        let root = self_signed_ca(
            seed,
            &format!("{label}/root"),
            KeyPair::p384(seed, &format!("{label}/root")),
            Name::new("sigil-testkit.dev", "sigstore"),
            not_before,
            not_after,
        );
        let int_key = KeyPair::p384(seed, &format!("{label}/intermediate"));
        let int_name = Name::new("sigil-testkit.dev", "sigstore-intermediate");
        let serial = serial_from(seed, &format!("{label}/intermediate"));
        let template = CertTemplate {
            serial: serial.clone(),
            issuer: root.name.clone(),
            subject: int_name.clone(),
            not_before,
            not_after,
            spki: int_key.spki_der(),
            extensions: vec![
                Extension::key_usage(&[5, 6]),
                Extension::ext_key_usage(false, &[OID_EKU_CODE_SIGNING]),
                Extension::basic_constraints(true, Some(0)),
                Extension::subject_key_id(&int_key),
                Extension::authority_key_id(&root.key),
            ],
        };
        let intermediate = CertifiedKey {
            cert_der: template.sign(&root.key),
            name: int_name,
            key: int_key,
            serial,
        };
        FulcioCa {
            root,
            intermediate,
            uri: uri.to_owned(),
            seed,
            label: label.to_owned(),
        }
    }

    /// The CA chain, intermediate first then root (the trusted root's order).
    pub fn chain_der(&self) -> Vec<Vec<u8>> {
        vec![
            self.intermediate.cert_der.clone(),
            self.root.cert_der.clone(),
        ]
    }

    /// SHA-256 of the intermediate's SPKI: the `issuer_key_hash` SCTs cover.
    pub fn issuer_key_hash(&self) -> [u8; 32] {
        Sha256::digest(self.intermediate.key.spki_der()).into()
    }

    /// Issues a leaf certificate for `req`.
    pub fn issue(&self, req: &LeafRequest<'_>) -> IssuedLeaf {
        let serial = serial_from(
            self.seed,
            &format!(
                "{}/leaf/{}/{}/{}",
                self.label,
                req.identity.as_str(),
                req.not_before,
                hex::encode(req.public_key.spki_der())
            ),
        );
        let mut extensions = vec![
            Extension::key_usage(&[0]),
            Extension::ext_key_usage(false, &[OID_EKU_CODE_SIGNING]),
            Extension::subject_key_id(req.public_key),
            Extension::authority_key_id(&self.intermediate.key),
            Extension::subject_alt_name(&req.identity),
        ];
        if let Some(issuer) = &req.oidc_issuer {
            // 1.1 is the deprecated raw-string form, 1.8 the DER UTF8String form.
            extensions.push(fulcio_raw(1, issuer));
        }
        if let Some(gh) = &req.github {
            extensions.extend(gh.raw_extensions());
        }
        if let Some(issuer) = &req.oidc_issuer {
            extensions.push(fulcio_utf8(8, issuer));
        }
        if let Some(gh) = &req.github {
            extensions.extend(gh.utf8_extensions());
        }
        extensions.extend(req.extra_extensions.iter().cloned());
        let mut template = CertTemplate {
            serial,
            issuer: self.intermediate.name.clone(),
            subject: Name::empty(),
            not_before: req.not_before,
            not_after: req.not_before + req.lifetime_secs,
            spki: req.public_key.spki_der(),
            extensions,
        };
        let precert_tbs = template.tbs_der(&self.intermediate.key);
        let mut scts = Vec::new();
        for sct in &req.scts {
            scts.push(sct.log.sct(
                sct.timestamp_ms,
                &self.issuer_key_hash(),
                &precert_tbs,
                &sct.extensions,
            ));
        }
        if !scts.is_empty() {
            template.extensions.push(sct_list_extension(&scts));
        }
        let tbs = template.tbs_der(&self.intermediate.key);
        IssuedLeaf {
            cert_der: sign_tbs(&tbs, &self.intermediate.key),
            precert_tbs_der: precert_tbs,
            tbs_der: tbs,
            scts,
        }
    }
}

/// An extension under Fulcio's arc whose value is the raw string bytes (1.1–1.6).
pub fn fulcio_raw(arc: u32, value: &str) -> Extension {
    Extension::new(
        &format!("{FULCIO_OID_ARC}.{arc}"),
        false,
        value.as_bytes().to_vec(),
    )
}

/// An extension under Fulcio's arc whose value is a DER UTF8String (1.8 onwards).
pub fn fulcio_utf8(arc: u32, value: &str) -> Extension {
    Extension::new(&format!("{FULCIO_OID_ARC}.{arc}"), false, der::utf8(value))
}

/// One SCT to embed in a leaf.
#[derive(Clone, Debug)]
pub struct SctRequest<'a> {
    /// The CT log that signs it (trusted or not).
    pub log: &'a CtLog,
    /// SCT timestamp, milliseconds since the epoch.
    pub timestamp_ms: u64,
    /// The SCT's `extensions` bytes (usually empty; Static CT logs put a leaf index here).
    pub extensions: Vec<u8>,
}

/// What a leaf certificate should say.
#[derive(Clone, Debug)]
pub struct LeafRequest<'a> {
    /// The leaf's (subject) key.
    pub public_key: &'a KeyPair,
    /// SAN identity.
    pub identity: Identity,
    /// OIDC issuer for the 1.1 and 1.8 extensions (omitted when `None`).
    pub oidc_issuer: Option<String>,
    /// notBefore, Unix seconds.
    pub not_before: i64,
    /// Lifetime in seconds (Fulcio: 600).
    pub lifetime_secs: i64,
    /// GitHub workflow claims for 1.2–1.6 and 1.9–1.22.
    pub github: Option<GithubWorkflow>,
    /// SCTs to embed (none: no SCT extension).
    pub scts: Vec<SctRequest<'a>>,
    /// Extensions appended after Fulcio's (before the SCT list).
    pub extra_extensions: Vec<Extension>,
}

/// A minted leaf certificate.
#[derive(Clone, Debug)]
pub struct IssuedLeaf {
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// The final TBSCertificate.
    pub tbs_der: Vec<u8>,
    /// The TBSCertificate without the SCT list extension (what SCTs sign).
    pub precert_tbs_der: Vec<u8>,
    /// The serialized SCTs embedded in the certificate.
    pub scts: Vec<Vec<u8>>,
}

impl IssuedLeaf {
    /// The certificate as PEM.
    pub fn cert_pem(&self) -> String {
        pem("CERTIFICATE", &self.cert_der)
    }
}

/// GitHub Actions workflow claims, as Fulcio encodes them. Empty strings
/// are omitted from the certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)] // field names mirror Fulcio's OID names one to one
pub struct GithubWorkflow {
    /// 1.2 (raw) and 1.20 BuildTrigger.
    pub trigger: String,
    /// 1.3 (raw) commit SHA; also 1.13 SourceRepositoryDigest and 1.19 BuildConfigDigest.
    pub sha: String,
    /// 1.4 (raw) workflow name.
    pub workflow_name: String,
    /// 1.5 (raw) `owner/repo`.
    pub repository: String,
    /// 1.6 (raw) git ref; also 1.14 SourceRepositoryRef.
    pub git_ref: String,
    /// 1.9 BuildSignerURI.
    pub build_signer_uri: String,
    /// 1.10 BuildSignerDigest.
    pub build_signer_digest: String,
    /// 1.11 RunnerEnvironment.
    pub runner_environment: String,
    /// 1.12 SourceRepositoryURI.
    pub source_repository_uri: String,
    /// 1.15 SourceRepositoryIdentifier.
    pub source_repository_identifier: String,
    /// 1.16 SourceRepositoryOwnerURI.
    pub source_repository_owner_uri: String,
    /// 1.17 SourceRepositoryOwnerIdentifier.
    pub source_repository_owner_identifier: String,
    /// 1.18 BuildConfigURI.
    pub build_config_uri: String,
    /// 1.21 RunInvocationURI.
    pub run_invocation_uri: String,
    /// 1.22 SourceRepositoryVisibilityAtSigning.
    pub source_repository_visibility: String,
}

impl GithubWorkflow {
    /// Consistent claims for workflow `workflow_path` (e.g. `.github/workflows/release.yml`)
    /// of `owner/repo` run on `git_ref` at commit `sha`.
    pub fn new(repository: &str, workflow_path: &str, git_ref: &str, sha: &str) -> Self {
        let repo_uri = format!("https://github.com/{repository}");
        let owner = repository.split('/').next().unwrap_or(repository);
        let workflow_uri = format!("{repo_uri}/{workflow_path}@{git_ref}");
        GithubWorkflow {
            trigger: "push".to_owned(),
            sha: sha.to_owned(),
            workflow_name: "release".to_owned(),
            repository: repository.to_owned(),
            git_ref: git_ref.to_owned(),
            build_signer_uri: workflow_uri.clone(),
            build_signer_digest: sha.to_owned(),
            runner_environment: "github-hosted".to_owned(),
            source_repository_uri: repo_uri.clone(),
            source_repository_identifier: "123456789".to_owned(),
            source_repository_owner_uri: format!("https://github.com/{owner}"),
            source_repository_owner_identifier: "987654321".to_owned(),
            build_config_uri: workflow_uri,
            run_invocation_uri: format!("{repo_uri}/actions/runs/1/attempts/1"),
            source_repository_visibility: "public".to_owned(),
        }
    }

    /// The SAN URI Fulcio issues for this workflow (the BuildSignerURI).
    pub fn identity(&self) -> Identity {
        Identity::Uri(self.build_signer_uri.clone())
    }

    fn raw_extensions(&self) -> Vec<Extension> {
        [
            (2, &self.trigger),
            (3, &self.sha),
            (4, &self.workflow_name),
            (5, &self.repository),
            (6, &self.git_ref),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(arc, v)| fulcio_raw(arc, v))
        .collect()
    }

    fn utf8_extensions(&self) -> Vec<Extension> {
        [
            (9, &self.build_signer_uri),
            (10, &self.build_signer_digest),
            (11, &self.runner_environment),
            (12, &self.source_repository_uri),
            (13, &self.sha),
            (14, &self.git_ref),
            (15, &self.source_repository_identifier),
            (16, &self.source_repository_owner_uri),
            (17, &self.source_repository_owner_identifier),
            (18, &self.build_config_uri),
            (19, &self.sha),
            (20, &self.trigger),
            (21, &self.run_invocation_uri),
            (22, &self.source_repository_visibility),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(arc, v)| fulcio_utf8(arc, v))
        .collect()
    }
}

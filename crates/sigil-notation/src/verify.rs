//! The verification of one Notary Project signature for one image, in the
//! specification's order: integrity, authenticity (trust store, then
//! trusted identity), expiry, authentic timestamp, revocation. Each check's
//! failure enforces, logs or is skipped as the trust policy statement says;
//! integrity is always enforced. Pure: the time and the fetched revocation
//! responses are passed in.

use sigil_verifier::crypto::sha256;
use sigil_verifier::tsa::{TimestampError, verify_rfc3161_to_roots};
use sigil_verifier::x509::Certificate;
use time::OffsetDateTime;

use crate::aws_signer::{self, AwsSignature, AwsSignerError};
use crate::chain::{self, ChainError};
use crate::dn;
use crate::envelope::{Envelope, EnvelopeError, SigningScheme};
use crate::payload::{self, Descriptor, PayloadError};
use crate::policy::{Action, Check, Identity, Level, Statement, StoreKind, TimestampPolicy};
use crate::revocation::{self, Evidence, Request, Verdict};
use crate::store::TrustStore;

/// What a verification is judged against.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The trust policy statement that applies to the image's repository.
    pub statement: &'a Statement,
    /// The trust store its `trustStores` name.
    pub trust_store: &'a TrustStore,
    /// Revocation responses fetched for [`revocation_requests`].
    pub revocation: &'a Evidence,
    /// The current time.
    pub now: OffsetDateTime,
}

/// What failed, per check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailureKind {
    /// The envelope is malformed or its signature does not verify.
    #[error("{0}")]
    Envelope(#[from] EnvelopeError),
    /// The signed payload is not this image's.
    #[error("{0}")]
    Payload(#[from] PayloadError),
    /// The chain breaks the certificate requirements.
    #[error("{0}")]
    Chain(#[from] ChainError),
    /// A critical extended attribute sigil does not understand.
    #[error("the signature has critical extended attribute `{0}`, which sigil does not understand")]
    UnknownCriticalAttribute(String),
    /// The signature needs a verification plugin sigil does not build in.
    #[error(
        "the signature requires verification plugin `{0}`; sigil runs no plugins and builds in only AWS Signer's"
    )]
    Plugin(String),
    /// A trust store the statement names is not in the trust store.
    #[error(
        "trust policy statement `{statement}` names trust store `{store}`, which does not exist"
    )]
    MissingStore {
        /// The statement.
        statement: String,
        /// `type:name`.
        store: String,
    },
    /// No certificate of the chain is in the statement's trust stores.
    #[error(
        "the certificate chain (signing certificate `{leaf}`) does not lead to trust stores {stores}"
    )]
    Untrusted {
        /// The signing certificate's subject.
        leaf: String,
        /// The stores tried.
        stores: String,
    },
    /// The signing certificate is not a trusted identity.
    #[error(
        "signing certificate `{subject}` matches none of the trusted identities of statement `{statement}`"
    )]
    Identity {
        /// The signing certificate's subject.
        subject: String,
        /// The statement.
        statement: String,
    },
    /// The signature expired.
    #[error("the signature expired at {0}")]
    Expired(OffsetDateTime),
    /// A certificate was not valid at the time the signature is judged at.
    #[error(
        "certificate `{subject}` (valid {not_before} to {not_after}) was not valid at {at}, {basis}"
    )]
    NotValidAt {
        /// The certificate.
        subject: String,
        /// Start of validity.
        not_before: OffsetDateTime,
        /// End of validity.
        not_after: OffsetDateTime,
        /// The time judged at.
        at: OffsetDateTime,
        /// Where that time comes from.
        basis: &'static str,
    },
    /// A timestamp was required and is missing.
    #[error(
        "the trust policy requires a timestamp countersignature (it names a tsa store) and the signature has none"
    )]
    NoTimestamp,
    /// The timestamp countersignature does not verify.
    #[error("timestamp countersignature: {0}")]
    Timestamp(TimestampError),
    /// A certificate is revoked.
    #[error("certificate `{subject}` is revoked ({via})")]
    Revoked {
        /// The certificate.
        subject: String,
        /// How it was learnt (`OCSP <url>`, `CRL <url>`).
        via: String,
    },
    /// A revocation status could not be determined.
    #[error("the revocation status of certificate `{subject}` could not be determined: {reason}")]
    RevocationUnknown {
        /// The certificate.
        subject: String,
        /// Why.
        reason: String,
    },
    /// AWS Signer's checks failed.
    #[error("{0}")]
    AwsSigner(#[from] AwsSignerError),
}

impl FailureKind {
    /// A stable, machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Envelope(_) => "notation_envelope",
            Self::Payload(_) => "notation_target_mismatch",
            Self::Chain(_) => "notation_chain",
            Self::UnknownCriticalAttribute(_) => "notation_unknown_critical_attribute",
            Self::Plugin(_) => "notation_plugin",
            Self::MissingStore { .. } => "notation_missing_trust_store",
            Self::Untrusted { .. } => "notation_untrusted_chain",
            Self::Identity { .. } => "notation_identity",
            Self::Expired(_) => "notation_expired",
            Self::NotValidAt { .. } => "notation_certificate_not_valid",
            Self::NoTimestamp => "notation_no_timestamp",
            Self::Timestamp(_) => "notation_timestamp",
            Self::Revoked { .. } => "notation_revoked",
            Self::RevocationUnknown { .. } => "notation_revocation_unknown",
            Self::AwsSigner(AwsSignerError::Revoked(_)) => "notation_revoked",
            Self::AwsSigner(AwsSignerError::Unknown(_)) => "notation_revocation_unknown",
            Self::AwsSigner(_) => "notation_aws_signer",
        }
    }
}

/// A check that failed, with what failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Notary Project {check} check failed: {kind}")]
pub struct Failure {
    /// The check.
    pub check: Check,
    /// What failed.
    pub kind: FailureKind,
}

/// A signature that passed (possibly with logged failures).
#[derive(Debug, Clone)]
pub struct Verified {
    /// False when the statement's level is `skip` (nothing was verified).
    pub verified: bool,
    /// The signing scheme.
    pub scheme: Option<SigningScheme>,
    /// The signing certificate's subject.
    pub signer: String,
    /// The time the chain was judged at.
    pub judged_at: Option<OffsetDateTime>,
    /// The verified timestamp's time, if a timestamp was verified.
    pub timestamp: Option<OffsetDateTime>,
    /// The AWS Signer profile version, for AWS Signer signatures.
    pub aws_signer_profile: Option<String>,
    /// Failures of checks whose action is `log`.
    pub logged: Vec<Failure>,
}

/// What to fetch for the revocation check of this envelope.
pub fn revocation_requests(envelope: &Envelope) -> Vec<Request> {
    match aws_signer::detect(envelope) {
        Ok(Some(aws)) => vec![aws_signer::revocation_request(&aws, envelope)],
        _ => revocation::requests(&envelope.chain),
    }
}

/// Verifies an envelope (of `media_type`) as a signature of `target`.
pub fn verify_envelope(
    media_type: &str,
    bytes: &[u8],
    target: &Descriptor,
    ctx: &Context<'_>,
) -> Result<Verified, Failure> {
    if ctx.statement.verification.level == Level::Skip {
        return Ok(skipped());
    }
    let envelope = crate::decode::envelope(media_type, bytes).map_err(|e| integrity(e.into()))?;
    verify(&envelope, target, ctx)
}

fn skipped() -> Verified {
    Verified {
        verified: false,
        scheme: None,
        signer: String::new(),
        judged_at: None,
        timestamp: None,
        aws_signer_profile: None,
        logged: Vec::new(),
    }
}

fn integrity(kind: FailureKind) -> Failure {
    Failure {
        check: Check::Integrity,
        kind,
    }
}

/// Verifies a parsed envelope as a signature of `target`.
pub fn verify(
    envelope: &Envelope,
    target: &Descriptor,
    ctx: &Context<'_>,
) -> Result<Verified, Failure> {
    let statement = ctx.statement;
    if statement.verification.level == Level::Skip {
        return Ok(skipped());
    }
    let leaf = envelope.signing_certificate().ok_or_else(|| {
        integrity(
            EnvelopeError::header(
                envelope.format,
                "x5chain",
                "is missing or empty; a Notary Project signature carries its certificate chain",
            )
            .into(),
        )
    })?;
    let mut out = Verified {
        verified: true,
        scheme: Some(envelope.scheme),
        signer: leaf.subject.clone(),
        judged_at: None,
        timestamp: None,
        aws_signer_profile: None,
        logged: Vec::new(),
    };
    let judge = |out: &mut Verified,
                 check: Check,
                 result: Result<(), FailureKind>|
     -> Result<(), Failure> {
        let Err(kind) = result else { return Ok(()) };
        let failure = Failure { check, kind };
        match statement.verification.action(check) {
            Action::Enforce => Err(failure),
            Action::Log => {
                out.logged.push(failure);
                Ok(())
            }
            Action::Skip => Ok(()),
        }
    };

    // 1. Integrity: always enforced.
    envelope
        .verify_integrity()
        .map_err(|e| integrity(e.into()))?;
    chain::validate_code_signing_chain(&envelope.chain).map_err(|e| integrity(e.into()))?;
    let signed_target = payload::target(&envelope.payload).map_err(|e| integrity(e.into()))?;
    payload::check_target(&signed_target, target).map_err(|e| integrity(e.into()))?;
    let aws = aws_signer::detect(envelope).map_err(|e| integrity(e.into()))?;
    if aws.is_none()
        && let Some(plugin) = envelope.attribute(aws_signer::ATTR_PLUGIN)
    {
        let name = plugin.value.as_str().unwrap_or("(not a string)").to_owned();
        return Err(integrity(FailureKind::Plugin(name)));
    }
    if let Some(unknown) = envelope
        .extended
        .iter()
        .find(|a| a.critical && !(aws.is_some() && aws_signer::understands(&a.key)))
    {
        return Err(integrity(FailureKind::UnknownCriticalAttribute(
            unknown.key.clone(),
        )));
    }
    out.aws_signer_profile = aws.as_ref().map(|a| a.profile_version.clone());

    // 2. Authenticity: the chain leads to the trust store, the signer is trusted.
    let authenticity = authenticity(envelope, leaf, aws.as_ref(), ctx);
    judge(&mut out, Check::Authenticity, authenticity)?;

    // 3. Expiry.
    let expiry = match envelope.expiry {
        Some(at) if at <= ctx.now => Err(FailureKind::Expired(at)),
        _ => Ok(()),
    };
    judge(&mut out, Check::Expiry, expiry)?;

    // 4. Authentic timestamp: the time the chain is judged at.
    let (timestamp, authentic_time) = authentic_timestamp(envelope, ctx);
    out.timestamp = authentic_time.filter(|_| envelope.scheme == SigningScheme::X509);
    out.judged_at = Some(authentic_time.unwrap_or(ctx.now));
    judge(&mut out, Check::AuthenticTimestamp, timestamp)?;

    // 5. Revocation.
    if statement.verification.action(Check::Revocation) != Action::Skip {
        let result = match &aws {
            Some(aws) => {
                let request = aws_signer::revocation_request(aws, envelope);
                aws_signer::revocation_verdict(ctx.revocation.get(&request))
                    .map_err(FailureKind::from)
            }
            None => {
                match revocation::check(&envelope.chain, ctx.revocation, ctx.now, authentic_time) {
                    Verdict::Good => Ok(()),
                    Verdict::Revoked { subject, source } => Err(FailureKind::Revoked {
                        subject,
                        via: source,
                    }),
                    Verdict::Unknown { subject, reason } => {
                        Err(FailureKind::RevocationUnknown { subject, reason })
                    }
                }
            }
        };
        judge(&mut out, Check::Revocation, result)?;
    }
    Ok(out)
}

fn authenticity(
    envelope: &Envelope,
    leaf: &Certificate,
    aws: Option<&AwsSignature>,
    ctx: &Context<'_>,
) -> Result<(), FailureKind> {
    let statement = ctx.statement;
    let kind = match envelope.scheme {
        SigningScheme::X509 => StoreKind::Ca,
        SigningScheme::SigningAuthority => StoreKind::SigningAuthority,
    };
    let mut trusted: Vec<&Certificate> = Vec::new();
    let mut names = Vec::new();
    for store in statement.trust_stores.iter().filter(|s| s.kind == kind) {
        let label = format!("{}:{}", store.kind.as_str(), store.name);
        let certs = ctx
            .trust_store
            .certificates(store.kind, &store.name)
            .ok_or_else(|| FailureKind::MissingStore {
                statement: statement.name.clone(),
                store: label.clone(),
            })?;
        trusted.extend(certs.iter());
        names.push(label);
    }
    let builtin_aws_root = aws.is_some()
        && statement
            .trusted_identities
            .iter()
            .any(aws_signer::is_profile_identity)
        && envelope
            .chain
            .last()
            .is_some_and(|root| hex::encode(sha256(&root.der)) == aws_signer::ROOT_SHA256);
    if builtin_aws_root {
        names.push("AWS Signer's root (built in)".into());
    }
    if !builtin_aws_root && chain::trusted_anchor(&envelope.chain, &trusted).is_none() {
        return Err(FailureKind::Untrusted {
            leaf: leaf.subject.clone(),
            stores: if names.is_empty() {
                format!("(the statement names no {} store)", kind.as_str())
            } else {
                names.join(", ")
            },
        });
    }
    if let Some(aws) = aws {
        return aws_signer::check_identity(aws, &statement.trusted_identities)
            .map_err(FailureKind::from);
    }
    if statement.trusted_identities.contains(&Identity::Any) {
        return Ok(());
    }
    let subject = dn::subject_of(&leaf.der);
    let matched = subject.as_ref().is_some_and(|subject| {
        statement.trusted_identities.iter().any(|i| match i {
            Identity::Subject { dn: wanted, .. } => dn::is_subset(wanted, subject),
            _ => false,
        })
    });
    if matched {
        Ok(())
    } else {
        Err(FailureKind::Identity {
            subject: subject
                .as_ref()
                .map(dn::display)
                .unwrap_or_else(|| leaf.subject.clone()),
            statement: statement.name.clone(),
        })
    }
}

/// The authentic-timestamp check and the authentic signing time it
/// establishes (`None`: the chain is judged at the current time).
fn authentic_timestamp(
    envelope: &Envelope,
    ctx: &Context<'_>,
) -> (Result<(), FailureKind>, Option<OffsetDateTime>) {
    let not_valid =
        |cert: &Certificate, at: OffsetDateTime, basis: &'static str| FailureKind::NotValidAt {
            subject: cert.subject.clone(),
            not_before: cert.not_before,
            not_after: cert.not_after,
            at,
            basis,
        };
    if envelope.scheme == SigningScheme::SigningAuthority {
        let at = envelope.signing_time;
        let result = match chain::invalid_at(&envelope.chain, at) {
            Some(cert) => Err(not_valid(
                cert,
                at,
                "the authentic signing time the signing authority vouches for",
            )),
            None => Ok(()),
        };
        return (result, Some(at));
    }
    let roots: Vec<Certificate> = ctx
        .statement
        .trust_stores
        .iter()
        .filter(|s| s.kind == StoreKind::Tsa)
        .filter_map(|s| ctx.trust_store.certificates(s.kind, &s.name))
        .flatten()
        .cloned()
        .collect();
    let names_tsa = ctx
        .statement
        .trust_stores
        .iter()
        .any(|s| s.kind == StoreKind::Tsa);
    let chain_expired = envelope.chain.iter().any(|c| ctx.now > c.not_after);
    let verify_timestamp = names_tsa
        && (ctx.statement.verification.verify_timestamp == TimestampPolicy::Always
            || chain_expired);
    if !verify_timestamp {
        let result = match chain::invalid_at(&envelope.chain, ctx.now) {
            Some(cert) => Err(not_valid(
                cert,
                ctx.now,
                "the current time (no trusted timestamp vouches for the signing time)",
            )),
            None => Ok(()),
        };
        return (result, None);
    }
    let Some(token) = &envelope.timestamp else {
        return (Err(FailureKind::NoTimestamp), None);
    };
    match verify_rfc3161_to_roots(token, &envelope.signature, &roots) {
        Ok(stamp) => {
            let result = match chain::invalid_at(&envelope.chain, stamp.time) {
                Some(cert) => Err(not_valid(
                    cert,
                    stamp.time,
                    "the time the trusted timestamp vouches for",
                )),
                None => Ok(()),
            };
            (result, Some(stamp.time))
        }
        Err(e) => (Err(FailureKind::Timestamp(e)), None),
    }
}

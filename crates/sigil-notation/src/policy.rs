//! The Notary Project trust policy (`trustpolicy.oci.json`, and the older
//! `trustpolicy.json` of the same shape): statements with registry scopes,
//! a verification level and its overrides, trust stores and trusted
//! identities, parsed and validated as the specification requires, with
//! every error naming the field (`trustPolicies[1].signatureVerification.level`).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::dn::{self, Dn};

/// Largest trust policy document read.
pub const MAX_POLICY_LEN: usize = 1024 * 1024;
/// Most statements in one document.
pub const MAX_STATEMENTS: usize = 1024;
/// Most registry scopes, trust stores or identities in one statement.
pub const MAX_LIST: usize = 1024;

/// The verifications a level enforces, logs or skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Check {
    /// The signature verifies over the envelope, and the envelope is well formed.
    Integrity,
    /// The chain leads to the trust store and the signer is a trusted identity.
    Authenticity,
    /// The signing time is vouched for and inside the chain's validity.
    AuthenticTimestamp,
    /// The signature has not expired.
    Expiry,
    /// No certificate of the chain is revoked.
    Revocation,
}

impl Check {
    /// Every check, in the order they run.
    pub const ALL: [Check; 5] = [
        Self::Integrity,
        Self::Authenticity,
        Self::AuthenticTimestamp,
        Self::Expiry,
        Self::Revocation,
    ];

    /// The name used in the trust policy and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Integrity => "integrity",
            Self::Authenticity => "authenticity",
            Self::AuthenticTimestamp => "authenticTimestamp",
            Self::Expiry => "expiry",
            Self::Revocation => "revocation",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a failed check does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The signature fails.
    Enforce,
    /// The failure is reported and the signature passes.
    Log,
    /// The check does not run.
    Skip,
}

impl Action {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "enforce" => Some(Self::Enforce),
            "log" => Some(Self::Log),
            "skip" => Some(Self::Skip),
            _ => None,
        }
    }
}

/// The built-in verification levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Every check enforced.
    Strict,
    /// Integrity and authenticity enforced; the rest logged.
    Permissive,
    /// Integrity enforced; the rest logged.
    Audit,
    /// No verification.
    Skip,
}

impl Level {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "strict" => Some(Self::Strict),
            "permissive" => Some(Self::Permissive),
            "audit" => Some(Self::Audit),
            "skip" => Some(Self::Skip),
            _ => None,
        }
    }

    /// The level's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::Permissive => "permissive",
            Self::Audit => "audit",
            Self::Skip => "skip",
        }
    }

    fn action(self, check: Check) -> Action {
        use Action::{Enforce, Log, Skip};
        match (self, check) {
            (Self::Skip, _) => Skip,
            (_, Check::Integrity) => Enforce,
            (Self::Strict, _) => Enforce,
            (Self::Permissive, Check::Authenticity) => Enforce,
            (Self::Permissive | Self::Audit, _) => Log,
        }
    }
}

/// When a timestamp countersignature is verified (`verifyTimestamp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampPolicy {
    /// Always, when a TSA trust store is configured (the default).
    Always,
    /// Only once the signing chain has expired.
    AfterCertExpiry,
}

/// A statement's `signatureVerification`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// The level.
    pub level: Level,
    /// Per-check overrides.
    pub overrides: BTreeMap<Check, Action>,
    /// When to verify timestamps.
    pub verify_timestamp: TimestampPolicy,
}

impl Verification {
    /// What a failure of `check` does under this statement.
    pub fn action(&self, check: Check) -> Action {
        self.overrides
            .get(&check)
            .copied()
            .unwrap_or_else(|| self.level.action(check))
    }
}

/// The three trust store types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StoreKind {
    /// `ca`: roots for `notary.x509` signatures.
    Ca,
    /// `signingAuthority`: roots for `notary.x509.signingAuthority` signatures.
    SigningAuthority,
    /// `tsa`: roots of timestamp authorities.
    Tsa,
}

impl StoreKind {
    /// The type's name (also its directory under `truststore/x509/`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ca => "ca",
            Self::SigningAuthority => "signingAuthority",
            Self::Tsa => "tsa",
        }
    }

    /// From a type name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "ca" => Some(Self::Ca),
            "signingAuthority" => Some(Self::SigningAuthority),
            "tsa" => Some(Self::Tsa),
            _ => None,
        }
    }
}

/// A `type:name` trust store reference.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoreRef {
    /// The store type.
    pub kind: StoreKind,
    /// The named store.
    pub name: String,
}

/// A trusted identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// `*`: any signer the trust store leads to.
    Any,
    /// `x509.subject:<DN>`.
    Subject {
        /// The DN as written.
        raw: String,
        /// Its attributes.
        dn: Dn,
    },
    /// Another `prefix:value` identity (an AWS Signer signing profile ARN).
    Other(String),
}

/// One trust policy statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// Its name.
    pub name: String,
    /// Repositories (`registry/repository`) it applies to; empty with `wildcard`.
    pub registry_scopes: Vec<String>,
    /// Whether the scope is `*`.
    pub wildcard: bool,
    /// Levels and overrides.
    pub verification: Verification,
    /// Trust stores.
    pub trust_stores: Vec<StoreRef>,
    /// Trusted identities.
    pub trusted_identities: Vec<Identity>,
}

/// A validated trust policy document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustPolicy {
    /// The statements, in document order.
    pub statements: Vec<Statement>,
}

/// Why a trust policy is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trust policy field `{field}`: {reason}")]
pub struct PolicyError {
    /// Path of the field, e.g. `trustPolicies[0].trustStores[1]`.
    pub field: String,
    /// What is wrong and what to do.
    pub reason: String,
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> PolicyError {
    PolicyError {
        field: field.into(),
        reason: reason.into(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawDocument {
    version: Option<String>,
    trust_policies: Option<Vec<RawStatement>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawStatement {
    name: Option<String>,
    registry_scopes: Option<Vec<String>>,
    signature_verification: Option<RawVerification>,
    #[serde(default)]
    trust_stores: Vec<String>,
    #[serde(default)]
    trusted_identities: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawVerification {
    level: Option<String>,
    #[serde(rename = "override", default)]
    overrides: BTreeMap<String, String>,
    verify_timestamp: Option<String>,
}

impl TrustPolicy {
    /// Parses and validates a trust policy document.
    pub fn parse(json: &[u8]) -> Result<Self, PolicyError> {
        if json.len() > MAX_POLICY_LEN {
            return Err(err(
                "(document)",
                format!(
                    "{} bytes is more than the {MAX_POLICY_LEN} sigil reads",
                    json.len()
                ),
            ));
        }
        let raw: RawDocument = serde_json::from_slice(json)
            .map_err(|e| err("(document)", format!("not a trust policy document: {e}")))?;
        match raw.version.as_deref() {
            Some("1.0") => {}
            Some(v) => {
                return Err(err(
                    "version",
                    format!("`{v}` is not supported; use \"1.0\""),
                ));
            }
            None => return Err(err("version", "is missing; use \"1.0\"")),
        }
        let raw_statements = raw
            .trust_policies
            .filter(|s| !s.is_empty())
            .ok_or_else(|| err("trustPolicies", "has no statements"))?;
        if raw_statements.len() > MAX_STATEMENTS {
            return Err(err(
                "trustPolicies",
                format!(
                    "{} statements is more than the {MAX_STATEMENTS} sigil reads",
                    raw_statements.len()
                ),
            ));
        }
        let mut statements: Vec<Statement> = Vec::with_capacity(raw_statements.len());
        let mut scope_owner: BTreeMap<String, String> = BTreeMap::new();
        for (i, raw) in raw_statements.into_iter().enumerate() {
            let at = format!("trustPolicies[{i}]");
            let statement = parse_statement(&at, raw)?;
            if statements.iter().any(|s| s.name == statement.name) {
                return Err(err(
                    format!("{at}.name"),
                    format!(
                        "`{}` names another statement too; statement names must be unique",
                        statement.name
                    ),
                ));
            }
            let scopes = if statement.wildcard {
                vec!["*".to_owned()]
            } else {
                statement.registry_scopes.clone()
            };
            for scope in scopes {
                if let Some(other) = scope_owner.insert(scope.clone(), statement.name.clone()) {
                    return Err(err(
                        format!("{at}.registryScopes"),
                        format!(
                            "`{scope}` is also a scope of statement `{other}`; a scope may belong to one statement only"
                        ),
                    ));
                }
            }
            statements.push(statement);
        }
        Ok(Self { statements })
    }

    /// The statement that applies to `repository` (`registry/path`, no tag
    /// or digest): the one that names it, else the wildcard statement.
    pub fn applicable(&self, repository: &str) -> Option<&Statement> {
        self.statements
            .iter()
            .find(|s| s.registry_scopes.iter().any(|r| r == repository))
            .or_else(|| self.statements.iter().find(|s| s.wildcard))
    }
}

fn parse_statement(at: &str, raw: RawStatement) -> Result<Statement, PolicyError> {
    let name = raw.name.filter(|n| !n.is_empty()).ok_or_else(|| {
        err(
            format!("{at}.name"),
            "is missing; every statement needs a name",
        )
    })?;
    let scopes = raw
        .registry_scopes
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            err(
                format!("{at}.registryScopes"),
                "is missing or empty; name repositories (registry/repository) or `*`",
            )
        })?;
    bounded(&format!("{at}.registryScopes"), scopes.len())?;
    let wildcard = scopes.iter().any(|s| s == "*");
    if wildcard && scopes.len() > 1 {
        return Err(err(
            format!("{at}.registryScopes"),
            "`*` cannot be combined with other scopes",
        ));
    }
    if !wildcard {
        for (j, scope) in scopes.iter().enumerate() {
            check_scope(scope)
                .map_err(|reason| err(format!("{at}.registryScopes[{j}]"), reason))?;
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = scopes.iter().find(|s| !seen.insert(s.as_str())) {
            return Err(err(
                format!("{at}.registryScopes"),
                format!("`{dup}` appears twice"),
            ));
        }
    }
    let rv = raw
        .signature_verification
        .ok_or_else(|| err(format!("{at}.signatureVerification"), "is missing"))?;
    let level_name = rv.level.filter(|l| !l.is_empty()).ok_or_else(|| {
        err(
            format!("{at}.signatureVerification.level"),
            "is missing; use strict, permissive, audit or skip",
        )
    })?;
    let level = Level::parse(&level_name).ok_or_else(|| {
        err(
            format!("{at}.signatureVerification.level"),
            format!("`{level_name}` is not strict, permissive, audit or skip"),
        )
    })?;
    let mut overrides = BTreeMap::new();
    for (check_name, action_name) in &rv.overrides {
        let field = format!("{at}.signatureVerification.override.{check_name}");
        if level == Level::Skip {
            return Err(err(field, "level `skip` cannot be customised"));
        }
        let check = Check::parse(check_name).ok_or_else(|| {
            err(&field, "is not a verification (integrity, authenticity, authenticTimestamp, expiry, revocation)")
        })?;
        let action = Action::parse(action_name).ok_or_else(|| {
            err(
                &field,
                format!("`{action_name}` is not enforce, log or skip"),
            )
        })?;
        if check == Check::Integrity {
            return Err(err(field, "integrity cannot be overridden"));
        }
        if check == Check::Authenticity && action == Action::Skip {
            return Err(err(field, "authenticity cannot be skipped"));
        }
        overrides.insert(check, action);
    }
    let verify_timestamp = match rv.verify_timestamp.as_deref() {
        None | Some("") | Some("always") => TimestampPolicy::Always,
        Some("afterCertExpiry") => TimestampPolicy::AfterCertExpiry,
        Some(other) => {
            return Err(err(
                format!("{at}.signatureVerification.verifyTimestamp"),
                format!("`{other}` is not always or afterCertExpiry"),
            ));
        }
    };
    let verification = Verification {
        level,
        overrides,
        verify_timestamp,
    };

    if level == Level::Skip {
        if !raw.trust_stores.is_empty() || !raw.trusted_identities.is_empty() {
            return Err(err(
                at,
                "level `skip` takes no trustStores or trustedIdentities; remove them",
            ));
        }
    } else {
        if raw.trust_stores.is_empty() {
            return Err(err(
                format!("{at}.trustStores"),
                "is missing; name at least one `ca:` or `signingAuthority:` store",
            ));
        }
        if raw.trusted_identities.is_empty() {
            return Err(err(
                format!("{at}.trustedIdentities"),
                "is missing; name identities or `*`",
            ));
        }
    }
    bounded(&format!("{at}.trustStores"), raw.trust_stores.len())?;
    bounded(
        &format!("{at}.trustedIdentities"),
        raw.trusted_identities.len(),
    )?;
    let mut trust_stores = Vec::with_capacity(raw.trust_stores.len());
    for (j, value) in raw.trust_stores.iter().enumerate() {
        let field = format!("{at}.trustStores[{j}]");
        let (kind, store) = value
            .split_once(':')
            .ok_or_else(|| err(&field, format!("`{value}` is not `<type>:<name>`")))?;
        let kind = StoreKind::parse(kind).ok_or_else(|| {
            err(
                &field,
                format!("type `{kind}` is not ca, signingAuthority or tsa"),
            )
        })?;
        if !is_store_name(store) {
            return Err(err(
                &field,
                format!("name `{store}` must match [a-zA-Z0-9_.-]+"),
            ));
        }
        trust_stores.push(StoreRef {
            kind,
            name: store.to_owned(),
        });
    }
    let mut trusted_identities = Vec::with_capacity(raw.trusted_identities.len());
    for (j, value) in raw.trusted_identities.iter().enumerate() {
        let field = format!("{at}.trustedIdentities[{j}]");
        if value == "*" {
            if raw.trusted_identities.len() > 1 {
                return Err(err(field, "`*` cannot be combined with other identities"));
            }
            trusted_identities.push(Identity::Any);
            continue;
        }
        let (prefix, rest) = value.split_once(':').ok_or_else(|| {
            err(
                &field,
                format!("`{value}` has no `:` between its type and value"),
            )
        })?;
        if prefix.is_empty() || rest.is_empty() {
            return Err(err(&field, format!("`{value}` has an empty type or value")));
        }
        if prefix == "x509.subject" {
            let dn = dn::parse(rest).map_err(|e| err(&field, e.to_string()))?;
            trusted_identities.push(Identity::Subject {
                raw: rest.to_owned(),
                dn,
            });
        } else {
            trusted_identities.push(Identity::Other(value.clone()));
        }
    }
    let subjects: Vec<(&String, &Dn)> = trusted_identities
        .iter()
        .filter_map(|i| match i {
            Identity::Subject { raw, dn } => Some((raw, dn)),
            _ => None,
        })
        .collect();
    for (a, (raw_a, dn_a)) in subjects.iter().enumerate() {
        for (raw_b, dn_b) in subjects.iter().skip(a + 1) {
            if dn::is_subset(dn_a, dn_b) || dn::is_subset(dn_b, dn_a) {
                return Err(err(
                    format!("{at}.trustedIdentities"),
                    format!("`{raw_a}` overlaps `{raw_b}`; remove the narrower one"),
                ));
            }
        }
    }
    Ok(Statement {
        name,
        registry_scopes: if wildcard { Vec::new() } else { scopes },
        wildcard,
        verification,
        trust_stores,
        trusted_identities,
    })
}

fn bounded(field: &str, n: usize) -> Result<(), PolicyError> {
    if n > MAX_LIST {
        return Err(err(
            field,
            format!("{n} entries is more than the {MAX_LIST} sigil reads"),
        ));
    }
    Ok(())
}

fn is_store_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A registry scope is `registry[:port]/repository`, without a scheme, tag,
/// digest or wildcard.
fn check_scope(scope: &str) -> Result<(), String> {
    let hint = "use a fully qualified repository without scheme or tag, e.g. registry.example.com/team/app";
    if scope.contains('*') {
        return Err(format!(
            "`{scope}` holds a wildcard; only a scope of exactly `*` may; {hint}"
        ));
    }
    let (domain, repository) = scope
        .split_once('/')
        .ok_or_else(|| format!("`{scope}` has no repository; {hint}"))?;
    let (host, port) = match domain.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (domain, None),
    };
    let host_ok = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let repo_ok = repository.split('/').all(|component| {
        let bytes = component.as_bytes();
        !bytes.is_empty()
            && bytes
                .first()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && bytes
                .last()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && bytes.iter().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
            && !component.contains("..")
            && !component.contains("___")
            && !component.contains("._")
            && !component.contains("_.")
            && !component.contains(".-")
            && !component.contains("-.")
            && !component.contains("_-")
            && !component.contains("-_")
    });
    if !host_ok || !port_ok || !repo_ok {
        return Err(format!("`{scope}` is not a valid repository; {hint}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"{
        "version": "1.0",
        "trustPolicies": [
            {
                "name": "apps",
                "registryScopes": ["registry.example.com/team/app", "localhost:5000/app"],
                "signatureVerification": {"level": "strict", "override": {"revocation": "log"}},
                "trustStores": ["ca:acme", "tsa:stamps"],
                "trustedIdentities": ["x509.subject: C=US, ST=WA, O=Acme"]
            },
            {
                "name": "everything-else",
                "registryScopes": ["*"],
                "signatureVerification": {"level": "skip"}
            }
        ]
    }"#;

    #[test]
    fn a_notation_trust_policy_parses_with_its_overrides() {
        let policy = TrustPolicy::parse(POLICY.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let apps = policy
            .applicable("registry.example.com/team/app")
            .map(|s| s.name.as_str());
        assert_eq!(apps, Some("apps"));
        let other = policy
            .applicable("registry.example.com/other")
            .map(|s| s.name.as_str());
        assert_eq!(other, Some("everything-else"));
        let Some(s) = policy.statements.first() else {
            panic!("no statement")
        };
        assert_eq!(s.verification.action(Check::Revocation), Action::Log);
        assert_eq!(s.verification.action(Check::Expiry), Action::Enforce);
        assert_eq!(s.trust_stores.get(1).map(|t| t.kind), Some(StoreKind::Tsa));
    }

    #[test]
    fn levels_follow_the_specification_table() {
        let v = |level| Verification {
            level,
            overrides: BTreeMap::new(),
            verify_timestamp: TimestampPolicy::Always,
        };
        assert_eq!(
            v(Level::Permissive).action(Check::Authenticity),
            Action::Enforce
        );
        assert_eq!(v(Level::Permissive).action(Check::Revocation), Action::Log);
        assert_eq!(v(Level::Audit).action(Check::Authenticity), Action::Log);
        assert_eq!(v(Level::Audit).action(Check::Integrity), Action::Enforce);
        assert_eq!(v(Level::Skip).action(Check::Integrity), Action::Skip);
    }

    fn error_of(json: &str) -> PolicyError {
        match TrustPolicy::parse(json.as_bytes()) {
            Err(e) => e,
            Ok(_) => panic!("accepted: {json}"),
        }
    }

    #[test]
    fn errors_name_the_field() {
        let bad_level = POLICY.replace("\"strict\"", "\"lenient\"");
        assert_eq!(
            error_of(&bad_level).field,
            "trustPolicies[0].signatureVerification.level"
        );
        let integrity = POLICY.replace("\"revocation\": \"log\"", "\"integrity\": \"log\"");
        assert_eq!(
            error_of(&integrity).field,
            "trustPolicies[0].signatureVerification.override.integrity"
        );
        let store = POLICY.replace("tsa:stamps", "tsa/stamps");
        assert_eq!(error_of(&store).field, "trustPolicies[0].trustStores[1]");
        let scope = POLICY.replace("localhost:5000/app", "localhost:5000/App:latest");
        assert_eq!(error_of(&scope).field, "trustPolicies[0].registryScopes[1]");
        let identity = POLICY.replace("O=Acme\"", "CN=x\"");
        assert_eq!(
            error_of(&identity).field,
            "trustPolicies[0].trustedIdentities[0]"
        );
        let two_wildcards = POLICY.replace(
            "\"registry.example.com/team/app\", \"localhost:5000/app\"",
            "\"*\"",
        );
        assert_eq!(
            error_of(&two_wildcards).field,
            "trustPolicies[1].registryScopes"
        );
        let skip_with_stores = POLICY.replace(
            "{\"level\": \"skip\"}",
            "{\"level\": \"skip\"}, \"trustStores\": [\"ca:x\"]",
        );
        assert_eq!(error_of(&skip_with_stores).field, "trustPolicies[1]");
        assert_eq!(
            error_of("{\"version\": \"2.0\", \"trustPolicies\": []}").field,
            "version"
        );
    }
}

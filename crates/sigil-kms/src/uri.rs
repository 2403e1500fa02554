//! The KMS key URIs cosign and sigstore policy-controller accept (the
//! grammar of sigstore/sigstore's `pkg/signature/kms` providers), parsed
//! without any network so that `sigil policy lint` can check them offline.

use std::fmt;

/// The longest KMS URI accepted; real ones are far shorter.
pub const MAX_URI_LEN: usize = 2048;

/// A KMS provider sigil can fetch public keys from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Provider {
    /// HashiCorp Vault or OpenBao transit engine (`hashivault://`, `openbao://`).
    Vault,
    /// AWS KMS (`awskms://`).
    Aws,
    /// Google Cloud KMS (`gcpkms://`).
    Gcp,
    /// Azure Key Vault (`azurekms://`).
    Azure,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 4] = [Self::Vault, Self::Aws, Self::Gcp, Self::Azure];

    /// The provider's name in flags and messages (its URI scheme).
    pub fn name(self) -> &'static str {
        match self {
            Self::Vault => "hashivault",
            Self::Aws => "awskms",
            Self::Gcp => "gcpkms",
            Self::Azure => "azurekms",
        }
    }

    /// The provider a flag or Secret names (`hashivault`, `openbao`, `awskms`, …).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "hashivault" | "openbao" => Some(Self::Vault),
            "awskms" => Some(Self::Aws),
            "gcpkms" => Some(Self::Gcp),
            "azurekms" => Some(Self::Azure),
            _ => None,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A parsed KMS key reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KmsRef {
    /// A transit key of Vault or OpenBao: `hashivault://NAME` or `openbao://NAME`.
    Vault {
        /// The transit key's name.
        key: String,
    },
    /// An AWS KMS key: `awskms://[ENDPOINT]/KEY` where KEY is a key ID, a key
    /// ARN, `alias/NAME` or an alias ARN.
    Aws {
        /// `host[:port]` to talk to instead of the regional endpoint (over
        /// https, as cosign does); empty for the default.
        endpoint: String,
        /// The KeyId sent to KMS (ID, ARN, alias name or alias ARN).
        key_id: String,
        /// The region named by an ARN.
        region: Option<String>,
    },
    /// A Google Cloud KMS key:
    /// `gcpkms://projects/P/locations/L/keyRings/R/cryptoKeys/K[/cryptoKeyVersions/V]`.
    Gcp {
        /// `projects/P/locations/L/keyRings/R/cryptoKeys/K`.
        key: String,
        /// The version, when pinned; else the newest enabled one, as cosign picks it.
        version: Option<String>,
    },
    /// An Azure Key Vault key: `azurekms://VAULT_HOST/KEY[/VERSION]`.
    Azure {
        /// The vault's host, e.g. `myvault.vault.azure.net`.
        vault_host: String,
        /// The key's name.
        key: String,
        /// The key version, when pinned; else the current one.
        version: Option<String>,
    },
}

/// Why a string is not a KMS URI sigil understands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// The scheme is none of the supported ones.
    #[error(
        "`{0}` is not a supported KMS URI: use hashivault://, openbao://, awskms://, gcpkms:// or \
         azurekms:// (the forms cosign accepts)"
    )]
    Scheme(String),
    /// The scheme is known but the rest does not follow its grammar.
    #[error("`{uri}` is not a valid {provider} key reference: expected {expected}")]
    Grammar {
        /// The URI as given.
        uri: String,
        /// Its provider.
        provider: Provider,
        /// The grammar, with examples.
        expected: &'static str,
    },
    /// Longer than [`MAX_URI_LEN`].
    #[error("the KMS URI is {0} bytes long; at most {MAX_URI_LEN} are accepted")]
    TooLong(usize),
}

const VAULT_FORM: &str = "hashivault://KEY_NAME (or openbao://KEY_NAME): letters, digits, `_`, \
                          `-` and `.`, starting and ending with a letter, digit or `_` (`/` may \
                          separate such names)";
const AWS_FORM: &str = "awskms://[ENDPOINT]/KEY where KEY is a key ID \
                        (1234abcd-12ab-34cd-56ef-1234567890ab), a key ARN \
                        (arn:aws:kms:REGION:ACCOUNT:key/ID), alias/NAME or an alias ARN \
                        (arn:aws:kms:REGION:ACCOUNT:alias/NAME), e.g. awskms:///alias/signing";
const GCP_FORM: &str = "gcpkms://projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY \
                        with an optional /cryptoKeyVersions/VERSION";
const AZURE_FORM: &str = "azurekms://VAULT_HOST/KEY_NAME[/VERSION], e.g. \
                          azurekms://myvault.vault.azure.net/signing-key";

impl KmsRef {
    /// Parses `uri` with the grammar of the provider its scheme names.
    pub fn parse(uri: &str) -> Result<Self, UriError> {
        if uri.len() > MAX_URI_LEN {
            return Err(UriError::TooLong(uri.len()));
        }
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| UriError::Scheme(uri.to_owned()))?;
        let provider =
            Provider::from_name(scheme).ok_or_else(|| UriError::Scheme(uri.to_owned()))?;
        let grammar = |expected| UriError::Grammar {
            uri: uri.to_owned(),
            provider,
            expected,
        };
        match provider {
            Provider::Vault => vault_name(rest)
                .then(|| Self::Vault {
                    key: rest.to_owned(),
                })
                .ok_or_else(|| grammar(VAULT_FORM)),
            Provider::Aws => parse_aws(rest).ok_or_else(|| grammar(AWS_FORM)),
            Provider::Gcp => parse_gcp(rest).ok_or_else(|| grammar(GCP_FORM)),
            Provider::Azure => parse_azure(rest).ok_or_else(|| grammar(AZURE_FORM)),
        }
    }

    /// The provider that holds the key.
    pub fn provider(&self) -> Provider {
        match self {
            Self::Vault { .. } => Provider::Vault,
            Self::Aws { .. } => Provider::Aws,
            Self::Gcp { .. } => Provider::Gcp,
            Self::Azure { .. } => Provider::Azure,
        }
    }
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `\w(([\w-.]+)?\w)?`, as sigstore's hashivault provider requires, or
/// several such names joined by `/`: policy-controller accepts those
/// (its examples use `hashivault://key/path`), so a policy naming one is
/// admitted and the transit engine's answer, not the syntax, decides.
fn vault_name(name: &str) -> bool {
    name.split('/').all(|segment| {
        let first_last = segment.chars().next().is_some_and(is_word)
            && segment.chars().next_back().is_some_and(is_word);
        first_last && segment.chars().all(|c| is_word(c) || c == '-' || c == '.')
    })
}

fn parse_aws(rest: &str) -> Option<KmsRef> {
    let (endpoint, key_id) = rest.split_once('/')?;
    let region = if let Some(arn) = key_id.strip_prefix("arn:") {
        // arn:PARTITION:kms:REGION:ACCOUNT:(key/UUID | alias/NAME)
        let mut parts = arn.splitn(5, ':');
        let partition = parts.next()?;
        let service = parts.next()?;
        let region = parts.next()?;
        let account = parts.next()?;
        let resource = parts.next()?;
        let ok = matches!(partition, "aws" | "aws-us-gov" | "aws-cn")
            && service == "kms"
            && !region.is_empty()
            && region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && account.len() == 12
            && account.chars().all(|c| c.is_ascii_digit())
            && (resource.strip_prefix("key/").is_some_and(aws_key_uuid)
                || resource.starts_with("alias/"));
        if !ok {
            return None;
        }
        Some(region.to_owned())
    } else if key_id.starts_with("alias/") || aws_key_uuid(key_id) {
        None
    } else {
        return None;
    };
    Some(KmsRef::Aws {
        endpoint: endpoint.to_owned(),
        key_id: key_id.to_owned(),
        region,
    })
}

/// A key ID: a UUID (hyphens optional, as sigstore's pattern allows),
/// optionally with the `mrk-` prefix of multi-Region keys.
fn aws_key_uuid(id: &str) -> bool {
    let id = id.strip_prefix("mrk-").unwrap_or(id);
    let groups: Vec<&str> = id.split('-').collect();
    let hex = |s: &str| s.chars().all(|c| c.is_ascii_hexdigit());
    match groups.as_slice() {
        [a, b, c, d, e] => {
            [a.len(), b.len(), c.len(), d.len(), e.len()] == [8, 4, 4, 4, 12]
                && groups.iter().all(|g| hex(g))
        }
        [one] => one.len() == 32 && hex(one),
        _ => false,
    }
}

fn parse_gcp(rest: &str) -> Option<KmsRef> {
    let parts: Vec<&str> = rest.split('/').collect();
    let segment = |s: &&str| !s.is_empty();
    match parts.as_slice() {
        [
            "projects",
            p,
            "locations",
            l,
            "keyRings",
            r,
            "cryptoKeys",
            k,
            tail @ ..,
        ] if [p, l, r, k].iter().all(|s| segment(s)) => {
            let key = format!("projects/{p}/locations/{l}/keyRings/{r}/cryptoKeys/{k}");
            let version = match tail {
                [] => None,
                ["cryptoKeyVersions" | "versions", v] if !v.is_empty() => Some((*v).to_owned()),
                _ => return None,
            };
            Some(KmsRef::Gcp { key, version })
        }
        _ => None,
    }
}

fn parse_azure(rest: &str) -> Option<KmsRef> {
    let parts: Vec<&str> = rest.split('/').collect();
    let (host, key, version) = match parts.as_slice() {
        [host, key] => (*host, *key, None),
        // sigstore's pattern allows an empty version after the slash.
        [host, key, version]
            if version
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()) =>
        {
            (*host, *key, Some(*version).filter(|v| !v.is_empty()))
        }
        _ => return None,
    };
    if host.is_empty() || key.is_empty() {
        return None;
    }
    Some(KmsRef::Azure {
        vault_host: host.to_owned(),
        key: key.to_owned(),
        version: version.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_cosign_documents_parses() {
        let ok = [
            "hashivault://cosign",
            "hashivault://my-key.v2",
            "openbao://k_1",
            "hashivault://key/path",
            "awskms:///1234abcd-12ab-34cd-56ef-1234567890ab",
            "awskms://localhost:4566/1234abcd-12ab-34cd-56ef-1234567890ab",
            "awskms:///mrk-1234abcd12ab34cd56ef1234567890ab",
            "awskms:///arn:aws:kms:us-east-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            "awskms:///alias/ExampleAlias",
            "awskms://localhost:4566/alias/ExampleAlias",
            "awskms:///arn:aws:kms:us-east-2:111122223333:alias/ExampleAlias",
            "gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k",
            "gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k/cryptoKeyVersions/3",
            "gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k/versions/3",
            "azurekms://myvault.vault.azure.net/mykey",
            "azurekms://myvault.vault.azure.net/mykey/0123abcd",
        ];
        for uri in ok {
            assert!(
                KmsRef::parse(uri).is_ok(),
                "{uri}: {:?}",
                KmsRef::parse(uri)
            );
        }
    }

    #[test]
    fn the_parts_of_each_form_are_extracted() {
        assert_eq!(
            KmsRef::parse("awskms://localhost:4566/arn:aws:kms:eu-west-1:111122223333:alias/a")
                .unwrap(),
            KmsRef::Aws {
                endpoint: "localhost:4566".into(),
                key_id: "arn:aws:kms:eu-west-1:111122223333:alias/a".into(),
                region: Some("eu-west-1".into()),
            }
        );
        assert_eq!(
            KmsRef::parse("gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k/versions/7")
                .unwrap(),
            KmsRef::Gcp {
                key: "projects/p/locations/l/keyRings/r/cryptoKeys/k".into(),
                version: Some("7".into()),
            }
        );
        assert_eq!(
            KmsRef::parse("azurekms://v.vault.azure.net/k/").unwrap(),
            KmsRef::Azure {
                vault_host: "v.vault.azure.net".into(),
                key: "k".into(),
                version: None,
            }
        );
        assert_eq!(
            KmsRef::parse("openbao://signing").unwrap(),
            KmsRef::Vault {
                key: "signing".into()
            }
        );
    }

    #[test]
    fn malformed_references_are_refused_with_the_expected_form() {
        let bad = [
            ("hashivault://", "hashivault://KEY_NAME"),
            ("hashivault://-lead", "hashivault://KEY_NAME"),
            ("hashivault://a//b", "hashivault://KEY_NAME"),
            ("hashivault://a/", "hashivault://KEY_NAME"),
            (
                "awskms://1234abcd-12ab-34cd-56ef-1234567890ab",
                "awskms://[ENDPOINT]/KEY",
            ),
            ("awskms:///not-a-key", "awskms://[ENDPOINT]/KEY"),
            (
                "awskms:///arn:aws:kms:us-east-2:1111:key/x",
                "awskms://[ENDPOINT]/KEY",
            ),
            (
                "awskms:///arn:aws:s3:us-east-2:111122223333:alias/a",
                "awskms://[ENDPOINT]/KEY",
            ),
            (
                "gcpkms://projects/p/locations/l/keyRings/r",
                "gcpkms://projects/PROJECT",
            ),
            (
                "gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k/x/1",
                "gcpkms://",
            ),
            ("azurekms://vault", "azurekms://VAULT_HOST/KEY_NAME"),
            ("azurekms://vault/k/V1", "azurekms://VAULT_HOST/KEY_NAME"),
        ];
        for (uri, form) in bad {
            let err = KmsRef::parse(uri).unwrap_err().to_string();
            assert!(err.contains(uri), "{uri}: {err}");
            assert!(err.contains(form), "{uri}: {err}");
        }
        let unknown = KmsRef::parse("k8s://ns/secret").unwrap_err().to_string();
        assert!(
            unknown.contains("hashivault://, openbao://, awskms://"),
            "{unknown}"
        );
        assert!(matches!(
            KmsRef::parse(&format!("hashivault://{}", "a".repeat(MAX_URI_LEN))),
            Err(UriError::TooLong(_))
        ));
    }
}

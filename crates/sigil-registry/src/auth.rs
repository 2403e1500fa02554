//! Registry credentials: docker config JSON (CLI `~/.docker/config.json`,
//! Kubernetes `.dockerconfigjson` and legacy `.dockercfg` pull-secret payloads),
//! and parsing of `WWW-Authenticate` challenges.
//!
//! Credentials are bound to the registry host they were configured for; the
//! client looks them up by the host it is about to talk to and nothing else,
//! so they cannot leak to another registry. Debug output redacts secrets.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::Deserialize;

/// Why a docker config could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    /// Not JSON of the docker config shape.
    #[error(
        "docker config is not valid JSON of the expected shape ({0}); check the pull secret's .dockerconfigjson or ~/.docker/config.json"
    )]
    Json(String),
    /// An `auth` field is not base64 of `user:password`.
    #[error(
        "docker config entry for `{0}` has an `auth` field that is not base64 of user:password"
    )]
    BadAuth(String),
}

/// One registry's credentials.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// User name and password (or identity token used as password).
    Basic {
        /// User name.
        username: String,
        /// Password or token.
        password: String,
    },
    /// A ready bearer token (docker config `registrytoken`).
    Bearer(String),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets never reach logs, even through `{:?}`.
        match self {
            Self::Basic { username, .. } => write!(f, "Basic({username}:<redacted>)"),
            Self::Bearer(_) => write!(f, "Bearer(<redacted>)"),
        }
    }
}

/// Credentials per registry host, and the hosts whose credentials a docker
/// credential helper keeps (which sigil does not run).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    by_host: BTreeMap<String, Credential>,
    helpers: BTreeMap<String, String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("by_host", &self.by_host)
            .field("helpers", &self.helpers)
            .finish()
    }
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    auths: Option<BTreeMap<String, RawEntry>>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "lowercase")]
struct RawEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

/// Reduces a docker config key (`https://index.docker.io/v1/`, `ghcr.io`,
/// `http://127.0.0.1:5000/v2/`) to the host the client will compare against.
pub fn normalize_host(key: &str) -> String {
    let s = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = s.split('/').next().unwrap_or(s).to_ascii_lowercase();
    match host.as_str() {
        // Docker Hub is configured under several names; requests go to index.docker.io.
        "docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "index.docker.io".into()
        }
        _ => host,
    }
}

impl Credentials {
    /// No credentials: anonymous access everywhere.
    pub fn anonymous() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the credential for `host`.
    pub fn insert(&mut self, host: &str, credential: Credential) {
        self.by_host.insert(normalize_host(host), credential);
    }

    /// The credential configured for exactly this host, if any.
    pub fn for_host(&self, host: &str) -> Option<&Credential> {
        self.by_host.get(&normalize_host(host))
    }

    /// The docker credential helper (`desktop` for `docker-credential-desktop`)
    /// that keeps this host's credentials, when the config has no inline
    /// credential for it.
    pub fn helper_for(&self, host: &str) -> Option<&str> {
        let host = normalize_host(host);
        if self.by_host.contains_key(&host) {
            return None;
        }
        self.helpers.get(&host).map(String::as_str)
    }

    /// Whether no credential is configured.
    pub fn is_empty(&self) -> bool {
        self.by_host.is_empty()
    }

    /// Parses a docker config JSON (`{"auths": {...}}`): `~/.docker/config.json`
    /// or a Kubernetes `.dockerconfigjson` secret payload.
    ///
    /// Credential helpers are not run (that would execute programs named by
    /// the config). Instead the hosts they serve are remembered — every
    /// `credHelpers` host, and with `credsStore` every `auths` host without
    /// inline credentials (docker's login leaves such an empty entry) — so a
    /// registry that asks such a host for credentials fails with an error
    /// naming the helper, not with a puzzling anonymous denial.
    pub fn from_docker_config_json(json: &[u8]) -> Result<Self, AuthConfigError> {
        let raw: RawConfig =
            serde_json::from_slice(json).map_err(|e| AuthConfigError::Json(e.to_string()))?;
        let auths = raw.auths.unwrap_or_default();
        let hosts: Vec<String> = auths.keys().cloned().collect();
        let mut out = Self::from_entries(auths)?;
        if let Some(store) = raw.creds_store.filter(|s| !s.trim().is_empty()) {
            for host in hosts {
                out.helpers.insert(normalize_host(&host), store.clone());
            }
        }
        for (host, helper) in raw.cred_helpers.unwrap_or_default() {
            if !helper.trim().is_empty() {
                out.helpers.insert(normalize_host(&host), helper);
            }
        }
        Ok(out)
    }

    /// Parses a legacy `.dockercfg` secret payload: the `auths` map without
    /// its wrapper.
    pub fn from_dockercfg(json: &[u8]) -> Result<Self, AuthConfigError> {
        let raw: BTreeMap<String, RawEntry> =
            serde_json::from_slice(json).map_err(|e| AuthConfigError::Json(e.to_string()))?;
        Self::from_entries(raw)
    }

    /// Merges `other` into `self`; entries of `other` win.
    pub fn merge(&mut self, other: Self) {
        self.by_host.extend(other.by_host);
        self.helpers.extend(other.helpers);
    }

    fn from_entries(entries: BTreeMap<String, RawEntry>) -> Result<Self, AuthConfigError> {
        let mut out = Self::default();
        for (key, e) in entries {
            let cred = if let Some(token) = e.registrytoken.filter(|t| !t.is_empty()) {
                Some(Credential::Bearer(token))
            } else if let (Some(username), Some(password)) =
                (e.username.clone(), e.password.clone())
            {
                Some(Credential::Basic { username, password })
            } else if let Some(auth) = e.auth.filter(|a| !a.is_empty()) {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| AuthConfigError::BadAuth(key.clone()))?;
                let (username, password) = decoded
                    .split_once(':')
                    .ok_or_else(|| AuthConfigError::BadAuth(key.clone()))?;
                Some(Credential::Basic {
                    username: username.to_string(),
                    password: password.to_string(),
                })
            } else {
                None
            };
            // An identity token is an OAuth refresh token; registries accept
            // it as the password of the `<token>` user.
            let cred = match (cred, e.identitytoken.filter(|t| !t.is_empty())) {
                (_, Some(token)) => Some(Credential::Basic {
                    username: "<token>".into(),
                    password: token,
                }),
                (c, None) => c,
            };
            if let Some(c) = cred {
                out.insert(&key, c);
            }
        }
        Ok(out)
    }
}

/// A parsed `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// `Basic realm=...`.
    Basic,
    /// `Bearer realm=...,service=...,scope=...`.
    Bearer {
        /// The token endpoint.
        realm: String,
        /// The `service` parameter, if any.
        service: Option<String>,
        /// The `scope` parameter, if any.
        scope: Option<String>,
    },
}

/// Parses a `WWW-Authenticate` header value; `None` for schemes sigil does not speak.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header
        .split_once(char::is_whitespace)
        .unwrap_or((header, ""));
    let params = parse_params(rest);
    match scheme.to_ascii_lowercase().as_str() {
        "basic" => Some(Challenge::Basic),
        "bearer" => Some(Challenge::Bearer {
            realm: params.get("realm")?.clone(),
            service: params.get("service").cloned(),
            scope: params.get("scope").cloned(),
        }),
        _ => None,
    }
}

/// Parses `k=v, k="quoted, with commas"` auth parameters; keys are lowercased.
fn parse_params(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    // Bounded by the input length: every iteration consumes at least one char.
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if chars.next().is_none() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => break,
                    _ => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        out.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn hosts_kept_by_credential_helpers_are_remembered_not_treated_as_anonymous() {
        let json = r#"{
            "auths": {"https://index.docker.io/v1/": {}, "inline.example": {"auth": "dTpw"}},
            "credsStore": "desktop",
            "credHelpers": {"123.dkr.ecr.us-east-1.amazonaws.com": "ecr-login"}
        }"#;
        let c = Credentials::from_docker_config_json(json.as_bytes()).unwrap();
        assert_eq!(c.helper_for("index.docker.io"), Some("desktop"));
        assert_eq!(
            c.helper_for("123.dkr.ecr.us-east-1.amazonaws.com"),
            Some("ecr-login")
        );
        // Inline credentials are used even when a store is configured.
        assert_eq!(c.helper_for("inline.example"), None);
        assert!(c.for_host("inline.example").is_some());
        // A host the config never mentions stays anonymous.
        assert_eq!(c.helper_for("ghcr.io"), None);
    }

    #[test]
    fn docker_config_auth_fields_decode_to_basic_credentials_per_host() {
        let json = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}},"127.0.0.1:5000":{{"username":"u","password":"p"}},"ghcr.io":{{"identitytoken":"tok"}}}},"credsStore":"desktop"}}"#,
            b64("alice:s3cr:et")
        );
        let c = Credentials::from_docker_config_json(json.as_bytes()).unwrap();
        assert_eq!(
            c.for_host("index.docker.io"),
            Some(&Credential::Basic {
                username: "alice".into(),
                password: "s3cr:et".into()
            })
        );
        assert_eq!(
            c.for_host("127.0.0.1:5000"),
            Some(&Credential::Basic {
                username: "u".into(),
                password: "p".into()
            })
        );
        assert!(
            matches!(c.for_host("ghcr.io"), Some(Credential::Basic { username, .. }) if username == "<token>")
        );
        assert_eq!(c.for_host("127.0.0.1:5001"), None);
        assert_eq!(c.for_host("evil.example"), None);
    }

    #[test]
    fn legacy_dockercfg_payloads_are_the_auths_map_alone() {
        let json = format!(
            r#"{{"registry.example:443":{{"auth":"{}","email":"x@y"}}}}"#,
            b64("bob:pw")
        );
        let c = Credentials::from_dockercfg(json.as_bytes()).unwrap();
        assert!(c.for_host("registry.example:443").is_some());
    }

    #[test]
    fn malformed_docker_configs_are_refused_with_the_entry_named() {
        assert!(matches!(
            Credentials::from_docker_config_json(b"[1]"),
            Err(AuthConfigError::Json(_))
        ));
        let e = Credentials::from_docker_config_json(br#"{"auths":{"r.example":{"auth":"!!!"}}}"#);
        assert_eq!(e, Err(AuthConfigError::BadAuth("r.example".into())));
        let e = Credentials::from_docker_config_json(
            format!(
                r#"{{"auths":{{"r.example":{{"auth":"{}"}}}}}}"#,
                b64("nocolon")
            )
            .as_bytes(),
        );
        assert!(e.is_err());
        assert!(
            Credentials::from_docker_config_json(b"{}")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn debug_output_never_shows_passwords_or_tokens() {
        let mut c = Credentials::anonymous();
        c.insert(
            "a.example",
            Credential::Basic {
                username: "u".into(),
                password: "hunter2".into(),
            },
        );
        c.insert("b.example", Credential::Bearer("tok3n".into()));
        let s = format!("{c:?}");
        assert!(!s.contains("hunter2") && !s.contains("tok3n"), "{s}");
        assert!(s.contains("redacted"));
    }

    #[test]
    fn bearer_challenges_parse_with_quoted_commas_and_any_case() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(
            c,
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:a/b:pull,push".into()),
            })
        );
        assert_eq!(
            parse_challenge(r#"basic realm="x""#),
            Some(Challenge::Basic)
        );
        assert_eq!(
            parse_challenge("BEARER realm=http://127.0.0.1:1/t"),
            Some(Challenge::Bearer {
                realm: "http://127.0.0.1:1/t".into(),
                service: None,
                scope: None
            })
        );
        assert_eq!(parse_challenge("Bearer service=x"), None);
        assert_eq!(parse_challenge("Negotiate abc"), None);
        assert_eq!(parse_challenge(""), None);
    }
}

//! A judge for one static policy given on the command line (a key or a
//! keyless identity, image globs, enforce or warn, a no-match action),
//! verifying with sigil-verifier's `verify_image` against a registry. It runs
//! the server end to end until the policy engine and its snapshot store
//! replace it behind the same [`ImageJudge`] trait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};
use sigil_policy::glob::{HostPattern, HostSet};
use sigil_registry::image::{ImagePolicy, VerifyImageOptions, verify_image};
use sigil_registry::{ClientConfig, ImageRef, RegistryClient, RegistryScope};
use sigil_verifier::trust::TrustedRoot;
use tokio::time::Instant;

use crate::judge::{ImageJudge, ObjectInfo, PinnedImage, PullSecrets, Verdict, Versions};

/// Registry clients kept per pull-secret identity.
const MAX_CLIENTS: usize = 256;

pub use sigil_judge::args::NoMatch;

/// Why a static judge could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StaticJudgeError {
    /// An image glob does not compile.
    #[error(
        "image glob `{glob}` is invalid ({reason}); use `*` within a path segment and `**` across segments"
    )]
    Glob {
        /// The glob.
        glob: String,
        /// Why.
        reason: String,
    },
    /// The registry client could not be built.
    #[error("cannot build the registry client: {0}")]
    Client(String),
}

/// One policy: which images, how they must be signed, and how strictly.
#[derive(Debug, Clone)]
pub struct StaticPolicy {
    /// Its name in messages.
    pub name: String,
    /// Image globs (`*` within a segment, `**` across).
    pub globs: Vec<String>,
    /// `key` or `keyless`, for messages.
    pub authority: String,
    /// What must verify.
    pub image_policy: ImagePolicy,
    /// `mode: warn`: failures become warnings.
    pub warn: bool,
    /// What unmatched images get.
    pub no_match: NoMatch,
    /// A canonical description of everything above, hashed into the policy hash.
    pub fingerprint: String,
    /// `--allow-registry`: hosts contacted besides those the globs select.
    pub allowed_registries: Vec<HostPattern>,
}

/// The registry hosts the static policy's globs can select, plus the
/// allowed ones: the only registries the static judge contacts.
#[derive(Debug)]
struct StaticRegistries(HostSet);

impl RegistryScope for StaticRegistries {
    fn permits(&self, host: &str) -> Result<(), String> {
        if self.0.contains(host) {
            Ok(())
        } else {
            Err(format!(
                "no --image-glob selects images on {host} and --allow-registry does not allow it; sigil contacts no other registry"
            ))
        }
    }
}

/// The hosts `policy` may contact. A glob the policy engine's syntax refuses
/// (the static judge's own is looser) may select any host.
fn static_hosts(policy: &StaticPolicy) -> HostSet {
    let mut set = HostSet::new();
    for g in &policy.globs {
        match sigil_policy::glob::Glob::compile(g) {
            Ok(glob) => set.add_glob(&glob),
            Err(_) => {
                if let Ok(any) = HostPattern::allow("*") {
                    set.add_pattern(any);
                }
            }
        }
    }
    for p in &policy.allowed_registries {
        set.add_pattern(p.clone());
    }
    set
}

/// The static judge.
pub struct StaticJudge {
    policy: StaticPolicy,
    globs: Vec<regex::Regex>,
    root: TrustedRoot,
    base: ClientConfig,
    clients: Mutex<HashMap<String, Arc<RegistryClient>>>,
    versions: Versions,
    hosts: Arc<StaticRegistries>,
}

/// Compiles a policy-controller style glob into an anchored regex.
pub fn compile_glob(glob: &str) -> Result<regex::Regex, StaticJudgeError> {
    let mut re = String::from("^");
    let mut rest = glob;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("**") {
            re.push_str(".*");
            rest = after;
        } else if let Some(after) = rest.strip_prefix('*') {
            re.push_str("[^/]*");
            rest = after;
        } else {
            re.push_str(&regex::escape(&c.to_string()));
            rest = rest.get(c.len_utf8()..).unwrap_or_default();
        }
    }
    re.push('$');
    regex::Regex::new(&re).map_err(|e| StaticJudgeError::Glob {
        glob: glob.to_string(),
        reason: e.to_string(),
    })
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

impl StaticJudge {
    /// Builds the judge. `trust_root_id` identifies the trust root's content
    /// (a hash of its JSON) for verdict cache keys.
    pub fn new(
        policy: StaticPolicy,
        root: TrustedRoot,
        trust_root_id: &str,
        base: ClientConfig,
    ) -> Result<Self, StaticJudgeError> {
        let globs = policy
            .globs
            .iter()
            .map(|g| compile_glob(g))
            .collect::<Result<Vec<_>, _>>()?;
        let versions = Versions {
            policy_hash: sha256_hex(&policy.fingerprint),
            trust_root_version: trust_root_id.to_string(),
        };
        let hosts = Arc::new(StaticRegistries(static_hosts(&policy)));
        let mut base = base;
        base.scope = Some(hosts.clone());
        // Fail at start, not at the first admission, if TLS cannot be set up.
        let anonymous = RegistryClient::new(base.clone())
            .map_err(|e| StaticJudgeError::Client(e.to_string()))?;
        let mut clients = HashMap::new();
        clients.insert(String::new(), Arc::new(anonymous));
        Ok(Self {
            policy,
            globs,
            root,
            base,
            clients: Mutex::new(clients),
            versions,
            hosts,
        })
    }

    fn client(&self, secrets: &PullSecrets) -> Result<Arc<RegistryClient>, String> {
        let key = if secrets.credentials.is_empty() {
            String::new()
        } else {
            secrets.id.clone()
        };
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| "registry client table poisoned; restart the webhook".to_string())?;
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let mut config = self.base.clone();
        config.credentials.merge(secrets.credentials.clone());
        let client = Arc::new(RegistryClient::new(config).map_err(|e| e.to_string())?);
        if clients.len() >= MAX_CLIENTS {
            clients.retain(|k, _| k.is_empty());
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    fn names(&self) -> Vec<String> {
        vec![self.policy.name.clone()]
    }
}

impl ImageJudge for StaticJudge {
    fn registry_keychain(&self) -> Option<Arc<sigil_registry::Keychain>> {
        self.base.keychain.clone()
    }

    async fn judge(
        &self,
        image: &PinnedImage,
        _object: &ObjectInfo,
        secrets: &PullSecrets,
        deadline: Instant,
    ) -> Verdict {
        let fail = |reason: String| {
            let line = format!(
                "policy {}, authority {}: {reason}",
                self.policy.name, self.policy.authority
            );
            if self.policy.warn {
                Verdict::warn(
                    self.names(),
                    vec![format!("{line} (mode: warn, admitted anyway)")],
                )
            } else {
                Verdict::deny(self.names(), vec![line])
            }
        };
        let client = match self.client(secrets) {
            Ok(c) => c,
            Err(e) => return fail(e),
        };
        let options = VerifyImageOptions::default();
        let reference = image.reference();
        let run = verify_image(
            &reference,
            &self.policy.image_policy,
            &self.root,
            &client,
            &options,
        );
        match tokio::time::timeout_at(deadline, run).await {
            Ok(Ok(_)) => Verdict::allow(self.names()),
            Ok(Err(e)) => fail(e.to_string()),
            Err(_) => fail(crate::judge::deadline_passed(&reference)),
        }
    }

    async fn resolve(
        &self,
        image: &str,
        secrets: &PullSecrets,
        deadline: Instant,
    ) -> Result<String, String> {
        if let Some(digest) = crate::judge::digest_of(image)? {
            return Ok(digest);
        }
        crate::judge::resolve_tag(&*self.client(secrets)?, image, deadline).await
    }

    fn matches(&self, image: &str, _object: &ObjectInfo) -> bool {
        if self.globs.iter().any(|g| g.is_match(image)) {
            return true;
        }
        // Also match the normalized name (`nginx` → `docker.io/library/nginx`),
        // with and without its tag.
        let Ok(r) = ImageRef::parse(image) else {
            return false;
        };
        let name = r.repository.to_string();
        let tagged = r.tag.as_ref().map(|t| format!("{name}:{t}"));
        self.globs
            .iter()
            .any(|g| g.is_match(&name) || tagged.as_deref().is_some_and(|t| g.is_match(t)))
    }

    fn registry_permitted(&self, image: &str) -> bool {
        ImageRef::parse(image).is_ok_and(|r| self.hosts.permits(&r.repository.host).is_ok())
    }

    fn no_match(&self, image: &str) -> Verdict {
        let why = format!(
            "no policy selects this image (policy {} covers {})",
            self.policy.name,
            self.policy.globs.join(", ")
        );
        match self.policy.no_match {
            NoMatch::Allow => Verdict::allow(Vec::new()),
            NoMatch::Warn => {
                Verdict::warn(Vec::new(), vec![format!("{why}; noMatchPolicy is warn")])
            }
            NoMatch::Deny => Verdict::deny(
                Vec::new(),
                vec![format!(
                    "{why} and noMatchPolicy is deny; add a glob that matches {image}"
                )],
            ),
        }
    }

    fn versions(&self) -> Versions {
        self.versions.clone()
    }

    fn ready(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::compile_glob;

    #[test]
    fn a_single_star_stays_within_a_path_segment() {
        let g = compile_glob("ghcr.io/org/*").unwrap();
        assert!(g.is_match("ghcr.io/org/app:1"));
        assert!(!g.is_match("ghcr.io/org/team/app:1"));
    }

    #[test]
    fn a_double_star_crosses_segments() {
        let g = compile_glob("ghcr.io/**").unwrap();
        assert!(g.is_match("ghcr.io/org/team/app@sha256:00"));
        assert!(!g.is_match("docker.io/org/app"));
    }

    #[test]
    fn regex_characters_in_globs_are_literal() {
        let g = compile_glob("registry.local:5000/a+b").unwrap();
        assert!(g.is_match("registry.local:5000/a+b"));
        assert!(!g.is_match("registryxlocal:5000/aab"));
    }
}

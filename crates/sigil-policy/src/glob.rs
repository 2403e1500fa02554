//! Image names as policies see them, and the `images[].glob` patterns that
//! select them, with sigstore policy-controller's semantics:
//!
//! - `*` matches any run of characters except `/` (so within one path
//!   segment, and across the `:tag` or `@digest` suffix);
//! - `**` matches any run of characters, `/` included;
//! - `.` is literal; only `a-z A-Z 0-9 - _ : / * .` may appear;
//! - a bare `*` means `index.docker.io/library/*` and `*/*` means
//!   `index.docker.io/*/*`;
//! - images are normalized first: `nginx` is `index.docker.io/library/nginx`,
//!   `docker.io/x/y` is `index.docker.io/x/y`, and an image with neither tag
//!   nor digest gets `:latest`.
//!
//! Where sigil differs, it matches *more* images (so more policies apply,
//! never fewer): a glob is tried against the repository alone as well as
//! against the reference with its tag and digest, so `ghcr.io/org/app` also
//! matches `ghcr.io/org/app@sha256:…`, the digest-pinned form every admitted
//! image takes after `/mutate`; and a glob written with `docker.io/` is read
//! as `index.docker.io/`.
//!
//! Which registry hosts a glob can select ([`Glob::hosts`], gathered into a
//! [`HostSet`]) bounds the registries sigil contacts: an image on a host no
//! policy can select is never fetched from.

use std::fmt;

use sigil_registry::reference::{ImageRef, ReferenceError};

use crate::wildcard::Wildcard;

/// Docker Hub's canonical registry host, as policy-controller writes it.
pub const DOCKER_HUB: &str = "index.docker.io";

/// The longest image reference sigil parses (the distribution spec caps a
/// repository name at 255 characters; tag and digest add at most ~200).
const MAX_REFERENCE_LEN: usize = 1024;

/// Why an image reference or a glob was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// The image reference is not a valid `registry/repository[:tag][@digest]`.
    #[error(
        "`{input}` is not an image reference ({reason}); write it like \
         registry.example/org/app:tag or registry.example/org/app@sha256:<64 hex>"
    )]
    InvalidImage {
        /// The input.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// The glob contains a character globs may not use.
    #[error(
        "invalid glob `{glob}`: only letters, digits and `-_:/.*` are allowed \
         (`*` matches within one path segment, `**` across segments)"
    )]
    InvalidGlob {
        /// The glob.
        glob: String,
    },
}

/// A normalized image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageName {
    /// Registry host (and port), `index.docker.io` for Docker Hub.
    pub registry: String,
    /// Repository path, `library/nginx` for Docker Hub official images.
    pub repository: String,
    /// The tag, `latest` when neither tag nor digest was given.
    pub tag: Option<String>,
    /// The digest (`sha256:<hex>`), when given.
    pub digest: Option<String>,
    /// The reference as written.
    pub original: String,
}

impl ImageName {
    /// Parses and normalizes a reference with the same parser the registry
    /// client uses ([`sigil_registry::reference::ImageRef`]), so a policy sees an
    /// image exactly as it will be fetched; only the registry is spelt the
    /// policy-controller way (`index.docker.io` for Docker Hub).
    pub fn parse(input: &str) -> Result<Self, GlobError> {
        let parsed = ImageRef::parse(input).map_err(|e| GlobError::InvalidImage {
            input: input.chars().take(MAX_REFERENCE_LEN).collect(),
            reason: match e {
                ReferenceError::Invalid { reason, .. } => reason,
                ReferenceError::Digest(d) => format!("`{d}` is not a sha256 digest"),
            },
        })?;
        let registry = if is_docker_hub(&parsed.repository.registry) {
            DOCKER_HUB.to_owned()
        } else {
            parsed.repository.registry
        };
        Ok(Self {
            registry,
            repository: parsed.repository.name,
            tag: parsed.tag,
            digest: parsed.digest.map(|d| d.to_string()),
            original: input.to_owned(),
        })
    }

    /// `registry/repository`, without tag or digest.
    pub fn repository_name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// `registry/repository@digest` when the reference has a digest.
    pub fn pinned(&self) -> Option<String> {
        self.digest
            .as_ref()
            .map(|d| format!("{}@{d}", self.repository_name()))
    }
}

impl fmt::Display for ImageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.repository_name())?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

fn is_docker_hub(registry: &str) -> bool {
    matches!(
        registry,
        "docker.io" | "index.docker.io" | "registry-1.docker.io"
    )
}

/// A compiled `images[].glob`.
#[derive(Debug, Clone)]
pub struct Glob {
    pattern: String,
    matcher: Wildcard,
    hosts: HostPattern,
}

/// The registry hosts one glob (or one allow-list entry) can select.
#[derive(Debug, Clone)]
pub struct HostPattern {
    /// Hosts matched by a pattern; `None` when any host can be.
    pattern: Option<Wildcard>,
    /// Also Docker Hub: the glob can match an image written in Docker Hub's
    /// short form (`nginx`, `team/app`), whose first segment is not a host.
    docker_hub: bool,
}

/// Glob syntax (`*` within a segment, everything else literal) as a
/// case-insensitive pattern over a whole host; `None` when it matches any
/// host.
fn host_pattern(glob_host: &str) -> Option<Wildcard> {
    if glob_host.chars().all(|c| c == '*') {
        return None;
    }
    Some(Wildcard::host(glob_host))
}

/// The host part of a normalized glob as a host glob (`None`: any host),
/// and whether the glob can also select Docker Hub short names. The host is
/// the glob's text before its first `/`; a `**` before any `/` lets the
/// host run on to anything without a `/`; a glob without `/` matches only
/// short Docker Hub names.
fn glob_host(normalized: &str) -> (Option<String>, bool) {
    let slash = normalized.find('/');
    let stars = normalized.find("**");
    let (host, open_ended) = match (slash, stars) {
        (Some(s), Some(d)) if d < s => (normalized.get(..d).unwrap_or_default(), true),
        (Some(s), _) => (normalized.get(..s).unwrap_or_default(), false),
        (None, Some(d)) => (normalized.get(..d).unwrap_or_default(), true),
        (None, None) => return (Some(DOCKER_HUB.to_owned()), true),
    };
    let glob_host = if open_ended {
        format!("{host}*")
    } else {
        host.to_owned()
    };
    // Only a first segment with `.` or `:` (or `localhost`) is a host; a
    // glob host without them can also match a short name's first segment,
    // which puts the image on Docker Hub.
    let literal = host.replace('*', "");
    let docker_hub = !(literal.contains(['.', ':']) || host == "localhost");
    let any = glob_host.chars().all(|c| c == '*');
    ((!any).then_some(glob_host), docker_hub)
}

/// A glob as written, normalized as [`Glob::compile`] matches it.
fn normalize(pattern: &str) -> String {
    match pattern {
        "*" => format!("{DOCKER_HUB}/library/*"),
        "*/*" => format!("{DOCKER_HUB}/*/*"),
        p => match p.strip_prefix("docker.io/") {
            Some(rest) => format!("{DOCKER_HUB}/{rest}"),
            None => p.to_owned(),
        },
    }
}

impl HostPattern {
    /// The hosts a normalized glob can select ([`glob_host`]).
    fn of_glob(normalized: &str) -> Self {
        let (host, docker_hub) = glob_host(normalized);
        Self {
            pattern: host.as_deref().map(Wildcard::host),
            docker_hub,
        }
    }

    /// An allow-list entry: a host glob (`mirror.example:5000`,
    /// `*.corp.example`, `*` for any host).
    pub fn allow(host_glob: &str) -> Result<Self, GlobError> {
        let invalid = || GlobError::InvalidGlob {
            glob: host_glob.chars().take(MAX_REFERENCE_LEN).collect(),
        };
        if host_glob.is_empty()
            || host_glob.len() > MAX_REFERENCE_LEN
            || !host_glob
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_:.*[]".contains(&b))
        {
            return Err(invalid());
        }
        let host = if is_docker_hub(&host_glob.to_ascii_lowercase()) {
            DOCKER_HUB
        } else {
            host_glob
        };
        Ok(Self {
            pattern: host_pattern(host),
            docker_hub: false,
        })
    }

    /// Whether `host` (normalized by [`canonical_host`]) is selected.
    fn permits(&self, host: &str) -> bool {
        (self.docker_hub && host == DOCKER_HUB)
            || self.pattern.as_ref().is_none_or(|p| p.is_match(host))
    }

    /// Whether every host is selected.
    fn is_any(&self) -> bool {
        self.pattern.is_none()
    }
}

/// A registry host as [`HostSet`] compares it: lower case, Docker Hub's
/// aliases as `index.docker.io`.
pub fn canonical_host(host: &str) -> String {
    let lower = host.to_ascii_lowercase();
    if is_docker_hub(&lower) {
        DOCKER_HUB.to_owned()
    } else {
        lower
    }
}

/// The registry hosts some policy can select, plus an allow-list: the
/// registries sigil may contact.
#[derive(Debug, Clone, Default)]
pub struct HostSet {
    patterns: Vec<HostPattern>,
    exact: std::collections::BTreeSet<String>,
}

impl HostSet {
    /// An empty set: no host.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the hosts `glob` can select.
    pub fn add_glob(&mut self, glob: &Glob) {
        if glob.hosts.is_any() && !self.is_any() {
            self.patterns.clear();
        }
        if !self.is_any() {
            self.patterns.push(glob.hosts.clone());
        }
    }

    /// Adds one host exactly (`source.oci`'s registry).
    pub fn add_host(&mut self, host: &str) {
        self.exact.insert(canonical_host(host));
    }

    /// Adds an allow-list entry (see [`HostPattern::allow`]).
    pub fn add_pattern(&mut self, pattern: HostPattern) {
        if pattern.is_any() {
            self.patterns.clear();
        }
        if !self.is_any() {
            self.patterns.push(pattern);
        }
    }

    /// Whether every host is in the set (some glob like `**`).
    pub fn is_any(&self) -> bool {
        self.patterns.first().is_some_and(HostPattern::is_any)
    }

    /// Whether `host` (`host[:port]`) is in the set.
    pub fn contains(&self, host: &str) -> bool {
        let host = canonical_host(host);
        self.exact.contains(&host) || self.patterns.iter().any(|p| p.permits(&host))
    }

    /// Whether every host `glob` can select is in the set. A glob whose
    /// host has a `*` is covered when some pattern of the set matches its
    /// host text with each `*` of it standing for itself: a pattern's `*`
    /// absorbs it, a literal character never does, so whatever the glob's
    /// `*` stands for, that pattern matches it too (sound; a union of
    /// patterns covering it only together is not recognised).
    pub fn covers(&self, glob: &Glob) -> bool {
        if self.is_any() {
            return true;
        }
        let (host, docker_hub) = glob_host(&normalize(&glob.pattern));
        if docker_hub && !self.contains(DOCKER_HUB) {
            return false;
        }
        let Some(host) = host else {
            return false;
        };
        let host = canonical_host(&host);
        if !host.contains('*') {
            return self.contains(&host);
        }
        self.patterns
            .iter()
            .any(|p| p.pattern.as_ref().is_none_or(|w| w.is_match(&host)))
    }
}

impl Glob {
    /// Compiles a glob, refusing characters outside `a-zA-Z0-9-_:/*.`.
    pub fn compile(pattern: &str) -> Result<Self, GlobError> {
        let invalid = || GlobError::InvalidGlob {
            glob: pattern.chars().take(MAX_REFERENCE_LEN).collect(),
        };
        if pattern.is_empty()
            || pattern.len() > MAX_REFERENCE_LEN
            || !pattern
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_:/*.".contains(&b))
        {
            return Err(invalid());
        }
        let normalized = normalize(pattern);
        Ok(Self {
            pattern: pattern.to_owned(),
            matcher: Wildcard::glob(&normalized),
            hosts: HostPattern::of_glob(&normalized),
        })
    }

    /// The registry hosts this glob can select.
    pub fn hosts(&self) -> &HostPattern {
        &self.hosts
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether the glob selects `image`: tried against the repository, the
    /// reference with tag and/or digest, and the reference as written. The
    /// webhook asks every policy's globs about every image, so the forms are
    /// fed to the matcher in parts rather than built as strings.
    pub fn matches(&self, image: &ImageName) -> bool {
        let tag = image.tag.as_deref();
        let digest = image.digest.as_deref();
        let forms = [
            Some((None, None)),
            tag.map(|t| (Some(t), None)),
            digest.map(|d| (None, Some(d))),
            tag.zip(digest).map(|(t, d)| (Some(t), Some(d))),
        ];
        forms.into_iter().flatten().any(|(tag, digest)| {
            self.matcher
                .is_match_bytes(reference_bytes(image, tag, digest))
        }) || self.matcher.is_match(&image.original)
    }
}

/// `registry/repository[:tag][@digest]` of `image`, byte by byte.
fn reference_bytes<'a>(
    image: &'a ImageName,
    tag: Option<&'a str>,
    digest: Option<&'a str>,
) -> impl Iterator<Item = u8> + 'a {
    use std::iter::once;
    image
        .registry
        .bytes()
        .chain(once(b'/'))
        .chain(image.repository.bytes())
        .chain(tag.into_iter().flat_map(|t| once(b':').chain(t.bytes())))
        .chain(digest.into_iter().flat_map(|d| once(b'@').chain(d.bytes())))
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    const DIGEST: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";

    fn matches(glob: &str, image: &str) -> bool {
        Glob::compile(glob)
            .unwrap_or_else(|e| panic!("{glob}: {e}"))
            .matches(&ImageName::parse(image).unwrap_or_else(|e| panic!("{image}: {e}")))
    }

    #[test]
    fn globs_match_like_policy_controller() {
        let pinned = format!("ghcr.io/org/app@{DIGEST}");
        let cases: &[(&str, &str, bool)] = &[
            // Docker Hub official and user images.
            ("index.docker.io/library/foo:latest", "foo", true),
            ("index.docker.io/library/foo:*", "foo", true),
            ("index.docker.io/library/*", "foo", true),
            ("index.docker.io/*/*", "foo", true),
            ("index.docker.io/**", "foo", true),
            ("inde**", "foo", true),
            ("**", "foo", true),
            ("*", "foo", true),
            ("*", "myuser/myapp", false),
            ("*/*", "myuser/myapp", true),
            ("index.docker.io/myuser/*", "myuser/myapp", true),
            ("docker.io/myuser/*", "myuser/myapp", true),
            (
                "index.docker.io/library/nginx",
                "docker.io/library/nginx:1.27",
                true,
            ),
            // `*` stays within one segment; `**` crosses them.
            ("ghcr.io/*/app", "ghcr.io/a/app", true),
            ("ghcr.io/*/app", "ghcr.io/a/b/app", false),
            ("ghcr.io/*/*", "ghcr.io/foo", false),
            ("ghcr.io/org/**", "ghcr.io/org/team/nested/app", true),
            ("ghcr.io/org/**", "ghcr.io/other/app", false),
            ("*/**", "ghcr.io/foo", true),
            // Anchored at both ends, dots literal.
            ("ghcr.io/foo", "prefix-ghcr.io/foo", false),
            ("ghcr.io/foo", "ghcr.io/foo-suffix", false),
            ("ghcr.io/**", "ghcrxio/foo", false),
            // Tags and digests: a glob without one matches the repository at
            // any tag or digest; `*` runs over the suffix.
            ("ghcr.io/org/app", "ghcr.io/org/app:v1", true),
            ("ghcr.io/org/app", &pinned, true),
            ("ghcr.io/org/*", &pinned, true),
            ("ghcr.io/org/app:v1", "ghcr.io/org/app:v2", false),
            ("ghcr.io/org/app:v*", "ghcr.io/org/app:v2", true),
            ("localhost:5000/app", "localhost:5000/app:dev", true),
            ("registry.local:5000/**", "registry.local:5000/a/b", true),
        ];
        for (glob, image, want) in cases {
            assert_eq!(matches(glob, image), *want, "glob {glob} image {image}");
        }
    }

    /// A set covers a glob when every host the glob can select is in it;
    /// checked against the hosts each glob's own set holds.
    #[test]
    fn a_set_covers_a_glob_only_when_it_holds_every_host_the_glob_can_select() {
        let set_of = |globs: &[&str], allowed: &[&str]| {
            let mut set = HostSet::new();
            for g in globs {
                set.add_glob(&Glob::compile(g).unwrap());
            }
            for a in allowed {
                set.add_pattern(HostPattern::allow(a).unwrap());
            }
            set
        };
        let cluster = set_of(
            &["registry.example.com/**", "*.corp.example/**", "nginx"],
            &["mirror.example:5000"],
        );
        for covered in [
            "registry.example.com/team-a/**",
            "REGISTRY.example.com/x",
            "a.corp.example/app",
            "*.corp.example/app",
            "team-*.corp.example/**",
            "mirror.example:5000/x",
            "docker.io/library/nginx",
            "nginx",
        ] {
            assert!(
                cluster.covers(&Glob::compile(covered).unwrap()),
                "{covered}"
            );
        }
        for not_covered in [
            "**",
            "*/**",
            "registry.example.com.evil/**",
            "registry*/x",
            "*.example/x",
            "corp.example/x",
            "mirror.example:5001/x",
            "10.96.0.1/x",
            "kubernetes.default.svc/x",
        ] {
            assert!(
                !cluster.covers(&Glob::compile(not_covered).unwrap()),
                "{not_covered}"
            );
        }
        // Docker Hub short names are covered only where Docker Hub is.
        let no_hub = set_of(&["ghcr.io/**"], &[]);
        assert!(!no_hub.covers(&Glob::compile("team/app").unwrap()));
        assert!(set_of(&["**"], &[]).covers(&Glob::compile("**").unwrap()));
    }

    /// Every host an image the glob matches can live on is in the glob's
    /// host set, and hosts it cannot select are not.
    #[test]
    fn a_globs_host_set_holds_every_host_it_can_select_and_no_other() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "ghcr.io/org/**",
                &["ghcr.io", "GHCR.IO"],
                &["ghcr.io:443", "evil.io", "index.docker.io"],
            ),
            (
                "registry.local:5000/**",
                &["registry.local:5000"],
                &["registry.local", "registry.local:5001"],
            ),
            (
                "*.corp.example/app",
                &["a.corp.example", "b.corp.example"],
                &["corp.example", "a.corp.example.evil"],
            ),
            (
                "inde**",
                &["index.docker.io", "indeed.example"],
                &["ghcr.io"],
            ),
            (
                "**",
                &["anything.example", "169.254.169.254", "index.docker.io"],
                &[],
            ),
            ("*/**", &["anything.example"], &[]),
            (
                "*",
                &["index.docker.io", "docker.io", "registry-1.docker.io"],
                &["ghcr.io"],
            ),
            ("*/*", &["index.docker.io"], &["ghcr.io"]),
            ("nginx:1.27", &["index.docker.io"], &["ghcr.io"]),
            (
                "docker.io/team/*",
                &["index.docker.io", "docker.io"],
                &["ghcr.io"],
            ),
            // A first segment without `.`/`:` is a Docker Hub short name too.
            ("team/*", &["index.docker.io"], &["ghcr.io"]),
            (
                "localhost:5000/app",
                &["localhost:5000"],
                &["index.docker.io", "localhost"],
            ),
        ];
        for (glob, inside, outside) in cases {
            let mut set = HostSet::new();
            set.add_glob(&Glob::compile(glob).unwrap());
            for h in *inside {
                assert!(set.contains(h), "glob {glob} should select host {h}");
            }
            for h in *outside {
                assert!(!set.contains(h), "glob {glob} must not select host {h}");
            }
        }
    }

    /// Cross-check with the matcher: for images each glob matches, the
    /// image's registry is in the glob's host set.
    #[test]
    fn every_image_a_glob_matches_is_on_a_host_of_its_set() {
        let globs = [
            "ghcr.io/org/**",
            "*",
            "*/*",
            "team/*",
            "inde**",
            "**",
            "*.corp.example/**",
            "nginx",
            "local*/**",
        ];
        let images = [
            "nginx",
            "team/app",
            "docker.io/team/app:1",
            "ghcr.io/org/app",
            "ghcr.io/org/a/b:2",
            "index.docker.io/library/nginx",
            "a.corp.example/x/y",
            "localhost/app",
            "localhost:5000/app",
            "registry-1.docker.io/team/app",
        ];
        for g in globs {
            let glob = Glob::compile(g).unwrap();
            let mut set = HostSet::new();
            set.add_glob(&glob);
            for i in images {
                let image = ImageName::parse(i).unwrap();
                if glob.matches(&image) {
                    assert!(
                        set.contains(&image.registry),
                        "glob {g} matches {i} but not its host {}",
                        image.registry
                    );
                }
            }
        }
    }

    #[test]
    fn allow_list_entries_and_exact_hosts_extend_the_set() {
        let mut set = HostSet::new();
        assert!(!set.contains("ghcr.io"), "an empty set holds nothing");
        set.add_pattern(HostPattern::allow("mirror.example:5000").unwrap());
        set.add_pattern(HostPattern::allow("*.internal.example").unwrap());
        set.add_pattern(HostPattern::allow("docker.io").unwrap());
        set.add_host("Sigs.Example");
        for h in [
            "mirror.example:5000",
            "a.internal.example",
            "index.docker.io",
            "sigs.example",
        ] {
            assert!(set.contains(h), "{h}");
        }
        for h in ["mirror.example", "internal.example", "ghcr.io"] {
            assert!(!set.contains(h), "{h}");
        }
        assert!(!set.is_any());
        set.add_pattern(HostPattern::allow("*").unwrap());
        assert!(set.is_any() && set.contains("ghcr.io"));
        assert!(HostPattern::allow("a/b").is_err());
        assert!(HostPattern::allow("").is_err());
    }

    #[test]
    fn globs_with_regex_syntax_are_refused() {
        for glob in [
            ".+",
            "[a-z]*",
            "ghcr.io/(a|b)",
            "",
            "ghcr.io/a b",
            "ghcr.io/a?",
        ] {
            let err = Glob::compile(glob).unwrap_err();
            assert!(matches!(err, GlobError::InvalidGlob { .. }), "{glob}");
        }
    }

    #[test]
    fn references_normalize_to_docker_hub_and_default_to_latest() {
        let r = ImageName::parse("nginx").unwrap();
        assert_eq!(r.repository_name(), "index.docker.io/library/nginx");
        assert_eq!(r.tag.as_deref(), Some("latest"));
        let r = ImageName::parse(&format!("ghcr.io/org/app:v1@{DIGEST}")).unwrap();
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.pinned(), Some(format!("ghcr.io/org/app@{DIGEST}")));
        assert_eq!(r.to_string(), format!("ghcr.io/org/app:v1@{DIGEST}"));
        let r = ImageName::parse("localhost:5000/app").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("localhost:5000", "app")
        );
    }

    #[test]
    fn malformed_references_are_refused_with_the_reason() {
        for image in [
            "",
            "invalid&name",
            "Upper/Case",
            "ghcr.io/app:",
            "ghcr.io/app@sha256:zz",
            "ghcr.io//app",
        ] {
            let err = ImageName::parse(image).unwrap_err();
            assert!(matches!(err, GlobError::InvalidImage { .. }), "{image}");
        }
    }
}

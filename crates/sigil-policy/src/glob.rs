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

use std::fmt;

use sigil_registry::reference::{ImageRef, ReferenceError};

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

    /// The strings a glob is tried against: the repository, the reference
    /// with tag and/or digest, and the reference as written.
    fn match_candidates(&self) -> Vec<String> {
        let repo = self.repository_name();
        let mut out = vec![repo.clone()];
        if let Some(tag) = &self.tag {
            out.push(format!("{repo}:{tag}"));
        }
        if let Some(digest) = &self.digest {
            out.push(format!("{repo}@{digest}"));
            if let Some(tag) = &self.tag {
                out.push(format!("{repo}:{tag}@{digest}"));
            }
        }
        out.push(self.original.clone());
        out
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
    regex: regex::Regex,
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
        let normalized = match pattern {
            "*" => format!("{DOCKER_HUB}/library/*"),
            "*/*" => format!("{DOCKER_HUB}/*/*"),
            p => match p.strip_prefix("docker.io/") {
                Some(rest) => format!("{DOCKER_HUB}/{rest}"),
                None => p.to_owned(),
            },
        };
        let mut re = String::with_capacity(normalized.len() * 2 + 2);
        re.push('^');
        let mut chars = normalized.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' if chars.peek() == Some(&'*') => {
                    chars.next();
                    re.push_str(".*");
                }
                '*' => re.push_str("[^/]*"),
                '.' => re.push_str(r"\."),
                c => re.push(c),
            }
        }
        re.push('$');
        let regex = regex::Regex::new(&re).map_err(|_| invalid())?;
        Ok(Self {
            pattern: pattern.to_owned(),
            regex,
        })
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether the glob selects `image`.
    pub fn matches(&self, image: &ImageName) -> bool {
        image
            .match_candidates()
            .iter()
            .any(|candidate| self.regex.is_match(candidate))
    }
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

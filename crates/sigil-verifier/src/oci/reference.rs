//! Image references: parsing and Docker Hub normalization.
//!
//! Parsing is oci-client's (`oci_spec::distribution::Reference`), which follows
//! the distribution grammar and already maps `nginx` to
//! `docker.io/library/nginx:latest`; this module adds the pieces sigil needs on
//! top: the host to talk to (`index.docker.io` for Docker Hub), a typed
//! digest, and stable display forms for messages.

use std::fmt;

use oci_client::Reference;

/// Why a reference or digest string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// The string is not an image reference.
    #[error(
        "`{input}` is not an image reference ({reason}); write it like registry.example/repo/name:tag or ...@sha256:<64 hex>"
    )]
    Invalid {
        /// The input.
        input: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The digest is not `sha256:<64 lowercase hex>`.
    #[error("`{0}` is not a sha256 digest; sigil expects sha256:<64 lowercase hex characters>")]
    Digest(String),
}

/// A `sha256:<hex>` content digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`; other algorithms are refused
    /// because every digest sigil checks is SHA-256.
    pub fn parse(s: &str) -> Result<Self, ReferenceError> {
        let hex_part = s
            .strip_prefix("sha256:")
            .ok_or_else(|| ReferenceError::Digest(s.to_string()))?;
        if hex_part.len() != 64 || hex_part.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(ReferenceError::Digest(s.to_string()));
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out)
            .map_err(|_| ReferenceError::Digest(s.to_string()))?;
        Ok(Self(out))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(crate::crypto::sha256(bytes))
    }

    /// The raw 32 bytes.
    pub fn bytes(&self) -> [u8; 32] {
        self.0
    }

    /// The lowercase hex without the algorithm.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The tag the referrers tag schema and cosign's legacy tags derive from
    /// the digest: `sha256-<hex>`.
    pub fn tag_stem(&self) -> String {
        format!("sha256-{}", self.hex())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

/// A repository on a registry host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Repository {
    /// The registry as the user wrote it after normalization (`docker.io` for Docker Hub).
    pub registry: String,
    /// The host to send requests to (`index.docker.io` for Docker Hub), with port when given.
    pub host: String,
    /// The repository path (`library/nginx`).
    pub name: String,
}

impl Repository {
    /// Parses `registry/path` (no tag or digest), as `source.oci` gives it.
    pub fn parse(s: &str) -> Result<Self, ReferenceError> {
        let r = ImageRef::parse(s)?;
        if r.digest.is_some() || s.contains('@') {
            return Err(ReferenceError::Invalid {
                input: s.to_string(),
                reason: "a repository has no tag or digest".into(),
            });
        }
        Ok(r.repository)
    }
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.name)
    }
}

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// Where the image lives.
    pub repository: Repository,
    /// The tag, if given (`latest` when neither tag nor digest was).
    pub tag: Option<String>,
    /// The digest, if given.
    pub digest: Option<Digest>,
}

impl ImageRef {
    /// Parses and normalizes a reference (`nginx` → `docker.io/library/nginx:latest`).
    pub fn parse(s: &str) -> Result<Self, ReferenceError> {
        let invalid = |reason: String| ReferenceError::Invalid {
            input: s.to_string(),
            reason,
        };
        if s.is_empty() || s.len() > 4096 || s.chars().any(|c| c.is_whitespace()) {
            return Err(invalid("empty, too long or containing whitespace".into()));
        }
        let parsed: Reference = s
            .parse()
            .map_err(|e: oci_client::ParseError| invalid(e.to_string()))?;
        // The distribution spec allows only lowercase repository paths; a
        // parser that lets others through would look up another repository.
        if !parsed
            .repository()
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b))
        {
            return Err(invalid(
                "repository path must be lowercase letters, digits, `.`, `_`, `-` and `/`".into(),
            ));
        }
        let digest = parsed.digest().map(Digest::parse).transpose()?;
        let tag = parsed.tag().map(str::to_string);
        Ok(Self {
            repository: Repository {
                registry: parsed.registry().to_string(),
                host: parsed.resolve_registry().to_string(),
                name: parsed.repository().to_string(),
            },
            tag: if tag.is_none() && digest.is_none() {
                Some("latest".into())
            } else {
                tag
            },
            digest,
        })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";

    #[test]
    fn references_normalize_like_docker_does() {
        let cases: &[(&str, &str, &str, &str, Option<&str>)] = &[
            (
                "nginx",
                "docker.io",
                "index.docker.io",
                "library/nginx",
                Some("latest"),
            ),
            (
                "nginx:1.27",
                "docker.io",
                "index.docker.io",
                "library/nginx",
                Some("1.27"),
            ),
            (
                "docker.io/nginx",
                "docker.io",
                "index.docker.io",
                "library/nginx",
                Some("latest"),
            ),
            (
                "user/app",
                "docker.io",
                "index.docker.io",
                "user/app",
                Some("latest"),
            ),
            (
                "ghcr.io/o/r/app:v1",
                "ghcr.io",
                "ghcr.io",
                "o/r/app",
                Some("v1"),
            ),
            (
                "127.0.0.1:5001/test/app:v1",
                "127.0.0.1:5001",
                "127.0.0.1:5001",
                "test/app",
                Some("v1"),
            ),
            (
                "localhost:5000/app",
                "localhost:5000",
                "localhost:5000",
                "app",
                Some("latest"),
            ),
        ];
        for (input, registry, host, name, tag) in cases {
            let r = ImageRef::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(r.repository.registry, *registry, "{input}");
            assert_eq!(r.repository.host, *host, "{input}");
            assert_eq!(r.repository.name, *name, "{input}");
            assert_eq!(r.tag.as_deref(), *tag, "{input}");
            assert!(r.digest.is_none());
        }
    }

    #[test]
    fn digest_references_keep_the_digest_and_need_no_tag() {
        let r = ImageRef::parse(&format!("127.0.0.1:5001/test/app@{D}"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.digest.map(|d| d.to_string()).as_deref(), Some(D));
        assert_eq!(r.tag, None);
        let r = ImageRef::parse(&format!("alpine:3@{D}")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.tag.as_deref(), Some("3"));
        assert_eq!(r.repository.name, "library/alpine");
        assert_eq!(r.to_string(), format!("docker.io/library/alpine:3@{D}"));
    }

    #[test]
    fn malformed_references_and_digests_are_refused_with_the_input_named() {
        for bad in [
            "",
            "UPPER/case",
            "a b",
            "app@sha256:abc",
            "app@md5:00",
            "-bad/x",
        ] {
            let e = ImageRef::parse(bad);
            assert!(e.is_err(), "{bad} parsed");
        }
        assert!(Digest::parse(&D.to_uppercase()).is_err());
        assert!(Digest::parse(&D.replace("sha256", "sha512")).is_err());
        let msg = ImageRef::parse("a b")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("`a b`"), "{msg}");
    }

    #[test]
    fn tag_stems_follow_the_referrers_tag_schema() {
        let d = Digest::parse(D).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.tag_stem(), format!("sha256-{}", &D[7..]));
    }

    #[test]
    fn source_repositories_have_no_tag_or_digest() {
        let r = Repository::parse("127.0.0.1:5001/sigs/app").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.name, "sigs/app");
        assert!(Repository::parse(&format!("127.0.0.1:5001/sigs/app@{D}")).is_err());
    }
}

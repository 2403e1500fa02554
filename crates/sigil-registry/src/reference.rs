//! Image references: parsing and Docker Hub normalization.
//!
//! A strict, hand-written parser of the distribution reference grammar
//! (`[domain[:port]/]path[:tag][@algorithm:hex]`). It replaces oci-client's
//! regex-based one, whose one-time regex compilation cost about 35 ms of
//! every `sigil verify` run. Docker Hub names are normalized the way Docker
//! does (`nginx` → `docker.io/library/nginx:latest`), requests to Docker Hub go
//! to `index.docker.io`, and the module gives a typed digest and stable
//! display forms for messages.

use std::fmt;

/// Longest repository name (`registry/path`) the distribution grammar allows.
pub const MAX_NAME_LEN: usize = 255;
/// Longest tag the distribution grammar allows.
pub const MAX_TAG_LEN: usize = 128;
/// Longest input considered at all; anything longer is refused unread.
const MAX_INPUT_LEN: usize = 4096;
/// The registry Docker Hub names normalize to.
const DOCKER_HUB: &str = "docker.io";
/// The host Docker Hub requests go to.
const DOCKER_HUB_HOST: &str = "index.docker.io";

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
        Self(sigil_verifier::crypto::sha256(bytes))
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
        let last = s.rsplit('/').next().unwrap_or(s);
        if r.digest.is_some() || last.contains(['@', ':']) {
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
        if s.is_empty() {
            return Err(invalid("it is empty".into()));
        }
        if s.len() > MAX_INPUT_LEN {
            return Err(invalid(format!("longer than {MAX_INPUT_LEN} bytes")));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((rest, d)) => {
                check_digest_syntax(d).map_err(invalid)?;
                (rest, Some(Digest::parse(d)?))
            }
            None => (s, None),
        };
        // A `:` after the last `/` starts the tag; one before it is a port.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest.get(last_slash..).and_then(|t| t.find(':')) {
            Some(i) => {
                let at = last_slash + i;
                let tag = rest.get(at + 1..).unwrap_or_default();
                check_tag(tag).map_err(invalid)?;
                (rest.get(..at).unwrap_or_default(), Some(tag.to_string()))
            }
            None => (rest, None),
        };
        let repository = split_name(name).map_err(invalid)?;
        let tag = match (tag, &digest) {
            (None, None) => Some("latest".to_string()),
            (tag, _) => tag,
        };
        Ok(Self {
            repository,
            tag,
            digest,
        })
    }
}

/// Splits `name` into a registry and a path, normalizing Docker Hub names.
/// As in Docker, the first component is a registry only when it looks like a
/// host (has a `.` or a `:`, or is `localhost`) and a path follows it.
fn split_name(name: &str) -> Result<Repository, String> {
    let (registry, path) = match name.split_once('/') {
        Some((first, path))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            check_domain(first)?;
            (first, path)
        }
        _ => (DOCKER_HUB, name),
    };
    check_path(path)?;
    let registry = if registry.eq_ignore_ascii_case(DOCKER_HUB_HOST) {
        DOCKER_HUB
    } else {
        registry
    };
    let path = if registry == DOCKER_HUB && !path.contains('/') {
        format!("library/{path}")
    } else {
        path.to_string()
    };
    if registry.len() + 1 + path.len() > MAX_NAME_LEN {
        return Err(format!(
            "the repository name is longer than {MAX_NAME_LEN} characters"
        ));
    }
    let host = if registry == DOCKER_HUB {
        DOCKER_HUB_HOST.to_string()
    } else {
        registry.to_ascii_lowercase()
    };
    Ok(Repository {
        registry: registry.to_string(),
        host,
        name: path,
    })
}

/// `host[:port]`: DNS labels of letters, digits and inner hyphens, or a
/// bracketed IPv6 address; the port is 1 to 5 digits.
fn check_domain(domain: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("registry `{domain}` {why}"));
    let (host, port) = if let Some(v6) = domain.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return bad("has an unclosed `[`");
        };
        if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return bad("has a malformed IPv6 address");
        }
        match after {
            "" => (None, None),
            p => match p.strip_prefix(':') {
                Some(port) => (None, Some(port)),
                None => return bad("has text after the IPv6 address"),
            },
        }
    } else {
        match domain.split_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(domain), None),
        }
    };
    if let Some(host) = host {
        for label in host.split('.') {
            let ok = !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-');
            if !ok {
                return bad(
                    "is not a host name (labels of letters, digits and inner `-`, separated by `.`)",
                );
            }
        }
    }
    if let Some(port) = port
        && (port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return bad("has a port that is not 1 to 5 digits");
    }
    Ok(())
}

/// `component(/component)*`, each `[a-z0-9]+` runs joined by `.`, `_`, `__`
/// or any number of `-`.
fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the repository path is empty".into());
    }
    for component in path.split('/') {
        check_component(component)?;
    }
    Ok(())
}

fn check_component(c: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("repository path component `{c}` {why}"));
    if c.is_empty() {
        return bad("is empty (a `//`, or a `/` at either end)");
    }
    if c.bytes().any(|b| b.is_ascii_uppercase()) {
        return bad("has uppercase letters; repository names are lowercase");
    }
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = c.as_bytes();
    if !bytes.first().copied().is_some_and(alnum) || !bytes.last().copied().is_some_and(alnum) {
        return bad("must start and end with a lowercase letter or digit");
    }
    // Each run of non-alphanumerics is one separator.
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while bytes.get(i).is_some_and(|b| !alnum(*b)) {
            i += 1;
        }
        if i > start {
            let sep = c.get(start..i).unwrap_or_default();
            let ok = matches!(sep, "." | "_" | "__") || sep.bytes().all(|b| b == b'-');
            if !ok {
                return bad(
                    "has a separator other than `.`, `_`, `__` or dashes, or a character outside [a-z0-9._-]",
                );
            }
        }
        i += 1;
    }
    Ok(())
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn check_tag(tag: &str) -> Result<(), String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let ok = !tag.is_empty()
        && tag.len() <= MAX_TAG_LEN
        && tag.as_bytes().first().copied().is_some_and(word)
        && tag.bytes().all(|b| word(b) || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tag `{tag}` must be 1 to {MAX_TAG_LEN} letters, digits, `_`, `.` or `-`, not starting with `.` or `-`"
        ))
    }
}

/// `algorithm:hex` as the grammar spells it (the algorithm and length are
/// then checked by [`Digest::parse`]).
fn check_digest_syntax(d: &str) -> Result<(), String> {
    let bad = || {
        Err(format!(
            "digest `{d}` is not algorithm:hex (at least 32 hex characters)"
        ))
    };
    let Some((alg, hex_part)) = d.split_once(':') else {
        return bad();
    };
    let alg_ok = alg.split(['+', '.', '-', '_']).all(|c| {
        c.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
            && c.bytes().all(|b| b.is_ascii_alphanumeric())
    });
    if !alg_ok || hex_part.len() < 32 || !hex_part.bytes().all(|b| b.is_ascii_hexdigit()) {
        return bad();
    }
    Ok(())
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
    fn references_normalize_like_docker_does_in_every_shape() {
        // input, registry, host, path, tag
        let cases: &[(&str, &str, &str, &str, Option<&str>)] = &[
            (
                "busybox",
                "docker.io",
                "index.docker.io",
                "library/busybox",
                Some("latest"),
            ),
            (
                "index.docker.io/nginx",
                "docker.io",
                "index.docker.io",
                "library/nginx",
                Some("latest"),
            ),
            (
                "docker.io/library/nginx:1",
                "docker.io",
                "index.docker.io",
                "library/nginx",
                Some("1"),
            ),
            (
                "a/b/c/d:Tag_1.x-y",
                "docker.io",
                "index.docker.io",
                "a/b/c/d",
                Some("Tag_1.x-y"),
            ),
            (
                "localhost/app",
                "localhost",
                "localhost",
                "app",
                Some("latest"),
            ),
            (
                "localhost:5000",
                "docker.io",
                "index.docker.io",
                "library/localhost",
                Some("5000"),
            ),
            (
                "Registry.Example.COM/app",
                "Registry.Example.COM",
                "registry.example.com",
                "app",
                Some("latest"),
            ),
            (
                "[::1]:5000/app:v",
                "[::1]:5000",
                "[::1]:5000",
                "app",
                Some("v"),
            ),
            (
                "[fe80::1]/app",
                "[fe80::1]",
                "[fe80::1]",
                "app",
                Some("latest"),
            ),
            (
                "r.io/a.b_c__d---e/f-g:_",
                "r.io",
                "r.io",
                "a.b_c__d---e/f-g",
                Some("_"),
            ),
            (
                "r-1.io:65535/x9/0",
                "r-1.io:65535",
                "r-1.io:65535",
                "x9/0",
                Some("latest"),
            ),
            (
                "user-name/app",
                "docker.io",
                "index.docker.io",
                "user-name/app",
                Some("latest"),
            ),
        ];
        for (input, registry, host, name, tag) in cases {
            let r = ImageRef::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(r.repository.registry, *registry, "{input}");
            assert_eq!(r.repository.host, *host, "{input}");
            assert_eq!(r.repository.name, *name, "{input}");
            assert_eq!(r.tag.as_deref(), *tag, "{input}");
            assert!(r.digest.is_none(), "{input}");
        }
        let max_tag = format!("r.io/app:{}", "t".repeat(MAX_TAG_LEN));
        assert!(ImageRef::parse(&max_tag).is_ok());
        let max_name = format!("r.io/{}", "a".repeat(MAX_NAME_LEN - 5));
        assert!(ImageRef::parse(&max_name).is_ok());
    }

    #[test]
    fn malformed_references_and_digests_are_refused_with_the_input_named() {
        let long_tag = format!("r.io/app:{}", "t".repeat(MAX_TAG_LEN + 1));
        let long_name = format!("r.io/{}", "a".repeat(MAX_NAME_LEN - 4));
        // Docker Hub normalization counts: `docker.io/library/` plus 240 is too long.
        let long_hub = "a".repeat(240);
        let huge = "a".repeat(MAX_INPUT_LEN + 1);
        for bad in [
            "",
            "UPPER/case",
            "r.io/App",
            "a b",
            " nginx",
            "nginx ",
            "app@sha256:abc",
            "app@md5:00",
            "app@sha256",
            "app@",
            "app@@sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d",
            "-bad/x",
            "bad-/x",
            "r.io/",
            "r.io//app",
            "r.io/app/",
            "/app",
            "app:",
            "app:-tag",
            "app:.tag",
            "app:t@g",
            "app:a:b",
            "r.io/a..b",
            "r.io/a___b",
            "r.io/a._b",
            "r.io/a-.b",
            "r.io/_a",
            "r.io/a_",
            "r.io/ä",
            "r.io:/app",
            "r.io:123456/app",
            "r.io:12a/app",
            "-r.io/app",
            "r-.io/app",
            "r..io/app",
            "[::1/app",
            "[]/app",
            "[::1]x/app",
            "[zz]/app",
            "r.io/app\n",
            long_tag.as_str(),
            long_name.as_str(),
            long_hub.as_str(),
            huge.as_str(),
        ] {
            let e = ImageRef::parse(bad);
            assert!(e.is_err(), "{bad:?} parsed as {e:?}");
        }
        assert!(Digest::parse(&D.to_uppercase()).is_err());
        assert!(Digest::parse(&D.replace("sha256", "sha512")).is_err());
        let msg = ImageRef::parse("a b")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("`a b`"), "{msg}");
        let msg = ImageRef::parse("r.io/App")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("lowercase"), "{msg}");
    }

    #[test]
    fn sha512_and_other_algorithms_are_grammatical_but_refused_as_not_sha256() {
        let e = ImageRef::parse(&format!("app@sha512:{}", "0".repeat(128)));
        assert!(matches!(e, Err(ReferenceError::Digest(_))), "{e:?}");
    }

    #[test]
    fn display_forms_parse_back_to_the_same_reference() {
        for input in [
            "nginx",
            "127.0.0.1:5001/test/app:v1",
            &format!("alpine:3@{D}"),
            &format!("r.io/a/b@{D}"),
        ] {
            let r = ImageRef::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            let again = ImageRef::parse(&r.to_string()).unwrap_or_else(|e| panic!("{r}: {e}"));
            assert_eq!(again, r, "{input}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parsing_arbitrary_strings_never_panics(s in "\\PC{0,300}") {
            let _ = ImageRef::parse(&s);
            let _ = Repository::parse(&s);
        }

        #[test]
        fn parsing_reference_shaped_strings_never_panics_and_round_trips(
            s in "[a-zA-Z0-9._:/@\\[\\]-]{0,80}",
        ) {
            if let Ok(r) = ImageRef::parse(&s) {
                let again = ImageRef::parse(&r.to_string());
                proptest::prop_assert_eq!(again, Ok(r));
            }
        }
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
        assert!(Repository::parse("127.0.0.1:5001/sigs/app:v1").is_err());
    }
}

//! Image config files (the OCI image configuration: user, entrypoint,
//! environment, labels, platform) by platform, for ClusterImagePolicy-level
//! policies with `fetchConfigFile: true`.
//!
//! policy-controller hands such a policy `config: {<platform>: <ConfigFile>}`:
//! one entry for an image manifest, one per entry of an index, keyed as
//! go-containerregistry writes a platform (`os/architecture[/variant][:os.version]`,
//! taken from the config itself, not from the index entry), each config
//! decoded into go-containerregistry's `ConfigFile` and encoded again. The
//! same document is built here from the registry's bytes: fields that type
//! does not know are dropped, and so are the zero values its `omitempty`
//! tags drop from `config`, so a CUE or Rego policy sees the same shape.
//!
//! Everything is fetched by digest and checked against it (manifests and
//! blobs alike), within the session's deadline and byte budget; an index
//! may list at most [`MAX_PLATFORMS`] entries and may not nest another index.

use std::collections::BTreeMap;

use futures_util::future::join_all;
use serde_json::{Map, Value};

use crate::client::{Descriptor, Manifest, RegistryError, Session};
use crate::reference::{Digest, Repository};

/// Most entries of an index whose configs are fetched (policy-controller has
/// no bound; real multi-platform images list a few dozen at most).
pub const MAX_PLATFORMS: usize = 64;

/// The config files of an image by platform key.
pub type ConfigFiles = BTreeMap<String, Value>;

pub(crate) const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
const MANIFEST_TYPES: [&str; 2] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// Why the config files of an image could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The registry failed or served something that does not check out.
    #[error("reading the config files of {image}: {error}")]
    Registry {
        /// The image (`repository@digest`).
        image: String,
        /// What went wrong.
        #[source]
        error: RegistryError,
    },
    /// A manifest the image names is not in the registry.
    #[error("reading the config files of {image}: manifest {digest} is not in the registry")]
    NotFound {
        /// The image.
        image: String,
        /// The missing manifest.
        digest: String,
    },
    /// The content is not something with a config file.
    #[error(
        "reading the config files of {image}: {digest} is {what}, not an image manifest or an \
         index of them; only images have config files, so drop fetchConfigFile from policies \
         that select it"
    )]
    NotAnImage {
        /// The image.
        image: String,
        /// The offending manifest.
        digest: String,
        /// What it is instead.
        what: String,
    },
    /// An index lists more entries than sigil reads.
    #[error(
        "reading the config files of {image}: its index lists {count} images, more than the \
         {limit} sigil reads for a policy"
    )]
    TooManyPlatforms {
        /// The image.
        image: String,
        /// Entries listed.
        count: usize,
        /// [`MAX_PLATFORMS`].
        limit: usize,
    },
    /// A config blob is not a JSON object.
    #[error("reading the config files of {image}: config {digest} is not a JSON object: {reason}")]
    NotJson {
        /// The image.
        image: String,
        /// The config blob.
        digest: String,
        /// The parser's complaint.
        reason: String,
    },
}

impl ConfigError {
    /// Whether the failure says nothing about the image (a registry outage,
    /// see [`RegistryError::is_inconclusive`]).
    pub fn is_inconclusive(&self) -> bool {
        matches!(self, Self::Registry { error, .. } if error.is_inconclusive())
    }
}

pub(crate) enum Shape<'m> {
    Index(&'m [Descriptor]),
    Image(&'m Descriptor),
    Other(String),
}

pub(crate) fn shape(m: &Manifest) -> Shape<'_> {
    let media_type = m.media_type.as_deref().unwrap_or("");
    if INDEX_TYPES.contains(&media_type) || (media_type.is_empty() && !m.manifests.is_empty()) {
        return Shape::Index(&m.manifests);
    }
    let is_manifest = MANIFEST_TYPES.contains(&media_type) || media_type.is_empty();
    match &m.config {
        Some(config) if is_manifest && m.artifact_type.is_none() => Shape::Image(config),
        _ if m.artifact_type.is_some() => Shape::Other(format!(
            "an artifact of type `{}`",
            m.artifact_type.as_deref().unwrap_or_default()
        )),
        _ if media_type.is_empty() => Shape::Other("a manifest without a media type".into()),
        _ => Shape::Other(format!("a manifest of media type `{media_type}`")),
    }
}

/// Reads the config files of the image `repo@digest` (an image manifest or
/// an index of them) by platform.
pub async fn config_files(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
) -> Result<ConfigFiles, ConfigError> {
    let image = format!("{repo}@{digest}");
    let manifest = fetch_manifest(session, repo, digest, &image).await?;
    let mut out = ConfigFiles::new();
    match shape(&manifest) {
        Shape::Image(config) => {
            let (key, file) = fetch_config(session, repo, config, &image).await?;
            out.insert(key, file);
        }
        Shape::Index(entries) => {
            if entries.len() > MAX_PLATFORMS {
                return Err(ConfigError::TooManyPlatforms {
                    image,
                    count: entries.len(),
                    limit: MAX_PLATFORMS,
                });
            }
            let fetched = join_all(
                entries
                    .iter()
                    .map(|entry| index_entry(session, repo, entry, &image)),
            )
            .await;
            for result in fetched {
                let (key, file) = result?;
                out.insert(key, file);
            }
        }
        Shape::Other(what) => {
            return Err(ConfigError::NotAnImage {
                image,
                digest: digest.to_string(),
                what,
            });
        }
    }
    Ok(out)
}

async fn index_entry(
    session: &Session<'_>,
    repo: &Repository,
    entry: &Descriptor,
    image: &str,
) -> Result<(String, Value), ConfigError> {
    let digest = Digest::parse(&entry.digest).map_err(|e| ConfigError::NotAnImage {
        image: image.to_owned(),
        digest: entry.digest.clone(),
        what: format!("an index entry with an unusable digest ({e})"),
    })?;
    let manifest = fetch_manifest(session, repo, &digest, image).await?;
    match shape(&manifest) {
        Shape::Image(config) => fetch_config(session, repo, config, image).await,
        Shape::Index(_) => Err(ConfigError::NotAnImage {
            image: image.to_owned(),
            digest: digest.to_string(),
            what: "an index inside an index (sigil reads one level)".into(),
        }),
        Shape::Other(what) => Err(ConfigError::NotAnImage {
            image: image.to_owned(),
            digest: digest.to_string(),
            what,
        }),
    }
}

async fn fetch_manifest(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
    image: &str,
) -> Result<Manifest, ConfigError> {
    match session
        .manifest(repo, &digest.to_string(), Some(*digest))
        .await
    {
        Ok(Some((_, _, manifest))) => Ok(manifest),
        Ok(None) => Err(ConfigError::NotFound {
            image: image.to_owned(),
            digest: digest.to_string(),
        }),
        Err(error) => Err(ConfigError::Registry {
            image: image.to_owned(),
            error,
        }),
    }
}

async fn fetch_config(
    session: &Session<'_>,
    repo: &Repository,
    config: &Descriptor,
    image: &str,
) -> Result<(String, Value), ConfigError> {
    let body = session
        .blob(repo, config)
        .await
        .map_err(|error| ConfigError::Registry {
            image: image.to_owned(),
            error,
        })?;
    let not_json = |reason: String| ConfigError::NotJson {
        image: image.to_owned(),
        digest: config.digest.clone(),
        reason,
    };
    let value: Value = serde_json::from_slice(&body).map_err(|e| not_json(e.to_string()))?;
    let Value::Object(object) = value else {
        return Err(not_json(format!("found {}", kind_of(&value))));
    };
    Ok((platform_key(&object), config_file(object)))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// go-containerregistry's `Platform.String()` over the config's own fields.
pub fn platform_key(config: &Map<String, Value>) -> String {
    let field = |name: &str| config.get(name).and_then(Value::as_str).unwrap_or("");
    let os = field("os");
    if os.is_empty() {
        return String::new();
    }
    let mut key = os.to_owned();
    for part in [field("architecture"), field("variant")] {
        if !part.is_empty() {
            key.push('/');
            key.push_str(part);
        }
    }
    let os_version = field("os.version");
    if !os_version.is_empty() {
        key.push(':');
        key.push_str(os_version);
    }
    key
}

/// The top-level fields of go-containerregistry's `ConfigFile`, and whether
/// each is written even when absent (no `omitempty`).
const CONFIG_FILE_FIELDS: [(&str, bool); 12] = [
    ("architecture", true),
    ("author", false),
    ("container", false),
    // A struct (time.Time): `omitempty` never drops it; its zero value is
    // written as the zero time.
    ("created", true),
    ("docker_version", false),
    ("history", false),
    ("os", true),
    ("rootfs", true),
    ("config", true),
    ("os.version", false),
    ("variant", false),
    ("os.features", false),
];

/// The fields of its `Config` (all `omitempty`).
const CONFIG_FIELDS: [&str; 24] = [
    "AttachStderr",
    "AttachStdin",
    "AttachStdout",
    "Cmd",
    "Healthcheck",
    "Domainname",
    "Entrypoint",
    "Env",
    "Hostname",
    "Image",
    "Labels",
    "OnBuild",
    "OpenStdin",
    "StdinOnce",
    "Tty",
    "User",
    "Volumes",
    "WorkingDir",
    "ExposedPorts",
    "ArgsEscaped",
    "NetworkDisabled",
    "MacAddress",
    "StopSignal",
    "Shell",
];

/// The config as go-containerregistry's `ConfigFile` round trip leaves it.
pub fn config_file(mut raw: Map<String, Value>) -> Value {
    let mut out = Map::new();
    for (name, always) in CONFIG_FILE_FIELDS {
        let value = match (raw.remove(name), name) {
            (Some(Value::Object(inner)), "config") => Value::Object(runtime_config(inner)),
            (Some(Value::Null) | None, "config") => Value::Object(Map::new()),
            (Some(Value::Null) | None, "created") => Value::String("0001-01-01T00:00:00Z".into()),
            (Some(Value::Null) | None, "rootfs") => {
                serde_json::json!({"type": "", "diff_ids": null})
            }
            (Some(Value::Null) | None, _) if always => Value::String(String::new()),
            (Some(v), _) if always || !is_zero(&v) => v,
            _ => continue,
        };
        out.insert(name.to_owned(), value);
    }
    Value::Object(out)
}

fn runtime_config(mut raw: Map<String, Value>) -> Map<String, Value> {
    CONFIG_FIELDS
        .iter()
        .filter_map(|name| {
            raw.remove(*name)
                .filter(|v| !is_zero(v))
                .map(|v| ((*name).to_owned(), v))
        })
        .collect()
}

/// What Go's `omitempty` leaves out.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            _ => Map::new(),
        }
    }

    #[test]
    fn platform_keys_are_written_as_go_containerregistry_writes_them() {
        let key = |v: Value| platform_key(&object(v));
        assert_eq!(
            key(json!({"os": "linux", "architecture": "amd64"})),
            "linux/amd64"
        );
        assert_eq!(
            key(json!({"os": "linux", "architecture": "arm", "variant": "v7"})),
            "linux/arm/v7"
        );
        assert_eq!(
            key(json!({"os": "windows", "architecture": "amd64", "os.version": "10.0.20348.2113"})),
            "windows/amd64:10.0.20348.2113"
        );
        assert_eq!(key(json!({"architecture": "amd64"})), "");
        assert_eq!(key(json!({"os": 7, "architecture": "amd64"})), "");
    }

    #[test]
    fn a_config_keeps_the_fields_go_containerregistry_keeps() {
        let file = config_file(object(json!({
            "architecture": "amd64",
            "os": "linux",
            "created": "2026-11-30T00:00:00Z",
            "moby.buildkit.buildinfo.v1": "ignored",
            "config": {
                "User": "65532",
                "Env": ["PATH=/usr/bin"],
                "Tty": false,
                "WorkingDir": "",
                "Labels": {},
                "Unknown": 1
            },
            "rootfs": {"type": "layers", "diff_ids": ["sha256:00"]},
            "history": []
        })));
        assert_eq!(
            file,
            json!({
                "architecture": "amd64",
                "os": "linux",
                "created": "2026-11-30T00:00:00Z",
                "config": {"User": "65532", "Env": ["PATH=/usr/bin"]},
                "rootfs": {"type": "layers", "diff_ids": ["sha256:00"]}
            })
        );
    }

    #[test]
    fn a_config_without_its_required_fields_gets_their_zero_values() {
        let file = config_file(object(json!({"os": "linux", "config": null})));
        assert_eq!(
            file,
            json!({
                "architecture": "",
                "created": "0001-01-01T00:00:00Z",
                "os": "linux",
                "rootfs": {"type": "", "diff_ids": null},
                "config": {}
            })
        );
    }

    #[test]
    fn manifests_indexes_and_artifacts_are_told_apart() {
        let parse = |v: Value| serde_json::from_value::<Manifest>(v).unwrap_or_default();
        let config = json!({"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:00", "size": 2});
        let image = parse(json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config, "layers": []
        }));
        assert!(matches!(shape(&image), Shape::Image(_)));
        let untyped = parse(json!({"config": config, "layers": []}));
        assert!(matches!(shape(&untyped), Shape::Image(_)));
        let index = parse(json!({
            "mediaType": "application/vnd.docker.distribution.manifest.list.v2+json",
            "manifests": [{"digest": "sha256:00", "size": 1}]
        }));
        assert!(matches!(shape(&index), Shape::Index([_])));
        let artifact = parse(json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "config": config
        }));
        assert!(matches!(shape(&artifact), Shape::Other(what) if what.contains("sigstore.bundle")));
    }
}

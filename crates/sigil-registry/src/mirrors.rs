//! Registry mirrors and pull-through caches, read in the forms the nodes
//! already use, so sigil reads an image where the kubelet pulls it:
//!
//! - containerd's `hosts.toml` (a `certs.d` directory: `<dir>/<namespace>/hosts.toml`,
//!   `_default` for every other registry): its `[host."URL"]` tables in the
//!   order written, then `server` (default: the namespace's own registry);
//!   a host without the `resolve` capability is used for digests only; an
//!   `override_path` URL (`https://harbor.example.com/v2/dockerhub-proxy`)
//!   names a repository prefix there;
//! - CRI-O's `registries.conf` (v2): each `[[registry]]`'s mirrors in
//!   order (`pull-from-mirror`, `mirror-by-digest-only`, `insecure`), then
//!   its `location`; `blocked` registries are read nowhere;
//! - sigil's own rules, `PREFIX=PLACE[,PLACE...]`, where a place is
//!   `[http://]host[/path]`: Harbor's proxy-cache form
//!   `docker.io=harbor.example.com/dockerhub-proxy` reads
//!   `docker.io/library/nginx` as `harbor.example.com/dockerhub-proxy/library/nginx`.
//!   The upstream is read only where it is listed among the places
//!   (`docker.io=harbor.example.com/dockerhub-proxy,docker.io`).
//!
//! A rule maps an upstream registry or repository prefix (the name the
//! policies say) to the places to read, in order ([`MirrorMap::places`]); the
//! longest prefix wins. What is read is judged under the upstream name,
//! and every digest is checked as for the upstream itself
//! ([`crate::client`] does the reading and records where it looked).

use std::fmt;
use std::path::Path;

use crate::auth::normalize_host;
use crate::reference::Repository;

/// Files and rules read at most: a bound on what a setting may hold.
pub const MAX_RULES: usize = 256;
/// Places one rule may list at most.
pub const MAX_PLACES: usize = 16;
/// The largest mirror configuration file read.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;

/// Why a mirror setting could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("registry mirrors: {source_name}: {reason}")]
pub struct MirrorError {
    /// The file or rule.
    pub source_name: String,
    /// What is wrong, and what form is expected.
    pub reason: String,
}

fn err(source: &str, reason: impl Into<String>) -> MirrorError {
    MirrorError {
        source_name: source.to_string(),
        reason: reason.into(),
    }
}

/// One place a rule reads.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlaceSpec {
    /// `host[:port]` (Docker Hub as `index.docker.io`).
    host: String,
    /// The repository prefix there (`dockerhub-proxy`), may be empty.
    path: String,
    /// Read over plain HTTP.
    insecure: bool,
    /// Not asked for tags.
    digest_only: bool,
    /// Not asked for digests.
    tag_only: bool,
    /// This place is the upstream registry itself.
    upstream: bool,
}

/// One place to read a repository at, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The repository there.
    pub repository: Repository,
    /// Whether it is the upstream itself (else a mirror or cache).
    pub upstream: bool,
    /// Not asked for tags (a mirror for digests only).
    pub digest_only: bool,
    /// Not asked for digests.
    pub tag_only: bool,
}

impl Place {
    /// Whether this place is asked for a reference by digest (`true`) or by tag.
    pub fn serves(&self, by_digest: bool) -> bool {
        if by_digest {
            !self.tag_only
        } else {
            !self.digest_only
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.upstream { "upstream" } else { "mirror" };
        write!(f, "{} ({kind})", self.repository)
    }
}

/// A prefix: a registry (`docker.io`) or a repository prefix in it
/// (`docker.io/library`), or every registry (`*`, containerd's `_default`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    registry: String,
    path: String,
    places: Vec<PlaceSpec>,
    blocked: bool,
    from: String,
}

/// Registry mirrors: rules from every source, longest prefix first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorMap {
    rules: Vec<Rule>,
}

/// The registry of a name as the policies write it (`docker.io` for
/// Docker Hub under any of its names).
fn registry_name(host: &str) -> String {
    match normalize_host(host).as_str() {
        "index.docker.io" => "docker.io".into(),
        other => other.to_string(),
    }
}

/// Splits `host[/path]` into the registry and the path.
fn split_location(s: &str) -> (String, String) {
    let s = s.trim().trim_end_matches('/');
    match s.split_once('/') {
        Some((h, p)) => (registry_name(h), p.trim_matches('/').to_string()),
        None => (registry_name(s), String::new()),
    }
}

fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
}

/// A repository path: OCI path components (lowercase letters and digits,
/// separated inside by `.`, `_` or `-`), or nothing.
fn valid_path(path: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let component = |seg: &str| {
        seg.chars().next().is_some_and(alnum)
            && seg.chars().last().is_some_and(alnum)
            && seg.chars().all(|c| alnum(c) || "._-".contains(c))
    };
    path.is_empty() || (path.len() <= 255 && path.split('/').all(component))
}

impl MirrorMap {
    /// No mirrors.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no rule is set.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn push(&mut self, rule: Rule) -> Result<(), MirrorError> {
        if self.rules.len() >= MAX_RULES {
            return Err(err(&rule.from, format!("more than {MAX_RULES} rules")));
        }
        if rule.places.len() > MAX_PLACES {
            return Err(err(
                &rule.from,
                format!("more than {MAX_PLACES} places in one rule"),
            ));
        }
        // A later source's rule for the same prefix replaces an earlier one.
        self.rules
            .retain(|r| !(r.registry == rule.registry && r.path == rule.path));
        self.rules.push(rule);
        self.rules.sort_by(|a, b| {
            let len = |r: &Rule| {
                if r.registry == "*" {
                    0
                } else {
                    r.registry.len() + r.path.len() + 1
                }
            };
            len(b).cmp(&len(a))
        });
        Ok(())
    }

    /// Adds sigil's own rule `PREFIX=PLACE[,PLACE...]`.
    pub fn add_rule(&mut self, spec: &str) -> Result<(), MirrorError> {
        let form = "expected PREFIX=PLACE[,PLACE...], e.g. \
                    docker.io=harbor.example.com/dockerhub-proxy,docker.io (list the upstream \
                    itself to allow reading it)";
        let (prefix, places) = spec.split_once('=').ok_or_else(|| err(spec, form))?;
        let (registry, path) = split_location(prefix);
        if !valid_host(&registry) || !valid_path(&path) {
            return Err(err(
                spec,
                format!("`{prefix}` is not a registry or repository prefix; {form}"),
            ));
        }
        let mut specs = Vec::new();
        for place in places.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (insecure, rest) = match place.strip_prefix("http://") {
                Some(r) => (true, r),
                None => (false, place.strip_prefix("https://").unwrap_or(place)),
            };
            let (host, place_path) = split_location(rest);
            if !valid_host(&host) || !valid_path(&place_path) {
                return Err(err(
                    spec,
                    format!("`{place}` is not a registry host[/path]; {form}"),
                ));
            }
            let upstream = host == registry && place_path == path;
            specs.push(PlaceSpec {
                host: normalize_host(&host),
                path: place_path,
                insecure,
                digest_only: false,
                tag_only: false,
                upstream,
            });
        }
        if specs.is_empty() {
            return Err(err(spec, form));
        }
        self.push(Rule {
            registry,
            path,
            places: specs,
            blocked: false,
            from: format!("rule `{spec}`"),
        })
    }

    /// Adds containerd's `hosts.toml` for `namespace` (its directory under
    /// `certs.d`: `docker.io`, `registry.example.com:5000`, `_default`).
    pub fn add_containerd_hosts(
        &mut self,
        namespace: &str,
        text: &str,
        from: &str,
    ) -> Result<(), MirrorError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e| err(from, format!("not TOML: {e}")))?;
        let registry = if namespace == "_default" {
            "*".to_string()
        } else {
            registry_name(namespace)
        };
        if registry != "*" && !valid_host(&registry) {
            return Err(err(from, format!("`{namespace}` is not a registry host")));
        }
        let mut places = Vec::new();
        if let Some(hosts) = table.get("host") {
            let hosts = hosts
                .as_table()
                .ok_or_else(|| err(from, "`host` must be a table of [host.\"URL\"] tables"))?;
            for (url, settings) in hosts {
                places.push(containerd_place(url, settings, &registry, from)?);
            }
        }
        let server = match table.get("server") {
            Some(v) => v
                .as_str()
                .ok_or_else(|| err(from, "`server` must be a URL string"))?
                .to_string(),
            None if registry == "docker.io" => "https://registry-1.docker.io".into(),
            None if registry == "*" => String::new(),
            None => format!("https://{registry}"),
        };
        if server.is_empty() {
            // `_default` without a server: each registry is its own upstream.
            places.push(PlaceSpec {
                host: "*".into(),
                path: String::new(),
                insecure: false,
                digest_only: false,
                tag_only: false,
                upstream: true,
            });
        } else {
            places.push(containerd_place(
                &server,
                &toml::Value::Table(toml::Table::new()),
                &registry,
                from,
            )?);
        }
        self.push(Rule {
            registry,
            path: String::new(),
            places,
            blocked: false,
            from: from.to_string(),
        })
    }

    /// Adds every `<dir>/<namespace>/hosts.toml` of a containerd `certs.d` directory.
    pub fn add_containerd_dir(&mut self, dir: &Path) -> Result<(), MirrorError> {
        let name = dir.display().to_string();
        let entries = std::fs::read_dir(dir)
            .map_err(|e| err(&name, format!("cannot read the directory: {e}")))?;
        let mut namespaces: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().join("hosts.toml").is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        namespaces.sort();
        if namespaces.len() > MAX_RULES {
            return Err(err(&name, format!("more than {MAX_RULES} namespaces")));
        }
        for ns in namespaces {
            let path = dir.join(&ns).join("hosts.toml");
            let text = read_bounded(&path)?;
            self.add_containerd_hosts(&ns, &text, &path.display().to_string())?;
        }
        Ok(())
    }

    /// Adds CRI-O's `registries.conf` (v2, `[[registry]]` tables).
    pub fn add_crio(&mut self, text: &str, from: &str) -> Result<(), MirrorError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e| err(from, format!("not TOML: {e}")))?;
        let Some(registries) = table.get("registry") else {
            return Ok(());
        };
        let registries = registries
            .as_array()
            .ok_or_else(|| err(from, "`registry` must be an array of [[registry]] tables"))?;
        for r in registries {
            let text = |k: &str| r.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let flag =
                |v: &toml::Value, k: &str| v.get(k).and_then(|x| x.as_bool()).unwrap_or(false);
            let location = text("location").unwrap_or_default();
            let prefix = text("prefix").unwrap_or_else(|| location.clone());
            if prefix.is_empty() {
                return Err(err(from, "a [[registry]] without prefix or location"));
            }
            if prefix.starts_with("*.") {
                // Wildcard subdomain prefixes: not a repository sigil can map.
                continue;
            }
            let (registry, path) = split_location(&prefix);
            let by_digest_only = flag(r, "mirror-by-digest-only");
            let mut places = Vec::new();
            for m in r
                .get("mirror")
                .and_then(|m| m.as_array())
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                let loc = m.get("location").and_then(|v| v.as_str()).ok_or_else(|| {
                    err(
                        from,
                        format!("a [[registry.mirror]] of `{prefix}` without location"),
                    )
                })?;
                let (host, mpath) = split_location(loc);
                let mode = m
                    .get("pull-from-mirror")
                    .and_then(|v| v.as_str())
                    .unwrap_or("all");
                places.push(PlaceSpec {
                    host: normalize_host(&host),
                    path: mpath,
                    insecure: flag(m, "insecure"),
                    digest_only: by_digest_only || mode == "digest-only",
                    tag_only: mode == "tag-only",
                    upstream: false,
                });
            }
            let (lhost, lpath) = if location.is_empty() {
                (registry.clone(), path.clone())
            } else {
                split_location(&location)
            };
            places.push(PlaceSpec {
                host: normalize_host(&lhost),
                path: lpath.clone(),
                insecure: flag(r, "insecure"),
                digest_only: false,
                tag_only: false,
                upstream: registry_name(&lhost) == registry && lpath == path,
            });
            for p in &places {
                if !valid_host(&p.host) || !valid_path(&p.path) {
                    return Err(err(
                        from,
                        format!("`{}/{}` is not a registry host[/path]", p.host, p.path),
                    ));
                }
            }
            self.push(Rule {
                registry,
                path,
                places,
                blocked: flag(r, "blocked"),
                from: from.to_string(),
            })?;
        }
        Ok(())
    }

    /// Reads a mirror setting from `path`: a containerd `certs.d`
    /// directory, or CRI-O's `registries.conf`.
    pub fn add_path(&mut self, path: &Path) -> Result<(), MirrorError> {
        if path.is_dir() {
            return self.add_containerd_dir(path);
        }
        let text = read_bounded(path)?;
        self.add_crio(&text, &path.display().to_string())
    }

    fn rule_for(&self, full: &str, registry: &str) -> Option<(&Rule, String)> {
        self.rules.iter().find_map(|r| {
            if r.registry == "*" {
                return Some((
                    r,
                    full.split_once('/')
                        .map(|(_, rest)| rest.to_string())
                        .unwrap_or_default(),
                ));
            }
            let prefix = if r.path.is_empty() {
                r.registry.clone()
            } else {
                format!("{}/{}", r.registry, r.path)
            };
            if r.registry != registry {
                return None;
            }
            full.strip_prefix(&prefix)
                .and_then(|rest| rest.strip_prefix('/'))
                .map(|rest| (r, rest.to_string()))
        })
    }

    /// The places to read `repo` at, in order, when a rule covers it;
    /// `None` when none does (read it where it is). An empty list: the
    /// setting blocks it.
    pub fn places(&self, repo: &Repository) -> Option<Vec<Place>> {
        let registry = registry_name(&repo.registry);
        let full = format!("{registry}/{}", repo.name);
        let (rule, rest) = self.rule_for(&full, &registry)?;
        if rule.blocked {
            return Some(Vec::new());
        }
        let places = rule
            .places
            .iter()
            .map(|p| {
                if p.upstream {
                    return Place {
                        repository: repo.clone(),
                        upstream: true,
                        digest_only: p.digest_only,
                        tag_only: p.tag_only,
                    };
                }
                let name = if p.path.is_empty() {
                    rest.clone()
                } else {
                    format!("{}/{rest}", p.path)
                };
                Place {
                    repository: Repository {
                        registry: registry_name(&p.host),
                        host: p.host.clone(),
                        name,
                    },
                    upstream: false,
                    digest_only: p.digest_only,
                    tag_only: p.tag_only,
                }
            })
            .collect();
        Some(places)
    }

    /// The mirror hosts (never the upstreams), for the registries sigil may contact.
    pub fn mirror_hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self
            .rules
            .iter()
            .flat_map(|r| &r.places)
            .filter(|p| !p.upstream && p.host != "*")
            .map(|p| p.host.clone())
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    /// The mirrors read over plain HTTP.
    pub fn insecure_hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self
            .rules
            .iter()
            .flat_map(|r| &r.places)
            .filter(|p| p.insecure && p.host != "*")
            .map(|p| p.host.clone())
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }
}

fn read_bounded(path: &Path) -> Result<String, MirrorError> {
    use std::io::Read as _;
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| err(&name, format!("cannot open: {e}")))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| err(&name, format!("cannot read as UTF-8: {e}")))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(err(&name, format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    Ok(text)
}

/// A `[host."URL"]` (or `server`) of containerd's hosts.toml as a place.
fn containerd_place(
    url: &str,
    settings: &toml::Value,
    registry: &str,
    from: &str,
) -> Result<PlaceSpec, MirrorError> {
    let parsed =
        url::Url::parse(url).map_err(|e| err(from, format!("host `{url}` is not a URL: {e}")))?;
    let insecure = match parsed.scheme() {
        "http" => true,
        "https" => false,
        s => {
            return Err(err(
                from,
                format!("host `{url}`: scheme {s} (http or https)"),
            ));
        }
    };
    let host = match (parsed.host_str(), parsed.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => return Err(err(from, format!("host `{url}` has no host"))),
    };
    let override_path = settings
        .get("override_path")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let path = parsed.path().trim_matches('/');
    let path = match (override_path, path) {
        (_, "") | (_, "v2") => String::new(),
        (true, p) => p
            .strip_prefix("v2/")
            .ok_or_else(|| {
                err(
                    from,
                    format!("host `{url}`: an override_path must start with /v2"),
                )
            })?
            .to_string(),
        (false, p) => {
            return Err(err(
                from,
                format!(
                    "host `{url}` has the path /{p} without override_path; sigil reads registries at /v2 (set override_path = true and the full /v2/... path)"
                ),
            ));
        }
    };
    let capabilities: Vec<&str> = match settings.get("capabilities") {
        Some(v) => v
            .as_array()
            .ok_or_else(|| err(from, format!("host `{url}`: capabilities must be a list")))?
            .iter()
            .filter_map(|c| c.as_str())
            .collect(),
        None => vec!["pull", "resolve"],
    };
    if !capabilities.contains(&"pull") {
        return Err(err(
            from,
            format!("host `{url}` cannot pull (capabilities {capabilities:?})"),
        ));
    }
    let upstream = registry != "*" && registry_name(&host) == registry && path.is_empty()
        || (registry == "docker.io" && normalize_host(&host) == "index.docker.io");
    Ok(PlaceSpec {
        host: normalize_host(&host),
        path,
        insecure,
        digest_only: !capabilities.contains(&"resolve"),
        tag_only: false,
        upstream,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn repo(s: &str) -> Repository {
        Repository::parse(s).unwrap()
    }

    fn names(places: &[Place]) -> Vec<String> {
        places
            .iter()
            .map(|p| {
                format!(
                    "{}{}",
                    p.repository.host,
                    if p.upstream { " (upstream)" } else { "" }
                ) + "/"
                    + &p.repository.name
            })
            .collect()
    }

    #[test]
    fn harbors_proxy_cache_form_maps_the_upstream_name_under_its_project() {
        let mut m = MirrorMap::new();
        m.add_rule("docker.io=harbor.example.com/dockerhub-proxy")
            .unwrap();
        let places = m.places(&repo("docker.io/library/nginx")).unwrap();
        assert_eq!(
            names(&places),
            ["harbor.example.com/dockerhub-proxy/library/nginx"]
        );
        assert_eq!(
            places[0].repository.to_string(),
            "harbor.example.com/dockerhub-proxy/library/nginx"
        );
        // `nginx` is docker.io/library/nginx.
        assert_eq!(m.places(&repo("nginx")).unwrap(), places);
        // Other registries are read where they are.
        assert_eq!(m.places(&repo("ghcr.io/a/b")), None);
        // Upstream allowed only when listed.
        m.add_rule("docker.io=harbor.example.com/dockerhub-proxy,docker.io")
            .unwrap();
        let places = m.places(&repo("docker.io/library/nginx")).unwrap();
        assert_eq!(
            names(&places),
            [
                "harbor.example.com/dockerhub-proxy/library/nginx",
                "index.docker.io (upstream)/library/nginx"
            ]
        );
        assert_eq!(m.mirror_hosts(), ["harbor.example.com"]);
    }

    #[test]
    fn the_longest_prefix_wins_and_a_repository_prefix_maps_only_below_it() {
        let mut m = MirrorMap::new();
        m.add_rule("docker.io=mirror.example").unwrap();
        m.add_rule("docker.io/team=http://team-cache.example:5000/cache")
            .unwrap();
        assert_eq!(
            names(&m.places(&repo("docker.io/team/app")).unwrap()),
            ["team-cache.example:5000/cache/app"]
        );
        assert_eq!(
            names(&m.places(&repo("docker.io/teamx/app")).unwrap()),
            ["mirror.example/teamx/app"]
        );
        assert_eq!(m.insecure_hosts(), ["team-cache.example:5000"]);
        for bad in [
            "docker.io",
            "=x",
            "docker.io=",
            "a b=c",
            "docker.io=host/UPPER",
            "docker.io=h/../x",
        ] {
            assert!(MirrorMap::new().add_rule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn containerd_hosts_toml_is_read_in_order_with_its_server_last() {
        let mut m = MirrorMap::new();
        m.add_containerd_hosts(
            "docker.io",
            r#"
server = "https://registry-1.docker.io"

[host."http://10.0.0.9:5000"]
  capabilities = ["pull", "resolve"]

[host."https://harbor.example.com/v2/dockerhub-proxy"]
  capabilities = ["pull"]
  override_path = true
"#,
            "certs.d/docker.io/hosts.toml",
        )
        .unwrap();
        let places = m.places(&repo("docker.io/library/busybox")).unwrap();
        assert_eq!(
            names(&places),
            [
                "10.0.0.9:5000/library/busybox",
                "harbor.example.com/dockerhub-proxy/library/busybox",
                "index.docker.io (upstream)/library/busybox"
            ]
        );
        assert!(places[1].digest_only && !places[0].digest_only);
        assert!(!places[1].serves(false) && places[1].serves(true));
        assert_eq!(m.insecure_hosts(), ["10.0.0.9:5000"]);
        // A server that is itself a mirror: the upstream is never read.
        let mut m = MirrorMap::new();
        m.add_containerd_hosts("quay.io", "server = \"https://quay-mirror.example\"\n", "f")
            .unwrap();
        assert_eq!(
            names(&m.places(&repo("quay.io/a/b")).unwrap()),
            ["quay-mirror.example/a/b"]
        );
        // No server: the namespace's own registry.
        let mut m = MirrorMap::new();
        m.add_containerd_hosts(
            "registry.example.com:5000",
            "[host.\"https://m.example\"]\n",
            "f",
        )
        .unwrap();
        assert_eq!(
            names(&m.places(&repo("registry.example.com:5000/a")).unwrap()),
            ["m.example/a", "registry.example.com:5000 (upstream)/a"]
        );
        let bad = MirrorMap::new().add_containerd_hosts(
            "docker.io",
            "[host.\"https://m.example/some/path\"]\n",
            "f",
        );
        assert!(bad.unwrap_err().reason.contains("override_path"));
        assert!(
            MirrorMap::new()
                .add_containerd_hosts("docker.io", "server = [", "f")
                .is_err()
        );
    }

    #[test]
    fn containerds_default_namespace_mirrors_every_other_registry() {
        let mut m = MirrorMap::new();
        m.add_containerd_hosts(
            "_default",
            "[host.\"https://cache.example/v2/all\"]\noverride_path = true\n",
            "f",
        )
        .unwrap();
        m.add_containerd_hosts("docker.io", "[host.\"https://dh.example\"]\n", "f")
            .unwrap();
        assert_eq!(
            names(&m.places(&repo("ghcr.io/o/r")).unwrap()),
            ["cache.example/all/o/r", "ghcr.io (upstream)/o/r"]
        );
        assert_eq!(
            names(&m.places(&repo("docker.io/library/a")).unwrap())[0],
            "dh.example/library/a"
        );
    }

    #[test]
    fn crio_registries_conf_mirrors_then_location_and_blocked_registries() {
        let mut m = MirrorMap::new();
        m.add_crio(
            r#"
unqualified-search-registries = ["docker.io"]

[[registry]]
prefix = "docker.io"
location = "registry-1.docker.io"

[[registry.mirror]]
location = "mirror.example.com/dockerhub"
pull-from-mirror = "digest-only"

[[registry.mirror]]
location = "10.0.0.7:5000"
insecure = true

[[registry]]
prefix = "quay.io/team"
location = "quay-cache.example/team"

[[registry]]
location = "evil.example"
blocked = true
"#,
            "registries.conf",
        )
        .unwrap();
        let places = m.places(&repo("docker.io/library/nginx")).unwrap();
        assert_eq!(
            names(&places),
            [
                "mirror.example.com/dockerhub/library/nginx",
                "10.0.0.7:5000/library/nginx",
                "index.docker.io (upstream)/library/nginx"
            ]
        );
        assert!(places[0].digest_only);
        assert_eq!(
            names(&m.places(&repo("quay.io/team/app")).unwrap()),
            ["quay-cache.example/team/app"]
        );
        assert_eq!(m.places(&repo("evil.example/x")), Some(Vec::new()));
        assert_eq!(m.insecure_hosts(), ["10.0.0.7:5000"]);
    }

    #[test]
    fn look_alike_prefixes_do_not_match() {
        let mut m = MirrorMap::new();
        m.add_rule("registry.example.com/team=mirror.example/t")
            .unwrap();
        assert_eq!(m.places(&repo("registry.example.com/teammate/x")), None);
        assert_eq!(
            m.places(&repo("registry.example.com.attacker.io/team/x")),
            None
        );
    }
}

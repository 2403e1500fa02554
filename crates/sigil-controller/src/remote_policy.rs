//! `policy.remote`: policy modules fetched from a URL and pinned by their
//! SHA-256. The policy reconciler inlines them like ConfigMap-held modules
//! (the snapshot carries the module, so the webhook never fetches).
//!
//! The pin makes a verified copy valid forever, so a module is fetched once
//! and then served from memory; after a restart the copy in the published
//! snapshot is recognised by its hash. A URL that cannot be reached therefore
//! only matters for a module never verified (a new policy or a new
//! `sha256sum`): the policy is then `Ready=False` with the reason, and the
//! webhook keeps enforcing the policy's last accepted generation.
//!
//! Fetches are bounded ([`TIMEOUT`], [`MAX_REDIRECTS`],
//! [`sigil_compile::compile::MAX_REMOTE_POLICY_BYTES`]) and reach only the
//! addresses the controller's egress policy allows ([`crate::egress`]: no
//! link-local or cloud metadata address, also not through a redirect or a DNS
//! name; for a namespace's ImagePolicy no loopback address either).

use std::collections::BTreeMap;
use std::time::Duration;

use sigil_api::cip::{ClusterImagePolicySpec, Policy, RemotePolicy};
use sigil_api::snapshot::SnapshotPolicy;
use sigil_compile::compile::{MAX_REMOTE_POLICY_BYTES, check_remote_policy};
use tokio::sync::{Mutex, OnceCell};

use crate::egress::{Author, Guard};

/// Longest a fetch may take, connection and body included.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed at most.
pub const MAX_REDIRECTS: usize = 3;
/// Verified modules kept in memory at most (each at most
/// `MAX_REMOTE_POLICY_BYTES`); the oldest goes first.
const MAX_CACHED: usize = 64;

/// The verified modules, by SHA-256, and the clients that fetch them: one
/// for what cluster admins name, one for what namespaces' ImagePolicies
/// name, each with its own address policy.
pub struct RemotePolicies {
    timeout: Duration,
    admin: Fetcher,
    tenant: Fetcher,
    verified: Mutex<Verified>,
}

/// One address policy and the client built on it.
struct Fetcher {
    guard: Guard,
    client: OnceCell<reqwest::Client>,
}

impl Fetcher {
    fn new(guard: Guard) -> Self {
        Self {
            guard,
            client: OnceCell::new(),
        }
    }
}

/// Verified modules by lower-case hex SHA-256, each with the order it came
/// in (the oldest leaves first when the cache is full).
#[derive(Default)]
struct Verified {
    modules: BTreeMap<String, (String, u64)>,
    next: u64,
}

impl Default for RemotePolicies {
    /// [`TIMEOUT`], with the controller's default address policies.
    fn default() -> Self {
        Self::with_timeout(TIMEOUT)
    }
}

impl RemotePolicies {
    /// Fetches bounded by `timeout`, reaching the addresses `admin` allows
    /// for ClusterImagePolicies and those `tenant` allows for ImagePolicies.
    pub fn new(timeout: Duration, admin: Guard, tenant: Guard) -> Self {
        Self {
            timeout,
            admin: Fetcher::new(admin),
            tenant: Fetcher::new(tenant),
            verified: Mutex::default(),
        }
    }

    /// Fetches bounded by `timeout` instead of [`TIMEOUT`], with the
    /// default address policies (no flags).
    pub fn with_timeout(timeout: Duration) -> Self {
        let args = crate::config::Args::default();
        Self::new(
            timeout,
            Guard::new(crate::egress::address_policy(&args, Author::Admin)),
            Guard::new(crate::egress::address_policy(&args, Author::Tenant)),
        )
    }

    /// Remembers the modules of a published policy: a copy verified before
    /// the controller restarted is recognised by its hash.
    pub async fn remember(&self, published: Option<&SnapshotPolicy>) {
        let Some(published) = published else {
            return;
        };
        for module in modules(&published.spec) {
            if module.len() <= MAX_REMOTE_POLICY_BYTES {
                let sum = hex::encode(sigil_verifier::crypto::sha256(module.as_bytes()));
                self.keep(sum, module.to_owned()).await;
            }
        }
    }

    /// Replaces `p.remote` by the module it pins, or adds the reason it
    /// cannot to `problems` (naming `{path}.remote`); `author` wrote the policy.
    pub async fn inline(
        &self,
        path: &str,
        p: &mut Policy,
        author: Author,
        problems: &mut Vec<String>,
    ) {
        let Some(remote) = p.remote.clone() else {
            return;
        };
        if p.data.is_some() || p.config_map_ref.is_some() {
            // More than one source: the compiler reports it.
            return;
        }
        match self.module(&remote, author).await {
            Ok(module) => {
                p.data = Some(module);
                p.remote = None;
            }
            Err(reason) => problems.push(format!(
                "{path}.remote: cannot use {}: {reason}",
                remote.url
            )),
        }
    }

    /// The module `remote` pins: a copy verified before, or fetched now
    /// within the address policy of `author`.
    pub async fn module(&self, remote: &RemotePolicy, author: Author) -> Result<String, String> {
        let sum = remote.sha256sum.trim().to_ascii_lowercase();
        if let Some((module, _)) = self.verified.lock().await.modules.get(&sum) {
            return Ok(module.clone());
        }
        let fetcher = match author {
            Author::Admin => &self.admin,
            Author::Tenant => &self.tenant,
        };
        let body = self.fetch(fetcher, remote.url.trim()).await?;
        let module = check_remote_policy(remote, &body)?;
        self.keep(sum, module.clone()).await;
        Ok(module)
    }

    async fn keep(&self, sum: String, module: String) {
        let mut verified = self.verified.lock().await;
        verified.next += 1;
        let order = verified.next;
        verified.modules.insert(sum, (module, order));
        while verified.modules.len() > MAX_CACHED {
            let oldest = verified
                .modules
                .iter()
                .min_by_key(|(_, (_, n))| *n)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => verified.modules.remove(&k),
                None => break,
            };
        }
    }

    async fn client<'f>(&self, fetcher: &'f Fetcher) -> Result<&'f reqwest::Client, String> {
        fetcher
            .client
            .get_or_try_init(|| async {
                // reqwest is built without a crypto provider of its own: the
                // binary installs sigil's at start, tests may not have.
                sigil_registry::tls::default_provider();
                let guard = fetcher.guard.clone();
                reqwest::Client::builder()
                    .connect_timeout(self.timeout)
                    .timeout(self.timeout)
                    .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                        if attempt.previous().len() >= MAX_REDIRECTS {
                            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
                        } else if let Some(why) = refused_host(&guard, attempt.url()) {
                            attempt.error(why)
                        } else {
                            attempt.follow()
                        }
                    }))
                    .dns_resolver(fetcher.guard.resolver())
                    .build()
                    .map_err(|e| format!("cannot build the HTTP client: {e}"))
            })
            .await
    }

    /// GETs `url`, at most [`MAX_REMOTE_POLICY_BYTES`] within the timeout.
    async fn fetch(&self, fetcher: &Fetcher, url: &str) -> Result<Vec<u8>, String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "https" | "http") {
            return Err(format!("scheme `{}` is not http(s)", parsed.scheme()));
        }
        if let Some(why) = refused_host(&fetcher.guard, &parsed) {
            return Err(why);
        }
        let client = self.client(fetcher).await?;
        let timeout = self.timeout;
        let fetch = async {
            let mut response = client.get(parsed).send().await.map_err(describe)?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("the server answered HTTP {status}"));
            }
            if response
                .content_length()
                .is_some_and(|n| n > MAX_REMOTE_POLICY_BYTES as u64)
            {
                return Err(too_large());
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(describe)? {
                body.extend_from_slice(&chunk);
                if body.len() > MAX_REMOTE_POLICY_BYTES {
                    return Err(too_large());
                }
            }
            Ok(body)
        };
        // reqwest's timeout covers the body too; this one also bounds a
        // server that trickles bytes between reads.
        tokio::time::timeout(timeout, fetch)
            .await
            .unwrap_or_else(|_| Err(timed_out(timeout)))
    }
}

fn too_large() -> String {
    format!(
        "the content is larger than the {MAX_REMOTE_POLICY_BYTES} bytes a policy may have; \
         check the URL"
    )
}

fn timed_out(timeout: Duration) -> String {
    format!(
        "no complete answer within {} s; check that the URL is reachable from the controller",
        timeout.as_secs_f32()
    )
}

fn describe(e: reqwest::Error) -> String {
    if e.is_timeout() {
        return "no complete answer in time; check that the URL is reachable from the controller"
            .into();
    }
    // The chain says what happened (connection refused, DNS, TLS, redirect).
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether any policy of `spec` is remote.
pub fn any(spec: &ClusterImagePolicySpec) -> bool {
    let attestations = spec
        .authorities
        .iter()
        .flat_map(|a| a.attestations.iter().filter_map(|att| att.policy.as_ref()));
    spec.policy
        .iter()
        .chain(attestations)
        .any(|p| p.remote.is_some())
}

/// Every inline module of a spec.
fn modules(spec: &ClusterImagePolicySpec) -> impl Iterator<Item = &str> {
    let cip = spec.policy.iter();
    let attestations = spec
        .authorities
        .iter()
        .flat_map(|a| a.attestations.iter().filter_map(|att| att.policy.as_ref()));
    cip.chain(attestations).filter_map(|p| p.data.as_deref())
}

/// Why the controller will not connect to `url`'s host, if it will not: a
/// literal address `guard` refuses (names are checked when they resolve, by
/// its resolver).
fn refused_host(guard: &Guard, url: &reqwest::Url) -> Option<String> {
    let ip: std::net::IpAddr = url
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()?;
    guard.refuse_ip(ip)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::get;
    use serde_json::{Value, json};
    use tokio::net::TcpListener;

    use super::*;
    use crate::fixtures::*;
    use crate::policy::reconcile;

    const REGO: &str = "package sigstore\nisCompliant := true\n";

    fn sum(text: &str) -> String {
        hex::encode(sigil_verifier::crypto::sha256(text.as_bytes()))
    }

    /// A policy server on 127.0.0.1: `/ok.rego` serves [`REGO`] (counting
    /// requests), `/big` more than a policy may have, `/slow` answers after
    /// 5 s, `/metadata` redirects to the cloud metadata address.
    struct Server {
        base: String,
        hits: Arc<AtomicUsize>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Server {
        async fn start() -> Self {
            let hits = Arc::new(AtomicUsize::new(0));
            let counter = hits.clone();
            let app = Router::new()
                .route(
                    "/ok.rego",
                    get(move || {
                        counter.fetch_add(1, Ordering::SeqCst);
                        async { REGO }
                    }),
                )
                .route(
                    "/big",
                    get(|| async { "#".repeat(MAX_REMOTE_POLICY_BYTES + 1) }),
                )
                .route(
                    "/slow",
                    get(|| async {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        REGO
                    }),
                )
                .route(
                    "/metadata",
                    get(|| async {
                        (
                            StatusCode::FOUND,
                            [(header::LOCATION, "http://169.254.169.254/latest/meta-data/")],
                        )
                            .into_response()
                    }),
                );
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let task = tokio::spawn(async move {
                axum::serve(listener, app).await.unwrap();
            });
            Self { base, hits, task }
        }

        fn url(&self, path: &str) -> String {
            format!("{}{path}", self.base)
        }

        fn stop(&self) {
            self.task.abort();
        }
    }

    fn remote(url: &str, sha256sum: &str) -> RemotePolicy {
        RemotePolicy {
            url: url.into(),
            sha256sum: sha256sum.into(),
        }
    }

    /// A URL on 127.0.0.1 where nothing listens.
    async fn closed_port_url() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        format!("http://{addr}/policy.rego")
    }

    #[tokio::test]
    async fn a_module_whose_hash_matches_is_fetched_once_and_then_served_from_memory() {
        let server = Server::start().await;
        let policies = RemotePolicies::default();
        let r = remote(&server.url("/ok.rego"), &sum(REGO).to_uppercase());

        assert_eq!(policies.module(&r, Author::Admin).await.unwrap(), REGO);
        server.stop();
        assert_eq!(policies.module(&r, Author::Admin).await.unwrap(), REGO);
        assert_eq!(server.hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn content_with_another_sha256_is_refused_and_not_remembered() {
        let server = Server::start().await;
        let policies = RemotePolicies::default();
        let wrong = "0".repeat(64);
        let err = policies
            .module(&remote(&server.url("/ok.rego"), &wrong), Author::Admin)
            .await
            .unwrap_err();
        assert!(
            err.contains(&format!(
                "sha256 is {}, not the sha256sum {wrong}",
                sum(REGO)
            )),
            "{err}"
        );
        policies
            .module(&remote(&server.url("/ok.rego"), &wrong), Author::Admin)
            .await
            .unwrap_err();
        assert_eq!(server.hits.load(Ordering::SeqCst), 2, "fetched again");
    }

    #[tokio::test]
    async fn oversized_content_is_refused() {
        let server = Server::start().await;
        let err = RemotePolicies::default()
            .module(&remote(&server.url("/big"), &sum(REGO)), Author::Admin)
            .await
            .unwrap_err();
        assert!(err.contains("larger than the 262144 bytes"), "{err}");
    }

    #[tokio::test]
    async fn a_slow_server_is_given_up_within_the_timeout() {
        let server = Server::start().await;
        let started = std::time::Instant::now();
        let err = RemotePolicies::with_timeout(Duration::from_millis(300))
            .module(&remote(&server.url("/slow"), &sum(REGO)), Author::Admin)
            .await
            .unwrap_err();
        assert!(err.contains("no complete answer"), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn an_unreachable_url_says_why() {
        let err = RemotePolicies::default()
            .module(&remote(&closed_port_url().await, &sum(REGO)), Author::Admin)
            .await
            .unwrap_err();
        assert!(err.to_ascii_lowercase().contains("connect"), "{err}");
    }

    #[tokio::test]
    async fn link_local_addresses_are_refused_also_through_a_redirect() {
        let policies = RemotePolicies::default();
        let err = policies
            .module(
                &remote("http://169.254.169.254/latest/meta-data/", &sum(REGO)),
                Author::Admin,
            )
            .await
            .unwrap_err();
        assert!(
            err.contains("169.254.169.254 is a link-local address"),
            "{err}"
        );
        let err = policies
            .module(&remote("http://[fe80::1]/p", &sum(REGO)), Author::Admin)
            .await
            .unwrap_err();
        assert!(err.contains("link-local"), "{err}");
        let server = Server::start().await;
        let err = policies
            .module(&remote(&server.url("/metadata"), &sum(REGO)), Author::Admin)
            .await
            .unwrap_err();
        assert!(
            err.contains("169.254.169.254 is a link-local address"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_published_copy_is_recognised_by_its_hash() {
        let policies = RemotePolicies::default();
        let spec: ClusterImagePolicySpec = serde_json::from_value(json!({
            "images": [{"glob": "**"}],
            "authorities": [{"static": {"action": "pass"}}],
            "policy": {"type": "rego", "data": REGO},
        }))
        .unwrap();
        policies
            .remember(Some(&SnapshotPolicy {
                name: "p".into(),
                spec,
                ..SnapshotPolicy::default()
            }))
            .await;
        let r = remote(&closed_port_url().await, &sum(REGO));
        assert_eq!(policies.module(&r, Author::Admin).await.unwrap(), REGO);
    }

    #[tokio::test]
    async fn an_image_policys_remote_module_is_never_fetched_from_loopback() {
        let server = Server::start().await;
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        // The cluster names the registry the ImagePolicies select.
        api.put(
            &cip_path("acme"),
            cip(
                "acme",
                1,
                json!({"images": [{"glob": "ghcr.io/acme/**"}],
                       "authorities": [{"static": {"action": "pass"}}]}),
            ),
        );
        reconcile_path(&api, &ctx, "acme").await;
        // The controller's own loopback, by a literal address and by a name.
        let by_name = server.url("/ok.rego").replace("127.0.0.1", "localhost");
        for (name, url) in [("literal", server.url("/ok.rego")), ("name", by_name)] {
            let path = image_policy_path("team-a", name);
            api.put(
                &path,
                image_policy("team-a", name, 1, remote_spec(&url, &sum(REGO))),
            );
            reconcile(object::<sigil_api::ImagePolicy>(&api, &path), ctx.clone())
                .await
                .unwrap();
            let obj = api.get(&path).unwrap();
            let cond = obj["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Ready")
                .unwrap()
                .clone();
            assert_eq!(cond["reason"], "UnresolvedReference", "{cond}");
            let message = cond["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("spec.policy.remote: cannot use {url}: "))
                    && message.contains("loopback"),
                "{message}"
            );
        }
        assert_eq!(server.hits.load(Ordering::SeqCst), 0, "nothing fetched");
        // The same module named by a cluster admin is fetched (sigil's own
        // loopback is the admin's to use).
        assert_eq!(
            RemotePolicies::default()
                .module(&remote(&server.url("/ok.rego"), &sum(REGO)), Author::Admin)
                .await
                .unwrap(),
            REGO
        );
        assert_eq!(server.hits.load(Ordering::SeqCst), 1);
    }

    fn remote_spec(url: &str, sha256sum: &str) -> Value {
        json!({
            "images": [{"glob": "ghcr.io/acme/**"}],
            "authorities": [{"static": {"action": "pass"}}],
            "policy": {"type": "rego", "remote": {"url": url, "sha256sum": sha256sum}},
        })
    }

    async fn reconcile_path(api: &FakeApi, ctx: &Arc<crate::Context>, name: &str) {
        reconcile(
            object::<sigil_api::ClusterImagePolicy>(api, &cip_path(name)),
            ctx.clone(),
        )
        .await
        .unwrap();
    }

    fn ready(api: &FakeApi, name: &str) -> Value {
        let obj = api.get(&cip_path(name)).unwrap();
        obj["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone()
    }

    #[tokio::test]
    async fn a_remote_policy_is_fetched_and_published_inline() {
        let server = Server::start().await;
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &cip_path("p"),
            cip("p", 1, remote_spec(&server.url("/ok.rego"), &sum(REGO))),
        );

        reconcile_path(&api, &ctx, "p").await;

        assert_eq!(ready(&api, "p")["status"], "True", "{}", ready(&api, "p"));
        let snapshot = stored_snapshot(&api).unwrap();
        let policy = snapshot.policies[0].spec.policy.as_ref().unwrap();
        assert_eq!(policy.data.as_deref(), Some(REGO));
        assert!(policy.remote.is_none());
        sigil_compile::snapshot::validate(&snapshot).unwrap();
    }

    #[tokio::test]
    async fn a_url_that_cannot_be_reached_makes_the_policy_not_ready_saying_so() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let url = closed_port_url().await;
        api.put(&cip_path("p"), cip("p", 1, remote_spec(&url, &sum(REGO))));

        reconcile_path(&api, &ctx, "p").await;

        let cond = ready(&api, "p");
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "UnresolvedReference");
        let message = cond["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("spec.policy.remote: cannot use {url}: ")),
            "{message}"
        );
        assert!(
            message.contains("the webhook does not enforce this policy"),
            "{message}"
        );
        assert!(stored_snapshot(&api).is_none_or(|s| s.policies.is_empty()));
    }

    #[tokio::test]
    async fn content_that_does_not_match_its_sha256sum_makes_the_policy_not_ready() {
        let server = Server::start().await;
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let wrong = "ab".repeat(32);
        api.put(
            &cip_path("p"),
            cip("p", 1, remote_spec(&server.url("/ok.rego"), &wrong)),
        );

        reconcile_path(&api, &ctx, "p").await;

        let cond = ready(&api, "p");
        assert_eq!(cond["status"], "False");
        let message = cond["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("not the sha256sum {wrong}")),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_url_down_after_a_success_keeps_the_verified_module_also_across_a_restart() {
        let server = Server::start().await;
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client.clone(), true);
        api.put(
            &cip_path("p"),
            cip("p", 1, remote_spec(&server.url("/ok.rego"), &sum(REGO))),
        );
        reconcile_path(&api, &ctx, "p").await;
        server.stop();

        // A new generation while the URL is down: the verified copy serves.
        let mut obj = api.get(&cip_path("p")).unwrap();
        obj["metadata"]["generation"] = 2.into();
        obj["spec"]["mode"] = "warn".into();
        api.put(&cip_path("p"), obj);
        reconcile_path(&api, &ctx, "p").await;
        assert_eq!(ready(&api, "p")["status"], "True", "{}", ready(&api, "p"));
        assert_eq!(stored_snapshot(&api).unwrap().policies[0].generation, 2);

        // A restarted controller has only the published snapshot.
        let (restarted, _rx2, _l2) = context(client, true);
        restarted.publisher.recover().await.unwrap();
        let mut obj = api.get(&cip_path("p")).unwrap();
        obj["metadata"]["generation"] = 3.into();
        obj["spec"]["mode"] = "enforce".into();
        api.put(&cip_path("p"), obj);
        reconcile_path(&api, &restarted, "p").await;
        assert_eq!(ready(&api, "p")["status"], "True", "{}", ready(&api, "p"));
        let snapshot = stored_snapshot(&api).unwrap();
        assert_eq!(snapshot.policies[0].generation, 3);
        assert_eq!(
            snapshot.policies[0]
                .spec
                .policy
                .as_ref()
                .unwrap()
                .data
                .as_deref(),
            Some(REGO)
        );
    }
}

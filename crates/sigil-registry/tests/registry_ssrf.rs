//! Requests an attacker chooses (SSRF): registry names that resolve to
//! forbidden addresses, literal forbidden addresses, redirects and token
//! realms pointing at them, DNS answers that change between lookups, and
//! registries outside the scope. No external network: names are answered by
//! a test resolver, and "forbidden" is made observable with a canary — a TCP
//! listener on 127.0.0.2 that a policy denies, counting every connection it
//! gets. The only acceptable count is zero.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Response, Uri};
use sigil_registry::egress::{AddressClass, AddressPolicy, Lookup, RegistryScope, parse_net};
use sigil_registry::{
    ClientConfig, Digest, Limits, RegistryClient, RegistryError, Repository, RequestObserver,
    RequestOutcome,
};
use tokio::net::TcpListener;

const DIGEST: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";

/// Names the test resolver answers: every address at once, or (rotating)
/// one address per lookup, in turn, as a rebinding DNS server does.
#[derive(Debug, Default)]
struct TestLookup {
    names: HashMap<String, Vec<IpAddr>>,
    rotate: bool,
    calls: AtomicUsize,
}

impl TestLookup {
    fn with(names: &[(&str, &[&str])]) -> Arc<Self> {
        Arc::new(Self {
            names: names
                .iter()
                .map(|(n, a)| {
                    (
                        (*n).to_string(),
                        a.iter().map(|s| s.parse().unwrap()).collect(),
                    )
                })
                .collect(),
            ..Self::default()
        })
    }

    fn rotating(names: &[(&str, &[&str])]) -> Arc<Self> {
        let mut l = Arc::try_unwrap(Self::with(names)).unwrap();
        l.rotate = true;
        Arc::new(l)
    }
}

impl Lookup for TestLookup {
    fn lookup(&self, host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = match self.names.get(host) {
            Some(list) if self.rotate => Ok(vec![list[n % list.len()]]),
            Some(list) => Ok(list.clone()),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such test name")),
        };
        Box::pin(async move { answer })
    }
}

/// A TCP listener that counts connections and never answers.
struct Canary {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl Canary {
    fn count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn canary_on(ip: &str, port: u16) -> Option<Canary> {
    let listener = TcpListener::bind((ip, port)).await.ok()?;
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = connections.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            // Held open and silent, like a metadata service that is slow to answer.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(30)).await;
                drop(socket);
            });
        }
    });
    Some(Canary { port, connections })
}

type Handler = dyn Fn(&Method, &Uri) -> Response<Body> + Send + Sync;

/// A registry on 127.0.0.1 and a canary on 127.0.0.2 with the same port, so
/// that one name re-pointed from one address to the other reaches either.
async fn registry_and_canary(handler: Arc<Handler>) -> (String, Canary, Arc<AtomicUsize>) {
    for _ in 0..20 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let Some(canary) = canary_on("127.0.0.2", port).await else {
            continue;
        };
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        let app = Router::new().fallback(move |method: Method, uri: Uri| {
            let h = handler.clone();
            counted.fetch_add(1, Ordering::SeqCst);
            async move { h(&method, &uri) }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        return (format!("127.0.0.1:{port}"), canary, requests);
    }
    panic!("no port free on both 127.0.0.1 and 127.0.0.2");
}

fn manifest_head(_: &Method, _: &Uri) -> Response<Body> {
    Response::builder()
        .status(200)
        .header("docker-content-digest", DIGEST)
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(Body::empty())
        .unwrap()
}

fn redirect_to(location: String) -> Arc<Handler> {
    Arc::new(move |_: &Method, _: &Uri| {
        Response::builder()
            .status(307)
            .header("location", location.clone())
            .body(Body::empty())
            .unwrap()
    })
}

/// Loopback allowed (the test registry lives there) except 127.0.0.2, the canary.
fn policy() -> AddressPolicy {
    AddressPolicy::without_loopback()
        .allow(parse_net("127.0.0.0/8").unwrap())
        .deny(parse_net("127.0.0.2").unwrap())
}

#[derive(Debug, Default)]
struct Outcomes(Mutex<Vec<(String, RequestOutcome)>>);

impl RequestObserver for Outcomes {
    fn observe(&self, host: &str, outcome: RequestOutcome, _waited: Duration) {
        self.0.lock().unwrap().push((host.to_string(), outcome));
    }
}

fn client(lookup: Arc<TestLookup>, observer: Option<Arc<Outcomes>>) -> RegistryClient {
    RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        addresses: policy(),
        lookup: Some(lookup),
        observer: observer.map(|o| o as _),
        limits: Limits {
            request_timeout: Duration::from_secs(2),
            total_deadline: Duration::from_secs(4),
            ..Limits::default()
        },
        ..ClientConfig::default()
    })
    .unwrap()
}

async fn resolve(client: &RegistryClient, repo: &str) -> Result<Option<Digest>, RegistryError> {
    client
        .session()
        .resolve_tag(&Repository::parse(repo).unwrap(), "v1")
        .await
}

fn refused_class(r: Result<Option<Digest>, RegistryError>) -> AddressClass {
    match r {
        Err(RegistryError::ForbiddenAddress { refused, .. }) => refused.class,
        other => panic!("expected a refused address, got {other:?}"),
    }
}

#[tokio::test]
async fn names_resolving_to_metadata_link_local_or_denied_addresses_are_refused_without_connecting()
{
    let (_registry, canary, _) = registry_and_canary(Arc::new(manifest_head)).await;
    let lookup = TestLookup::with(&[
        ("metadata.test", &["169.254.169.254"]),
        ("imds6.test", &["fd00:ec2::254"]),
        ("canary.test", &["127.0.0.2"]),
    ]);
    let c = client(lookup, None);
    let p = canary.port;
    assert_eq!(
        refused_class(resolve(&c, &format!("metadata.test:{p}/x")).await),
        AddressClass::LinkLocal
    );
    assert_eq!(
        refused_class(resolve(&c, &format!("imds6.test:{p}/x")).await),
        AddressClass::Metadata
    );
    let err = resolve(&c, &format!("canary.test:{p}/x"))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "forbidden-address");
    let text = err.to_string();
    assert!(
        text.contains("canary.test is at 127.0.0.2") && text.contains("--allow-registry-address"),
        "the message names the host, the address and how to allow it: {text}"
    );
    assert_eq!(
        canary.count(),
        0,
        "no connection reached the denied address"
    );
}

#[tokio::test]
async fn a_name_answering_a_forbidden_address_among_allowed_ones_is_refused_whole() {
    let (registry, canary, requests) = registry_and_canary(Arc::new(manifest_head)).await;
    // Both addresses in one answer: the good one is not tried either.
    let c = client(
        TestLookup::with(&[("mixed.test", &["127.0.0.1", "127.0.0.2"])]),
        None,
    );
    let port = registry.rsplit(':').next().unwrap();
    assert_eq!(
        refused_class(resolve(&c, &format!("mixed.test:{port}/x")).await),
        AddressClass::Denied
    );
    assert_eq!(canary.count(), 0);
    assert_eq!(requests.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn literal_forbidden_addresses_are_refused_before_any_request() {
    let (_registry, canary, _) = registry_and_canary(Arc::new(manifest_head)).await;
    let outcomes = Arc::new(Outcomes::default());
    let c = client(TestLookup::with(&[]), Some(outcomes.clone()));
    let p = canary.port;
    for (repo, class) in [
        (format!("127.0.0.2:{p}/x"), AddressClass::Denied),
        (
            "169.254.169.254/latest".to_string(),
            AddressClass::LinkLocal,
        ),
        ("[fd00:ec2::254]/x".to_string(), AddressClass::Metadata),
        ("[fe80::1]:5000/x".to_string(), AddressClass::LinkLocal),
        (format!("0.0.0.0:{p}/x"), AddressClass::Unspecified),
        // IPv4-mapped IPv6 spelling of the canary.
        (format!("[::ffff:7f00:2]:{p}/x"), AddressClass::Denied),
    ] {
        assert_eq!(refused_class(resolve(&c, &repo).await), class, "{repo}");
    }
    assert_eq!(canary.count(), 0);
    let seen = outcomes.0.lock().unwrap();
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert!(
        seen.iter()
            .all(|(_, o)| *o == RequestOutcome::Failed("forbidden")),
        "refusals are counted as `forbidden`: {seen:?}"
    );
}

#[tokio::test]
async fn a_redirect_to_a_forbidden_address_is_not_followed() {
    // The canary listens on 127.0.0.2 at the registry's own port.
    let lookup = TestLookup::with(&[("canary.test", &["127.0.0.2"])]);
    for target in [
        "http://127.0.0.2:{p}/latest/meta-data/",
        "http://canary.test:{p}/x",
        "http://169.254.169.254/latest/meta-data/",
    ] {
        // The canary's port is known only once it listens: the handler reads it then.
        let port_cell = Arc::new(Mutex::new(0u16));
        let cell = port_cell.clone();
        let handler: Arc<Handler> = Arc::new(move |_, _| {
            let location = target.replace("{p}", &cell.lock().unwrap().to_string());
            Response::builder()
                .status(307)
                .header("location", location)
                .body(Body::empty())
                .unwrap()
        });
        let (registry, canary, requests) = registry_and_canary(handler).await;
        *port_cell.lock().unwrap() = canary.port;
        let c = client(lookup.clone(), None);
        let r = resolve(&c, &format!("{registry}/x")).await;
        assert!(
            matches!(r, Err(RegistryError::ForbiddenAddress { .. })),
            "redirect target refused: {r:?}"
        );
        assert!(
            requests.load(Ordering::SeqCst) >= 1,
            "the registry itself was asked"
        );
        assert_eq!(
            canary.count(),
            0,
            "the redirect target was never connected to"
        );
    }
}

#[tokio::test]
async fn a_token_realm_at_a_forbidden_address_is_not_contacted() {
    let port_cell = Arc::new(Mutex::new(0u16));
    let cell = port_cell.clone();
    let handler: Arc<Handler> = Arc::new(move |_, _| {
        let p = *cell.lock().unwrap();
        Response::builder()
            .status(401)
            .header(
                "www-authenticate",
                format!(r#"Bearer realm="http://127.0.0.2:{p}/token",service="reg""#),
            )
            .body(Body::empty())
            .unwrap()
    });
    let (registry, canary, _) = registry_and_canary(handler).await;
    *port_cell.lock().unwrap() = canary.port;
    let c = client(TestLookup::with(&[]), None);
    let r = resolve(&c, &format!("{registry}/x")).await;
    assert!(
        matches!(r, Err(RegistryError::ForbiddenAddress { .. })),
        "{r:?}"
    );
    assert_eq!(canary.count(), 0);
}

#[tokio::test]
async fn dns_rebinding_between_check_and_connect_cannot_reach_a_forbidden_address() {
    let (registry, canary, requests) = registry_and_canary(Arc::new(manifest_head)).await;
    let port = registry.rsplit(':').next().unwrap().to_string();
    // Every lookup flips the answer between the registry and the canary.
    let lookup = TestLookup::rotating(&[("rebind.test", &["127.0.0.1", "127.0.0.2"])]);
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..16 {
        // A fresh client per attempt: no pooled connection, a lookup each time.
        let c = client(lookup.clone(), None);
        match resolve(&c, &format!("rebind.test:{port}/x")).await {
            Ok(Some(d)) => {
                assert_eq!(d.to_string(), DIGEST);
                ok += 1;
            }
            Err(RegistryError::ForbiddenAddress { .. }) => refused += 1,
            other => panic!("unexpected: {other:?}"),
        }
    }
    assert!(
        ok > 0 && refused > 0,
        "both answers were seen: {ok} ok, {refused} refused"
    );
    assert_eq!(
        requests.load(Ordering::SeqCst),
        ok,
        "one request per allowed answer"
    );
    assert_eq!(
        canary.count(),
        0,
        "no connection ever went to the re-pointed address"
    );
}

#[tokio::test]
async fn localhost_is_refused_when_loopback_is_denied() {
    // The system resolver: `localhost` is 127.0.0.1 (and ::1) on every host.
    let c = RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        addresses: AddressPolicy::without_loopback(),
        ..ClientConfig::default()
    })
    .unwrap();
    assert_eq!(
        refused_class(resolve(&c, "localhost:5000/x").await),
        AddressClass::Loopback
    );
    assert_eq!(
        refused_class(resolve(&c, "127.0.0.1:5000/x").await),
        AddressClass::Loopback
    );
}

#[derive(Debug)]
struct OnlyHost(String);

impl RegistryScope for OnlyHost {
    fn permits(&self, host: &str) -> Result<(), String> {
        if host == self.0 {
            Ok(())
        } else {
            Err(format!("no policy selects images on {host}"))
        }
    }
}

#[tokio::test]
async fn the_registry_scope_gates_where_requests_start_but_not_blob_redirects() {
    let (storage, _c1, storage_requests) = registry_and_canary(Arc::new(manifest_head)).await;
    let (inside, _c2, inside_requests) =
        registry_and_canary(redirect_to(format!("http://{storage}/storage/blob"))).await;
    let (outside, _c3, outside_requests) = registry_and_canary(Arc::new(manifest_head)).await;
    let c = RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        addresses: policy(),
        scope: Some(Arc::new(OnlyHost(inside.clone()))),
        ..ClientConfig::default()
    })
    .unwrap();
    let err = resolve(&c, &format!("{outside}/x")).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::ForbiddenRegistry { .. }),
        "{err}"
    );
    assert_eq!(err.reason(), "forbidden-registry");
    assert!(
        err.to_string().contains("no policy selects images on"),
        "{err}"
    );
    assert_eq!(outside_requests.load(Ordering::SeqCst), 0);
    // In scope: its redirect to another host (blob storage) is followed.
    let d = resolve(&c, &format!("{inside}/x")).await.unwrap();
    assert_eq!(d.map(|d| d.to_string()).as_deref(), Some(DIGEST));
    assert!(inside_requests.load(Ordering::SeqCst) >= 1);
    assert!(storage_requests.load(Ordering::SeqCst) >= 1);
}

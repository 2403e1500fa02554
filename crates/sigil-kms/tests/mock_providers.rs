//! Each provider against a mock server on 127.0.0.1 that checks every
//! request the way the real API does (paths, API versions, auth headers,
//! the token exchange's form fields and, for Google, the JWT's signature)
//! and answers as the real API documents. Google Cloud KMS and Azure Key
//! Vault are checked against these mocks only; Vault transit and AWS KMS
//! also run against real servers (OpenBao and moto, `make test-kms`:
//! sigil-cli's `tests/kms_policy.rs`, the controller's `kms_resolve` tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use base64::Engine as _;
use sigil_kms::{Env, Http, KmsError, KmsRef, fetch_public_key};

/// One request as the mock saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    query: BTreeMap<String, String>,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Seen {
    fn form(&self) -> BTreeMap<String, String> {
        url::form_urlencoded::parse(&self.body)
            .into_owned()
            .collect()
    }
    fn bearer(&self) -> Option<&str> {
        self.headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
    }
}

type Handler = dyn Fn(&Seen) -> (StatusCode, String) + Send + Sync;

/// Serves `handler` on 127.0.0.1; returns the base URL and the requests seen.
async fn mock(handler: Arc<Handler>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let handler = handler.clone();
            let log = log.clone();
            async move {
                let request = Seen {
                    method,
                    path: uri.path().to_owned(),
                    query: url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                        .into_owned()
                        .collect(),
                    headers,
                    body: body.to_vec(),
                };
                let (status, body) = handler(&request);
                log.lock().unwrap().push(request);
                (status, [("content-type", "application/json")], body)
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn ok(v: serde_json::Value) -> (StatusCode, String) {
    (StatusCode::OK, v.to_string())
}

fn refuse(status: StatusCode, why: &str) -> (StatusCode, String) {
    (
        status,
        serde_json::json!({"error": {"code": status.as_u16(), "message": why}}).to_string(),
    )
}

fn p256_pem(seed: u8) -> (Vec<u8>, String) {
    // A fixed key: the generator multiplied by a small scalar.
    let secret = p256_secret(seed);
    let public = secret.public_key();
    let pem = p256::pkcs8::EncodePublicKey::to_public_key_pem(&public, p256::pkcs8::LineEnding::LF)
        .unwrap();
    (public.to_sec1_bytes().to_vec(), pem)
}

fn p256_secret(seed: u8) -> p256::SecretKey {
    let mut bytes = [0u8; 32];
    bytes[31] = seed;
    p256::SecretKey::from_slice(&bytes).unwrap()
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[tokio::test]
async fn vault_reads_the_latest_transit_key_with_the_token_and_namespace() {
    let (_, pem) = p256_pem(3);
    let answer = serde_json::json!({"data": {"latest_version": 2, "type": "ecdsa-p256", "keys": {
        "1": {"public_key": "stale", "name": "P-256"},
        "2": {"public_key": pem, "name": "P-256"}}}});
    let (url, seen) = mock(Arc::new(move |r: &Seen| {
        if r.headers.get("x-vault-token").map(|v| v.as_bytes()) != Some(b"s.test") {
            return (
                StatusCode::FORBIDDEN,
                r#"{"errors":["permission denied"]}"#.into(),
            );
        }
        match (r.method.as_str(), r.path.as_str()) {
            ("GET", "/v1/signing-transit/keys/release") => ok(answer.clone()),
            _ => (StatusCode::NOT_FOUND, r#"{"errors":[]}"#.into()),
        }
    }))
    .await;
    let env = Env::from_pairs([
        ("VAULT_ADDR", url.as_str()),
        ("VAULT_TOKEN", "s.test"),
        ("VAULT_NAMESPACE", "team-a"),
        ("TRANSIT_SECRET_ENGINE_PATH", "/signing-transit/"),
    ]);
    let key = fetch_public_key(
        &KmsRef::parse("hashivault://release").unwrap(),
        &env,
        &Http::default(),
    )
    .await
    .unwrap();
    assert_eq!(key.pem, pem);
    assert_eq!(key.version.as_deref(), Some("2"));
    assert_eq!(
        seen.lock().unwrap()[0].headers["x-vault-namespace"],
        "team-a"
    );

    let wrong = Env::from_pairs([("VAULT_ADDR", url.as_str()), ("BAO_TOKEN", "s.other")]);
    let err = fetch_public_key(
        &KmsRef::parse("openbao://release").unwrap(),
        &wrong,
        &Http::default(),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, KmsError::Refused { status: 403, .. }),
        "{text}"
    );
    assert!(
        text.contains("permission denied") && text.contains("transit key `release`"),
        "{text}"
    );
    assert!(!text.contains("s.other"), "the token leaked into {text}");
}

#[tokio::test]
async fn vault_kubernetes_auth_logs_in_with_the_service_account_token_first() {
    let (_, pem) = p256_pem(4);
    let dir = tempdir("vault-k8s");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "eyJ.sa-token.sig\n").unwrap();
    let answer =
        serde_json::json!({"data": {"latest_version": 1, "keys": {"1": {"public_key": pem}}}});
    let (url, seen) = mock(Arc::new(move |r: &Seen| match r.path.as_str() {
        "/v1/auth/k8s-prod/login" => {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            if body["role"] == "sigil" && body["jwt"] == "eyJ.sa-token.sig" {
                ok(serde_json::json!({"auth": {"client_token": "s.from-login"}}))
            } else {
                (
                    StatusCode::BAD_REQUEST,
                    r#"{"errors":["invalid role or jwt"]}"#.into(),
                )
            }
        }
        "/v1/transit/keys/k"
            if r.headers
                .get("x-vault-token")
                .is_some_and(|t| t == "s.from-login") =>
        {
            ok(answer.clone())
        }
        _ => (
            StatusCode::FORBIDDEN,
            r#"{"errors":["permission denied"]}"#.into(),
        ),
    }))
    .await;
    let env = Env::from_pairs([
        ("VAULT_ADDR", url.as_str()),
        ("VAULT_KUBERNETES_ROLE", "sigil"),
        ("VAULT_KUBERNETES_MOUNT", "k8s-prod"),
        ("VAULT_KUBERNETES_TOKEN_FILE", token_file.to_str().unwrap()),
    ]);
    let key = fetch_public_key(
        &KmsRef::parse("hashivault://k").unwrap(),
        &env,
        &Http::default(),
    )
    .await
    .unwrap();
    assert_eq!(key.pem, pem);
    assert_eq!(seen.lock().unwrap().len(), 2);
    let none = Env::from_pairs([("VAULT_ADDR", url.as_str())]);
    let err = fetch_public_key(
        &KmsRef::parse("hashivault://k").unwrap(),
        &none,
        &Http::default(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("VAULT_TOKEN") && err.contains("VAULT_KUBERNETES_ROLE"),
        "{err}"
    );
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sigil-kms-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A Google service-account key file for a fresh RSA key; returns the file's
/// JSON and the public key that verifies its JWTs.
fn google_service_account(token_uri: &str) -> (String, Vec<u8>) {
    use aws_lc_rs::encoding::{AsDer as _, Pkcs8V1Der};
    use aws_lc_rs::rsa::KeySize;
    use aws_lc_rs::signature::{KeyPair as _, RsaKeyPair};
    let key = RsaKeyPair::generate(KeySize::Rsa2048).unwrap();
    let pkcs8: Pkcs8V1Der<'_> = key.as_der().unwrap();
    let body = base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref());
    let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap());
        pem.push('\n');
    }
    pem.push_str("-----END PRIVATE KEY-----\n");
    // RFC 8017 RSAPublicKey, the form the verifier below takes.
    let public = key.public_key().as_ref().to_vec();
    let json = serde_json::json!({
        "type": "service_account", "project_id": "p", "private_key_id": "kid1",
        "private_key": pem.as_str(), "client_email": "sigil@p.iam.gserviceaccount.com",
        "token_uri": token_uri,
    });
    (json.to_string(), public)
}

/// Checks an RS256 JWT as Google's token endpoint does: signature, audience, scope, lifetime.
fn google_jwt_ok(jwt: &str, public_pkcs1: &[u8], audience: &str) -> bool {
    let parts: Vec<&str> = jwt.split('.').collect();
    if parts.len() != 3 {
        return false;
    }
    let decode = |s: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .unwrap()
    };
    let signed = format!("{}.{}", parts[0], parts[1]);
    let key = aws_lc_rs::signature::UnparsedPublicKey::new(
        &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
        public_pkcs1,
    );
    if key.verify(signed.as_bytes(), &decode(parts[2])).is_err() {
        return false;
    }
    let header: serde_json::Value = serde_json::from_slice(&decode(parts[0])).unwrap();
    let claims: serde_json::Value = serde_json::from_slice(&decode(parts[1])).unwrap();
    let lifetime = claims["exp"].as_i64().unwrap_or(0) - claims["iat"].as_i64().unwrap_or(0);
    header["alg"] == "RS256"
        && header["kid"] == "kid1"
        && claims["aud"] == audience
        && claims["iss"] == "sigil@p.iam.gserviceaccount.com"
        && claims["scope"] == "https://www.googleapis.com/auth/cloudkms"
        && (1..=3600).contains(&lifetime)
}

const GCP_KEY: &str = "projects/p/locations/global/keyRings/r/cryptoKeys/k";

/// Google Cloud KMS's REST surface for one key with enabled versions 1 and 2.
fn gcp_kms(r: &Seen, pem: &str, algorithm: &str, crc_ok: bool) -> (StatusCode, String) {
    if r.method != Method::GET {
        return refuse(StatusCode::METHOD_NOT_ALLOWED, "method");
    }
    let path = r.path.as_str();
    if path == format!("/v1/{GCP_KEY}") {
        return ok(serde_json::json!({"name": GCP_KEY, "purpose": "ASYMMETRIC_SIGN"}));
    }
    if path == format!("/v1/{GCP_KEY}/cryptoKeyVersions") {
        if r.query.get("filter").map(String::as_str) != Some("state=ENABLED")
            || r.query.get("orderBy").map(String::as_str) != Some("name desc")
        {
            return refuse(StatusCode::BAD_REQUEST, "unexpected list parameters");
        }
        return ok(serde_json::json!({"cryptoKeyVersions": [
            {"name": format!("{GCP_KEY}/cryptoKeyVersions/2"), "state": "ENABLED"},
            {"name": format!("{GCP_KEY}/cryptoKeyVersions/1"), "state": "ENABLED"}]}));
    }
    if let Some(version) = path
        .strip_prefix(&format!("/v1/{GCP_KEY}/cryptoKeyVersions/"))
        .and_then(|p| p.strip_suffix("/publicKey"))
    {
        let crc = sigil_kms::der::crc32c(pem.as_bytes()) ^ u32::from(!crc_ok);
        return ok(serde_json::json!({"pem": pem, "algorithm": algorithm,
            "pemCrc32c": crc.to_string(), "name": format!("{GCP_KEY}/cryptoKeyVersions/{version}")}));
    }
    refuse(StatusCode::NOT_FOUND, "not found")
}

/// The token endpoint's URL and the service account's public key, known
/// only once the mock server listens.
type AccountSlot = Arc<Mutex<Option<(String, Vec<u8>)>>>;

#[tokio::test]
async fn gcp_exchanges_a_service_account_jwt_then_reads_the_newest_enabled_version() {
    let (_, pem) = p256_pem(5);
    let slot: AccountSlot = Arc::default();
    let shared = slot.clone();
    let kms_pem = pem.clone();
    let (url, seen) = mock(Arc::new(move |r: &Seen| {
        let guard = shared.lock().unwrap();
        let (token_uri, public) = guard.as_ref().unwrap();
        if r.path == "/token" {
            let form = r.form();
            let grant = form.get("grant_type").map(String::as_str);
            return if grant == Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
                && google_jwt_ok(form.get("assertion").map_or("", String::as_str), public, token_uri)
            {
                ok(serde_json::json!({"access_token": "ya29.mock", "token_type": "Bearer", "expires_in": 3599}))
            } else {
                (StatusCode::BAD_REQUEST, r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#.into())
            };
        }
        if r.bearer() != Some("ya29.mock") {
            return refuse(StatusCode::UNAUTHORIZED, "Request had invalid authentication credentials.");
        }
        gcp_kms(r, &kms_pem, "EC_SIGN_P256_SHA256", true)
    }))
    .await;
    let token_uri = format!("{url}/token");
    let (credentials, public) = google_service_account(&token_uri);
    *slot.lock().unwrap() = Some((token_uri, public));
    let dir = tempdir("gcp");
    let file = dir.join("sa.json");
    std::fs::write(&file, &credentials).unwrap();

    let env = Env::from_pairs([
        ("GOOGLE_APPLICATION_CREDENTIALS", file.to_str().unwrap()),
        ("SIGIL_GCPKMS_ENDPOINT", url.as_str()),
    ]);
    let reference = KmsRef::parse(&format!("gcpkms://{GCP_KEY}")).unwrap();
    let key = fetch_public_key(&reference, &env, &Http::default())
        .await
        .unwrap();
    assert_eq!(key.pem, pem);
    assert_eq!(key.version.as_deref(), Some("2"));
    let paths: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.path.clone())
        .collect();
    assert_eq!(paths[0], "/token");
    assert_eq!(
        paths.last().unwrap(),
        &format!("/v1/{GCP_KEY}/cryptoKeyVersions/2/publicKey")
    );

    // The same JSON inline (as a credentials Secret holds it) and a pinned version.
    let inline = Env::from_pairs([
        ("GOOGLE_APPLICATION_CREDENTIALS", credentials.as_str()),
        ("SIGIL_GCPKMS_ENDPOINT", url.as_str()),
    ]);
    let pinned = KmsRef::parse(&format!("gcpkms://{GCP_KEY}/versions/1")).unwrap();
    let key = fetch_public_key(&pinned, &inline, &Http::default())
        .await
        .unwrap();
    assert_eq!(key.version.as_deref(), Some("1"));
}

#[tokio::test]
async fn gcp_refuses_a_corrupted_answer_and_keys_it_cannot_verify() {
    let (_, pem) = p256_pem(6);
    for (algorithm, crc_ok, expected) in [
        ("EC_SIGN_P256_SHA256", false, "pemCrc32c does not match"),
        ("RSA_SIGN_PSS_2048_SHA256", true, "RSA_SIGN_PSS_2048_SHA256"),
    ] {
        let kms_pem = pem.clone();
        let (url, _) = mock(Arc::new(move |r: &Seen| {
            if r.bearer() != Some("ya29.ready") {
                return refuse(StatusCode::UNAUTHORIZED, "no token");
            }
            gcp_kms(r, &kms_pem, algorithm, crc_ok)
        }))
        .await;
        let env = Env::from_pairs([
            ("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.ready"),
            ("SIGIL_GCPKMS_ENDPOINT", url.as_str()),
        ]);
        let reference = KmsRef::parse(&format!("gcpkms://{GCP_KEY}")).unwrap();
        let err = fetch_public_key(&reference, &env, &Http::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{err}");
    }
}

#[tokio::test]
async fn gcp_workload_identity_federation_exchanges_the_token_file_then_impersonates() {
    let (_, pem) = p256_pem(7);
    let kms_pem = pem.clone();
    let (url, seen) = mock(Arc::new(move |r: &Seen| match r.path.as_str() {
        "/v1/token" => {
            let form = r.form();
            let want = [
                ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"),
                ("audience", "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/k8s/providers/cluster"),
                ("requested_token_type", "urn:ietf:params:oauth:token-type:access_token"),
                ("subject_token", "k8s-projected-token"),
                ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
                ("scope", "https://www.googleapis.com/auth/cloud-platform"),
            ];
            if want.iter().all(|(k, v)| form.get(*k).map(String::as_str) == Some(*v)) {
                ok(serde_json::json!({"access_token": "federated", "issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer"}))
            } else {
                (StatusCode::BAD_REQUEST, r#"{"error":"invalid_request"}"#.into())
            }
        }
        "/v1/projects/-/serviceAccounts/sigil@p.iam.gserviceaccount.com:generateAccessToken" => {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            if r.bearer() == Some("federated") && body["scope"][0] == "https://www.googleapis.com/auth/cloud-platform" {
                ok(serde_json::json!({"accessToken": "impersonated", "expireTime": "2030-01-01T00:00:00Z"}))
            } else {
                refuse(StatusCode::FORBIDDEN, "iam.serviceAccounts.getAccessToken denied")
            }
        }
        _ if r.bearer() == Some("impersonated") => gcp_kms(r, &kms_pem, "EC_SIGN_P256_SHA256", true),
        _ => refuse(StatusCode::UNAUTHORIZED, "bad token"),
    }))
    .await;
    let dir = tempdir("gcp-wif");
    let token = dir.join("token");
    std::fs::write(&token, "k8s-projected-token").unwrap();
    let config = serde_json::json!({
        "type": "external_account",
        "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/k8s/providers/cluster",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": format!("{url}/v1/token"),
        "service_account_impersonation_url": format!("{url}/v1/projects/-/serviceAccounts/sigil@p.iam.gserviceaccount.com:generateAccessToken"),
        "credential_source": {"file": token.to_str().unwrap(), "format": {"type": "text"}},
    });
    let env = Env::from_pairs([
        ("GOOGLE_APPLICATION_CREDENTIALS", config.to_string()),
        ("SIGIL_GCPKMS_ENDPOINT", url.clone()),
    ]);
    let key = fetch_public_key(
        &KmsRef::parse(&format!("gcpkms://{GCP_KEY}")).unwrap(),
        &env,
        &Http::default(),
    )
    .await
    .unwrap();
    assert_eq!(key.pem, pem);
    assert_eq!(seen.lock().unwrap().len(), 5);
}

/// Azure's token endpoint and Key Vault for one P-256 key; `assertion`
/// selects workload identity (client_assertion) over a client secret.
fn azure(r: &Seen, x: &str, y: &str, assertion: bool) -> (StatusCode, String) {
    if r.path == "/tenant-1/oauth2/v2.0/token" {
        let form = r.form();
        let get = |k: &str| form.get(k).map(String::as_str);
        let credential = if assertion {
            get("client_assertion") == Some("federated-jwt")
                && get("client_assertion_type")
                    == Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
        } else {
            get("client_secret") == Some("s3cret")
        };
        return if get("grant_type") == Some("client_credentials")
            && get("client_id") == Some("app-1")
            && get("scope") == Some("https://vault.azure.net/.default")
            && credential
        {
            ok(
                serde_json::json!({"token_type": "Bearer", "expires_in": 3599, "access_token": "eyJ.azure"}),
            )
        } else {
            (StatusCode::UNAUTHORIZED, r#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."}"#.into())
        };
    }
    if r.bearer() != Some("eyJ.azure") {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "AKV10000: Request is missing a Bearer or PoP token.",
        );
    }
    if r.query.get("api-version").map(String::as_str) != Some("7.5") {
        return refuse(
            StatusCode::BAD_REQUEST,
            "The api-version is missing or not supported",
        );
    }
    match r.path.as_str() {
        "/keys/release" | "/keys/release/0123abcd" => ok(serde_json::json!({
            "key": {"kid": "https://v.vault.azure.net/keys/release/0123abcd", "kty": "EC-HSM",
                    "key_ops": ["sign", "verify"], "crv": "P-256", "x": x, "y": y},
            "attributes": {"enabled": true}})),
        _ => refuse(
            StatusCode::NOT_FOUND,
            "A key with (name/id) nope was not found in this key vault.",
        ),
    }
}

#[tokio::test]
async fn azure_gets_a_token_with_a_client_secret_or_federated_token_then_converts_the_jwk() {
    let (sec1, pem) = p256_pem(8);
    let (x, y) = (b64url(&sec1[1..33]), b64url(&sec1[33..65]));
    for assertion in [false, true] {
        let (x, y) = (x.clone(), y.clone());
        let (url, seen) = mock(Arc::new(move |r: &Seen| azure(r, &x, &y, assertion))).await;
        let dir = tempdir("azure");
        let token = dir.join("azure-token");
        std::fs::write(&token, "federated-jwt").unwrap();
        let mut env = Env::from_pairs([
            ("AZURE_TENANT_ID", "tenant-1"),
            ("AZURE_CLIENT_ID", "app-1"),
            ("AZURE_AUTHORITY_HOST", url.as_str()),
            ("SIGIL_AZUREKMS_ENDPOINT", url.as_str()),
        ]);
        if assertion {
            env.set("AZURE_FEDERATED_TOKEN_FILE", token.to_str().unwrap());
        } else {
            env.set("AZURE_CLIENT_SECRET", "s3cret");
        }
        let reference = KmsRef::parse("azurekms://v.vault.azure.net/release").unwrap();
        let key = fetch_public_key(&reference, &env, &Http::default())
            .await
            .unwrap();
        assert_eq!(key.pem, pem, "the JWK must become the key's own SPKI");
        assert_eq!(key.version.as_deref(), Some("0123abcd"));
        assert_eq!(seen.lock().unwrap().len(), 2);
    }
}

#[tokio::test]
async fn azure_reports_the_identity_platforms_own_reason_for_a_wrong_secret() {
    let (url, _) = mock(Arc::new(|r: &Seen| azure(r, "x", "y", false))).await;
    let env = Env::from_pairs([
        ("AZURE_TENANT_ID", "tenant-1"),
        ("AZURE_CLIENT_ID", "app-1"),
        ("AZURE_CLIENT_SECRET", "wrong"),
        ("AZURE_AUTHORITY_HOST", url.as_str()),
    ]);
    let reference = KmsRef::parse("azurekms://v.vault.azure.net/release").unwrap();
    let err = fetch_public_key(&reference, &env, &Http::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("AADSTS7000215"), "{err}");
    assert!(!err.contains("wrong"), "the secret leaked into {err}");
}

#[tokio::test]
async fn an_unreachable_kms_and_an_oversized_answer_are_told_apart() {
    // A port that was just free: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let env = Env::from_pairs([
        ("VAULT_ADDR", format!("http://127.0.0.1:{port}")),
        ("VAULT_TOKEN", "t".into()),
    ]);
    let err = fetch_public_key(
        &KmsRef::parse("hashivault://k").unwrap(),
        &env,
        &Http::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, KmsError::Unreachable { .. }), "{err}");

    let (url, _) = mock(Arc::new(|_: &Seen| {
        (StatusCode::OK, "x".repeat(2 * 1024 * 1024))
    }))
    .await;
    let env = Env::from_pairs([("VAULT_ADDR", url.as_str()), ("VAULT_TOKEN", "t")]);
    let err = fetch_public_key(
        &KmsRef::parse("hashivault://k").unwrap(),
        &env,
        &Http::default(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
}

#[tokio::test]
async fn aws_signs_get_public_key_with_sigv4_and_the_session_token() {
    let secret = p256_secret(9);
    let der = p256::pkcs8::EncodePublicKey::to_public_key_der(&secret.public_key()).unwrap();
    let der_b64 = base64::engine::general_purpose::STANDARD.encode(der.as_bytes());
    let (url, seen) = mock(Arc::new(move |r: &Seen| {
        let target = r.headers.get("x-amz-target").and_then(|v| v.to_str().ok());
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        if r.method != Method::POST
            || r.path != "/"
            || target != Some("TrentService.GetPublicKey")
            || r.headers["content-type"] != "application/x-amz-json-1.1"
            || body["KeyId"] != "alias/release"
        {
            return (
                StatusCode::BAD_REQUEST,
                r#"{"__type":"ValidationException","message":"bad request"}"#.into(),
            );
        }
        ok(
            serde_json::json!({"KeyId": "arn:aws:kms:eu-west-1:111122223333:key/k1",
            "PublicKey": der_b64, "KeySpec": "ECC_NIST_P256", "KeyUsage": "SIGN_VERIFY",
            "SigningAlgorithms": ["ECDSA_SHA_256"]}),
        )
    }))
    .await;
    let env = Env::from_pairs([
        ("AWS_REGION", "eu-west-1"),
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        (
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        ),
        ("AWS_SESSION_TOKEN", "session"),
        ("AWS_ENDPOINT_URL_KMS", url.as_str()),
    ]);
    let key = fetch_public_key(
        &KmsRef::parse("awskms:///alias/release").unwrap(),
        &env,
        &Http::default(),
    )
    .await
    .unwrap();
    let expected = p256::pkcs8::EncodePublicKey::to_public_key_pem(
        &secret.public_key(),
        p256::pkcs8::LineEnding::LF,
    )
    .unwrap();
    assert_eq!(key.pem, expected);

    // Recompute the signature from what arrived: the signed headers must be
    // the ones sent, so a server that checks SigV4 accepts it.
    let seen = seen.lock().unwrap();
    let r = &seen[0];
    let header = |n: &str| r.headers.get(n).unwrap().to_str().unwrap().to_owned();
    let authorization = header("authorization");
    assert!(
        authorization.contains("/eu-west-1/kms/aws4_request"),
        "{authorization}"
    );
    assert!(
        authorization.contains(
            "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
        ),
        "{authorization}"
    );
    assert_eq!(header("x-amz-security-token"), "session");
    let (date, host, content_type, target) = (
        header("x-amz-date"),
        header("host"),
        header("content-type"),
        header("x-amz-target"),
    );
    let signed = sigil_kms::sigv4::sign(
        &sigil_kms::sigv4::Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: Some("session".into()),
        },
        "eu-west-1",
        "kms",
        &date,
        &sigil_kms::sigv4::Request {
            method: "POST",
            path: "/",
            query: &[],
            headers: &[
                ("content-type", &content_type),
                ("host", &host),
                ("x-amz-date", &date),
                ("x-amz-security-token", "session"),
                ("x-amz-target", &target),
            ],
            payload: &r.body,
        },
    );
    assert_eq!(signed.authorization, authorization);
}

/// A host a key reference names that is neither documented for its provider
/// nor allowed by the admin never sees a request, and no token is obtained
/// for it: the Azure reference points its vault at the mock, the AWS one its
/// endpoint.
#[tokio::test]
async fn a_key_reference_naming_an_undocumented_host_gets_no_request_and_no_credential() {
    let (url, seen) = mock(Arc::new(|_: &Seen| {
        ok(serde_json::json!({"access_token": "t"}))
    }))
    .await;
    let host = url.trim_start_matches("http://").to_owned();
    let azure = Env::from_pairs([
        ("AZURE_TENANT_ID", "tenant"),
        ("AZURE_CLIENT_ID", "client"),
        ("AZURE_CLIENT_SECRET", "the-secret"),
        // The admin's token service: it must not be asked either.
        ("AZURE_AUTHORITY_HOST", url.as_str()),
    ]);
    let err = fetch_public_key(
        &KmsRef::parse(&format!("azurekms://{host}/signing")).unwrap(),
        &azure,
        &Http::default(),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, KmsError::Forbidden { .. }), "{text}");
    assert!(
        text.contains(&format!("refusing to contact https://{host}/keys/signing"))
            && text.contains("is not an endpoint azurekms documents")
            && text.contains("--kms-allow-host"),
        "{text}"
    );
    let aws = Env::from_pairs([
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
        ("AWS_SESSION_TOKEN", "session"),
        ("AWS_REGION", "us-east-1"),
    ]);
    let err = fetch_public_key(
        &KmsRef::parse(&format!("awskms://{host}/alias/signing")).unwrap(),
        &aws,
        &Http::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, KmsError::Forbidden { .. }), "{err}");
    assert_eq!(err.reason(), "forbidden");
    assert!(seen.lock().unwrap().is_empty(), "nothing reached the host");

    // Listed by the admin, the same reference is asked (over https, which
    // the plain-http mock cannot answer: the failure is the transport's).
    let allowed = Http::new(sigil_kms::HttpConfig {
        allowed_hosts: vec![sigil_kms::HostRule::parse(&host).unwrap()],
        ..sigil_kms::HttpConfig::default()
    });
    let err = fetch_public_key(
        &KmsRef::parse(&format!("awskms://{host}/alias/signing")).unwrap(),
        &aws,
        &allowed,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, KmsError::Unreachable { .. }), "{err}");
}

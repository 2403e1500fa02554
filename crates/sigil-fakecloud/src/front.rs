//! Registry fronts: a local registry (olareg) behind each cloud's
//! authentication, accepting only credentials the fakes issued and that
//! have not expired, as ECR (`AWS` + the GetAuthorizationToken password,
//! Basic), Artifact Registry (`oauth2accesstoken` + a Google access token
//! at its token realm, then its own bearer token) and ACR (`/oauth2/exchange`
//! of an Entra token for the ACR audience, a refresh token at
//! `/oauth2/token`, then its own bearer token) do; and a plain front that
//! only counts what passes (the upstream of a mirror, to prove it is never
//! contacted).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};
use axum::response::IntoResponse;
use base64::Engine as _;

use crate::state::{Kind, State, now};
use crate::{b64url, json};

/// Which cloud a front stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// ECR.
    Ecr,
    /// Artifact Registry.
    Gcp,
    /// ACR.
    Acr,
    /// No authentication: counts and passes through.
    Plain,
}

impl Front {
    /// Its name in counters.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ecr => "ecr",
            Self::Gcp => "gcp",
            Self::Acr => "acr",
            Self::Plain => "plain",
        }
    }
}

/// The user of an ACR refresh token.
const ACR_USER: &str = "00000000-0000-0000-0000-000000000000";
/// The Entra audience ACR's exchange accepts.
const ACR_AUDIENCE: &str = "https://containerregistry.azure.net";

fn registry_error(status: StatusCode, challenge: Option<String>, message: &str) -> Response<Body> {
    let mut r = json(
        status,
        serde_json::json!({"errors": [{"code": "UNAUTHORIZED", "message": message}]}),
    );
    if let Some(c) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert("www-authenticate", c);
    }
    r
}

fn basic(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    Some(
        headers
            .get("authorization")?
            .to_str()
            .ok()?
            .strip_prefix("Bearer ")?
            .to_string(),
    )
}

/// The host a client addressed (its `Host` or, over HTTP/2, the authority).
fn addressed(uri: &Uri, headers: &HeaderMap) -> String {
    headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| uri.authority().map(|a| a.to_string()))
        .unwrap_or_default()
}

/// Serves one request to `front`.
pub async fn serve(
    state: Arc<State>,
    front: Front,
    scheme: &'static str,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let name = front.name();
    state.count(&format!("front.{name}.requests"));
    if state.is_down(&format!("front-{name}")) {
        return crate::down(&format!("front-{name}"));
    }
    let host = addressed(&uri, &headers);
    let path = uri.path();
    let allowed = match front {
        Front::Plain => Ok(()),
        Front::Ecr => ecr_allows(&state, &headers),
        Front::Gcp => {
            if path == "/v2/token" {
                return gcp_token(&state, &host, &headers);
            }
            bearer_allows(&state, &headers, &host)
        }
        Front::Acr => {
            if path == "/oauth2/exchange" {
                return acr_exchange(&state, &host, &body);
            }
            if path == "/oauth2/token" {
                return acr_token(&state, &host, &method, &headers, &body);
            }
            bearer_allows(&state, &headers, &host)
        }
    };
    if let Err(why) = allowed {
        state.count(&format!("front.{name}.refused"));
        let challenge = match front {
            Front::Ecr => {
                format!(r#"Basic realm="{scheme}://{host}/",service="ecr.amazonaws.com""#)
            }
            Front::Gcp => format!(r#"Bearer realm="{scheme}://{host}/v2/token",service="{host}""#),
            Front::Acr => {
                format!(r#"Bearer realm="{scheme}://{host}/oauth2/token",service="{host}""#)
            }
            Front::Plain => String::new(),
        };
        return registry_error(StatusCode::UNAUTHORIZED, Some(challenge), &why);
    }
    state.count(&format!("front.{name}.proxied"));
    proxy(&state, method, &uri, &headers, body).await
}

fn ecr_allows(state: &State, headers: &HeaderMap) -> Result<(), String> {
    let (user, password) = basic(headers).ok_or("authentication required")?;
    if user != "AWS" {
        return Err("the user must be AWS".into());
    }
    match state.token(&password) {
        Some(Kind::EcrPassword) => Ok(()),
        _ if state.expired(&password) => {
            Err("Your authorization token has expired. Reauthenticate and try again.".into())
        }
        _ => Err("not a token ECR issued".into()),
    }
}

fn bearer_allows(state: &State, headers: &HeaderMap, host: &str) -> Result<(), String> {
    let token = bearer(headers).ok_or("authentication required")?;
    match state.token(&token) {
        Some(Kind::Registry(h)) if h == host => Ok(()),
        Some(Kind::Registry(_)) => Err("a token for another registry".into()),
        _ if state.expired(&token) => Err("the token has expired".into()),
        _ => Err("not a token this registry issued".into()),
    }
}

fn registry_token(state: &State, host: &str, name: &str) -> Response<Body> {
    let life = state.config.lifetimes.registry_token;
    let (token, _) = state.issue(Kind::Registry(host.to_string()), "registry-token-", life);
    state.count(&format!("front.{name}.tokens"));
    json(
        StatusCode::OK,
        serde_json::json!({"token": token, "access_token": token, "expires_in": life}),
    )
}

fn gcp_token(state: &State, host: &str, headers: &HeaderMap) -> Response<Body> {
    match basic(headers) {
        Some((user, token))
            if user == "oauth2accesstoken" && state.token(&token) == Some(Kind::GoogleAccess) =>
        {
            registry_token(state, host, "gcp")
        }
        _ => {
            state.count("front.gcp.refused");
            registry_error(
                StatusCode::UNAUTHORIZED,
                None,
                "oauth2accesstoken with a valid Google access token is required",
            )
        }
    }
}

fn acr_exchange(state: &State, host: &str, body: &[u8]) -> Response<Body> {
    if state.is_down("acr") {
        return crate::down("acr");
    }
    let f: BTreeMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
    let get = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    if get("grant_type") != "access_token" || get("service") != host {
        state.count("acr.exchange.refused.request");
        return registry_error(
            StatusCode::BAD_REQUEST,
            None,
            "grant_type=access_token and service=<this registry> are required",
        );
    }
    match state.token(get("access_token")) {
        Some(Kind::Entra(aud)) if aud == ACR_AUDIENCE => {}
        Some(Kind::Entra(aud)) => {
            state.count("acr.exchange.refused.audience");
            return registry_error(
                StatusCode::UNAUTHORIZED,
                None,
                &format!("the access token's audience {aud} is not {ACR_AUDIENCE}"),
            );
        }
        _ => {
            state.count("acr.exchange.refused.token");
            return registry_error(StatusCode::UNAUTHORIZED, None, "not a valid Entra ID token");
        }
    }
    // JWT-shaped, as ACR's are, so a client can read its expiry.
    let life = state.config.lifetimes.acr_refresh;
    let expires = now() + life;
    let claims = serde_json::json!({"exp": expires, "grant_type": "refresh_token", "aud": host,
        "jti": state.fresh("rt-")});
    let refresh = format!(
        "{}.{}.fake",
        b64url(br#"{"alg":"none","typ":"JWT"}"#),
        b64url(claims.to_string().as_bytes())
    );
    state.record(&refresh, Kind::AcrRefresh(host.to_string()), expires);
    state.count("acr.exchange.issued");
    json(
        StatusCode::OK,
        serde_json::json!({"refresh_token": refresh}),
    )
}

fn acr_token(
    state: &State,
    host: &str,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
) -> Response<Body> {
    let refresh = if method == Method::POST {
        let f: BTreeMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
        f.get("refresh_token").cloned()
    } else {
        basic(headers)
            .filter(|(u, _)| u == ACR_USER)
            .map(|(_, p)| p)
    };
    match refresh.and_then(|r| state.token(&r)) {
        Some(Kind::AcrRefresh(h)) if h == host => registry_token(state, host, "acr"),
        _ => {
            state.count("front.acr.refused");
            registry_error(
                StatusCode::UNAUTHORIZED,
                None,
                "a valid ACR refresh token for this registry is required",
            )
        }
    }
}

/// Forwards the request to the upstream registry and its answer back.
async fn proxy(
    state: &State,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let Some(upstream) = &state.config.upstream else {
        return (StatusCode::BAD_GATEWAY, "no upstream registry configured").into_response();
    };
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let url = format!("{}{path}", upstream.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build();
    let Ok(client) = client else {
        return (StatusCode::BAD_GATEWAY, "no HTTP client").into_response();
    };
    let Ok(method) = reqwest::Method::from_bytes(method.as_str().as_bytes()) else {
        return (StatusCode::METHOD_NOT_ALLOWED, "").into_response();
    };
    let mut request = client.request(method, &url).body(body.to_vec());
    for name in ["accept", "content-type", "range"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            request = request.header(name, v);
        }
    }
    state.count("upstream.requests");
    let answer = match request.send().await {
        Ok(a) => a,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response(),
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut out = Response::builder().status(status);
    for name in [
        "content-type",
        "docker-content-digest",
        "link",
        "location",
        "oci-filters-applied",
        "docker-distribution-api-version",
    ] {
        if let Some(v) = answer.headers().get(name).and_then(|v| v.to_str().ok()) {
            out = out.header(name, v);
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    out.body(Body::from(bytes))
        .unwrap_or_else(|_| (StatusCode::BAD_GATEWAY, "").into_response())
}

//! Google: the GKE metadata server (only with `Metadata-Flavor: Google`,
//! and never for a request a proxy forwarded), STS's token exchange for
//! workload identity federation (the subject token's signature, its
//! audience = the pool provider's, its expiry), service account
//! impersonation (only with a federated token it issued), and Google's
//! OAuth token endpoint refreshing a gcloud user's application-default
//! credentials (only for the client and refresh token it knows).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State as Axum;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::state::{Kind, State, now};
use crate::{down, json, rfc3339};

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    json(
        status,
        serde_json::json!({"error": error, "error_description": description}),
    )
}

/// `GET /computeMetadata/v1/instance/service-accounts/default/token`.
pub async fn metadata_token(Axum(state): Axum<Arc<State>>, headers: HeaderMap) -> Response {
    if state.is_down("metadata") {
        return down("metadata");
    }
    if headers.get("metadata-flavor").and_then(|v| v.to_str().ok()) != Some("Google") {
        state.count("metadata.refused.flavor");
        return (
            StatusCode::FORBIDDEN,
            "Missing Metadata-Flavor:Google header.",
        )
            .into_response();
    }
    if headers.contains_key("x-forwarded-for") {
        state.count("metadata.refused.forwarded");
        return (StatusCode::FORBIDDEN, "X-Forwarded-For is not allowed").into_response();
    }
    let life = state.config.lifetimes.google_token;
    let (token, _) = state.issue(Kind::GoogleAccess, "ya29.fake-", life);
    state.count("metadata.issued");
    (
        StatusCode::OK,
        [
            ("metadata-flavor", "Google"),
            ("content-type", "application/json"),
        ],
        serde_json::json!({"access_token": token, "expires_in": life, "token_type": "Bearer"})
            .to_string(),
    )
        .into_response()
}

/// `POST /v1/token`: STS's token exchange.
pub async fn sts_token(Axum(state): Axum<Arc<State>>, body: Bytes) -> Response {
    if state.is_down("google-sts") {
        return down("google-sts");
    }
    let f: BTreeMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    let get = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    if get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange" {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "only token-exchange",
        );
    }
    let audience = &state.config.pool_audience;
    if get("audience") != audience {
        state.count("google-sts.refused.audience");
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_target",
            "The target service indicated by the \"audience\" parameters is invalid",
        );
    }
    match crate::jwt::verify(get("subject_token"), &state.keys, audience, now()) {
        Ok(c) if state.config.subjects.contains(&c.subject) => {}
        Ok(c) => {
            state.count("google-sts.refused.condition");
            return oauth_error(
                StatusCode::FORBIDDEN,
                "unauthorized_client",
                &format!(
                    "The given credential is rejected by the attribute condition ({})",
                    c.subject
                ),
            );
        }
        Err(e) => {
            state.count("google-sts.refused.token");
            return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", &e);
        }
    }
    let life = state.config.lifetimes.google_token;
    let (token, _) = state.issue(Kind::GoogleAccess, "ya29.federated-", life);
    state.count("google-sts.issued");
    json(
        StatusCode::OK,
        serde_json::json!({"access_token": token, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer", "expires_in": life}),
    )
}

/// `POST /token`: Google's OAuth endpoint, the `refresh_token` grant of
/// gcloud's application-default credentials: the client must be the one
/// the refresh token was issued to, with its secret.
pub async fn oauth_token(Axum(state): Axum<Arc<State>>, body: Bytes) -> Response {
    if state.is_down("google-oauth") {
        return down("google-oauth");
    }
    let f: BTreeMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    let get = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    if get("grant_type") != "refresh_token" {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "Invalid grant_type",
        );
    }
    let (client_id, secret, refresh) = &state.config.google_user;
    if get("client_id") != client_id || get("client_secret") != secret {
        state.count("google-oauth.refused.client");
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "The OAuth client was not found.",
        );
    }
    if get("refresh_token") != refresh {
        state.count("google-oauth.refused.token");
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_grant",
            "Token has been expired or revoked.",
        );
    }
    let life = state.config.lifetimes.google_token;
    let (token, _) = state.issue(Kind::GoogleAccess, "ya29.user-", life);
    state.count("google-oauth.issued");
    json(
        StatusCode::OK,
        serde_json::json!({"access_token": token, "expires_in": life, "token_type": "Bearer",
            "scope": "https://www.googleapis.com/auth/cloud-platform"}),
    )
}

/// `POST /v1/projects/-/serviceAccounts/SA:generateAccessToken`.
pub async fn impersonate(Axum(state): Axum<Arc<State>>, headers: HeaderMap) -> Response {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if state.token(bearer) != Some(Kind::GoogleAccess) {
        state.count("impersonate.refused");
        return json(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"error": {"code": 401, "message": "Request had invalid authentication credentials."}}),
        );
    }
    let life = state.config.lifetimes.google_token;
    let (token, expires) = state.issue(Kind::GoogleAccess, "ya29.impersonated-", life);
    state.count("impersonate.issued");
    json(
        StatusCode::OK,
        serde_json::json!({"accessToken": token, "expireTime": rfc3339(expires)}),
    )
}

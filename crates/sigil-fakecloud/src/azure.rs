//! Azure: Entra ID's token endpoint for workload identity (the federated
//! client assertion's signature, audience `api://AzureADTokenExchange`,
//! expiry and subject, the application and the tenant), and the managed
//! identity endpoint of IMDS (only with `Metadata: true`). The token's
//! audience is the scope asked for, so ACR's exchange can refuse a token
//! meant for another resource.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State as Axum};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;

use crate::state::{Kind, State, now};
use crate::{down, json};

fn aad_error(status: StatusCode, error: &str, description: &str) -> Response {
    json(
        status,
        serde_json::json!({"error": error, "error_description": description}),
    )
}

/// `POST /{tenant}/oauth2/v2.0/token`.
pub async fn entra_token(
    Axum(state): Axum<Arc<State>>,
    Path(tenant): Path<String>,
    body: Bytes,
) -> Response {
    if state.is_down("entra") {
        return down("entra");
    }
    let f: BTreeMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    let get = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    if tenant != state.config.azure_tenant {
        state.count("entra.refused.tenant");
        return aad_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            &format!("AADSTS90002: Tenant '{tenant}' not found."),
        );
    }
    if get("grant_type") != "client_credentials"
        || get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    {
        return aad_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "AADSTS900144: client_credentials with a jwt-bearer client assertion is required",
        );
    }
    if get("client_id") != state.config.azure_client_id {
        state.count("entra.refused.client");
        return aad_error(
            StatusCode::BAD_REQUEST,
            "unauthorized_client",
            "AADSTS700016: Application not found in the directory",
        );
    }
    match crate::jwt::verify(
        get("client_assertion"),
        &state.keys,
        "api://AzureADTokenExchange",
        now(),
    ) {
        Ok(c)
            if state.config.subjects.contains(&c.subject)
                && state.config.issuer.as_deref().is_none_or(|i| i == c.issuer) => {}
        Ok(_) => {
            state.count("entra.refused.subject");
            return aad_error(
                StatusCode::BAD_REQUEST,
                "invalid_client",
                "AADSTS700213: No matching federated identity record found for presented assertion subject",
            );
        }
        Err(e) => {
            state.count("entra.refused.assertion");
            return aad_error(
                StatusCode::BAD_REQUEST,
                "invalid_client",
                &format!("AADSTS700024: Client assertion is not valid: {e}"),
            );
        }
    }
    let Some(audience) = get("scope").strip_suffix("/.default") else {
        return aad_error(
            StatusCode::BAD_REQUEST,
            "invalid_scope",
            "AADSTS1002012: the scope must end in /.default",
        );
    };
    issue(&state, audience, "entra")
}

fn issue(state: &State, audience: &str, service: &str) -> Response {
    let life = state.config.lifetimes.entra_token;
    let (token, _) = state.issue(
        Kind::Entra(audience.trim_end_matches('/').to_string()),
        "eyJ.fake-entra-",
        life,
    );
    state.count(&format!("{service}.issued"));
    json(
        StatusCode::OK,
        serde_json::json!({"token_type": "Bearer", "expires_in": life, "ext_expires_in": life, "access_token": token}),
    )
}

/// `GET /metadata/identity/oauth2/token?api-version=...&resource=...`.
pub async fn imds_token(Axum(state): Axum<Arc<State>>, uri: Uri, headers: HeaderMap) -> Response {
    if state.is_down("azure-imds") {
        return down("azure-imds");
    }
    if headers.get("metadata").and_then(|v| v.to_str().ok()) != Some("true") {
        state.count("azure-imds.refused.header");
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "invalid_request", "error_description": "Required metadata header not specified"}),
        );
    }
    let q: BTreeMap<String, String> =
        url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    match q.get("resource") {
        Some(resource) if q.contains_key("api-version") => issue(&state, resource, "azure-imds"),
        _ => json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "invalid_request", "error_description": "resource and api-version are required"}),
        ),
    }
}

//! AWS: STS `AssumeRoleWithWebIdentity` (the ServiceAccount token's
//! signature against the API server's keys, audience `sts.amazonaws.com`,
//! expiry, subject and role), ECR `GetAuthorizationToken` (SigV4 recomputed
//! from the request as received, with issued credentials only, their
//! session token, and a date within five minutes), the EKS Pod Identity
//! agent (its authorization token is a ServiceAccount token for
//! `pods.eks.amazonaws.com`) and IMDSv2 (a session token first).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State as Axum;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use sigil_cloud::sigv4;

use crate::state::{Kind, State, now};
use crate::{down, json, rfc3339};

/// STS's XML error.
fn sts_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = format!(
        "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type>\
         <Code>{code}</Code><Message>{message}</Message></Error><RequestId>fake</RequestId></ErrorResponse>"
    );
    (status, [("content-type", "text/xml")], body).into_response()
}

/// An AWS JSON-protocol error.
fn json_error(status: StatusCode, kind: &str, message: &str) -> Response {
    json(
        status,
        serde_json::json!({"__type": kind, "message": message}),
    )
}

fn form(body: &[u8]) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

/// `POST /`: STS (a form with `Action`) or ECR (an `X-Amz-Target` header).
pub async fn post_root(
    Axum(state): Axum<Arc<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(target) = headers.get("x-amz-target").and_then(|v| v.to_str().ok()) {
        let target = target.to_string();
        return ecr(&state, &method, &uri, &headers, &body, &target);
    }
    sts(&state, &body)
}

fn sts(state: &State, body: &[u8]) -> Response {
    if state.is_down("sts") {
        return down("sts");
    }
    let f = form(body);
    if f.get("Action").map(String::as_str) != Some("AssumeRoleWithWebIdentity") {
        return sts_error(
            StatusCode::BAD_REQUEST,
            "InvalidAction",
            "only AssumeRoleWithWebIdentity is served",
        );
    }
    let token = f.get("WebIdentityToken").map(String::as_str).unwrap_or("");
    let claims = match crate::jwt::verify(token, &state.keys, "sts.amazonaws.com", now()) {
        Ok(c) => c,
        Err(e) if e.contains("expired") => {
            state.count("sts.refused.expired");
            return sts_error(
                StatusCode::BAD_REQUEST,
                "ExpiredTokenException",
                "Token expired",
            );
        }
        Err(e) => {
            state.count(if e.contains("audience") {
                "sts.refused.audience"
            } else {
                "sts.refused.token"
            });
            return sts_error(StatusCode::BAD_REQUEST, "InvalidIdentityToken", &e);
        }
    };
    if state
        .config
        .issuer
        .as_deref()
        .is_some_and(|i| i != claims.issuer)
    {
        state.count("sts.refused.issuer");
        return sts_error(
            StatusCode::BAD_REQUEST,
            "InvalidIdentityToken",
            "No OpenIDConnect provider found for the token's issuer",
        );
    }
    let role = f.get("RoleArn").map(String::as_str).unwrap_or("");
    if role != state.config.role_arn || !state.config.subjects.contains(&claims.subject) {
        state.count("sts.refused.role");
        return sts_error(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            "Not authorized to perform sts:AssumeRoleWithWebIdentity",
        );
    }
    let (id, c) = state.issue_aws(state.config.lifetimes.aws_credentials);
    state.count("sts.issued");
    let body = format!(
        "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
         <AssumeRoleWithWebIdentityResult><SubjectFromWebIdentityToken>{}</SubjectFromWebIdentityToken>\
         <Credentials><AccessKeyId>{id}</AccessKeyId><SecretAccessKey>{}</SecretAccessKey>\
         <SessionToken>{}</SessionToken><Expiration>{}</Expiration></Credentials>\
         </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
        claims.subject,
        c.secret,
        c.session.unwrap_or_default(),
        rfc3339(c.expires)
    );
    (StatusCode::OK, [("content-type", "text/xml")], body).into_response()
}

/// The SigV4 `Authorization` header's parts.
struct Authorization {
    key_id: String,
    date: String,
    region: String,
    service: String,
    signed_headers: Vec<String>,
    signature: String,
}

fn parse_authorization(value: &str) -> Option<Authorization> {
    let rest = value.strip_prefix("AWS4-HMAC-SHA256 ")?;
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        match k {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => signature = Some(v),
            _ => {}
        }
    }
    let mut scope = credential?.split('/');
    let (key_id, date, region, service, term) = (
        scope.next()?,
        scope.next()?,
        scope.next()?,
        scope.next()?,
        scope.next()?,
    );
    (term == "aws4_request").then(|| Authorization {
        key_id: key_id.to_string(),
        date: date.to_string(),
        region: region.to_string(),
        service: service.to_string(),
        signed_headers: signed
            .unwrap_or("")
            .split(';')
            .map(str::to_string)
            .collect(),
        signature: signature.unwrap_or("").to_string(),
    })
}

/// Checks the request's SigV4 signature as AWS does: recomputed from the
/// method, path, query, the headers it says it signed (as received) and the
/// body, with the secret of an issued, unexpired key whose session token
/// the request carries; its date within five minutes of now.
fn check_sigv4(
    state: &State,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    service: &str,
) -> Result<String, (&'static str, String)> {
    // HTTP/2 carries the host as the URI's authority, not as a header.
    let header = |n: &str| match headers.get(n).and_then(|v| v.to_str().ok()) {
        Some(v) => v.to_string(),
        None if n == "host" => uri.authority().map(|a| a.to_string()).unwrap_or_default(),
        None => String::new(),
    };
    let auth = parse_authorization(&header("authorization")).ok_or((
        "MissingAuthenticationTokenException",
        "no SigV4 Authorization header".to_string(),
    ))?;
    let credential = state.aws(&auth.key_id).ok_or((
        "UnrecognizedClientException",
        "The security token included in the request is invalid (unknown or expired key)"
            .to_string(),
    ))?;
    if credential
        .session
        .as_deref()
        .is_some_and(|s| s != header("x-amz-security-token"))
        || (credential.session.is_some()
            && !auth
                .signed_headers
                .iter()
                .any(|h| h == "x-amz-security-token"))
    {
        return Err((
            "UnrecognizedClientException",
            "the session token is missing, wrong or not signed".into(),
        ));
    }
    for required in ["host", "x-amz-date"] {
        if !auth.signed_headers.iter().any(|h| h == required) {
            return Err((
                "IncompleteSignatureException",
                format!("{required} is not signed"),
            ));
        }
    }
    let amz_date = header("x-amz-date");
    let at = time::PrimitiveDateTime::parse(
        &amz_date,
        time::macros::format_description!("[year][month][day]T[hour][minute][second]Z"),
    )
    .map(|t| t.assume_utc().unix_timestamp())
    .map_err(|_| {
        (
            "IncompleteSignatureException",
            format!("x-amz-date `{amz_date}` is not a date"),
        )
    })?;
    if (now() - at).abs() > 300 || !amz_date.starts_with(&auth.date) {
        return Err((
            "InvalidSignatureException",
            "Signature expired or its date does not match".into(),
        ));
    }
    if auth.service != service {
        return Err((
            "InvalidSignatureException",
            format!("signed for service {}, not {service}", auth.service),
        ));
    }
    let values: Vec<(String, String)> = auth
        .signed_headers
        .iter()
        .map(|n| (n.clone(), header(n)))
        .collect();
    let signed_headers: Vec<(&str, &str)> = values
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let query: Vec<(String, String)> =
        url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let query: Vec<(&str, &str)> = query
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let expected = sigv4::sign(
        &sigv4::Credentials {
            access_key_id: auth.key_id.clone(),
            secret_access_key: credential.secret,
            session_token: credential.session,
        },
        &auth.region,
        &auth.service,
        &amz_date,
        &sigv4::Request {
            method: method.as_str(),
            path: uri.path(),
            query: &query,
            headers: &signed_headers,
            payload: body,
        },
    );
    if expected.signature != auth.signature {
        return Err((
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided".into(),
        ));
    }
    Ok(auth.region)
}

fn ecr(
    state: &State,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    target: &str,
) -> Response {
    if state.is_down("ecr") {
        return down("ecr");
    }
    let (service, public) = match target {
        "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken" => ("ecr", false),
        "SpencerFrontendService.GetAuthorizationToken" => ("ecr-public", true),
        other => {
            return json_error(
                StatusCode::BAD_REQUEST,
                "UnknownOperationException",
                &format!("{other} is not served"),
            );
        }
    };
    if let Err((kind, message)) = check_sigv4(state, method, uri, headers, body, service) {
        state.count("ecr.refused.signature");
        return json_error(StatusCode::FORBIDDEN, kind, &message);
    }
    let life = state.config.lifetimes.ecr_token;
    let (password, expires) = state.issue(Kind::EcrPassword, "ecr-password-", life);
    state.count("ecr.issued");
    let token = base64::engine::general_purpose::STANDARD.encode(format!("AWS:{password}"));
    let data = serde_json::json!({"authorizationToken": token, "expiresAt": expires as f64,
        "proxyEndpoint": "https://fake.dkr.ecr.example"});
    if public {
        json(
            StatusCode::OK,
            serde_json::json!({"authorizationData": data}),
        )
    } else {
        json(
            StatusCode::OK,
            serde_json::json!({"authorizationData": [data]}),
        )
    }
}

fn agent_answer(state: &State) -> Response {
    let (id, c) = state.issue_aws(state.config.lifetimes.aws_credentials);
    json(
        StatusCode::OK,
        serde_json::json!({"Code": "Success", "AccessKeyId": id, "SecretAccessKey": c.secret,
            "Token": c.session, "AccountId": state.config.aws_account, "Expiration": rfc3339(c.expires)}),
    )
}

/// `GET /v1/credentials`: the EKS Pod Identity agent.
pub async fn pod_identity(Axum(state): Axum<Arc<State>>, headers: HeaderMap) -> Response {
    if state.is_down("pod-identity") {
        return down("pod-identity");
    }
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match crate::jwt::verify(token, &state.keys, "pods.eks.amazonaws.com", now()) {
        Ok(c) if state.config.subjects.contains(&c.subject) => {
            state.count("pod-identity.issued");
            agent_answer(&state)
        }
        Ok(_) => {
            state.count("pod-identity.refused.association");
            json(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"Message": "no Pod Identity association for this ServiceAccount"}),
            )
        }
        Err(e) => {
            state.count("pod-identity.refused.token");
            json(StatusCode::UNAUTHORIZED, serde_json::json!({"Message": e}))
        }
    }
}

/// The IMDSv2 role the fake serves.
const ROLE: &str = "sigil-node-role";

/// `PUT /latest/api/token`.
pub async fn imds_token(Axum(state): Axum<Arc<State>>, headers: HeaderMap) -> Response {
    if state.is_down("imds") {
        return down("imds");
    }
    let ttl = headers
        .get("x-aws-ec2-metadata-token-ttl-seconds")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|t| (1..=21600).contains(t));
    let Some(ttl) = ttl else {
        return (
            StatusCode::BAD_REQUEST,
            "X-aws-ec2-metadata-token-ttl-seconds (1-21600) is required",
        )
            .into_response();
    };
    let (token, _) = state.issue(Kind::Registry("imds".into()), "imds-", ttl);
    (StatusCode::OK, token).into_response()
}

/// `GET /latest/meta-data/iam/security-credentials/[ROLE]`.
pub async fn imds_credentials(
    Axum(state): Axum<Arc<State>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let session = headers
        .get("x-aws-ec2-metadata-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if state.token(session) != Some(Kind::Registry("imds".into())) {
        state.count("imds.refused.session");
        return (StatusCode::UNAUTHORIZED, "").into_response();
    }
    match uri.path().rsplit('/').next() {
        Some("") => (StatusCode::OK, format!("{ROLE}\n")).into_response(),
        Some(ROLE) => {
            state.count("imds.issued");
            agent_answer(&state)
        }
        _ => (StatusCode::NOT_FOUND, "").into_response(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_authorization_header_is_read_into_its_scope() {
        let a = parse_authorization(
            "AWS4-HMAC-SHA256 Credential=ASIA1/20260101/us-east-1/ecr/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, Signature=abcd",
        )
        .unwrap();
        assert_eq!(
            (a.key_id.as_str(), a.region.as_str(), a.service.as_str()),
            ("ASIA1", "us-east-1", "ecr")
        );
        assert_eq!(a.signed_headers, ["content-type", "host", "x-amz-date"]);
        assert!(parse_authorization("Bearer x").is_none());
        assert!(parse_authorization("AWS4-HMAC-SHA256 Credential=a/b/c/d/other").is_none());
    }
}

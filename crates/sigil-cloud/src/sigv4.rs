//! AWS Signature Version 4 (header form), as the AWS General Reference
//! specifies it: canonical request, string to sign, the HMAC key chain.
//! Tested against the vectors AWS publishes (the SigV4 test suite's
//! `get-vanilla` family and the S3 `GET Object` example).

use aws_lc_rs::{digest, hmac};

/// Access keys; `session_token` for temporary ones (STS).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key ID.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// One request to sign. Header names may be in any case; `host` and
/// `x-amz-date` must be among them (and `x-amz-security-token` when the
/// credentials carry one), since they are signed.
pub struct Request<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// The path, not yet percent-encoded (`/` for the KMS JSON API).
    pub path: &'a str,
    /// Query parameters, not yet encoded, in any order.
    pub query: &'a [(&'a str, &'a str)],
    /// Headers to sign.
    pub headers: &'a [(&'a str, &'a str)],
    /// The body.
    pub payload: &'a [u8],
}

/// What signing produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The canonical request (for tests and debugging; holds no secret).
    pub canonical_request: String,
    /// The string to sign.
    pub string_to_sign: String,
    /// The signature, lowercase hex.
    pub signature: String,
    /// The `Authorization` header's value.
    pub authorization: String,
}

/// `YYYYMMDDTHHMMSSZ` of `t`, the `x-amz-date` format.
pub fn amz_date(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Signs `request` for `service` in `region` at `amz_date` (see [`amz_date`]).
pub fn sign(
    credentials: &Credentials,
    region: &str,
    service: &str,
    amz_date: &str,
    request: &Request<'_>,
) -> Signed {
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), collapse_spaces(v)))
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed_headers = headers
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let mut query: Vec<(String, String)> = request
        .query
        .iter()
        .map(|(k, v)| (uri_encode(k, true), uri_encode(v, true)))
        .collect();
    query.sort();
    let canonical_query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let canonical_request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        request.method,
        uri_encode(request.path, false),
        canonical_query,
        canonical_headers,
        signed_headers,
        hex(digest::digest(&digest::SHA256, request.payload).as_ref()),
    );
    let date = amz_date.get(..8).unwrap_or(amz_date);
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical_request.as_bytes()).as_ref())
    );
    let mut key = format!("AWS4{}", credentials.secret_access_key).into_bytes();
    for part in [date, region, service, "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    let signature = hex(&hmac_sha256(&key, string_to_sign.as_bytes()));
    let authorization = format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
        credentials.access_key_id
    );
    Signed {
        canonical_request,
        string_to_sign,
        signature,
        authorization,
    }
}

/// The headers of a signed request of AWS's JSON 1.1 protocol (KMS, ECR):
/// `POST /` to `host` with `body`, operation `target` (`TrentService.GetPublicKey`,
/// `AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken`), signed for
/// `service` in `region` at `amz_date`. Every header to send but `host`
/// (which the HTTP client sets from the URL), `authorization` among them.
pub fn json_request_headers(
    credentials: &Credentials,
    region: &str,
    service: &str,
    target: &str,
    host: &str,
    body: &[u8],
    amz_date: &str,
) -> Vec<(&'static str, String)> {
    let mut headers: Vec<(&'static str, String)> = vec![
        ("content-type", "application/x-amz-json-1.1".into()),
        ("host", host.to_owned()),
        ("x-amz-date", amz_date.to_owned()),
        ("x-amz-target", target.to_owned()),
    ];
    if let Some(token) = &credentials.session_token {
        headers.push(("x-amz-security-token", token.clone()));
    }
    let signed_headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let signed = sign(
        credentials,
        region,
        service,
        amz_date,
        &Request {
            method: "POST",
            path: "/",
            query: &[],
            headers: &signed_headers,
            payload: body,
        },
    );
    headers.retain(|(k, _)| *k != "host");
    headers.push(("authorization", signed.authorization));
    headers
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Trims and folds runs of spaces into one, as canonical headers require.
fn collapse_spaces(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// RFC 3986 encoding of everything but unreserved characters (and `/` in
/// paths).
fn uri_encode(s: &str, encode_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (b == b'/' && !encode_slash) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SigV4 test suite's credentials and clock.
    fn suite_credentials() -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }
    const SUITE_DATE: &str = "20150830T123600Z";

    #[test]
    fn get_vanilla_gives_the_published_canonical_request_and_signature() {
        let signed = sign(
            &suite_credentials(),
            "us-east-1",
            "service",
            SUITE_DATE,
            &Request {
                method: "GET",
                path: "/",
                query: &[],
                headers: &[
                    ("Host", "example.amazonaws.com"),
                    ("X-Amz-Date", SUITE_DATE),
                ],
                payload: b"",
            },
        );
        assert_eq!(
            signed.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            signed.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n\
             bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"
        );
        assert_eq!(
            signed.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn query_parameters_are_sorted_as_in_get_vanilla_query_order_key_case() {
        let signed = sign(
            &suite_credentials(),
            "us-east-1",
            "service",
            SUITE_DATE,
            &Request {
                method: "GET",
                path: "/",
                query: &[("Param2", "value2"), ("Param1", "value1")],
                headers: &[
                    ("Host", "example.amazonaws.com"),
                    ("X-Amz-Date", SUITE_DATE),
                ],
                payload: b"",
            },
        );
        assert!(
            signed
                .canonical_request
                .contains("\nParam1=value1&Param2=value2\n"),
            "{}",
            signed.canonical_request
        );
        assert_eq!(
            signed.signature,
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
        );
    }

    #[test]
    fn the_s3_get_object_example_gives_the_published_signature() {
        // "Example: GET Object" of the S3 SigV4 header-signing documentation.
        let date = "20130524T000000Z";
        let signed = sign(
            &Credentials {
                access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
                secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
                session_token: None,
            },
            "us-east-1",
            "s3",
            date,
            &Request {
                method: "GET",
                path: "/test.txt",
                query: &[],
                headers: &[
                    ("Host", "examplebucket.s3.amazonaws.com"),
                    ("Range", "bytes=0-9"),
                    (
                        "x-amz-content-sha256",
                        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                    ),
                    ("x-amz-date", date),
                ],
                payload: b"",
            },
        );
        assert!(
            signed
                .string_to_sign
                .ends_with("7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"),
            "{}",
            signed.string_to_sign
        );
        assert_eq!(
            signed.signature,
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn header_values_are_trimmed_and_inner_spaces_folded() {
        assert_eq!(collapse_spaces("  a   b  c "), "a b c");
        assert_eq!(uri_encode("a b/c~", false), "a%20b/c~");
        assert_eq!(uri_encode("a=b/c", true), "a%3Db%2Fc");
    }

    #[test]
    fn a_json_request_signs_its_headers_and_the_session_token_and_sends_all_but_host() {
        let credentials = Credentials {
            session_token: Some("session".into()),
            ..suite_credentials()
        };
        let host = "kms.us-east-1.amazonaws.com";
        let body = br#"{"KeyId":"k"}"#;
        let headers = json_request_headers(
            &credentials,
            "us-east-1",
            "kms",
            "TrentService.GetPublicKey",
            host,
            body,
            SUITE_DATE,
        );
        let names: Vec<&str> = headers.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "content-type",
                "x-amz-date",
                "x-amz-target",
                "x-amz-security-token",
                "authorization"
            ]
        );
        // The signature is that of the same request signed by hand, host included.
        let expected = sign(
            &credentials,
            "us-east-1",
            "kms",
            SUITE_DATE,
            &Request {
                method: "POST",
                path: "/",
                query: &[],
                headers: &[
                    ("content-type", "application/x-amz-json-1.1"),
                    ("host", host),
                    ("x-amz-date", SUITE_DATE),
                    ("x-amz-target", "TrentService.GetPublicKey"),
                    ("x-amz-security-token", "session"),
                ],
                payload: body,
            },
        );
        assert_eq!(
            headers.last().map(|(_, v)| v.as_str()),
            Some(expected.authorization.as_str())
        );
        assert!(
            expected.authorization.contains(
                "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
            ),
            "{}",
            expected.authorization
        );
    }

    #[test]
    fn credentials_debug_output_hides_the_secret_and_token() {
        let shown = format!(
            "{:?}",
            Credentials {
                session_token: Some("tok".into()),
                ..suite_credentials()
            }
        );
        assert!(
            !shown.contains("wJalr") && !shown.contains("tok"),
            "{shown}"
        );
    }
}

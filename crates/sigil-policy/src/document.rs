//! The documents attestation and ClusterImagePolicy-level policies see,
//! built as sigstore policy-controller v0.15.1 builds them, because a CUE
//! (or Rego) verdict depends on every field present or absent:
//!
//! - attestation level: cosign v3.0.5's `AttestationToPayloadJSON`: the
//!   whole in-toto statement, decoded into Go types and encoded again with
//!   `encoding/json`. Numbers go through `float64`; for the predicate short
//!   names `vuln`, `slsaprovenance` and `link` the predicate is decoded into
//!   cosign's typed structs, which drop unknown fields and add absent ones
//!   as zero values (`"event_id": ""`, `"0001-01-01T00:00:00Z"`), and whose
//!   type errors fail the attestation;
//! - ClusterImagePolicy level: policy-controller's `PolicyResult`:
//!   `authorityMatches` (empty fields omitted, no predicates), then `spec`,
//!   `metadata` and `typemeta` of the highest-level object when the policy
//!   asks for them (workloads' `spec` reduced to the duck type
//!   policy-controller reads; no `typemeta` for a bare Pod).
//!
//! A document is kept both as the bytes Go would write (what CUE compiles)
//! and as JSON (what Rego reads).

use std::fmt::Write as _;

use serde_json::{Map, Number, Value};
use sigil_registry::config::ConfigFiles;
use sigil_verifier::dsse::Statement;
use sigil_verifier::identity::FulcioIdentity;

use crate::model::{AuthorityResult, CipPolicy, ResourceInfo, VerifiedAttestation};

/// A value as Go's `encoding/json` writes it: objects keep their field
/// order (struct order, or sorted keys for maps).
#[derive(Debug, Clone, PartialEq)]
pub enum GoValue {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A `float64`.
    Number(f64),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<GoValue>),
    /// An object, in output order.
    Object(Vec<(String, GoValue)>),
}

impl GoValue {
    /// Go's encoding: compact, HTML-escaped, `float64` formatting.
    pub fn to_go_json(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    /// The same value as JSON.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Null => Value::Null,
            Self::Bool(b) => Value::Bool(*b),
            Self::Number(f) => json_number(*f),
            Self::String(s) => Value::String(s.clone()),
            Self::Array(items) => Value::Array(items.iter().map(Self::to_json).collect()),
            Self::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// A JSON value decoded into Go's `interface{}`: maps with sorted keys,
    /// every number a `float64`.
    pub fn from_json(value: &Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::Bool(b) => Self::Bool(*b),
            Value::Number(n) => Self::Number(as_f64(n)),
            Value::String(s) => Self::String(s.clone()),
            Value::Array(items) => Self::Array(items.iter().map(Self::from_json).collect()),
            // serde_json's map is ordered by key, as Go writes map keys.
            Value::Object(map) => Self::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), Self::from_json(v)))
                    .collect(),
            ),
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Self::Null => out.push_str("null"),
            Self::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Self::Number(f) => out.push_str(&go_float(*f)),
            Self::String(s) => write_go_string(s, out),
            Self::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Self::Object(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_go_string(k, out);
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

fn as_f64(n: &Number) -> f64 {
    n.as_f64().unwrap_or(0.0)
}

/// A number Rego compares as Go's decoder would have produced it: integral
/// values within `i64` stay integers, the rest `f64`.
fn json_number(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
        Value::Number(Number::from(f as i64))
    } else {
        Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

/// `strconv.AppendFloat(f, 'f' or 'e', -1, 64)` as `encoding/json` chooses:
/// the shortest digits that round-trip, `e` notation below 1e-6 and from
/// 1e21, the exponent without a leading zero (`1e-7`, `1e+21`).
pub fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => s,
        }
    } else {
        format!("{f}")
    }
}

/// A Go string literal: `"` and `\` escaped, `\b \f \n \r \t` short,
/// other control characters, `<`, `>`, `&`, U+2028 and U+2029 as `\u00XX`.
fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A policy's input document, in both forms.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Go's encoding (what CUE compiles).
    pub bytes: String,
    /// JSON (what Rego reads).
    pub json: Value,
}

impl Document {
    fn new(value: &GoValue) -> Self {
        Self {
            bytes: value.to_go_json(),
            json: value.to_json(),
        }
    }
}

/// How cosign re-encodes a statement, chosen by the predicate type *as the
/// ClusterImagePolicy writes it* (a short name or a URI): the same
/// attestation gives a different document under `vuln` and under its URI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementShape {
    /// `in_toto.Statement`: the predicate as it is (custom, spdx, spdxjson,
    /// cyclonedx, slsaprovenance02, slsaprovenance1, openvex, any URI).
    Generic,
    /// `in_toto.ProvenanceStatementSLSA02` (`slsaprovenance`).
    SlsaProvenance02,
    /// `in_toto.LinkStatement` (`link`).
    Link,
    /// cosign's `CosignVulnStatement` (`vuln`).
    Vuln,
}

impl StatementShape {
    /// The shape cosign uses for a CIP's `predicateType` value.
    pub fn for_predicate_type(name: &str) -> Self {
        match name {
            "slsaprovenance" => Self::SlsaProvenance02,
            "link" => Self::Link,
            "vuln" => Self::Vuln,
            _ => Self::Generic,
        }
    }

    fn go_name(self) -> &'static str {
        match self {
            Self::Generic => "Statement",
            Self::SlsaProvenance02 => "ProvenanceStatementSLSA02",
            Self::Link => "LinkStatement",
            Self::Vuln => "CosignVulnStatement",
        }
    }
}

/// A Go type the typed statements use.
enum Ty {
    Str,
    Bool,
    /// `interface{}`.
    Any,
    /// `map[string]string`.
    StrMap,
    /// `map[string]interface{}`.
    AnyMap,
    /// `time.Time`.
    Time,
    /// A struct: its Go type (package-qualified) and fields.
    Struct(&'static str, &'static [Field]),
    Ptr(&'static Ty),
    Slice(&'static Ty),
}

struct Field {
    json: &'static str,
    ty: Ty,
    omitempty: bool,
}

const fn field(json: &'static str, ty: Ty) -> Field {
    Field {
        json,
        ty,
        omitempty: false,
    }
}

const fn omitempty(json: &'static str, ty: Ty) -> Field {
    Field {
        json,
        ty,
        omitempty: true,
    }
}

/// cosign v3.0.5 `pkg/cosign/attestation.CosignVulnPredicate`.
const VULN_PREDICATE: Ty = Ty::Struct(
    "attestation.CosignVulnPredicate",
    &[
        field(
            "invocation",
            Ty::Struct(
                "attestation.Invocation",
                &[
                    field("parameters", Ty::Any),
                    field("uri", Ty::Str),
                    field("event_id", Ty::Str),
                    field("builder.id", Ty::Str),
                ],
            ),
        ),
        field(
            "scanner",
            Ty::Struct(
                "attestation.Scanner",
                &[
                    field("uri", Ty::Str),
                    field("version", Ty::Str),
                    field(
                        "db",
                        Ty::Struct(
                            "attestation.DB",
                            &[field("uri", Ty::Str), field("version", Ty::Str)],
                        ),
                    ),
                    field("result", Ty::Any),
                ],
            ),
        ),
        field(
            "metadata",
            Ty::Struct(
                "attestation.Metadata",
                &[
                    field("scanStartedOn", Ty::Time),
                    field("scanFinishedOn", Ty::Time),
                ],
            ),
        ),
    ],
);

/// in-toto-golang v0.9.0 `slsa_provenance/v0.2.ProvenancePredicate`.
const SLSA02_PREDICATE: Ty = Ty::Struct(
    "v02.ProvenancePredicate",
    &[
        field(
            "builder",
            Ty::Struct("common.ProvenanceBuilder", &[field("id", Ty::Str)]),
        ),
        field("buildType", Ty::Str),
        omitempty(
            "invocation",
            Ty::Struct(
                "v02.ProvenanceInvocation",
                &[
                    omitempty(
                        "configSource",
                        Ty::Struct(
                            "v02.ConfigSource",
                            &[
                                omitempty("uri", Ty::Str),
                                omitempty("digest", Ty::StrMap),
                                omitempty("entryPoint", Ty::Str),
                            ],
                        ),
                    ),
                    omitempty("parameters", Ty::Any),
                    omitempty("environment", Ty::Any),
                ],
            ),
        ),
        omitempty("buildConfig", Ty::Any),
        omitempty(
            "metadata",
            Ty::Ptr(&Ty::Struct(
                "v02.ProvenanceMetadata",
                &[
                    omitempty("buildInvocationID", Ty::Str),
                    omitempty("buildStartedOn", Ty::Ptr(&Ty::Time)),
                    omitempty("buildFinishedOn", Ty::Ptr(&Ty::Time)),
                    field(
                        "completeness",
                        Ty::Struct(
                            "v02.ProvenanceComplete",
                            &[
                                field("parameters", Ty::Bool),
                                field("environment", Ty::Bool),
                                field("materials", Ty::Bool),
                            ],
                        ),
                    ),
                    field("reproducible", Ty::Bool),
                ],
            )),
        ),
        omitempty(
            "materials",
            Ty::Slice(&Ty::Struct(
                "common.ProvenanceMaterial",
                &[omitempty("uri", Ty::Str), omitempty("digest", Ty::StrMap)],
            )),
        ),
    ],
);

/// in-toto-golang v0.9.0 `in_toto.Link`.
const LINK_PREDICATE: Ty = Ty::Struct(
    "in_toto.Link",
    &[
        field("_type", Ty::Str),
        field("name", Ty::Str),
        field("materials", Ty::AnyMap),
        field("products", Ty::AnyMap),
        field("byproducts", Ty::AnyMap),
        field("command", Ty::Slice(&Ty::Str)),
        field("environment", Ty::AnyMap),
    ],
);

/// Where a value sits, for Go's error text: the innermost struct's type
/// name and the JSON field path from the statement down.
#[derive(Clone, Copy)]
struct At<'a> {
    owner: &'a str,
    path: &'a str,
}

/// A decoding error as Go words it.
fn type_error(found: &Value, at: At<'_>, go_type: &str) -> String {
    let kind = match found {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let owner = at.owner.rsplit('.').next().unwrap_or(at.owner);
    format!(
        "json: cannot unmarshal {kind} into Go struct field {owner}.{} of type {go_type}",
        at.path
    )
}

/// Decodes `value` (absent: `None`) into `ty` and encodes it again, as
/// `json.Unmarshal` then `json.Marshal` would. Returns the value and whether
/// it is "empty" for `omitempty`.
fn retype(value: Option<&Value>, ty: &Ty, at: At<'_>) -> Result<(GoValue, bool), String> {
    let value = value.filter(|v| !v.is_null());
    match ty {
        Ty::Str => match value {
            None => Ok((GoValue::String(String::new()), true)),
            Some(Value::String(s)) => Ok((GoValue::String(s.clone()), s.is_empty())),
            Some(other) => Err(type_error(other, at, "string")),
        },
        Ty::Bool => match value {
            None => Ok((GoValue::Bool(false), true)),
            Some(Value::Bool(b)) => Ok((GoValue::Bool(*b), !b)),
            Some(other) => Err(type_error(other, at, "bool")),
        },
        Ty::Any => Ok(match value {
            None => (GoValue::Null, true),
            Some(v) => (GoValue::from_json(v), false),
        }),
        Ty::StrMap | Ty::AnyMap => {
            let strings = matches!(ty, Ty::StrMap);
            match value {
                None => Ok((GoValue::Null, true)),
                Some(Value::Object(map)) => {
                    let mut fields = Vec::with_capacity(map.len());
                    for (k, v) in map {
                        let item = match v {
                            Value::String(s) if strings => GoValue::String(s.clone()),
                            other if strings => {
                                return Err(type_error(other, at, "string"));
                            }
                            other => GoValue::from_json(other),
                        };
                        fields.push((k.clone(), item));
                    }
                    let empty = fields.is_empty();
                    Ok((GoValue::Object(fields), empty))
                }
                Some(other) => Err(type_error(
                    other,
                    at,
                    if strings {
                        "map[string]string"
                    } else {
                        "map[string]interface {}"
                    },
                )),
            }
        }
        Ty::Time => match value {
            None => Ok((GoValue::String(GO_ZERO_TIME.into()), false)),
            Some(Value::String(s)) => match go_time(s) {
                Some(t) => Ok((GoValue::String(t), false)),
                None => Err(format!(
                    "parsing time \"{s}\" as \"2006-01-02T15:04:05Z07:00\": not RFC 3339 \
                     (Go struct field {}.{})",
                    at.owner.rsplit('.').next().unwrap_or(at.owner),
                    at.path
                )),
            },
            Some(_) => Err("Time.UnmarshalJSON: input is not a JSON string".into()),
        },
        Ty::Struct(name, fields) => {
            let object = match value {
                None => None,
                Some(Value::Object(map)) => Some(map),
                Some(other) => return Err(type_error(other, at, name)),
            };
            let mut out = Vec::with_capacity(fields.len());
            for f in *fields {
                let v = object.and_then(|m| go_field(m, f.json));
                let path = format!("{}.{}", at.path, f.json);
                let inner = At {
                    owner: name,
                    path: &path,
                };
                let (encoded, empty) = retype(v, &f.ty, inner)?;
                if !(f.omitempty && empty) {
                    out.push((f.json.to_owned(), encoded));
                }
            }
            // Go's omitempty never omits a struct.
            Ok((GoValue::Object(out), false))
        }
        Ty::Ptr(inner) => match value {
            None => Ok((GoValue::Null, true)),
            Some(v) => Ok((retype(Some(v), inner, at)?.0, false)),
        },
        Ty::Slice(inner) => match value {
            None => Ok((GoValue::Null, true)),
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    // A null element decodes to the element type's zero value.
                    out.push(retype(Some(item), inner, at)?.0);
                }
                let empty = out.is_empty();
                Ok((GoValue::Array(out), empty))
            }
            Some(other) => Err(type_error(other, at, "slice")),
        },
    }
}

/// The JSON key Go's decoder assigns to a struct field: the exact name, or
/// else a name equal to it ignoring ASCII case.
fn go_field<'a>(map: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    map.get(name).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

/// `time.Time{}` as `MarshalJSON` writes it.
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Parses an RFC 3339 time as Go's `time.Time.UnmarshalJSON` does and
/// writes it as its `MarshalJSON` does (`RFC3339Nano`: the fraction without
/// trailing zeros, `Z` for a zero offset, the offset kept otherwise).
fn go_time(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(r)?;
        if part.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(part).ok()?.parse().ok()
        } else {
            None
        }
    };
    let sep = |i: usize, c: u8| b.get(i) == Some(&c);
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(sep(4, b'-') && sep(7, b'-') && sep(10, b'T') && sep(13, b':') && sep(16, b':')) {
        return None;
    }
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in(month, year)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut rest = b.get(19..)?;
    let mut fraction = String::new();
    // Go also accepts a comma before the fraction (and writes a period).
    if matches!(rest.first(), Some(b'.' | b',')) && rest.get(1).is_some_and(u8::is_ascii_digit) {
        let n = 1 + rest
            .iter()
            .skip(1)
            .take_while(|c| c.is_ascii_digit())
            .count();
        // Go keeps nanoseconds: nine digits, truncated.
        fraction = rest.get(1..n)?.iter().take(9).map(|&c| c as char).collect();
        rest = rest.get(n..)?;
    }
    let fraction = fraction.trim_end_matches('0');
    let zone = match rest {
        b"Z" => "Z".to_owned(),
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hh = digits_of(*h1, *h2)?;
            let mm = digits_of(*m1, *m2)?;
            if hh > 23 || mm > 59 {
                return None;
            }
            if hh == 0 && mm == 0 {
                "Z".to_owned()
            } else {
                format!("{}{hh:02}:{mm:02}", *sign as char)
            }
        }
        _ => return None,
    };
    let mut out = format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}");
    if !fraction.is_empty() {
        out.push('.');
        out.push_str(fraction);
    }
    out.push_str(&zone);
    Some(out)
}

fn digits_of(a: u8, b: u8) -> Option<u32> {
    (a.is_ascii_digit() && b.is_ascii_digit())
        .then(|| u32::from(a - b'0') * 10 + u32::from(b - b'0'))
}

fn days_in(month: u32, year: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The attestation-level document for `statement`, as policy-controller
/// builds it for an attestation the CIP names with `predicate_type`.
/// An error is cosign's decoding error: the attestation then fails.
pub fn attestation_document(
    statement: &Statement,
    shape: StatementShape,
) -> Result<Document, String> {
    let subjects = GoValue::Array(
        statement
            .subject
            .iter()
            .map(|s| {
                GoValue::Object(vec![
                    (
                        "name".into(),
                        GoValue::String(s.name.clone().unwrap_or_default()),
                    ),
                    (
                        "digest".into(),
                        GoValue::Object(
                            s.digest
                                .iter()
                                .map(|(k, v)| (k.clone(), GoValue::String(v.clone())))
                                .collect(),
                        ),
                    ),
                ])
            })
            .collect(),
    );
    let name = shape.go_name();
    let predicate = match shape {
        StatementShape::Generic => GoValue::from_json(&statement.predicate),
        StatementShape::Vuln => typed(&statement.predicate, &VULN_PREDICATE, name)?,
        StatementShape::SlsaProvenance02 => typed(&statement.predicate, &SLSA02_PREDICATE, name)?,
        StatementShape::Link => typed(&statement.predicate, &LINK_PREDICATE, name)?,
    };
    let document = GoValue::Object(vec![
        (
            "_type".into(),
            GoValue::String(statement.statement_type.clone()),
        ),
        (
            "predicateType".into(),
            GoValue::String(statement.predicate_type.clone()),
        ),
        ("subject".into(), subjects),
        ("predicate".into(), predicate),
    ]);
    Ok(Document::new(&document))
}

fn typed(predicate: &Value, ty: &Ty, name: &str) -> Result<GoValue, String> {
    let at = At {
        owner: name,
        path: "predicate",
    };
    retype(Some(predicate), ty, at)
        .map(|(v, _)| v)
        .map_err(|e| format!("unmarshaling {name}: {e}"))
}

/// The ClusterImagePolicy-level document (policy-controller's
/// `PolicyResult`), for the authorities that passed, with the image's
/// config files by platform when the policy fetched them.
pub fn policy_document(
    authorities: &[AuthorityResult],
    cip: &CipPolicy,
    resource: &ResourceInfo,
    config: Option<&ConfigFiles>,
) -> Document {
    let mut matches = Vec::new();
    for a in authorities {
        let Ok(m) = &a.outcome else { continue };
        let mut entry = Vec::new();
        if !m.signatures.is_empty() {
            let signatures = m
                .signatures
                .iter()
                .map(|s| GoValue::Object(signer_fields(&s.id, s.identity.as_ref())))
                .collect();
            entry.push(("signatures".into(), GoValue::Array(signatures)));
        }
        if !m.attestations.is_empty() {
            let by_name = m
                .attestations
                .iter()
                .map(|(name, list)| {
                    let entries = list
                        .iter()
                        .map(|att| attestation_entry(att, m.predicate_types.get(name)))
                        .collect();
                    (name.clone(), GoValue::Array(entries))
                })
                .collect();
            entry.push(("attestations".into(), GoValue::Object(by_name)));
        }
        if a.kind == "static" {
            entry.push(("static".into(), GoValue::Bool(true)));
        }
        matches.push((a.name.clone(), GoValue::Object(entry)));
    }
    matches.sort_by(|a, b| a.0.cmp(&b.0));
    let mut doc = vec![("authorityMatches".into(), GoValue::Object(matches))];
    // A map with omitempty: an image whose configs were read but came to
    // nothing has no `config`.
    if let Some(config) = config.filter(|c| !c.is_empty()) {
        let by_platform = config
            .iter()
            .map(|(platform, file)| (platform.clone(), GoValue::from_json(file)))
            .collect();
        doc.push(("config".into(), GoValue::Object(by_platform)));
    }
    if cip.include_spec && !resource.spec.is_null() {
        doc.push(("spec".into(), GoValue::from_json(&duck_spec(resource))));
    }
    if cip.include_object_meta && !resource.metadata.is_null() {
        doc.push(("metadata".into(), GoValue::from_json(&resource.metadata)));
    }
    // policy-controller has no TypeMeta for bare Pods.
    if cip.include_type_meta && resource.kind != "Pod" && !resource.kind.is_empty() {
        let api_version = if resource.group.is_empty() {
            resource.version.clone()
        } else {
            format!("{}/{}", resource.group, resource.version)
        };
        doc.push((
            "typemeta".into(),
            GoValue::Object(vec![
                ("kind".into(), GoValue::String(resource.kind.clone())),
                ("apiVersion".into(), GoValue::String(api_version)),
            ]),
        ));
    }
    Document::new(&GoValue::Object(doc))
}

/// The `spec` policy-controller decodes each kind into: the PodSpec of a
/// Pod; `replicas`, `selector` and `template` of Deployments, ReplicaSets
/// and StatefulSets (its PodScalable duck type); only `template` of
/// DaemonSets and Jobs (knative's WithPod); a CronJob's whole spec.
fn duck_spec(resource: &ResourceInfo) -> Value {
    let spec = &resource.spec;
    let pick = |keys: &[&str]| {
        let mut out = Map::new();
        for key in keys {
            match spec.get(*key) {
                Some(v) => {
                    out.insert((*key).to_owned(), v.clone());
                }
                // `selector` is a pointer without omitempty.
                None if *key == "selector" => {
                    out.insert("selector".into(), Value::Null);
                }
                None => {}
            }
        }
        Value::Object(out)
    };
    match resource.kind.as_str() {
        "Deployment" | "ReplicaSet" | "StatefulSet" => pick(&["replicas", "selector", "template"]),
        "DaemonSet" | "Job" | "ReplicationController" => pick(&["template"]),
        _ => spec.clone(),
    }
}

/// policy-controller's `PolicySignature`: every field omitted when empty;
/// a key-based signature has only its `id`.
fn signer_fields(id: &str, identity: Option<&FulcioIdentity>) -> Vec<(String, GoValue)> {
    let mut fields = Vec::new();
    let mut put = |key: &str, value: Option<&str>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            fields.push((key.to_owned(), GoValue::String(v.to_owned())));
        }
    };
    put("id", Some(id));
    if let Some(i) = identity {
        let e = &i.extensions;
        put("subject", Some(&i.subject));
        put("issuer", i.issuer.as_deref());
        put(
            "githubWorkflowTrigger",
            e.github_workflow_trigger.as_deref(),
        );
        put("githubWorkflowSha", e.github_workflow_sha.as_deref());
        put("githubWorkflowName", e.github_workflow_name.as_deref());
        put(
            "githubWorkflowRepo",
            e.github_workflow_repository.as_deref(),
        );
        put("githubWorkflowRef", e.github_workflow_ref.as_deref());
    }
    fields
}

/// policy-controller's `PolicyAttestation`: the signer's fields, the
/// predicate type as the CIP names it, and the attestation's digest; never
/// the predicate itself.
fn attestation_entry(att: &VerifiedAttestation, predicate_type: Option<&String>) -> GoValue {
    let mut fields = signer_fields(&att.id, att.identity.as_ref());
    let predicate_type = predicate_type.unwrap_or(&att.statement.predicate_type);
    if !predicate_type.is_empty() {
        fields.push((
            "predicateType".into(),
            GoValue::String(predicate_type.clone()),
        ));
    }
    if !att.id.is_empty() {
        fields.push(("digest".into(), GoValue::String(att.id.clone())));
    }
    GoValue::Object(fields)
}

#[cfg(test)]
mod tests;

//! Conversion of Kyverno's image verification into sigil's policies: the
//! `verifyImages` rules of `kyverno.io` ClusterPolicy and Policy, and
//! `policies.kyverno.io` ImageValidatingPolicy. Kyverno 1.17 deprecated
//! ClusterPolicy, so its users rewrite these rules anyway.
//!
//! What Kyverno requires maps onto sigil's semantics as follows. All
//! policies that select an image must pass, and within one policy any
//! authority suffices; so an attestor set whose entries must all verify
//! (Kyverno's default `count`) becomes one policy per entry, a set with
//! `count: 1` one policy with an authority per entry, and each set, and each
//! attestation, policies of their own. A requirement sigil cannot express
//! (another `count`, signing certificates, Notary-signed attestations, CEL
//! checks of payloads, conditions with operators or keys beyond the simple
//! ones) is
//! never converted into something weaker: its verifyImages entry, or the
//! whole ImageValidatingPolicy, is reported and left out. Where sigil is
//! stricter than Kyverno (it judges every workload, not only the matched
//! ones; it never skips an image Kyverno was told to skip), the conversion
//! warns.
//!
//! Kyverno's Notary verification (`type: Notary` rules, `notary` attestors)
//! builds one Notation trust policy: every repository, level `strict`, the
//! rule's certificates as trust store `ca:kyverno` (and its TSA roots as
//! `tsa:kyverno`), any identity they certify. That document and those
//! stores become a `notation` authority, so sigil runs the same checks.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::foreign::{ForeignConversion, object_name, policy_object, text};

/// Kyverno's API versions of ClusterPolicy and Policy.
const POLICY_VERSIONS: &[&str] = &["kyverno.io/v1", "kyverno.io/v2beta1"];
/// Kyverno's API versions of ImageValidatingPolicy.
const IVP_VERSIONS: &[&str] = &[
    "policies.kyverno.io/v1alpha1",
    "policies.kyverno.io/v1beta1",
    "policies.kyverno.io/v1",
];
/// The Rekor that Kyverno uses when a rule names none.
const PUBLIC_REKOR: &str = "https://rekor.sigstore.dev";

/// Whether `doc` is a Kyverno object this module converts.
pub fn is_kyverno(doc: &Value) -> bool {
    let api = text(doc, "/apiVersion");
    let kind = text(doc, "/kind");
    (POLICY_VERSIONS.contains(&api) && matches!(kind, "ClusterPolicy" | "Policy"))
        || (IVP_VERSIONS.contains(&api)
            && matches!(
                kind,
                "ImageValidatingPolicy" | "NamespacedImageValidatingPolicy"
            ))
}

/// Converts one Kyverno document ([`is_kyverno`]).
pub fn convert_kyverno(doc: &Value) -> ForeignConversion {
    let mut c = ForeignConversion::default();
    let target = Target::of(doc);
    if text(doc, "/kind").ends_with("ImageValidatingPolicy") {
        convert_ivp(doc, &target, &mut c);
    } else {
        convert_policy(doc, &target, &mut c);
    }
    c
}

fn list<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Where converted policies go: cluster-wide, or a namespace.
struct Target {
    name: String,
    namespace: Option<String>,
}

impl Target {
    fn of(doc: &Value) -> Self {
        let namespaced = matches!(
            text(doc, "/kind"),
            "Policy" | "NamespacedImageValidatingPolicy"
        );
        Self {
            name: text(doc, "/metadata/name").to_string(),
            namespace: namespaced.then(|| text(doc, "/metadata/namespace").to_string()),
        }
    }
}

/// A Kyverno image pattern as a sigil glob: Kyverno's `*` matches any run
/// of characters, `/` included, which sigil writes `**`.
fn glob_of(pattern: &str, at: &str) -> Result<(String, Option<String>), String> {
    if pattern.contains('?') {
        return Err(format!(
            "{at}: `{pattern}`: `?` (one character) has no counterpart in sigil's globs; \
             write the pattern without it"
        ));
    }
    if pattern.contains("{{") {
        return Err(format!(
            "{at}: `{pattern}`: a Kyverno variable cannot be resolved ahead of admission"
        ));
    }
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(i) = rest.find('*') {
        out.push_str(rest.get(..i).unwrap_or_default());
        out.push_str("**");
        rest = rest.get(i..).unwrap_or_default().trim_start_matches('*');
    }
    out.push_str(rest);
    let note = (out != pattern).then(|| {
        format!(
            "{at}: `{pattern}` written as the glob `{out}` (Kyverno's `*` also matches `/`, \
             as sigil's `**` does)"
        )
    });
    Ok((out, note))
}

/// A converted authority, or why the entry does not map.
type Converted = Result<Value, String>;

/// One Kyverno `kyverno.io` attestor entry (`keys`, `keyless`, ...) as a
/// sigil authority.
fn authority_of_entry(entry: &Value, name: &str, at: &str, c: &mut ForeignConversion) -> Converted {
    if let Some(keys) = entry.get("keys") {
        let mut key = Map::new();
        let public = text(keys, "/publicKeys").trim();
        if let Some(kms) = keys.get("kms").and_then(Value::as_str) {
            key.insert("kms".into(), Value::from(kms));
        } else if let Some(secret) = keys.get("secret") {
            key.insert("secretRef".into(), json!({ "name": text(secret, "/name") }));
            c.warnings.push(format!(
                "{at}.keys.secret: Secret `{}` is read from sigil's namespace for a cluster-wide \
                 policy (an ImagePolicy's own namespace otherwise), not from `{}`; copy it there",
                text(secret, "/name"),
                text(secret, "/namespace"),
            ));
        } else if public.starts_with("k8s://") {
            return Err(format!(
                "{at}.keys.publicKeys: `{public}` names a Secret by URI; give its key as \
                 `keys.secret` or inline PEM"
            ));
        } else if public.contains("-----BEGIN") {
            if public.matches("-----BEGIN").count() > 1 {
                return Err(format!(
                    "{at}.keys.publicKeys: several keys in one entry; give each key an entry of \
                     its own"
                ));
            }
            key.insert("data".into(), Value::from(format!("{public}\n")));
        } else if !public.is_empty() {
            key.insert("kms".into(), Value::from(public));
        } else {
            return Err(format!("{at}.keys: no publicKeys, secret or kms"));
        }
        match text(keys, "/signatureAlgorithm") {
            "" | "sha256" => {}
            alg @ ("sha224" | "sha384" | "sha512") => {
                key.insert("hashAlgorithm".into(), Value::from(alg));
            }
            other => {
                return Err(format!(
                    "{at}.keys.signatureAlgorithm: `{other}` is not a hash sigil checks"
                ));
            }
        }
        let mut a = Map::new();
        a.insert("name".into(), Value::from(name));
        a.insert("key".into(), Value::Object(key));
        if let Some(ctlog) = tlog(keys, at, "keys", true)? {
            a.insert("ctlog".into(), ctlog);
        }
        return Ok(Value::Object(a));
    }
    if let Some(keyless) = entry.get("keyless") {
        let mut identity = identity_of(keyless);
        for (field, regexp) in [("issuer", "issuerRegExp"), ("subject", "subjectRegExp")] {
            if !identity.contains_key(field) && !identity.contains_key(regexp) {
                identity.insert(regexp.into(), Value::from(".*"));
                c.changes.push(format!(
                    "{at}.keyless: no {field}: any {field} is accepted, written `{regexp}: .*`"
                ));
            }
        }
        if let Some(Value::Object(ext)) = keyless.get("additionalExtensions") {
            let mut claims = Map::new();
            for (k, v) in ext {
                let claim = match k.as_str() {
                    "githubWorkflowSha" => "githubWorkflowSHA",
                    other => other,
                };
                let Some(v) = v.as_str() else {
                    return Err(format!(
                        "{at}.keyless.additionalExtensions.{k}: not a string"
                    ));
                };
                claims.insert(claim.into(), Value::from(v));
            }
            if !claims.is_empty() {
                identity.insert("claims".into(), Value::Object(claims));
            }
        }
        let mut k = Map::new();
        k.insert(
            "identities".into(),
            Value::Array(vec![Value::Object(identity)]),
        );
        let roots = text(keyless, "/roots").trim();
        if !roots.is_empty() {
            k.insert("ca-cert".into(), json!({ "data": format!("{roots}\n") }));
        }
        if keyless.pointer("/ctlog/ignoreSCT") == Some(&Value::Bool(true)) {
            k.insert("insecureIgnoreSCT".into(), Value::Bool(true));
        }
        let mut a = Map::new();
        a.insert("name".into(), Value::from(name));
        a.insert("keyless".into(), Value::Object(k));
        if let Some(ctlog) = tlog(keyless, at, "keyless", false)? {
            a.insert("ctlog".into(), ctlog);
        }
        return Ok(Value::Object(a));
    }
    if entry.get("certificates").is_some() {
        return Err(format!(
            "{at}.certificates: a signing certificate given in the policy has no counterpart in \
             sigil's authorities; verify with its public key (`keys`) or keyless identities"
        ));
    }
    if entry.get("attestor").is_some() {
        return Err(format!(
            "{at}.attestor: nested attestor sets do not map; flatten them into entries"
        ));
    }
    Err(format!(
        "{at}: an entry without keys or keyless does not map"
    ))
}

/// A sigil identity's issuer and subject fields, from the Kyverno object
/// that holds them under the same names (a keyless attestor, or one of an
/// ImageValidatingPolicy's identities); empty values are left out.
fn identity_of(src: &Value) -> Map<String, Value> {
    let mut identity = Map::new();
    for field in ["issuer", "issuerRegExp", "subject", "subjectRegExp"] {
        if let Some(v) = src.get(field).and_then(Value::as_str)
            && !v.is_empty()
        {
            identity.insert(field.into(), Value::from(v));
        }
    }
    identity
}

/// The authority's `ctlog` for Kyverno's `rekor`/`ctlog` settings.
fn tlog(entry: &Value, at: &str, field: &str, is_key: bool) -> Result<Option<Value>, String> {
    let given = |p: &str| entry.pointer(p).is_some_and(|k| k.as_str() != Some(""));
    log_setting(
        LogSetting {
            keys_at: &format!("{at}.{field}"),
            keys_given: given("/rekor/pubkey") || given("/ctlog/pubkey"),
            ignore_at: &format!("{at}.{field}.rekor.ignoreTlog"),
            ignore: entry.pointer("/rekor/ignoreTlog") == Some(&Value::Bool(true)),
            url: text(entry, "/rekor/url"),
        },
        is_key,
    )
}

/// A Kyverno transparency log setting, wherever the policy kind keeps it.
struct LogSetting<'a> {
    /// Where the log keys would be, for the problem's words.
    keys_at: &'a str,
    /// Whether the policy gives Rekor or CT log keys.
    keys_given: bool,
    /// Where the switch that skips the log is.
    ignore_at: &'a str,
    /// Whether it skips the transparency log.
    ignore: bool,
    /// The Rekor named, empty for Kyverno's default.
    url: &'a str,
}

/// The `ctlog` of a key (`is_key`) or keyless authority for `log`: none for
/// the public-good Rekor, `{}` to skip the log (keys only: a keyless
/// signature's time comes from verified evidence), `{url}` for another.
fn log_setting(log: LogSetting<'_>, is_key: bool) -> Result<Option<Value>, String> {
    if log.keys_given {
        return Err(format!(
            "{}: a Rekor or CT log key given in the policy; put the instance's keys in a \
             TrustRoot and name it with `ctlog.trustRootRef` (and `keyless.trustRootRef`)",
            log.keys_at
        ));
    }
    if log.ignore {
        if !is_key {
            return Err(format!(
                "{}: sigil takes a keyless signature's time only from a transparency log or an \
                 RFC 3161 timestamp, never the wall clock; drop it, or name a TrustRoot with a \
                 timestamp authority",
                log.ignore_at
            ));
        }
        return Ok(Some(json!({})));
    }
    let url = log.url.trim_end_matches('/');
    if url.is_empty() || url == PUBLIC_REKOR {
        return Ok(None);
    }
    Ok(Some(json!({ "url": url })))
}

/// The authorities of one attestor set, grouped into the policies they need:
/// one policy of all of them when any one suffices, one policy each when all
/// must verify.
fn attestor_set(
    set: &Value,
    at: &str,
    notary: bool,
    c: &mut ForeignConversion,
) -> Result<Vec<Vec<Value>>, String> {
    let entries = list(set, "/entries");
    if entries.is_empty() {
        return Err(format!("{at}.entries: empty"));
    }
    let mut authorities = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let name = format!("attestor-{i}");
        let entry_at = format!("{at}.entries[{i}]");
        authorities.push(if notary {
            notary_certificates(e, &name, &entry_at)?
        } else {
            authority_of_entry(e, &name, &entry_at, c)?
        });
    }
    let count = set.get("count").and_then(Value::as_u64);
    match count {
        None => Ok(authorities.into_iter().map(|a| vec![a]).collect()),
        Some(n) if n as usize == entries.len() => {
            Ok(authorities.into_iter().map(|a| vec![a]).collect())
        }
        Some(1) => Ok(vec![authorities]),
        Some(n) => Err(format!(
            "{at}.count: {n} of {} entries must verify; sigil expresses one of them (one policy) \
             or all of them (a policy each), not {n}",
            entries.len()
        )),
    }
}

/// A Kyverno condition key `{{ a.b.c }}` as a Rego reference into the
/// predicate.
fn rego_path(key: &str, at: &str) -> Result<String, String> {
    let inner = key
        .trim()
        .strip_prefix("{{")
        .and_then(|k| k.strip_suffix("}}"))
        .map(str::trim)
        .ok_or_else(|| format!("{at}.key: `{key}` is not a `{{{{ path }}}}` into the predicate"))?;
    let mut out = String::from("input.predicate");
    for part in inner.split('.') {
        let simple = !part.is_empty()
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !part.starts_with(|c: char| c.is_ascii_digit());
        if !simple {
            return Err(format!(
                "{at}.key: `{key}`: only dotted field names map, not JMESPath expressions"
            ));
        }
        let _ = write!(out, ".{part}");
    }
    Ok(out)
}

/// One Kyverno condition as a Rego expression.
fn rego_condition(cond: &Value, at: &str) -> Result<String, String> {
    let path = rego_path(text(cond, "/key"), at)?;
    let value = cond.get("value").cloned().unwrap_or(Value::Null);
    let literal = serde_json::to_string(&value).map_err(|e| format!("{at}.value: {e}"))?;
    if literal.contains("{{") {
        return Err(format!("{at}.value: Kyverno variables do not map"));
    }
    let wildcard = |v: &Value| v.as_str().is_some_and(|s| s.contains(['*', '?']));
    let op = text(cond, "/operator");
    match op {
        "Equals" | "NotEquals" if wildcard(&value) => Err(format!(
            "{at}: {op} with a wildcard value does not map (sigil's conditions compare exactly)"
        )),
        "Equals" => Ok(format!("{path} == {literal}")),
        "NotEquals" => Ok(format!("not {path} == {literal}")),
        "In" | "AnyIn" | "NotIn" if !value.is_array() => {
            Err(format!("{at}: {op} needs a list value"))
        }
        "In" => Ok(format!("{path} in {literal}")),
        "NotIn" => Ok(format!("not {path} in {literal}")),
        "AnyIn" => Ok(format!("some x in {path}; x in {literal}")),
        other => Err(format!(
            "{at}.operator: `{other}` does not map (Equals, NotEquals, In, NotIn and AnyIn do)"
        )),
    }
}

/// Kyverno's attestation `conditions` as a Rego module: every block must
/// hold; in a block, every `all` condition and at least one `any`.
fn rego_of_conditions(conditions: &[Value], at: &str) -> Result<Option<String>, String> {
    if conditions.is_empty() {
        return Ok(None);
    }
    let mut body = Vec::new();
    let mut helpers = String::new();
    for (b, block) in conditions.iter().enumerate() {
        for (i, cond) in list(block, "/all").iter().enumerate() {
            body.push(rego_condition(
                cond,
                &format!("{at}.conditions[{b}].all[{i}]"),
            )?);
        }
        let any = list(block, "/any");
        if !any.is_empty() {
            let rule = format!("any_{b}");
            for (i, cond) in any.iter().enumerate() {
                let expr = rego_condition(cond, &format!("{at}.conditions[{b}].any[{i}]"))?;
                let _ = write!(helpers, "\n{rule} if {{\n  {expr}\n}}\n");
            }
            body.push(rule);
        }
    }
    let mut module = String::from(
        "package sigstore\nimport rego.v1\n\ndefault isCompliant := false\n\nisCompliant if {\n",
    );
    for line in &body {
        let _ = writeln!(module, "  {line}");
    }
    module.push_str("}\n");
    module.push_str(&helpers);
    Ok(Some(module))
}

/// The mode a Kyverno failure action gives.
fn mode_of(action: &str) -> &'static str {
    if action.eq_ignore_ascii_case("enforce") {
        "enforce"
    } else {
        "audit"
    }
}

/// A ClusterPolicy's or Policy's `verifyImages` rules.
fn convert_policy(doc: &Value, target: &Target, c: &mut ForeignConversion) {
    let legacy_action = text(doc, "/spec/validationFailureAction");
    for (r, rule) in list(doc, "/spec/rules").iter().enumerate() {
        let rule_name = text(rule, "/name");
        let at = format!("spec.rules[{r}] ({rule_name})");
        let verify = list(rule, "/verifyImages");
        if verify.is_empty() {
            c.warnings.push(format!(
                "{at}: not an image verification rule (no verifyImages); sigil does not run it"
            ));
            continue;
        }
        let namespaces = match_namespaces(rule, &at, target, c);
        if rule.get("exclude").is_some() {
            c.warnings.push(format!(
                "{at}.exclude: sigil judges the excluded objects too (exclude an image's \
                 namespace from admission with the chart's namespace selection instead)"
            ));
        }
        for (v, vi) in verify.iter().enumerate() {
            let at = format!("{at}.verifyImages[{v}]");
            let action = vi
                .get("failureAction")
                .and_then(Value::as_str)
                .unwrap_or(legacy_action);
            let mode = mode_of(action);
            if action.is_empty() {
                c.changes.push(format!(
                    "{at}: no failureAction: Kyverno's default, Audit, written `mode: audit`"
                ));
            }
            let base = if verify.len() > 1 {
                object_name(&[&target.name, rule_name, &v.to_string()])
            } else {
                object_name(&[&target.name, rule_name])
            };
            match verify_images_entry(vi, &at, c) {
                Ok((globs, policies)) => {
                    emit(&base, &namespaces, &globs, mode, policies, c);
                }
                Err(why) => c
                    .unmapped
                    .push(format!("{why}; the entry is not converted")),
            }
        }
    }
}

/// The namespaces a rule's `match` confines it to, as ImagePolicy
/// namespaces (`[None]`: cluster-wide, or the Policy's own namespace).
fn match_namespaces(
    rule: &Value,
    at: &str,
    target: &Target,
    c: &mut ForeignConversion,
) -> Vec<Option<String>> {
    if let Some(ns) = &target.namespace {
        return vec![Some(ns.clone())];
    }
    let mut out = Vec::new();
    let mut confined = true;
    let filters: Vec<&Value> = ["/match/any", "/match/all"]
        .iter()
        .flat_map(|p| list(rule, p))
        .chain(rule.pointer("/match/resources"))
        .collect();
    for f in &filters {
        let resources = f.get("resources").unwrap_or(f);
        let names = list(resources, "/namespaces");
        if names.is_empty()
            || names
                .iter()
                .any(|n| n.as_str().is_none_or(|n| n.contains(['*', '?'])))
        {
            confined = false;
        } else {
            out.extend(names.iter().filter_map(Value::as_str).map(str::to_string));
        }
        for other in [
            "names",
            "selector",
            "namespaceSelector",
            "operations",
            "annotations",
        ] {
            if resources.get(other).is_some() {
                c.warnings.push(format!(
                    "{at}.match: `{other}` does not map; sigil judges every workload it admits \
                     in the namespaces the policy covers"
                ));
            }
        }
    }
    if filters.is_empty() || !confined || out.is_empty() {
        return vec![None];
    }
    out.sort();
    out.dedup();
    c.changes.push(format!(
        "{at}.match: namespaces {} written as an ImagePolicy in each",
        out.join(", ")
    ));
    out.into_iter().map(Some).collect()
}

/// Globs and the policies (each a list of authorities) of one verifyImages
/// entry.
fn verify_images_entry(
    vi: &Value,
    at: &str,
    c: &mut ForeignConversion,
) -> Result<(Vec<String>, Vec<Vec<Value>>), String> {
    let notary = match text(vi, "/type") {
        "" | "Cosign" | "SigstoreBundle" => false,
        "Notary" => true,
        other => return Err(format!("{at}.type: `{other}` is not a type sigil knows")),
    };
    let mut patterns: Vec<&str> = list(vi, "/imageReferences")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if let Some(image) = vi.get("image").and_then(Value::as_str) {
        patterns.push(image);
    }
    if patterns.is_empty() {
        return Err(format!("{at}.imageReferences: none"));
    }
    let mut globs = Vec::new();
    for (i, p) in patterns.iter().enumerate() {
        let (glob, note) = glob_of(p, &format!("{at}.imageReferences[{i}]"))?;
        c.changes.extend(note);
        globs.push(glob);
    }
    if !list(vi, "/skipImageReferences").is_empty() {
        c.warnings.push(format!(
            "{at}.skipImageReferences: sigil's globs select no exceptions, so the skipped \
             images are verified too; narrow imageReferences if they must not be"
        ));
    }
    if vi.get("required") == Some(&Value::Bool(false)) {
        c.warnings.push(format!(
            "{at}.required: false: sigil requires the signatures of every image the policy \
             selects"
        ));
    }
    if vi.get("mutateDigest") == Some(&Value::Bool(false)) {
        c.warnings.push(format!(
            "{at}.mutateDigest: false: whether sigil pins images to their digests is the \
             chart's `webhook.pin`, for all policies"
        ));
    }
    if vi.get("verifyDigest") == Some(&Value::Bool(false)) {
        c.warnings.push(format!(
            "{at}.verifyDigest: false: sigil verifies the digest an image runs as whatever \
             the reference says; a tag is resolved first"
        ));
    }
    if notary {
        return notary_entry(vi, at, c).map(|policies| (globs, policies));
    }
    let source = source_of(vi, at, c);
    let mut policies = Vec::new();
    for (s, set) in list(vi, "/attestors").iter().enumerate() {
        policies.extend(attestor_set(
            set,
            &format!("{at}.attestors[{s}]"),
            false,
            c,
        )?);
    }
    for (a, att) in list(vi, "/attestations").iter().enumerate() {
        let at = format!("{at}.attestations[{a}]");
        let predicate = vi_text_or(att, "/type", "/predicateType");
        if predicate.is_empty() {
            return Err(format!("{at}.type: none"));
        }
        let rego = rego_of_conditions(list(att, "/conditions"), &at)?;
        let mut attestation =
            json!({ "name": format!("attestation-{a}"), "predicateType": predicate });
        if let (Some(module), Some(obj)) = (rego, attestation.as_object_mut()) {
            obj.insert("policy".into(), json!({ "type": "rego", "data": module }));
        }
        let sets = list(att, "/attestors");
        if sets.is_empty() {
            return Err(format!(
                "{at}.attestors: none; name who must have signed the attestation"
            ));
        }
        for (s, set) in sets.iter().enumerate() {
            for mut group in attestor_set(set, &format!("{at}.attestors[{s}]"), false, c)? {
                for authority in &mut group {
                    if let Some(obj) = authority.as_object_mut() {
                        obj.insert("attestations".into(), json!([attestation.clone()]));
                    }
                }
                policies.push(group);
            }
        }
    }
    if policies.is_empty() {
        return Err(format!("{at}: no attestors and no attestations"));
    }
    if let Some(source) = source {
        for group in &mut policies {
            for authority in group {
                if let Some(obj) = authority.as_object_mut() {
                    obj.insert("source".into(), json!([source.clone()]));
                }
            }
        }
    }
    Ok((globs, policies))
}

/// The policies of a `type: Notary` verifyImages entry: its attestor sets
/// with certificate entries; everything a `notation` authority does not
/// take is refused or, where sigil judges the same, noted.
fn notary_entry(
    vi: &Value,
    at: &str,
    c: &mut ForeignConversion,
) -> Result<Vec<Vec<Value>>, String> {
    if !text(vi, "/repository").is_empty() {
        return Err(format!(
            "{at}.repository: a notation authority finds the signatures among the image's own \
             referrers, not in another repository"
        ));
    }
    if !list(vi, "/attestations").is_empty() {
        return Err(format!(
            "{at}.attestations: Notary-signed attestations (referrers of other artifact types) \
             are not among what sigil's notation authority verifies"
        ));
    }
    if !list(vi, "/imageRegistryCredentials/secrets").is_empty() {
        c.warnings.push(format!(
            "{at}.imageRegistryCredentials.secrets: a notation authority reads the image's \
             referrers with the workload's pull secrets and sigil's registry credentials; these \
             Secrets are not used"
        ));
    }
    let mut policies = Vec::new();
    for (s, set) in list(vi, "/attestors").iter().enumerate() {
        policies.extend(attestor_set(set, &format!("{at}.attestors[{s}]"), true, c)?);
    }
    if policies.is_empty() {
        return Err(format!(
            "{at}.attestors: none; name the certificates that must have signed"
        ));
    }
    c.changes.push(format!(
        "{at}: Notary verification written as a notation authority with the trust policy \
         Kyverno builds (every repository, level strict, the certificates as trust store \
         ca:kyverno, any identity they certify)"
    ));
    Ok(policies)
}

/// A `type: Notary` attestor entry (`certificates.cert` and `certChain`)
/// as a notation authority. Its `rekor` and `ctlog` settings mean nothing
/// to Kyverno's Notary verifier, nor to sigil's.
fn notary_certificates(entry: &Value, name: &str, at: &str) -> Converted {
    if entry.get("certificates").is_none() {
        return Err(format!(
            "{at}: a Notary rule's entries give `certificates`; keys and keyless identities \
             verify Sigstore signatures"
        ));
    }
    let certs: Vec<&str> = ["/certificates/cert", "/certificates/certChain"]
        .iter()
        .map(|p| text(entry, p).trim())
        .filter(|pem| !pem.is_empty())
        .collect();
    if certs.is_empty() {
        return Err(format!(
            "{at}.certificates: neither cert nor certChain is given"
        ));
    }
    Ok(notation_authority(name, &certs.join("\n"), ""))
}

/// A `notation` authority with the trust policy Kyverno's Notary verifier
/// builds, over `certs` (and `tsa` roots, when any).
fn notation_authority(name: &str, certs: &str, tsa: &str) -> Value {
    let mut stores = vec!["ca:kyverno"];
    let mut trust_stores =
        vec![json!({ "name": "ca/kyverno", "certificates": format!("{}\n", certs.trim()) })];
    if !tsa.trim().is_empty() {
        stores.push("tsa:kyverno");
        trust_stores
            .push(json!({ "name": "tsa/kyverno", "certificates": format!("{}\n", tsa.trim()) }));
    }
    let policy = json!({
        "version": "1.0",
        "trustPolicies": [{
            "name": "kyverno",
            "registryScopes": ["*"],
            "signatureVerification": { "level": "strict" },
            "trustStores": stores,
            "trustedIdentities": ["*"],
        }],
    });
    json!({
        "name": name,
        "notation": {
            "trustPolicy": serde_json::to_string_pretty(&policy).unwrap_or_default(),
            "trustStores": trust_stores,
        },
    })
}

fn vi_text_or<'a>(v: &'a Value, first: &str, second: &str) -> &'a str {
    let t = text(v, first);
    if t.is_empty() { text(v, second) } else { t }
}

/// The authorities' `source` for Kyverno's `repository` and registry
/// credentials.
fn source_of(vi: &Value, at: &str, c: &mut ForeignConversion) -> Option<Value> {
    let mut source = Map::new();
    let repository = text(vi, "/repository");
    if !repository.is_empty() {
        source.insert("oci".into(), Value::from(repository));
    }
    let secrets: Vec<Value> = list(vi, "/imageRegistryCredentials/secrets")
        .iter()
        .filter_map(Value::as_str)
        .map(|s| json!({ "name": s }))
        .collect();
    if !secrets.is_empty() {
        c.warnings.push(format!(
            "{at}.imageRegistryCredentials.secrets: read from sigil's namespace, not Kyverno's; \
             copy them there"
        ));
        source.insert("signaturePullSecrets".into(), Value::Array(secrets));
    }
    (!source.is_empty()).then_some(Value::Object(source))
}

/// Writes the policies of one entry, in each namespace it applies to.
fn emit(
    base: &str,
    namespaces: &[Option<String>],
    globs: &[String],
    mode: &str,
    policies: Vec<Vec<Value>>,
    c: &mut ForeignConversion,
) {
    let several = policies.len() > 1;
    for (p, authorities) in policies.into_iter().enumerate() {
        let name = if several {
            object_name(&[base, &p.to_string()])
        } else {
            base.to_string()
        };
        for ns in namespaces {
            c.objects.push(policy_object(
                &name,
                ns.as_deref(),
                globs,
                mode,
                authorities.clone(),
                "kyverno",
            ));
        }
    }
}

/// An ImageValidatingPolicy: its attestors, attestations and the
/// validations that use them.
fn convert_ivp(doc: &Value, target: &Target, c: &mut ForeignConversion) {
    let actions: Vec<&str> = list(doc, "/spec/validationActions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mode = if actions.is_empty() || actions.contains(&"Deny") {
        "enforce"
    } else if actions.contains(&"Warn") {
        "warn"
    } else {
        "audit"
    };
    match ivp_policies(doc, c) {
        Ok((globs, policies)) => {
            let namespaces = vec![target.namespace.clone()];
            emit(
                &object_name(&[&target.name]),
                &namespaces,
                &globs,
                mode,
                policies,
                c,
            );
        }
        Err(why) => c
            .unmapped
            .push(format!("{why}; the policy is not converted")),
    }
    if doc.pointer("/spec/matchConstraints").is_some() {
        c.warnings.push(
            "spec.matchConstraints: sigil judges every workload it admits, not only the \
             resources matched"
                .into(),
        );
    }
    if doc.pointer("/spec/mutateDigest") == Some(&Value::Bool(false)) {
        c.warnings.push(
            "spec.mutateDigest: false: whether sigil pins images is the chart's `webhook.pin`"
                .into(),
        );
    }
}

fn ivp_policies(
    doc: &Value,
    c: &mut ForeignConversion,
) -> Result<(Vec<String>, Vec<Vec<Value>>), String> {
    let mut globs = Vec::new();
    for (i, m) in list(doc, "/spec/matchImageReferences").iter().enumerate() {
        let at = format!("spec.matchImageReferences[{i}]");
        let Some(glob) = m.get("glob").and_then(Value::as_str) else {
            return Err(format!("{at}: only globs map, not CEL expressions"));
        };
        let (glob, note) = glob_of(glob, &at)?;
        c.changes.extend(note);
        globs.push(glob);
    }
    if globs.is_empty() {
        return Err("spec.matchImageReferences: none".into());
    }
    let attestors = list(doc, "/spec/attestors");
    let attestations = list(doc, "/spec/attestations");
    let mut policies = Vec::new();
    for (i, v) in list(doc, "/spec/validations").iter().enumerate() {
        let at = format!("spec.validations[{i}]");
        let expr = text(v, "/expression");
        let (names, attestation) = parse_validation(expr)
            .ok_or_else(|| format!("{at}.expression: `{}` does not map: sigil maps `images.containers.map(image, verifyImageSignatures(image, [attestors.A, ...])).all(e, e > 0)` and the same with `verifyAttestationSignatures(image, attestations.X, [...])`", expr.trim()))?;
        let mut group = Vec::new();
        for name in names {
            let a = attestors
                .iter()
                .find(|a| text(a, "/name") == name)
                .ok_or_else(|| format!("{at}: attestor `{name}` is not in spec.attestors"))?;
            let mut authority = ivp_authority(a, &format!("spec.attestors ({name})"))?;
            if attestation.is_some() && authority.get("notation").is_some() {
                return Err(format!(
                    "{at}: attestations signed with Notary (attestor `{name}`) are not among \
                     what sigil's notation authority verifies"
                ));
            }
            if let Some(att) = &attestation {
                let x = attestations
                    .iter()
                    .find(|x| text(x, "/name") == att.as_str())
                    .ok_or_else(|| {
                        format!("{at}: attestation `{att}` is not in spec.attestations")
                    })?;
                let predicate = vi_text_or(x, "/intoto/type", "/referrer/type");
                if predicate.is_empty() {
                    return Err(format!("spec.attestations ({att}): no intoto.type"));
                }
                if let Some(obj) = authority.as_object_mut() {
                    obj.insert(
                        "attestations".into(),
                        json!([{ "name": att, "predicateType": predicate }]),
                    );
                }
            }
            group.push(authority);
        }
        policies.push(group);
    }
    if policies.is_empty() {
        return Err("spec.validations: none that verify signatures".into());
    }
    Ok((globs, policies))
}

/// `images.containers.map(image, verifyImageSignatures(image,
/// [attestors.a, attestors.b])).all(e, e > 0)` (or `verifyAttestationSignatures(image, attestations.x, [...])`):
/// the attestor names and the attestation's.
fn parse_validation(expr: &str) -> Option<(Vec<String>, Option<String>)> {
    let compact: String = expr.split_whitespace().collect();
    let rest = compact.strip_prefix("images.containers.map(image,")?;
    let (call, attestation) = if let Some(r) = rest.strip_prefix("verifyImageSignatures(image,") {
        (r, None)
    } else {
        let r = rest.strip_prefix("verifyAttestationSignatures(image,attestations.")?;
        let (name, r) = r.split_once(',')?;
        (r, Some(name.to_string()))
    };
    let (inner, tail) = call.strip_prefix('[')?.split_once(']')?;
    if tail != ")).all(e,e>0)" {
        return None;
    }
    let names: Option<Vec<String>> = inner
        .split(',')
        .map(|n| n.strip_prefix("attestors.").map(str::to_string))
        .collect();
    names.filter(|n| !n.is_empty()).map(|n| (n, attestation))
}

/// An ImageValidatingPolicy's cosign attestor as a sigil authority.
fn ivp_authority(a: &Value, at: &str) -> Converted {
    let name = object_name(&[text(a, "/name")]);
    if let Some(notary) = a.get("notary") {
        for field in ["certs", "tsaCerts"] {
            if notary.pointer(&format!("/{field}/expression")).is_some() {
                return Err(format!(
                    "{at}.notary.{field}.expression: a CEL expression is evaluated by Kyverno; \
                     give the certificates as `value`"
                ));
            }
        }
        let certs = text(notary, "/certs/value");
        if certs.trim().is_empty() {
            return Err(format!("{at}.notary.certs.value: none"));
        }
        return Ok(notation_authority(
            &name,
            certs,
            text(notary, "/tsaCerts/value"),
        ));
    }
    let Some(cosign) = a.get("cosign") else {
        return Err(format!("{at}: only cosign and notary attestors map"));
    };
    let mut authority = Map::new();
    authority.insert("name".into(), Value::from(name));
    if let Some(key) = cosign.get("key") {
        let mut k = Map::new();
        if let Some(data) = key.get("data").and_then(Value::as_str) {
            k.insert("data".into(), Value::from(format!("{}\n", data.trim())));
        } else if let Some(kms) = key.get("kms").and_then(Value::as_str) {
            k.insert("kms".into(), Value::from(kms));
        } else {
            return Err(format!("{at}.cosign.key: only data and kms map"));
        }
        if let Some(h) = key.get("hashAlgorithm").and_then(Value::as_str) {
            k.insert("hashAlgorithm".into(), Value::from(h));
        }
        authority.insert("key".into(), Value::Object(k));
    } else if let Some(keyless) = cosign.get("keyless") {
        let identities: Vec<Value> = list(keyless, "/identities")
            .iter()
            .map(|i| Value::Object(identity_of(i)))
            .collect();
        if identities.is_empty() {
            return Err(format!("{at}.cosign.keyless.identities: none"));
        }
        let mut k = Map::new();
        k.insert("identities".into(), Value::Array(identities));
        let roots = text(keyless, "/roots").trim();
        if !roots.is_empty() {
            k.insert("ca-cert".into(), json!({ "data": format!("{roots}\n") }));
        }
        if cosign.pointer("/ctlog/insecureIgnoreSCT") == Some(&Value::Bool(true)) {
            k.insert("insecureIgnoreSCT".into(), Value::Bool(true));
        }
        authority.insert("keyless".into(), Value::Object(k));
    } else {
        return Err(format!("{at}.cosign: only key and keyless map"));
    }
    let ctlog = log_setting(
        LogSetting {
            keys_at: &format!("{at}.cosign.ctlog"),
            keys_given: cosign.pointer("/ctlog/rekorPubKey").is_some()
                || cosign.pointer("/ctlog/ctLogPubKey").is_some(),
            ignore_at: &format!("{at}.cosign.ctlog.insecureIgnoreTlog"),
            ignore: cosign.pointer("/ctlog/insecureIgnoreTlog") == Some(&Value::Bool(true)),
            url: text(cosign, "/ctlog/url"),
        },
        authority.contains_key("key"),
    )?;
    if let Some(ctlog) = ctlog {
        authority.insert("ctlog".into(), ctlog);
    }
    let repository = text(cosign, "/source/repository");
    if !repository.is_empty() {
        authority.insert("source".into(), json!([{ "oci": repository }]));
    }
    Ok(Value::Object(authority))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use serde_json::{Value, json};

    use crate::convert::{Conversion, convert_yaml};

    const KEY: &str = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE8nXRh950IZbRj8Ra/N9sbqOPZrfM\n5/KAQN0/KjHcorm/J5yctVd7iEcnessRQjU917hmKO6JWVGHpDguIyakZA==\n-----END PUBLIC KEY-----";

    fn objects(c: &Conversion) -> Vec<Value> {
        serde_saphyr::from_multiple(&c.yaml).unwrap()
    }

    fn indent(text: &str, spaces: usize) -> String {
        let pad = " ".repeat(spaces);
        text.lines()
            .map(|l| format!("{pad}{l}\n"))
            .collect::<String>()
    }

    fn cluster_policy(action: &str, verify: &str) -> String {
        format!(
            "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata:\n  name: check-images\n\
             spec:\n{action}  rules:\n  - name: signed\n    match:\n      any:\n      - resources:\n\
             \x20         kinds: [Pod]\n    verifyImages:\n{}",
            indent(verify, 4)
        )
    }

    fn keys_entry() -> String {
        format!("- keys:\n    publicKeys: |-\n{}", indent(KEY, 6))
    }

    #[test]
    fn a_key_rule_becomes_one_enforcing_policy_with_kyvernos_wildcard_as_a_double_star() {
        let verify = format!(
            "- imageReferences: [\"ghcr.io/acme/*\"]\n  failureAction: Enforce\n  attestors:\n  - entries:\n{}",
            indent(&keys_entry(), 4)
        );
        let c = convert_yaml(&cluster_policy("", &verify)).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        assert_eq!(out.len(), 1, "{}", c.yaml);
        let p = &out[0];
        assert_eq!(p["kind"], "ClusterImagePolicy");
        assert_eq!(p["metadata"]["name"], "check-images-signed");
        assert_eq!(p["spec"]["images"], json!([{"glob": "ghcr.io/acme/**"}]));
        assert!(p["spec"].get("mode").is_none(), "{p}");
        let a = &p["spec"]["authorities"][0];
        assert_eq!(a["key"]["data"], format!("{KEY}\n"));
        // Kyverno requires a public-good log entry by default, as sigil does
        // for a key authority without ctlog.
        assert!(a.get("ctlog").is_none(), "{a}");
        assert!(
            c.changes
                .iter()
                .any(|l| l.contains("written as the glob `ghcr.io/acme/**`")),
            "{:?}",
            c.changes
        );
    }

    #[test]
    fn without_a_failure_action_kyvernos_default_audit_is_written_out() {
        let verify = format!(
            "- imageReferences: [\"ghcr.io/acme/app\"]\n  attestors:\n  - entries:\n{}",
            indent(&keys_entry(), 4)
        );
        let c = convert_yaml(&cluster_policy("", &verify)).unwrap();
        assert_eq!(objects(&c)[0]["spec"]["mode"], "audit");
        assert!(
            c.changes
                .iter()
                .any(|l| l.contains("Kyverno's default, Audit"))
        );
        let legacy = convert_yaml(&cluster_policy(
            "  validationFailureAction: Enforce\n",
            &verify,
        ))
        .unwrap();
        assert!(
            objects(&legacy)[0]["spec"].get("mode").is_none(),
            "{}",
            legacy.yaml
        );
    }

    #[test]
    fn entries_that_must_all_verify_become_a_policy_each_and_count_one_a_policy_of_either() {
        let two = format!(
            "{}- keys:\n    kms: awskms:///arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab\n    rekor: {{ignoreTlog: true}}\n",
            keys_entry()
        );
        let all = format!(
            "- imageReferences: [\"ghcr.io/acme/app\"]\n  failureAction: Enforce\n  attestors:\n  - entries:\n{}",
            indent(&two, 4)
        );
        let c = convert_yaml(&cluster_policy("", &all)).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        let names: Vec<&str> = out
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["check-images-signed-0", "check-images-signed-1"]);
        assert_eq!(out[1]["spec"]["authorities"][0]["ctlog"], json!({}));
        assert_eq!(
            out[1]["spec"]["authorities"][0]["key"]["kms"],
            "awskms:///arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
        );

        let either = all.replace("  - entries:", "  - count: 1\n    entries:");
        let c = convert_yaml(&cluster_policy("", &either)).unwrap();
        let out = objects(&c);
        assert_eq!(out.len(), 1, "{}", c.yaml);
        assert_eq!(out[0]["spec"]["authorities"].as_array().unwrap().len(), 2);

        let three = format!("{two}{}", keys_entry());
        let some = format!(
            "- imageReferences: [\"ghcr.io/acme/app\"]\n  failureAction: Enforce\n  attestors:\n  - count: 2\n    entries:\n{}",
            indent(&three, 4)
        );
        let c = convert_yaml(&cluster_policy("", &some)).unwrap();
        assert_eq!(c.converted, 0, "{}", c.yaml);
        assert_eq!(c.report.len(), 1, "{:?}", c.report);
        assert!(
            c.report[0].contains("count: 2 of 3 entries must verify")
                && c.report[0].ends_with("the entry is not converted"),
            "{:?}",
            c.report
        );
    }

    #[test]
    fn keyless_identity_extensions_sct_and_a_private_rekor_map_to_sigils_fields() {
        let verify = "- imageReferences: [\"ghcr.io/acme/app:*\"]\n  failureAction: Enforce\n  attestors:\n  - entries:\n    - keyless:\n        subject: https://github.com/acme/app/.github/workflows/release.yml@refs/heads/main\n        issuer: https://token.actions.githubusercontent.com\n        additionalExtensions:\n          githubWorkflowSha: 0123abcd\n          githubWorkflowTrigger: push\n        rekor:\n          url: https://rekor.internal.example/\n        ctlog:\n          ignoreSCT: true\n";
        let c = convert_yaml(&cluster_policy("", verify)).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let a = &objects(&c)[0]["spec"]["authorities"][0];
        let id = &a["keyless"]["identities"][0];
        assert_eq!(id["issuer"], "https://token.actions.githubusercontent.com");
        assert_eq!(
            id["claims"],
            json!({"githubWorkflowSHA": "0123abcd", "githubWorkflowTrigger": "push"})
        );
        assert_eq!(a["keyless"]["insecureIgnoreSCT"], true);
        assert_eq!(a["ctlog"], json!({"url": "https://rekor.internal.example"}));

        let no_log = verify.replace(
            "        rekor:\n          url: https://rekor.internal.example/\n",
            "        rekor:\n          ignoreTlog: true\n",
        );
        let c = convert_yaml(&cluster_policy("", &no_log)).unwrap();
        assert_eq!(c.converted, 0);
        assert!(
            c.report[0].contains("rekor.ignoreTlog: sigil takes a keyless signature's time only"),
            "{:?}",
            c.report
        );
    }

    #[test]
    fn attestation_conditions_become_a_rego_policy_that_lints() {
        let verify = format!(
            "- imageReferences: [\"ghcr.io/acme/*\"]\n  failureAction: Enforce\n  attestations:\n  - type: https://slsa.dev/provenance/v1\n    attestors:\n    - entries:\n{}    conditions:\n    - all:\n      - key: \"{{{{ buildDefinition.buildType }}}}\"\n        operator: Equals\n        value: https://actions.github.io/buildtypes/workflow/v1\n      any:\n      - key: \"{{{{ runDetails.builder.id }}}}\"\n        operator: In\n        value: [a, b]\n      - key: \"{{{{ runDetails.builder.id }}}}\"\n        operator: Equals\n        value: c\n",
            indent(&keys_entry(), 6)
        );
        let c = convert_yaml(&cluster_policy("", &verify)).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let a = &objects(&c)[0]["spec"]["authorities"][0];
        let att = &a["attestations"][0];
        assert_eq!(att["predicateType"], "https://slsa.dev/provenance/v1");
        assert_eq!(att["policy"]["type"], "rego");
        let rego = att["policy"]["data"].as_str().unwrap();
        assert!(
            rego.contains(
                "input.predicate.buildDefinition.buildType == \"https://actions.github.io/buildtypes/workflow/v1\""
            ) && rego.contains("input.predicate.runDetails.builder.id in [\"a\",\"b\"]")
                && rego.contains("any_0 if {\n  input.predicate.runDetails.builder.id == \"c\"\n}"),
            "{rego}"
        );

        let jmespath = verify.replace(
            "runDetails.builder.id }}\"\n        operator: In",
            "length(runDetails) }}\"\n        operator: In",
        );
        let c = convert_yaml(&cluster_policy("", &jmespath)).unwrap();
        assert_eq!(c.converted, 0);
        assert!(
            c.report[0].contains("only dotted field names map"),
            "{:?}",
            c.report
        );
    }

    #[test]
    fn a_namespaced_policy_becomes_image_policies_and_namespaces_of_a_match_too() {
        let verify = format!(
            "- imageReferences: [\"ghcr.io/acme/app\"]\n  failureAction: Enforce\n  attestors:\n  - entries:\n{}",
            indent(&keys_entry(), 4)
        );
        let policy = cluster_policy("", &verify)
            .replace("kind: ClusterPolicy", "kind: Policy")
            .replace(
                "  name: check-images\n",
                "  name: check-images\n  namespace: shop\n",
            );
        let c = convert_yaml(&policy).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        assert_eq!(out[0]["kind"], "ImagePolicy");
        assert_eq!(out[0]["metadata"]["namespace"], "shop");

        let confined = cluster_policy("", &verify).replace(
            "          kinds: [Pod]\n",
            "          kinds: [Pod]\n          namespaces: [web, shop]\n",
        );
        let c = convert_yaml(&confined).unwrap();
        let out = objects(&c);
        let placed: Vec<(&str, &str)> = out
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["namespace"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(placed, [("ImagePolicy", "shop"), ("ImagePolicy", "web")]);
    }

    #[test]
    fn signing_certificates_and_other_rules_are_reported_not_converted() {
        let certs = "- imageReferences: [\"ghcr.io/acme/*\"]\n  attestors:\n  - entries:\n    - certificates:\n        cert: x\n";
        let c = convert_yaml(&cluster_policy("", certs)).unwrap();
        assert_eq!(c.converted, 0);
        assert!(
            c.report[0].contains(".certificates: a signing certificate"),
            "{:?}",
            c.report
        );

        let validate = "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: labels}\nspec:\n  rules:\n  - name: need-label\n    validate: {message: x}\n";
        let c = convert_yaml(validate).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        assert!(
            c.warnings[0].contains("not an image verification rule"),
            "{:?}",
            c.warnings
        );
    }

    /// A CA certificate as the trust store of a Notary rule holds it.
    fn ca_pem(org: &str) -> String {
        let leaf = sigil_testkit::notation::LeafSpec::new(org, "signer", 0, 4_000_000_000);
        sigil_testkit::notation::NotaryPki::new(5, org, 0, 4_000_000_000, &leaf)
            .root
            .cert_pem()
    }

    fn notary_rule(entries: &str, extra: &str) -> String {
        format!(
            "- type: Notary\n  imageReferences: [\"ghcr.io/acme/*\"]\n{extra}  attestors:\n  - entries:\n{}",
            indent(entries, 4)
        )
    }

    fn cert_entry(pem: &str) -> String {
        format!("- certificates:\n    cert: |-\n{}", indent(pem.trim(), 6))
    }

    fn trust_policy_of(authority: &Value) -> Value {
        serde_json::from_str(authority["notation"]["trustPolicy"].as_str().unwrap()).unwrap()
    }

    #[test]
    fn a_notary_rule_becomes_a_notation_authority_with_the_trust_policy_kyverno_builds() {
        let pem = ca_pem("Acme");
        let c = convert_yaml(&cluster_policy(
            "  validationFailureAction: Enforce\n",
            &notary_rule(&cert_entry(&pem), ""),
        ))
        .unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0]["spec"]["images"],
            json!([{ "glob": "ghcr.io/acme/**" }])
        );
        let authority = &out[0]["spec"]["authorities"][0];
        assert_eq!(
            trust_policy_of(authority),
            json!({"version": "1.0", "trustPolicies": [{
                "name": "kyverno", "registryScopes": ["*"],
                "signatureVerification": {"level": "strict"},
                "trustStores": ["ca:kyverno"], "trustedIdentities": ["*"],
            }]})
        );
        assert_eq!(
            authority["notation"]["trustStores"],
            json!([{ "name": "ca/kyverno", "certificates": format!("{}\n", pem.trim()) }])
        );
        assert!(
            c.changes
                .iter()
                .any(|l| l.contains("Notary verification written as a notation authority")),
            "{:?}",
            c.changes
        );
    }

    #[test]
    fn a_notary_set_of_one_in_two_certificates_is_one_policy_with_two_authorities() {
        let entries = format!(
            "{}\n{}",
            cert_entry(&ca_pem("Acme")),
            cert_entry(&ca_pem("Beta"))
        );
        let rule = notary_rule(&entries, "").replace("  - entries:", "  - count: 1\n    entries:");
        let c = convert_yaml(&cluster_policy("", &rule)).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["spec"]["authorities"].as_array().unwrap().len(), 2);
        // Without count, both must verify: a policy each.
        let c = convert_yaml(&cluster_policy("", &notary_rule(&entries, ""))).unwrap();
        assert_eq!(objects(&c).len(), 2);
    }

    #[test]
    fn what_a_notation_authority_does_not_take_leaves_a_notary_rule_out() {
        let pem = ca_pem("Acme");
        for (extra, entries, expected) in [
            (
                "  repository: ghcr.io/acme/signatures\n",
                cert_entry(&pem),
                ".repository: a notation authority finds the signatures among the image's own",
            ),
            (
                "  attestations:\n  - type: sbom/cyclone-dx\n    attestors: []\n",
                cert_entry(&pem),
                ".attestations: Notary-signed attestations",
            ),
            (
                "",
                keys_entry(),
                "a Notary rule's entries give `certificates`",
            ),
            (
                "",
                "- certificates: {}\n".to_string(),
                "neither cert nor certChain",
            ),
        ] {
            let c = convert_yaml(&cluster_policy("", &notary_rule(&entries, extra))).unwrap();
            assert_eq!(c.converted, 0, "{extra}");
            assert!(
                c.report.iter().any(|l| l.contains(expected)),
                "{expected}: {:?}",
                c.report
            );
        }
    }

    #[test]
    fn an_image_validating_policys_notary_attestor_keeps_its_tsa_roots() {
        let (ca, tsa) = (ca_pem("Acme"), ca_pem("Stamps"));
        let ivp = format!(
            "apiVersion: policies.kyverno.io/v1beta1\nkind: ImageValidatingPolicy\nmetadata:\n  name: notary\nspec:\n  matchImageReferences:\n  - glob: \"ghcr.io/acme/*\"\n  attestors:\n  - name: notary\n    notary:\n      certs:\n        value: |-\n{}      tsaCerts:\n        value: |-\n{}  validations:\n  - expression: images.containers.map(image, verifyImageSignatures(image, [attestors.notary])).all(e, e > 0)\n",
            indent(ca.trim(), 10),
            indent(tsa.trim(), 10)
        );
        let c = convert_yaml(&ivp).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        let authority = &out[0]["spec"]["authorities"][0];
        assert_eq!(
            trust_policy_of(authority)["trustPolicies"][0]["trustStores"],
            json!(["ca:kyverno", "tsa:kyverno"])
        );
        assert_eq!(
            authority["notation"]["trustStores"][1]["name"],
            "tsa/kyverno"
        );

        let expression = ivp.replace(
            "      certs:\n        value: |-\n",
            "      certs:\n        expression: data.certs\n        value: |-\n",
        );
        let c = convert_yaml(&expression).unwrap();
        assert!(
            c.report
                .iter()
                .any(|l| l.contains("notary.certs.expression")),
            "{:?}",
            c.report
        );
    }

    #[test]
    fn an_image_validating_policys_signature_and_attestation_checks_map_and_cel_checks_do_not() {
        let ivp = format!(
            "apiVersion: policies.kyverno.io/v1alpha1\nkind: ImageValidatingPolicy\nmetadata:\n  name: ivp\nspec:\n  validationActions: [Deny]\n  matchImageReferences:\n  - glob: \"ghcr.io/acme/*\"\n  attestors:\n  - name: release\n    cosign:\n      key:\n        data: |\n{}      ctlog:\n        insecureIgnoreTlog: true\n  - name: ci\n    cosign:\n      keyless:\n        identities:\n        - issuer: https://token.actions.githubusercontent.com\n          subjectRegExp: \"^https://github.com/acme/\"\n  attestations:\n  - name: sbom\n    intoto:\n      type: https://spdx.dev/Document\n  validations:\n  - expression: >-\n      images.containers.map(image, verifyImageSignatures(image, [attestors.release, attestors.ci])).all(e, e > 0)\n    message: not signed\n  - expression: images.containers.map(image, verifyAttestationSignatures(image, attestations.sbom, [attestors.ci])).all(e, e > 0)\n",
            indent(KEY, 10)
        );
        let c = convert_yaml(&ivp).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        assert_eq!(out.len(), 2, "{}", c.yaml);
        assert_eq!(out[0]["metadata"]["name"], "ivp-0");
        let either: Vec<&str> = out[0]["spec"]["authorities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        assert_eq!(either, ["release", "ci"]);
        assert_eq!(out[0]["spec"]["authorities"][0]["ctlog"], json!({}));
        assert_eq!(
            out[1]["spec"]["authorities"][0]["attestations"],
            json!([{"name": "sbom", "predicateType": "https://spdx.dev/Document"}])
        );

        let payload = ivp.replace(
            "  - expression: images.containers.map(image, verifyAttestationSignatures(image, attestations.sbom, [attestors.ci])).all(e, e > 0)\n",
            "  - expression: images.containers.map(image, extractPayload(image, attestations.sbom).name == 'x').all(e, e)\n",
        );
        let c = convert_yaml(&payload).unwrap();
        assert_eq!(c.converted, 0);
        assert!(
            c.report[0].contains("spec.validations[1].expression")
                && c.report[0].contains("does not map"),
            "{:?}",
            c.report
        );
    }
}

//! Conversion of Ratify's configuration (`config.ratify.deislabs.io`, the
//! resources Ratify 1.x reads beside Gatekeeper) into sigil's policies.
//!
//! A `notation` Verifier carries a Notation trust policy document
//! (`trustPolicyDoc`) and trust stores whose certificates come from
//! KeyManagementProviders (or the older CertificateStores) by name
//! (`verificationCertStores`). It becomes a ClusterImagePolicy (an
//! ImagePolicy for a NamespacedVerifier) for every image, whose one
//! `notation` authority holds the document unchanged and each store with
//! the inline certificates of the providers it names. A provider sigil
//! cannot read offline (a key vault) becomes a `configMapRef` for the user
//! to fill, so the policy stays closed until the certificates are there:
//! nothing is converted into something weaker.
//!
//! What the other resources decide is said, not silently dropped: the
//! Policy's `any` or `all` over Notary Project signatures (sigil passes an
//! image when one of its signatures verifies), a Rego policy (it does not
//! map), the Store's registry access (sigil reads registries with the
//! workload's pull secrets and its own credential providers).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::foreign::{ForeignConversion, object_name, policy_object, text};

/// Ratify's configuration API group.
const GROUP: &str = "config.ratify.deislabs.io/";
/// The kinds this module reads.
const KINDS: &[&str] = &[
    "Verifier",
    "NamespacedVerifier",
    "Store",
    "NamespacedStore",
    "Policy",
    "NamespacedPolicy",
    "KeyManagementProvider",
    "NamespacedKeyManagementProvider",
    "CertificateStore",
];
/// The artifact type of Notary Project signatures.
const NOTARY_SIGNATURE: &str = "application/vnd.cncf.notary.signature";
/// The names Ratify has given its Notation verifier.
const NOTATION_VERIFIERS: &[&str] = &["notation", "notaryv2"];

/// Whether `doc` is a Ratify resource this module reads.
pub fn is_ratify(doc: &Value) -> bool {
    text(doc, "/apiVersion").starts_with(GROUP) && KINDS.contains(&text(doc, "/kind"))
}

/// What a stream's other Ratify resources tell about one Verifier: the
/// certificate providers by the names Verifiers use, and the policy over
/// Notary Project signatures.
#[derive(Debug, Default)]
pub struct Inventory {
    /// Provider by reference (`name` cluster-wide, `namespace/name` for a
    /// namespaced one): its inline certificates, or why there are none.
    providers: BTreeMap<String, Result<String, String>>,
    /// How the stream's config policy judges Notary Project signatures
    /// (`any` or `all`), when it has one.
    notary_policy: Option<String>,
}

impl Inventory {
    /// Reads the providers and the policy among `docs`.
    pub fn of(docs: &[Value]) -> Self {
        let mut inventory = Self::default();
        for doc in docs.iter().filter(|d| is_ratify(d)) {
            let name = text(doc, "/metadata/name");
            let namespace = text(doc, "/metadata/namespace");
            match text(doc, "/kind") {
                kind @ ("KeyManagementProvider"
                | "NamespacedKeyManagementProvider"
                | "CertificateStore") => {
                    let certificates = provider_certificates(doc, kind);
                    let namespaced = kind != "KeyManagementProvider";
                    if namespaced && !namespace.is_empty() {
                        inventory
                            .providers
                            .insert(format!("{namespace}/{name}"), certificates.clone());
                    }
                    // A CertificateStore was named without its namespace.
                    if kind != "NamespacedKeyManagementProvider" {
                        inventory.providers.insert(name.to_owned(), certificates);
                    }
                }
                "Policy" | "NamespacedPolicy" if is_config_policy(doc) => {
                    inventory.notary_policy = Some(notary_policy_of(doc));
                }
                _ => {}
            }
        }
        inventory
    }
}

/// A provider's inline PEM certificates, or why sigil cannot read them.
fn provider_certificates(doc: &Value, kind: &str) -> Result<String, String> {
    let provider = if kind == "CertificateStore" {
        text(doc, "/spec/provider")
    } else {
        text(doc, "/spec/type")
    };
    let content = text(doc, "/spec/parameters/contentType");
    let value = text(doc, "/spec/parameters/value").trim();
    match provider {
        "inline" if content == "key" => Err("holds a public key, not certificates".into()),
        "inline" if value.contains("-----BEGIN CERTIFICATE-----") => Ok(format!("{value}\n")),
        "inline" => Err("holds no PEM certificate".into()),
        "" => Err("names no provider type".into()),
        other => Err(format!(
            "is of type `{other}`, whose certificates sigil does not fetch"
        )),
    }
}

fn is_config_policy(doc: &Value) -> bool {
    matches!(
        policy_type(doc),
        "config-policy" | "configpolicy" | "configPolicy"
    )
}

/// `spec.type`, or the older `spec.name` / `metadata.name` that named it.
fn policy_type(doc: &Value) -> &str {
    [
        text(doc, "/spec/type"),
        text(doc, "/spec/name"),
        text(doc, "/metadata/name"),
    ]
    .into_iter()
    .find(|t| {
        matches!(
            *t,
            "config-policy" | "configpolicy" | "configPolicy" | "rego-policy" | "regopolicy"
        )
    })
    .unwrap_or_default()
}

/// `any` or `all`: what a config policy requires of Notary Project
/// signatures (its `default`, itself `all` unless given, when the type is
/// not named).
fn notary_policy_of(doc: &Value) -> String {
    let policies = doc.pointer("/spec/parameters/artifactVerificationPolicies");
    let of = |key: &str| {
        policies
            .and_then(|p| p.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    of(NOTARY_SIGNATURE)
        .or_else(|| of("default"))
        .unwrap_or_else(|| "all".into())
}

/// Converts one Ratify document ([`is_ratify`]) with what the stream's
/// other documents say.
pub fn convert_ratify(doc: &Value, inventory: &Inventory) -> ForeignConversion {
    let mut c = ForeignConversion::default();
    match text(doc, "/kind") {
        "Verifier" | "NamespacedVerifier" => convert_verifier(doc, inventory, &mut c),
        "Store" | "NamespacedStore" => convert_store(doc, &mut c),
        "Policy" | "NamespacedPolicy" => convert_policy(doc, &mut c),
        _ => match provider_certificates(doc, text(doc, "/kind")) {
            Ok(_) => c.changes.push(
                "inline certificates: written into the trust stores of the Verifiers that name \
                 this provider"
                    .into(),
            ),
            Err(why) => c.warnings.push(format!(
                "this provider {why}; the trust stores that name it become a configMapRef to \
                 fill with its certificates"
            )),
        },
    }
    c
}

fn convert_verifier(doc: &Value, inventory: &Inventory, c: &mut ForeignConversion) {
    let verifier = text(doc, "/spec/name");
    let name = text(doc, "/metadata/name");
    if !NOTATION_VERIFIERS.contains(&verifier) {
        c.unmapped.push(format!(
            "spec.name: the `{verifier}` verifier does not map; sigil converts Ratify's notation \
             verifier (write Sigstore verification as key or keyless authorities, or convert \
             policy-controller's or Kyverno's policies); the verifier is not converted"
        ));
        return;
    }
    let artifact_types = text(doc, "/spec/artifactTypes");
    if !artifact_types.is_empty()
        && !artifact_types
            .split(',')
            .any(|t| t.trim() == NOTARY_SIGNATURE)
    {
        c.unmapped.push(format!(
            "spec.artifactTypes: `{artifact_types}` does not include {NOTARY_SIGNATURE}; the \
             verifier is not converted"
        ));
        return;
    }
    let parameters = doc.pointer("/spec/parameters").unwrap_or(&Value::Null);
    let Some(document) = parameters.get("trustPolicyDoc").filter(|d| d.is_object()) else {
        c.unmapped
            .push("spec.parameters.trustPolicyDoc: none; the verifier is not converted".to_owned());
        return;
    };
    let Some(stores) = parameters
        .get("verificationCertStores")
        .and_then(Value::as_object)
    else {
        let why = if parameters.get("verificationCerts").is_some() {
            "spec.parameters.verificationCerts names files inside Ratify's pod; give the \
             certificates as KeyManagementProviders in verificationCertStores and convert again"
        } else {
            "spec.parameters.verificationCertStores: none"
        };
        c.unmapped
            .push(format!("{why}; the verifier is not converted"));
        return;
    };
    // The older layout maps store names to providers, all of type ca.
    let legacy = stores.values().all(Value::is_array);
    let typed: Vec<(&str, &serde_json::Map<String, Value>)> = if legacy {
        c.changes.push(
            "spec.parameters.verificationCertStores: the older layout without store types: its \
             stores are `ca` stores, as Ratify reads them"
                .into(),
        );
        vec![("ca", stores)]
    } else {
        let mut typed = Vec::new();
        for (kind, named) in stores {
            let Some(named) = named.as_object() else {
                c.unmapped.push(format!(
                    "spec.parameters.verificationCertStores.{kind}: not a map of store names to \
                     providers; the verifier is not converted"
                ));
                return;
            };
            if !matches!(kind.as_str(), "ca" | "signingAuthority" | "tsa") {
                c.unmapped.push(format!(
                    "spec.parameters.verificationCertStores.{kind}: not a trust store type (ca, \
                     signingAuthority, tsa); the verifier is not converted"
                ));
                return;
            }
            typed.push((kind.as_str(), named));
        }
        typed
    };
    let mut trust_stores = Vec::new();
    for (kind, named) in typed {
        for (store, refs) in named {
            let at = if legacy {
                format!("spec.parameters.verificationCertStores.{store}")
            } else {
                format!("spec.parameters.verificationCertStores.{kind}.{store}")
            };
            let refs: Vec<&str> = refs
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            trust_stores.push(trust_store(kind, store, &refs, &at, inventory, c));
        }
    }
    let authority = json!({
        "name": object_name(&[name]),
        "notation": {
            "trustPolicy": serde_json::to_string_pretty(document).unwrap_or_default(),
            "trustStores": trust_stores,
        },
    });
    match inventory.notary_policy.as_deref() {
        Some("any") => c.changes.push(
            "the Policy's `any` over Notary Project signatures is the notation authority's own \
             rule: one signature that verifies passes"
                .into(),
        ),
        Some(other) => c.warnings.push(format!(
            "the Policy requires `{other}` Notary Project signatures to verify; sigil passes an \
             image when one of them verifies (Ratify's `any`), so an image that carries, beside \
             a signature that verifies, one that does not (another signer's, say) is admitted"
        )),
        None => c.warnings.push(
            "no config-policy among the documents: sigil passes an image when one of its Notary \
             Project signatures verifies (Ratify's `any`); under Ratify's default `all` an image \
             carrying a signature that does not verify is denied even when another one verifies"
                .into(),
        ),
    }
    c.changes.push(
        "images `**`: Ratify verifies every image Gatekeeper's constraint sends it; the trust \
         policy's registryScopes pick the statement, and an image no statement covers is \
         denied, as Ratify denies it"
            .into(),
    );
    c.changes.push(
        "enforced at admission: Gatekeeper's constraint decided how failures counted before; \
         set `mode: warn` or `mode: audit` for its `warn` or `dryrun`"
            .into(),
    );
    let namespace = (text(doc, "/kind") == "NamespacedVerifier")
        .then(|| text(doc, "/metadata/namespace"))
        .filter(|ns| !ns.is_empty());
    c.objects.push(policy_object(
        &object_name(&["ratify", name]),
        namespace,
        &["**".to_owned()],
        "enforce",
        vec![authority],
        "ratify",
    ));
}

/// One trust store entry: the inline certificates of every provider it
/// names, or a ConfigMap to fill when sigil cannot read one of them.
fn trust_store(
    kind: &str,
    store: &str,
    refs: &[&str],
    at: &str,
    inventory: &Inventory,
    c: &mut ForeignConversion,
) -> Value {
    let name = format!("{kind}/{store}");
    let mut pem = String::new();
    let mut missing = Vec::new();
    for reference in refs {
        match inventory.providers.get(*reference) {
            Some(Ok(certificates)) => pem.push_str(certificates),
            Some(Err(why)) => missing.push(format!("`{reference}` {why}")),
            None => missing.push(format!("`{reference}` is not among the documents")),
        }
    }
    if refs.is_empty() {
        missing.push("no provider is named".into());
    }
    if missing.is_empty() {
        return json!({ "name": name, "certificates": pem });
    }
    let config_map = object_name(&["ratify", kind, store]);
    c.warnings.push(format!(
        "{at}: {}: the store reads ConfigMap `{config_map}` in sigil's namespace (create it with \
         one PEM file per certificate of {}); until it exists the policy is not Ready and \
         admits nothing",
        missing.join("; "),
        refs.join(", ")
    ));
    json!({ "name": name, "configMapRef": { "name": config_map } })
}

fn convert_store(doc: &Value, c: &mut ForeignConversion) {
    let store = text(doc, "/spec/name");
    if store != "oras" {
        c.unmapped.push(format!(
            "spec.name: the `{store}` referrer store does not map; sigil reads signatures \
             through the registry's referrers API and the OCI 1.1 fallback tag"
        ));
        return;
    }
    let parameters = doc.pointer("/spec/parameters").unwrap_or(&Value::Null);
    let auth = text(parameters, "/authProvider/name");
    if !auth.is_empty() {
        c.warnings.push(format!(
            "spec.parameters.authProvider: `{auth}` does not carry over; sigil reads registries \
             with the workload's pull secrets and its own credential providers (cloud workload \
             identity, docker config): see docs/registries.md"
        ));
    }
    if parameters.get("useHttp") == Some(&Value::Bool(true)) {
        c.warnings.push(
            "spec.parameters.useHttp: plain-HTTP registries are named in sigil's registry \
             settings (docs/registries.md), host by host"
                .into(),
        );
    }
    c.changes.push(
        "the oras store: sigil finds Notary Project signatures among the image's OCI referrers \
         with the same registry access as the image"
            .into(),
    );
}

fn convert_policy(doc: &Value, c: &mut ForeignConversion) {
    if is_config_policy(doc) {
        c.changes.push(format!(
            "config-policy: Notary Project signatures `{}` (the converted Verifiers say what \
             that means for sigil)",
            notary_policy_of(doc)
        ));
    } else {
        c.unmapped.push(
            "rego-policy: its rules over Ratify's verifier reports do not map; the converted \
             Verifiers pass an image when one of its Notary Project signatures verifies, and \
             what else the Rego requires can be written as the ClusterImagePolicy's `policy`"
                .into(),
        );
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use serde_json::{Value, json};

    use crate::convert::{Conversion, convert_yaml};

    fn objects(c: &Conversion) -> Vec<Value> {
        serde_saphyr::from_multiple(&c.yaml).unwrap()
    }

    fn indent(text: &str, spaces: usize) -> String {
        let pad = " ".repeat(spaces);
        text.lines().map(|l| format!("{pad}{l}\n")).collect()
    }

    /// A CA certificate (PEM) for the organisation `org`.
    fn ca_pem(org: &str) -> String {
        let leaf = sigil_testkit::notation::LeafSpec::new(org, "signer", 0, 4_000_000_000);
        sigil_testkit::notation::NotaryPki::new(7, org, 0, 4_000_000_000, &leaf)
            .root
            .cert_pem()
    }

    fn inline_provider(name: &str, pem: &str) -> String {
        format!(
            "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: KeyManagementProvider\nmetadata:\n  name: {name}\nspec:\n  type: inline\n  parameters:\n    contentType: certificate\n    value: |\n{}",
            indent(pem.trim(), 6)
        )
    }

    const TRUST_POLICY_DOC: &str = "    trustPolicyDoc:\n      version: \"1.0\"\n      trustPolicies:\n      - name: default\n        registryScopes: [\"registry.example/acme/app\"]\n        signatureVerification:\n          level: strict\n        trustStores: [\"ca:ca-certs\", \"tsa:tsa-certs\"]\n        trustedIdentities: [\"x509.subject: C=US, ST=WA, O=Acme\"]\n";

    fn verifier(stores: &str) -> String {
        format!(
            "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: Verifier\nmetadata:\n  name: verifier-notation\nspec:\n  name: notation\n  artifactTypes: application/vnd.cncf.notary.signature\n  parameters:\n    verificationCertStores:\n{stores}{TRUST_POLICY_DOC}"
        )
    }

    const TYPED_STORES: &str = "      ca:\n        ca-certs:\n        - acme-root\n      tsa:\n        tsa-certs:\n        - stamps-root\n";

    const ANY_POLICY: &str = "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: Policy\nmetadata:\n  name: ratify-policy\nspec:\n  type: config-policy\n  parameters:\n    artifactVerificationPolicies:\n      \"application/vnd.cncf.notary.signature\": any\n";

    #[test]
    fn a_notation_verifier_becomes_a_notation_authority_with_its_providers_certificates() {
        let (acme, stamps) = (ca_pem("Acme"), ca_pem("Stamps"));
        let stream = [
            verifier(TYPED_STORES),
            inline_provider("acme-root", &acme),
            inline_provider("stamps-root", &stamps),
            ANY_POLICY.to_owned(),
        ]
        .join("---\n");
        let c = convert_yaml(&stream).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let out = objects(&c);
        assert_eq!(out.len(), 1);
        let policy = &out[0];
        assert_eq!(policy["kind"], "ClusterImagePolicy");
        assert_eq!(policy["metadata"]["name"], "ratify-verifier-notation");
        assert_eq!(
            policy["metadata"]["annotations"]["policy.sigil.dev/converted-from"],
            "ratify"
        );
        assert_eq!(policy["spec"]["images"], json!([{ "glob": "**" }]));
        let notation = &policy["spec"]["authorities"][0]["notation"];
        let document: Value =
            serde_json::from_str(notation["trustPolicy"].as_str().unwrap()).unwrap();
        assert_eq!(
            document["trustPolicies"][0]["trustedIdentities"],
            json!(["x509.subject: C=US, ST=WA, O=Acme"])
        );
        assert_eq!(
            notation["trustStores"],
            json!([
                { "name": "ca/ca-certs", "certificates": format!("{}\n", acme.trim()) },
                { "name": "tsa/tsa-certs", "certificates": format!("{}\n", stamps.trim()) },
            ])
        );
        assert!(
            c.changes
                .iter()
                .any(|l| l.contains("`any` over Notary Project signatures")),
            "{:?}",
            c.changes
        );
    }

    #[test]
    fn the_older_store_layout_and_a_certificate_store_are_read_as_ratify_reads_them() {
        let acme = ca_pem("Acme");
        let store = format!(
            "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: CertificateStore\nmetadata:\n  name: certstore-inline\n  namespace: gatekeeper-system\nspec:\n  provider: inline\n  parameters:\n    value: |\n{}",
            indent(acme.trim(), 6)
        );
        let verifier = verifier("      certs:\n      - certstore-inline\n")
            .replace("[\"ca:ca-certs\", \"tsa:tsa-certs\"]", "[\"ca:certs\"]");
        let c = convert_yaml(&[verifier, store, ANY_POLICY.to_owned()].join("---\n")).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        assert_eq!(
            out[0]["spec"]["authorities"][0]["notation"]["trustStores"],
            json!([{ "name": "ca/certs", "certificates": format!("{}\n", acme.trim()) }])
        );
        assert!(
            c.changes
                .iter()
                .any(|l| l.contains("the older layout without store types")),
            "{:?}",
            c.changes
        );
    }

    #[test]
    fn a_key_vault_provider_becomes_a_configmap_to_fill_and_the_policy_stays_closed() {
        let vault = "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: KeyManagementProvider\nmetadata:\n  name: acme-root\nspec:\n  type: azurekeyvault\n  parameters:\n    vaultURI: https://acme.vault.azure.net/\n";
        let stream = [
            verifier(TYPED_STORES),
            vault.to_owned(),
            inline_provider("stamps-root", &ca_pem("Stamps")),
            ANY_POLICY.to_owned(),
        ]
        .join("---\n");
        let c = convert_yaml(&stream).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        assert_eq!(
            out[0]["spec"]["authorities"][0]["notation"]["trustStores"][0],
            json!({ "name": "ca/ca-certs", "configMapRef": { "name": "ratify-ca-ca-certs" } })
        );
        assert!(
            c.warnings.iter().any(|l| l.contains(
                "`acme-root` is of type `azurekeyvault`, whose certificates sigil does not fetch"
            ) && l.contains("ConfigMap `ratify-ca-ca-certs`")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn ratifys_default_all_over_signatures_is_a_documented_difference() {
        let stream = [
            verifier(TYPED_STORES),
            inline_provider("acme-root", &ca_pem("Acme")),
            inline_provider("stamps-root", &ca_pem("Stamps")),
        ]
        .join("---\n");
        let c = convert_yaml(&stream).unwrap();
        assert_eq!(c.converted, 1);
        assert!(
            c.warnings
                .iter()
                .any(|l| l.contains("no config-policy among the documents")),
            "{:?}",
            c.warnings
        );
        let all = ANY_POLICY.replace(": any", ": all");
        let c = convert_yaml(&format!("{stream}---\n{all}")).unwrap();
        assert!(
            c.warnings
                .iter()
                .any(|l| l.contains("requires `all` Notary Project signatures")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn other_verifiers_rego_policies_and_file_certificates_are_reported_not_converted() {
        let cosign = "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: Verifier\nmetadata:\n  name: verifier-cosign\nspec:\n  name: cosign\n  artifactTypes: application/vnd.dev.cosign.artifact.sig.v1+json\n";
        let rego = "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: Policy\nmetadata:\n  name: ratify-policy\nspec:\n  type: rego-policy\n  parameters:\n    policy: package ratify.policy\n";
        let files = "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: Verifier\nmetadata:\n  name: files\nspec:\n  name: notation\n  parameters:\n    verificationCerts: [/usr/local/ratify-certs]\n    trustPolicyDoc: {version: \"1.0\", trustPolicies: []}\n";
        let c = convert_yaml(&[cosign, rego, files].join("---\n")).unwrap();
        assert_eq!(c.converted, 0);
        for expected in [
            "the `cosign` verifier does not map",
            "rego-policy: its rules over Ratify's verifier reports do not map",
            "verificationCerts names files inside Ratify's pod",
        ] {
            assert!(
                c.report.iter().any(|l| l.contains(expected)),
                "{expected}: {:?}",
                c.report
            );
        }
    }

    #[test]
    fn providers_in_the_other_files_of_a_run_fill_the_stores() {
        let options = crate::convert::ConvertOptions {
            companions: vec![
                inline_provider("acme-root", &ca_pem("Acme")),
                [
                    inline_provider("stamps-root", &ca_pem("Stamps")),
                    ANY_POLICY.to_owned(),
                ]
                .join("---\n"),
            ],
            ..Default::default()
        };
        let c = crate::convert::convert_yaml_with(&verifier(TYPED_STORES), &options).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let out = objects(&c);
        let stores = &out[0]["spec"]["authorities"][0]["notation"]["trustStores"];
        assert!(stores[0]["certificates"].is_string() && stores[1]["certificates"].is_string());
    }

    #[test]
    fn a_namespaced_verifier_becomes_an_image_policy_in_its_namespace() {
        let namespaced = verifier(TYPED_STORES).replace(
            "kind: Verifier\nmetadata:\n",
            "kind: NamespacedVerifier\nmetadata:\n  namespace: shop\n",
        );
        let stream = [
            namespaced,
            inline_provider("acme-root", &ca_pem("Acme")),
            inline_provider("stamps-root", &ca_pem("Stamps")),
            ANY_POLICY.to_owned(),
        ]
        .join("---\n");
        let c = convert_yaml(&stream).unwrap();
        assert!(c.report.is_empty(), "{:?}", c.report);
        let out = objects(&c);
        assert_eq!(out[0]["kind"], "ImagePolicy");
        assert_eq!(out[0]["metadata"]["namespace"], "shop");
    }
}

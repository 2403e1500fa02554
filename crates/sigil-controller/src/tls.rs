//! Webhook TLS: a CA and a serving certificate for the webhook Service in a
//! Secret (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`), and the `caBundle` of
//! sigil's MutatingWebhookConfiguration and ValidatingWebhookConfiguration
//! (and, with `--gatekeeper-provider`, of the Gatekeeper Provider that calls
//! the webhook's external-data listener) kept equal to `ca.crt`.
//!
//! Rotation never fails an admission: the serving certificate (1 year) is
//! renewed when less than [`LEAF_RENEW_BEFORE`] remains, signed by the same
//! long-lived CA (10 years) that every `caBundle` already trusts, so old and
//! new certificates are both valid while the webhook reloads its mounted
//! files. The CA itself is replaced [`CA_RENEW_BEFORE`] ahead of its expiry;
//! the previous CA stays in `ca.crt` and in every `caBundle` until it
//! expires, and `caBundle` is updated before the Secret, so clients trust a
//! new CA before anything serves a certificate it signed. With
//! `--webhook-tls external` (or its alias `--cert-manager`) this module does
//! nothing: cert-manager and its CA injector, or whoever runs the webhook out
//! of cluster, own both.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::Resource as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData as _,
};
use sigil_verifier::x509::Certificate;
use time::{Duration, OffsetDateTime};

use crate::config::Args;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::names::MANAGER;
use crate::resync;

/// Lifetime of a generated CA.
pub const CA_VALIDITY: Duration = Duration::days(3650);
/// A CA is replaced when less than this remains.
pub const CA_RENEW_BEFORE: Duration = Duration::days(365);
/// Lifetime of a serving certificate.
pub const LEAF_VALIDITY: Duration = Duration::days(365);
/// A serving certificate is renewed when less than this remains.
pub const LEAF_RENEW_BEFORE: Duration = Duration::days(120);
/// Certificates start an hour early to absorb clock skew.
const BACKDATE: Duration = Duration::hours(1);

/// Secret data keys.
pub const CA_CRT: &str = "ca.crt";
/// The CA's private key.
pub const CA_KEY: &str = "ca.key";
/// The serving certificate.
pub const TLS_CRT: &str = "tls.crt";
/// The serving key.
pub const TLS_KEY: &str = "tls.key";

/// The webhook's certificates, as PEM.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Material {
    /// CA certificates: the current one first, then earlier ones still valid.
    pub ca_certs: Vec<String>,
    /// The current CA's key.
    pub ca_key: String,
    /// The serving certificate.
    pub tls_crt: String,
    /// The serving key.
    pub tls_key: String,
}

impl Material {
    /// Reads the Secret's data.
    pub fn from_secret(secret: &Secret) -> Self {
        let data = secret.data.clone().unwrap_or_default();
        let text = |k: &str| {
            data.get(k)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .unwrap_or_default()
        };
        let ca_certs = Certificate::from_pem_chain(&text(CA_CRT))
            .map(|certs| {
                certs
                    .iter()
                    .map(|c| sigil_verifier::crypto::pem_encode("CERTIFICATE", &c.der))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            ca_certs,
            ca_key: text(CA_KEY),
            tls_crt: text(TLS_CRT),
            tls_key: text(TLS_KEY),
        }
    }

    /// The `caBundle`: every CA certificate, concatenated.
    pub fn ca_bundle(&self) -> String {
        self.ca_certs.concat()
    }

    fn data(&self) -> BTreeMap<String, ByteString> {
        [
            (CA_CRT, self.ca_bundle()),
            (CA_KEY, self.ca_key.clone()),
            (TLS_CRT, self.tls_crt.clone()),
            (TLS_KEY, self.tls_key.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
        .collect()
    }
}

/// The DNS names the API server may use for the webhook Service.
pub fn dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

fn tls_err(what: &str) -> impl Fn(rcgen::Error) -> Error + '_ {
    move |e| Error::Tls(format!("{what}: {e}"))
}

fn ca_params(common_name: &str, now: OffsetDateTime) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - BACKDATE;
    params.not_after = now + CA_VALIDITY;
    params
}

/// A usable CA: its certificate, key and the parameters that sign with it.
struct Ca {
    cert: Certificate,
    key: KeyPair,
    params: CertificateParams,
}

fn new_ca(now: OffsetDateTime) -> Result<(Ca, String)> {
    let key = KeyPair::generate().map_err(tls_err("generating the CA key"))?;
    let params = ca_params(&format!("sigil-webhook-ca-{}", now.unix_timestamp()), now);
    let cert = params
        .self_signed(&key)
        .map_err(tls_err("self-signing the CA"))?;
    let pem_text = cert.pem();
    let parsed = Certificate::from_der(cert.der())
        .map_err(|e| Error::Tls(format!("parsing the new CA: {e}")))?;
    Ok((
        Ca {
            cert: parsed,
            key,
            params,
        },
        pem_text,
    ))
}

/// The current CA of `m`, when it is ours, matches its key and is far from
/// expiry.
fn current_ca(m: &Material, now: OffsetDateTime) -> Option<Ca> {
    let cert = Certificate::from_pem_chain(m.ca_certs.first()?)
        .ok()?
        .into_iter()
        .next()?;
    let key = KeyPair::from_pem(&m.ca_key).ok()?;
    if key.subject_public_key_info() != cert.spki_der
        || !cert.is_ca
        || !cert.is_valid_at(now)
        || cert.not_after - now < CA_RENEW_BEFORE
    {
        return None;
    }
    // rcgen re-creates the issuer name from the common name; the signature
    // check of a fresh leaf below proves the name bytes match.
    let common_name = cert.subject.strip_prefix("CN=")?.to_owned();
    let mut params = ca_params(&common_name, now);
    params.not_after = cert.not_after;
    Some(Ca { cert, key, params })
}

fn leaf_ok(m: &Material, ca: &Certificate, names: &[String], now: OffsetDateTime) -> bool {
    let Some(leaf) = Certificate::from_pem_chain(&m.tls_crt)
        .ok()
        .and_then(|c| c.into_iter().next())
    else {
        return false;
    };
    let key_matches =
        KeyPair::from_pem(&m.tls_key).is_ok_and(|k| k.subject_public_key_info() == leaf.spki_der);
    key_matches
        && leaf.verify_issued_by(ca).is_ok()
        && leaf.is_valid_at(now)
        && leaf.not_after - now >= LEAF_RENEW_BEFORE
        && names.iter().all(|n| leaf.san_dns.contains(n))
}

fn new_leaf(ca: &Ca, names: &[String], now: OffsetDateTime) -> Result<(String, String)> {
    let key = KeyPair::generate().map_err(tls_err("generating the serving key"))?;
    let mut params =
        CertificateParams::new(names.to_vec()).map_err(tls_err("serving certificate names"))?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.get(2).cloned().unwrap_or_default(),
    );
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - BACKDATE;
    params.not_after = (now + LEAF_VALIDITY).min(ca.cert.not_after);
    let issuer = Issuer::from_params(&ca.params, &ca.key);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(tls_err("signing the serving certificate"))?;
    let parsed = Certificate::from_der(cert.der())
        .map_err(|e| Error::Tls(format!("parsing the new serving certificate: {e}")))?;
    parsed.verify_issued_by(&ca.cert).map_err(|e| {
        Error::Tls(format!(
            "the new serving certificate does not chain to the CA: {e}"
        ))
    })?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Decides the material to hold at `now`: `existing` when it is fine,
/// otherwise a renewed serving certificate and, when needed, a new CA.
/// Returns the material and whether it changed.
pub fn plan(
    existing: Option<&Material>,
    names: &[String],
    now: OffsetDateTime,
) -> Result<(Material, bool)> {
    let existing = existing.cloned().unwrap_or_default();
    let mut m = existing.clone();
    let ca = match current_ca(&existing, now) {
        Some(ca) => ca,
        None => {
            let (ca, ca_pem) = new_ca(now)?;
            // Earlier CAs stay trusted until they expire.
            let earlier = existing.ca_certs.iter().filter(|p| {
                Certificate::from_pem_chain(p)
                    .ok()
                    .and_then(|c| c.into_iter().next())
                    .is_some_and(|c| c.is_valid_at(now))
            });
            m.ca_certs = std::iter::once(ca_pem).chain(earlier.cloned()).collect();
            m.ca_key = ca.key.serialize_pem();
            ca
        }
    };
    // Drop earlier CAs that expired.
    let mut kept = Vec::with_capacity(m.ca_certs.len());
    for (i, p) in m.ca_certs.iter().enumerate() {
        let valid = Certificate::from_pem_chain(p)
            .ok()
            .and_then(|c| c.into_iter().next())
            .is_some_and(|c| c.is_valid_at(now));
        if i == 0 || valid {
            kept.push(p.clone());
        }
    }
    m.ca_certs = kept;
    if !leaf_ok(&m, &ca.cert, names, now) {
        let (crt, key) = match new_leaf(&ca, names, now) {
            Ok(leaf) => leaf,
            Err(e) if existing.ca_certs.first() == m.ca_certs.first() => {
                // The stored CA cannot sign leaves that chain to it (not
                // made by sigil): replace it.
                tracing::warn!(error = %e, "stored webhook CA unusable; generating a new one");
                return plan(None, names, now).map(|(mut fresh, _)| {
                    fresh.ca_certs.extend(m.ca_certs.iter().cloned());
                    (fresh, true)
                });
            }
            Err(e) => return Err(e),
        };
        m.tls_crt = crt;
        m.tls_key = key;
    }
    let changed = m != existing;
    Ok((m, changed))
}

/// Expiry (Unix time) of the serving certificate in `m`.
pub fn leaf_expiry(m: &Material) -> Option<i64> {
    Certificate::from_pem_chain(&m.tls_crt)
        .ok()?
        .first()
        .map(|c| c.not_after.unix_timestamp())
}

async fn sync_ca_bundle(client: &Client, args: &Args, bundle: &str) -> Result<()> {
    let want = ByteString(bundle.as_bytes().to_vec());
    set_ca_bundle(
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        &args.mutating_webhook,
        &want,
        |c| {
            c.webhooks
                .iter_mut()
                .flatten()
                .map(|w| &mut w.client_config)
                .collect()
        },
    )
    .await?;
    set_ca_bundle(
        Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        &args.validating_webhook,
        &want,
        |c| {
            c.webhooks
                .iter_mut()
                .flatten()
                .map(|w| &mut w.client_config)
                .collect()
        },
    )
    .await?;
    if let Some(name) = &args.gatekeeper_provider {
        set_provider_ca_bundle(client, name, bundle).await?;
    }
    Ok(())
}

/// Sets `spec.caBundle` of the Gatekeeper Provider `name` to `bundle`
/// (base64 of the PEM, as the Provider holds it), writing only when it
/// differs. A missing Provider, or Gatekeeper's API not installed, is not an
/// error: the chart creates the Provider, and Gatekeeper may come later.
async fn set_provider_ca_bundle(client: &Client, name: &str, bundle: &str) -> Result<()> {
    use base64::Engine as _;
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let gvk = GroupVersionKind::gvk("externaldata.gatekeeper.sh", "v1beta1", "Provider");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let provider = match api.get_opt(name).await {
        Ok(Some(p)) => p,
        Ok(None) => return Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => {
            return Err(Error::kube(
                format!("reading Gatekeeper Provider {name}"),
                e,
            ));
        }
    };
    let want = base64::engine::general_purpose::STANDARD.encode(bundle);
    if provider
        .data
        .pointer("/spec/caBundle")
        .and_then(|v| v.as_str())
        == Some(want.as_str())
    {
        return Ok(());
    }
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"caBundle": want}})),
    )
    .await
    .map_err(|e| {
        Error::kube(
            format!("updating caBundle of Gatekeeper Provider {name}"),
            e,
        )
    })?;
    tracing::info!(%name, "caBundle of the Gatekeeper Provider updated");
    Ok(())
}

/// Sets `caBundle` on every webhook of one (mutating or validating)
/// configuration, writing only when something differs. A missing
/// configuration is not an error: the chart may not have installed it yet.
async fn set_ca_bundle<K>(
    api: Api<K>,
    name: &str,
    want: &ByteString,
    client_configs: impl Fn(&mut K) -> Vec<&mut WebhookClientConfig>,
) -> Result<()>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let kind = K::kind(&());
    let Some(mut config) = api
        .get_opt(name)
        .await
        .map_err(|e| Error::kube(format!("reading {kind} {name}"), e))?
    else {
        return Ok(());
    };
    let mut changed = false;
    for c in client_configs(&mut config) {
        if c.ca_bundle.as_ref() != Some(want) {
            c.ca_bundle = Some(want.clone());
            changed = true;
        }
    }
    if changed {
        api.replace(name, &PostParams::default(), &config)
            .await
            .map_err(|e| Error::kube(format!("updating caBundle of {kind} {name}"), e))?;
        tracing::info!(%name, %kind, "caBundle updated");
    }
    Ok(())
}

/// Brings the TLS Secret and both `caBundle`s up to date at `now`.
pub async fn sync(ctx: &Context, now: OffsetDateTime) -> Result<()> {
    ctx.ensure_leader()?;
    let args = &ctx.args;
    ctx.metrics.reconciled("tls");
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &args.namespace);
    let existing = secrets
        .get_opt(&args.webhook_tls_secret)
        .await
        .map_err(|e| {
            Error::kube(
                format!(
                    "reading Secret {}/{}",
                    args.namespace, args.webhook_tls_secret
                ),
                e,
            )
        })?
        .map(|s| Material::from_secret(&s));
    let names = dns_names(&args.webhook_service, &args.namespace);
    let (material, changed) = plan(existing.as_ref(), &names, now)?;
    // caBundle first: clients must trust a new CA before anything serves
    // a certificate it signed.
    sync_ca_bundle(&ctx.client, args, &material.ca_bundle()).await?;
    if changed {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(args.webhook_tls_secret.clone()),
                namespace: Some(args.namespace.clone()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(material.data()),
            ..Default::default()
        };
        let mut body = serde_json::to_value(&secret).map_err(|e| Error::Tls(e.to_string()))?;
        if let Some(obj) = body.as_object_mut() {
            obj.insert("apiVersion".into(), Secret::API_VERSION.into());
            obj.insert("kind".into(), Secret::KIND.into());
        }
        secrets
            .patch(
                &args.webhook_tls_secret,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(|e| {
                Error::kube(
                    format!(
                        "writing Secret {}/{}",
                        args.namespace, args.webhook_tls_secret
                    ),
                    e,
                )
            })?;
        tracing::info!(secret = %args.webhook_tls_secret, "webhook certificate written");
    }
    if let Some(at) = leaf_expiry(&material) {
        ctx.metrics.certificate_expiry(at);
    }
    Ok(())
}

/// Keeps webhook TLS in sync until `shutdown` resolves: on start, every
/// `--tls-check-seconds`, and whenever the Secret or a webhook configuration
/// changes (a Helm upgrade that resets `caBundle` is repaired at once).
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()> + Send) {
    if !ctx.args.manages_webhook_tls() {
        tracing::info!(
            "--webhook-tls external: the webhook certificate and caBundle are handled elsewhere"
        );
        shutdown.await;
        return;
    }
    let args = &ctx.args;
    let secret = resync::changes(
        Api::<Secret>::namespaced(ctx.client.clone(), &args.namespace),
        watcher::Config::default().fields(&format!("metadata.name={}", args.webhook_tls_secret)),
    );
    let [mutating, validating] = resync::webhook_configurations(&ctx.client, args);
    let changes = futures_util::stream::select_all([secret, mutating, validating]);
    resync::keep(
        "tls",
        "webhook TLS sync",
        &ctx.metrics,
        args.tls_check(),
        changes,
        || sync(&ctx, OffsetDateTime::now_utc()),
        shutdown,
    )
    .await;
}

#[cfg(test)]
mod tests {

    use base64::Engine as _;
    use serde_json::{Value, json};

    use super::*;
    use crate::fixtures::*;

    fn webhook_config(kind: &str, name: &str) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name},
            "webhooks": [{"name": "validate.sigil.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "clientConfig": {"service": {"name": "sigil-webhook", "namespace": NS}}}],
        })
    }

    const MUTATING: &str =
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/sigil-webhook";
    const VALIDATING: &str =
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/sigil-webhook";

    fn ca_bundle(api: &FakeApi, path: &str) -> String {
        let b64 = api.get(path).unwrap()["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .unwrap()
            .to_owned();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
        )
        .unwrap()
    }

    fn stored(api: &FakeApi) -> Material {
        let secret: Secret =
            serde_json::from_value(api.get(&secret_path("sigil-webhook-tls")).unwrap()).unwrap();
        Material::from_secret(&secret)
    }

    fn setup() -> (Arc<Context>, FakeApi, tokio::sync::watch::Sender<bool>) {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, leading) = context(client, true);
        api.put(
            MUTATING,
            webhook_config("MutatingWebhookConfiguration", "sigil-webhook"),
        );
        api.put(
            VALIDATING,
            webhook_config("ValidatingWebhookConfiguration", "sigil-webhook"),
        );
        (ctx, api, leading)
    }

    fn leaf(m: &Material) -> Certificate {
        Certificate::from_pem_chain(&m.tls_crt).unwrap().remove(0)
    }

    #[tokio::test]
    async fn a_first_sync_creates_a_ca_and_a_serving_certificate_and_sets_both_ca_bundles() {
        let (ctx, api, _l) = setup();
        let now = OffsetDateTime::now_utc();

        sync(&ctx, now).await.unwrap();

        let m = stored(&api);
        assert_eq!(m.ca_certs.len(), 1);
        let ca = Certificate::from_pem_chain(&m.ca_certs[0])
            .unwrap()
            .remove(0);
        let leaf = leaf(&m);
        leaf.verify_issued_by(&ca).unwrap();
        for name in dns_names("sigil-webhook", NS) {
            assert!(leaf.san_dns.contains(&name), "{name}");
        }
        assert_eq!(ca_bundle(&api, MUTATING), m.ca_bundle());
        assert_eq!(ca_bundle(&api, VALIDATING), m.ca_bundle());

        // In sync: nothing is written again.
        let writes = api
            .requests()
            .iter()
            .filter(|r| r.method != http::Method::GET)
            .count();
        sync(&ctx, now).await.unwrap();
        assert_eq!(
            api.requests()
                .iter()
                .filter(|r| r.method != http::Method::GET)
                .count(),
            writes
        );
    }

    const PROVIDER: &str = "/apis/externaldata.gatekeeper.sh/v1beta1/providers/sigil";

    #[tokio::test]
    async fn the_gatekeeper_provider_gets_the_webhook_ca_as_its_ca_bundle_when_named() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |a| a.gatekeeper_provider = Some("sigil".into()));
        api.put(
            MUTATING,
            webhook_config("MutatingWebhookConfiguration", "sigil-webhook"),
        );
        api.put(
            VALIDATING,
            webhook_config("ValidatingWebhookConfiguration", "sigil-webhook"),
        );
        let now = OffsetDateTime::now_utc();
        // Not created yet (or Gatekeeper not installed): nothing to do.
        sync(&ctx, now).await.unwrap();
        assert!(api.get(PROVIDER).is_none());

        api.put(
            PROVIDER,
            json!({"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "Provider",
                   "metadata": {"name": "sigil"},
                   "spec": {"url": "https://sigil-webhook.sigil-system:8444/verify", "timeout": 3}}),
        );
        sync(&ctx, now).await.unwrap();
        let provider = api.get(PROVIDER).unwrap();
        let pem = base64::engine::general_purpose::STANDARD
            .decode(provider["spec"]["caBundle"].as_str().unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(pem).unwrap(), stored(&api).ca_bundle());
        assert_eq!(
            provider["spec"]["timeout"], 3,
            "the rest of the spec is kept"
        );

        let patches = || api.requests_to(http::Method::PATCH, PROVIDER).len();
        let before = patches();
        sync(&ctx, now).await.unwrap();
        assert_eq!(
            patches(),
            before,
            "in sync: the Provider is not written again"
        );
    }

    #[tokio::test]
    async fn a_serving_certificate_near_expiry_is_renewed_by_the_same_ca() {
        let (ctx, api, _l) = setup();
        let now = OffsetDateTime::now_utc();
        sync(&ctx, now).await.unwrap();
        let first = stored(&api);

        let later = now + LEAF_VALIDITY - LEAF_RENEW_BEFORE + Duration::days(1);
        sync(&ctx, later).await.unwrap();

        let second = stored(&api);
        assert_ne!(second.tls_crt, first.tls_crt);
        assert_eq!(
            second.ca_certs, first.ca_certs,
            "the CA stays, so the caBundle stays valid"
        );
        assert_eq!(ca_bundle(&api, MUTATING), first.ca_bundle());
        // The old certificate is still valid while the webhook reloads.
        assert!(leaf(&first).is_valid_at(later));
        assert!(leaf(&second).not_after > leaf(&first).not_after);
    }

    #[tokio::test]
    async fn certificate_rotation_of_an_expiring_ca_updates_ca_bundle_with_old_and_new_ca() {
        let (ctx, api, _l) = setup();
        let now = OffsetDateTime::now_utc();
        sync(&ctx, now).await.unwrap();
        let first = stored(&api);

        let later = now + CA_VALIDITY - CA_RENEW_BEFORE + Duration::days(1);
        sync(&ctx, later).await.unwrap();

        let second = stored(&api);
        assert_eq!(second.ca_certs.len(), 2);
        assert_eq!(
            second.ca_certs[1], first.ca_certs[0],
            "the old CA stays trusted"
        );
        let new_ca = Certificate::from_pem_chain(&second.ca_certs[0])
            .unwrap()
            .remove(0);
        leaf(&second).verify_issued_by(&new_ca).unwrap();
        assert_eq!(ca_bundle(&api, MUTATING), second.ca_bundle());
        assert_eq!(ca_bundle(&api, VALIDATING), second.ca_bundle());
        // caBundle was updated before the Secret holding the new certificate.
        let order: Vec<String> = api
            .requests()
            .into_iter()
            .filter(|r| r.method != http::Method::GET)
            .map(|r| r.path)
            .collect();
        let last_bundle = order.iter().rposition(|p| p == VALIDATING).unwrap();
        let last_secret = order
            .iter()
            .rposition(|p| p.ends_with("sigil-webhook-tls"))
            .unwrap();
        assert!(last_bundle < last_secret, "{order:?}");
    }

    #[tokio::test]
    async fn a_reset_ca_bundle_is_repaired() {
        let (ctx, api, _l) = setup();
        let now = OffsetDateTime::now_utc();
        sync(&ctx, now).await.unwrap();
        api.put(
            MUTATING,
            webhook_config("MutatingWebhookConfiguration", "sigil-webhook"),
        );

        sync(&ctx, now).await.unwrap();

        assert_eq!(ca_bundle(&api, MUTATING), stored(&api).ca_bundle());
    }

    #[tokio::test]
    async fn external_tls_mode_steps_aside() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client.clone(), true);
        let mut args = ctx.args.clone();
        args.webhook_tls = crate::config::WebhookTls::External;
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = Arc::new(Context::new(
            client,
            args,
            ctx.metrics.clone(),
            ctx.leading.clone(),
            tx,
        ));

        run(ctx, async {}).await;

        assert!(api.requests().is_empty());
    }
}

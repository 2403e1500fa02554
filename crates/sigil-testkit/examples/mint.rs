//! Writes testkit scenarios to a directory, one subdirectory per scenario,
//! laid out like sigstore-conformance cases (`bundle.sigstore.json`,
//! `artifact`, `trusted_root.json`, `identity`, `issuer`, `key.pub`) plus
//! `trust_config.json` for sigstore-python and DER/PEM pieces for openssl.
//!
//! Usage: `cargo run -p sigil-testkit --example mint -- OUT_DIR [SEED]`

use std::fs;
use std::path::Path;

use anyhow::Context as _;
use sigil_testkit::{
    BundleSpec, BundleVersion, ChainSpec, Content, SctSpec, Testkit, TimestampSpec, TlogSpec,
    TrustRootSpec, TsaOptions, V1Kind, V2Kind,
};

/// What is signed.
#[derive(Clone, Copy)]
enum Kind {
    Message,
    /// In-toto statement whose subject has a name.
    DsseNamed,
    /// In-toto statement whose subject has only a digest (cosign v3).
    DsseNameless,
}

/// One scenario and what a conforming verifier should say: `ok`, `fail`,
/// or `nocheck:<why>` when sigstore-python cannot judge it.
struct Scenario {
    name: &'static str,
    spec: BundleSpec,
    kind: Kind,
    expect: &'static str,
    /// A kit other than the default one (e.g. with different certificate validity).
    kit: Option<Testkit>,
}

fn scenarios() -> Vec<Scenario> {
    use Kind::{DsseNamed, DsseNameless, Message};
    let d = BundleSpec::default;
    let v2 = BundleSpec::rekor_v2;
    let sc = |name, spec, kind, expect| Scenario {
        name,
        spec,
        kind,
        expect,
        kit: None,
    };
    let tsa = |embed_certs, gen_time, wrong_imprint| {
        TimestampSpec::Rfc3161(TsaOptions {
            embed_certs,
            gen_time,
            wrong_imprint,
        })
    };
    let late = Some(sigil_testkit::DEFAULT_SIGNING_TIME + 3600);
    vec![
        sc(
            "v1-message-v0.1",
            BundleSpec {
                version: BundleVersion::V01,
                ..d()
            },
            Message,
            "ok",
        ),
        sc(
            "v1-message-v0.2",
            BundleSpec {
                version: BundleVersion::V02,
                ..d()
            },
            Message,
            "ok",
        ),
        sc("v1-message-v0.3", d(), Message, "ok"),
        sc(
            "v1-message-v0.3-alt",
            BundleSpec {
                version: BundleVersion::V03Alt,
                ..d()
            },
            Message,
            "ok",
        ),
        sc(
            "v1-message-email",
            BundleSpec::email("alice@sigil.test", "https://accounts.sigil.test"),
            Message,
            "ok",
        ),
        sc(
            "v1-message-tsa",
            BundleSpec {
                timestamp: TimestampSpec::without_certs(),
                ..d()
            },
            Message,
            "ok",
        ),
        sc(
            "v1-message-sct-extensions",
            BundleSpec {
                sct: SctSpec::WithExtensions(vec![0, 0, 5, 0, 0, 0, 0, 7]),
                ..d()
            },
            Message,
            "ok",
        ),
        sc("v1-dsse", d(), DsseNamed, "ok"),
        sc(
            "v1-dsse-nameless-subject",
            d(),
            DsseNameless,
            "nocheck:sigstore-python requires subject.name",
        ),
        sc(
            "v1-intoto",
            BundleSpec {
                tlog: TlogSpec::RekorV1(V1Kind::Intoto),
                version: BundleVersion::V02,
                timestamp: TimestampSpec::embedded(),
                ..d()
            },
            DsseNamed,
            "nocheck:sigstore-python verifies no intoto entries",
        ),
        sc("v2-message-tsa-embedded", v2(), Message, "ok"),
        sc(
            "v2-message-tsa-no-certs",
            BundleSpec {
                timestamp: TimestampSpec::without_certs(),
                ..v2()
            },
            Message,
            "ok",
        ),
        sc("v2-dsse-hashedrekord", v2(), DsseNamed, "ok"),
        sc(
            "v2-dsse-dsse002",
            BundleSpec {
                tlog: TlogSpec::RekorV2(V2Kind::Dsse),
                ..v2()
            },
            DsseNamed,
            "nocheck:sigstore-python verifies no dsse 0.0.2 entries",
        ),
        sc(
            "managed-key-v1",
            BundleSpec::managed_key(),
            Message,
            "nocheck:the sigstore CLI has no managed-key verification",
        ),
        sc(
            "no-sct_fail",
            BundleSpec {
                sct: SctSpec::None,
                ..d()
            },
            Message,
            "fail",
        ),
        sc(
            "untrusted-sct_fail",
            BundleSpec {
                sct: SctSpec::Untrusted,
                ..d()
            },
            Message,
            "fail",
        ),
        sc(
            "chain-with-root_fail",
            BundleSpec {
                version: BundleVersion::V01,
                chain: ChainSpec::WithRoot,
                ..d()
            },
            Message,
            "nocheck:sigstore-python only warns about a root in the chain",
        ),
        sc(
            "tsa-wrong-imprint_fail",
            BundleSpec {
                timestamp: tsa(true, None, true),
                ..v2()
            },
            Message,
            "fail",
        ),
        sc(
            "tsa-time-after-leaf-expiry_fail",
            BundleSpec {
                timestamp: tsa(true, late, false),
                ..v2()
            },
            Message,
            "fail",
        ),
        Scenario {
            kit: Some(Testkit::new(42).with_tsa_validity(
                sigil_testkit::EPOCH_2020,
                sigil_testkit::DEFAULT_SIGNING_TIME - 1,
            )),
            ..sc("tsa-outside-tsa-cert-validity_fail", v2(), Message, "fail")
        },
        sc(
            "integrated-time-after-cert-expiry_fail",
            BundleSpec {
                integrated_time: late,
                ..d()
            },
            Message,
            "fail",
        ),
        sc(
            "v2-no-timestamp_fail",
            BundleSpec {
                timestamp: TimestampSpec::None,
                ..v2()
            },
            Message,
            "fail",
        ),
        sc(
            "no-tlog_fail",
            BundleSpec {
                tlog: TlogSpec::None,
                timestamp: TimestampSpec::embedded(),
                ..d()
            },
            Message,
            "fail",
        ),
    ]
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = args.next().context("usage: mint OUT_DIR [SEED]")?;
    let seed: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(42);
    let kit = Testkit::new(seed);
    let out = Path::new(&out);
    fs::create_dir_all(out)?;
    let trusted_root = kit.trusted_root_json();
    let trust_config = kit.client_trust_config_json(&TrustRootSpec::default());
    let mut index = String::new();
    for sc in scenarios() {
        let dir = out.join(sc.name);
        fs::create_dir_all(&dir)?;
        let artifact = format!("artifact for {}\n", sc.name).into_bytes();
        let predicate =
            serde_json::json!({"buildDefinition": {"buildType": "https://sigil.test/build"}});
        let provenance = "https://slsa.dev/provenance/v1";
        let content = match sc.kind {
            Kind::Message => Content::Message(artifact.clone()),
            Kind::DsseNamed => Content::in_toto_named("artifact", &artifact, provenance, predicate),
            Kind::DsseNameless => Content::in_toto(&artifact, provenance, predicate),
        };
        let kit = sc.kit.as_ref().unwrap_or(&kit);
        let trusted_root = kit.trusted_root_json();
        let trust_config = kit.client_trust_config_json(&TrustRootSpec::default());
        let minted = kit.sign(&sc.spec, content).with_context(|| sc.name)?;
        fs::write(dir.join("bundle.sigstore.json"), &minted.json)?;
        fs::write(dir.join("artifact"), &artifact)?;
        fs::write(dir.join("trusted_root.json"), &trusted_root)?;
        fs::write(dir.join("trust_config.json"), &trust_config)?;
        fs::write(dir.join("identity"), sc.spec.identity.as_str())?;
        fs::write(dir.join("issuer"), &sc.spec.oidc_issuer)?;
        if let Some(pem) = &minted.public_key_pem {
            fs::write(dir.join("key.pub"), pem)?;
        }
        if let Some(leaf) = &minted.leaf {
            fs::write(dir.join("leaf.pem"), leaf.cert_pem())?;
        }
        if let Some(ts) = &minted.timestamp {
            fs::write(dir.join("timestamp.tsr"), ts)?;
        }
        fs::write(dir.join("signature.bin"), &minted.signature)?;
        index.push_str(&format!("{} {}\n", sc.name, sc.expect));
    }
    fs::write(
        out.join("fulcio-chain.pem"),
        format!(
            "{}{}",
            kit.fulcio.intermediate.cert_pem(),
            kit.fulcio.root.cert_pem()
        ),
    )?;
    fs::write(out.join("fulcio-root.pem"), kit.fulcio.root.cert_pem())?;
    fs::write(
        out.join("fulcio-intermediate.pem"),
        kit.fulcio.intermediate.cert_pem(),
    )?;
    fs::write(out.join("tsa-root.pem"), kit.tsa.root.cert_pem())?;
    fs::write(out.join("tsa-signer.pem"), kit.tsa.signer.cert_pem())?;
    fs::write(out.join("ctlog.pub"), kit.ct_log.key.public_key_pem())?;
    fs::write(out.join("trusted_root.json"), &trusted_root)?;
    fs::write(out.join("trust_config.json"), &trust_config)?;
    fs::write(out.join("scenarios.txt"), index)?;
    println!("wrote {}", out.display());
    Ok(())
}

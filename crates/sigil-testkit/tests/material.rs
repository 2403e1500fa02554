//! Checks the testkit's output with independent parsers and the RustCrypto
//! verifiers: certificates parse and chain, SCTs, SETs, checkpoints and
//! inclusion proofs verify, bundles have the protobuf-JSON shape.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use p256::ecdsa::signature::Verifier as _;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use sigil_testkit::rekor::merkle;
use sigil_testkit::{
    BundleSpec, BundleVersion, ChainSpec, Content, KeyPair, SctSpec, Testkit, TimestampSpec,
    TlogSpec, TrustRootSpec, V1Kind, V2Kind, ValidFor,
};
use x509_parser::prelude::*;

fn kit() -> Testkit {
    Testkit::new(7)
}

fn b64(v: &Value) -> Vec<u8> {
    B64.decode(v.as_str().expect("string")).expect("base64")
}

fn p256_verify(key: &KeyPair, msg: &[u8], der_sig: &[u8]) {
    let KeyPair::P256(sk) = key else {
        panic!("not P-256")
    };
    let sig = p256::ecdsa::Signature::from_der(der_sig).expect("DER signature");
    sk.verifying_key()
        .verify(msg, &sig)
        .expect("signature verifies");
}

fn p384_verify(key: &KeyPair, msg: &[u8], der_sig: &[u8]) {
    let KeyPair::P384(sk) = key else {
        panic!("not P-384")
    };
    let sig = p384::ecdsa::Signature::from_der(der_sig).expect("DER signature");
    sk.verifying_key()
        .verify(msg, &sig)
        .expect("signature verifies");
}

fn message_bundle(spec: &BundleSpec) -> (sigil_testkit::MintedBundle, Value) {
    let m = kit()
        .sign(spec, Content::Message(b"hello".to_vec()))
        .unwrap();
    let v = m.value();
    (m, v)
}

#[test]
fn every_certificate_parses_and_chains_to_its_issuer() {
    let k = kit();
    let (m, _) = message_bundle(&BundleSpec::default());
    let leaf = m.leaf.unwrap();
    for (der, issuer) in [
        (&k.fulcio.root.cert_der, &k.fulcio.root.key),
        (&k.fulcio.intermediate.cert_der, &k.fulcio.root.key),
        (&leaf.cert_der, &k.fulcio.intermediate.key),
        (&k.tsa.root.cert_der, &k.tsa.root.key),
        (&k.tsa.signer.cert_der, &k.tsa.root.key),
    ] {
        let (rest, cert) = X509Certificate::from_der(der).expect("parses");
        assert!(rest.is_empty());
        p384_verify(
            issuer,
            cert.tbs_certificate.as_ref(),
            &cert.signature_value.data,
        );
    }
    let (_, root) = X509Certificate::from_der(&k.fulcio.root.cert_der).unwrap();
    assert!(root.is_ca());
    let (_, int) = X509Certificate::from_der(&k.fulcio.intermediate.cert_der).unwrap();
    assert!(int.is_ca());
    let eku = int.extended_key_usage().unwrap().unwrap();
    assert!(
        eku.value.code_signing,
        "Fulcio intermediates carry codeSigning"
    );
    assert_eq!(
        int.basic_constraints()
            .unwrap()
            .unwrap()
            .value
            .path_len_constraint,
        Some(0)
    );
    let (_, tsa) = X509Certificate::from_der(&k.tsa.signer.cert_der).unwrap();
    let eku = tsa.extended_key_usage().unwrap().unwrap();
    assert!(eku.critical && eku.value.time_stamping);
}

#[test]
fn leaf_carries_fulcio_identity_extensions_and_ten_minute_validity() {
    let (m, _) = message_bundle(&BundleSpec::default());
    let leaf = m.leaf.unwrap();
    let (_, cert) = X509Certificate::from_der(&leaf.cert_der).unwrap();
    let validity = cert.validity();
    assert_eq!(
        validity.not_after.timestamp() - validity.not_before.timestamp(),
        600
    );
    assert_eq!(
        validity.not_before.timestamp(),
        sigil_testkit::DEFAULT_SIGNING_TIME
    );
    assert!(cert.key_usage().unwrap().unwrap().value.digital_signature());
    assert!(
        cert.extended_key_usage()
            .unwrap()
            .unwrap()
            .value
            .code_signing
    );
    let san = cert.subject_alternative_name().unwrap().unwrap();
    assert!(san.critical);
    assert_eq!(
        san.value.general_names,
        vec![GeneralName::URI(
            "https://github.com/sigil-dev/example/.github/workflows/release.yml@refs/heads/main"
        )]
    );
    let ext = |arc: u32| {
        let oid = format!("1.3.6.1.4.1.57264.1.{arc}");
        cert.extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == oid)
            .map(|e| e.value.to_vec())
    };
    assert_eq!(ext(1).unwrap(), sigil_testkit::GITHUB_ISSUER.as_bytes());
    let utf8 = ext(8).unwrap();
    assert_eq!(utf8[0], 0x0c);
    assert_eq!(&utf8[2..], sigil_testkit::GITHUB_ISSUER.as_bytes());
    assert_eq!(ext(5).unwrap(), b"sigil-dev/example");
    for arc in 9..=22 {
        assert!(ext(arc).is_some(), "extension 1.{arc} present");
    }
    assert!(cert.subject().iter().next().is_none(), "empty subject");
}

#[test]
fn email_identity_has_no_github_extensions() {
    let (m, _) = message_bundle(&BundleSpec::email("a@b.test", "https://issuer.test"));
    let leaf = m.leaf.unwrap();
    let (_, cert) = X509Certificate::from_der(&leaf.cert_der).unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap();
    assert_eq!(
        san.value.general_names,
        vec![GeneralName::RFC822Name("a@b.test")]
    );
    assert!(
        !cert
            .extensions()
            .iter()
            .any(|e| e.oid.to_id_string() == "1.3.6.1.4.1.57264.1.9")
    );
}

/// Parses a TLS SCT list and verifies each SCT over the precert TBS.
fn verify_scts(k: &Testkit, leaf: &sigil_testkit::fulcio::IssuedLeaf, log: &KeyPair) -> Vec<u8> {
    let (_, cert) = X509Certificate::from_der(&leaf.cert_der).unwrap();
    let ext = cert
        .extensions()
        .iter()
        .find(|e| e.oid.to_id_string() == "1.3.6.1.4.1.11129.2.4.2")
        .expect("SCT extension");
    // extnValue holds an OCTET STRING holding the TLS list.
    let (_, inner) = x509_parser::der_parser::der::parse_der_octetstring(ext.value).unwrap();
    let list = inner.as_slice().unwrap();
    let total = u16::from_be_bytes([list[0], list[1]]) as usize;
    assert_eq!(total, list.len() - 2);
    let len = u16::from_be_bytes([list[2], list[3]]) as usize;
    let sct = &list[4..4 + len];
    assert_eq!(sct[0], 0, "v1");
    assert_eq!(&sct[1..33], &log.spki_sha256());
    let ts = u64::from_be_bytes(sct[33..41].try_into().unwrap());
    let ext_len = u16::from_be_bytes([sct[41], sct[42]]) as usize;
    let exts = sct[43..43 + ext_len].to_vec();
    let rest = &sct[43 + ext_len..];
    assert_eq!(&rest[..2], &[4, 3], "sha256 / ecdsa");
    let sig_len = u16::from_be_bytes([rest[2], rest[3]]) as usize;
    let sig = &rest[4..4 + sig_len];
    // The precert TBS is the final TBS minus the SCT extension.
    let (_, pre) = TbsCertificate::from_der(&leaf.precert_tbs_der).unwrap();
    let final_oids: Vec<String> = cert
        .extensions()
        .iter()
        .map(|e| e.oid.to_id_string())
        .collect();
    let pre_oids: Vec<String> = pre
        .extensions()
        .iter()
        .map(|e| e.oid.to_id_string())
        .collect();
    assert_eq!(pre_oids.as_slice(), &final_oids[..final_oids.len() - 1]);
    assert_eq!(pre.subject_pki.raw, cert.tbs_certificate.subject_pki.raw);
    let ikh: [u8; 32] = Sha256::digest(k.fulcio.intermediate.key.spki_der()).into();
    let signed = sigil_testkit::ct::CtLog::signed_data(ts, &ikh, &leaf.precert_tbs_der, &exts);
    p256_verify(log, &signed, sig);
    exts
}

#[test]
fn embedded_sct_verifies_over_precert_tbs_and_issuer_key_hash() {
    let k = kit();
    let (m, _) = message_bundle(&BundleSpec::default());
    let exts = verify_scts(&k, &m.leaf.unwrap(), &k.ct_log.key);
    assert!(exts.is_empty());
}

#[test]
fn sct_options_change_extensions_log_or_presence() {
    let k = kit();
    let (m, _) = message_bundle(&BundleSpec {
        sct: SctSpec::WithExtensions(vec![0, 0, 5, 1, 2, 3, 4, 5]),
        ..BundleSpec::default()
    });
    assert_eq!(
        verify_scts(&k, &m.leaf.unwrap(), &k.ct_log.key),
        vec![0, 0, 5, 1, 2, 3, 4, 5]
    );
    let (m, _) = message_bundle(&BundleSpec {
        sct: SctSpec::Untrusted,
        ..BundleSpec::default()
    });
    verify_scts(&k, &m.leaf.unwrap(), &k.untrusted_ct_log.key);
    let (m, _) = message_bundle(&BundleSpec {
        sct: SctSpec::None,
        ..BundleSpec::default()
    });
    let leaf = m.leaf.unwrap();
    let (_, cert) = X509Certificate::from_der(&leaf.cert_der).unwrap();
    assert!(
        !cert
            .extensions()
            .iter()
            .any(|e| e.oid.to_id_string() == "1.3.6.1.4.1.11129.2.4.2")
    );
}

fn check_entry_proof(entry: &Value) -> (String, [u8; 32]) {
    let body = b64(&entry["canonicalizedBody"]);
    let p = &entry["inclusionProof"];
    let idx: u64 = p["logIndex"].as_str().unwrap().parse().unwrap();
    let size: u64 = p["treeSize"].as_str().unwrap().parse().unwrap();
    let hashes: Vec<[u8; 32]> = p["hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| b64(h).try_into().unwrap())
        .collect();
    let root: [u8; 32] = b64(&p["rootHash"]).try_into().unwrap();
    let computed = merkle::root_from_proof(idx, size, &merkle::leaf_hash(&body), &hashes).unwrap();
    assert_eq!(computed, root);
    let cp = p["checkpoint"]["envelope"].as_str().unwrap().to_owned();
    let (note_body, _) = cp.split_once("\n\n").unwrap();
    assert_eq!(
        note_body,
        format!(
            "{}\n{size}\n{}",
            note_body.lines().next().unwrap(),
            B64.encode(root)
        )
    );
    (cp, root)
}

fn sig_lines(cp: &str) -> Vec<(String, Vec<u8>)> {
    cp.split_once("\n\n")
        .unwrap()
        .1
        .lines()
        .map(|l| {
            let l = l.strip_prefix("\u{2014} ").unwrap();
            let (name, data) = l.rsplit_once(' ').unwrap();
            (name.to_owned(), B64.decode(data).unwrap())
        })
        .collect()
}

#[test]
fn rekor_v1_entry_has_valid_set_proof_and_checkpoint() {
    let k = kit();
    for (spec, content, kind, version) in [
        (
            BundleSpec::default(),
            Content::Message(b"m".to_vec()),
            "hashedrekord",
            "0.0.1",
        ),
        (
            BundleSpec::default(),
            Content::in_toto(b"a", "https://example.test/p", serde_json::json!({})),
            "dsse",
            "0.0.1",
        ),
        (
            BundleSpec {
                tlog: TlogSpec::RekorV1(V1Kind::Intoto),
                ..BundleSpec::default()
            },
            Content::in_toto(b"a", "https://example.test/p", serde_json::json!({})),
            "intoto",
            "0.0.2",
        ),
    ] {
        let v = k.sign(&spec, content).unwrap().value();
        let e = &v["verificationMaterial"]["tlogEntries"][0];
        assert_eq!(e["kindVersion"]["kind"], kind);
        assert_eq!(e["kindVersion"]["version"], version);
        assert_eq!(b64(&e["logId"]["keyId"]), k.rekor_v1.log_id());
        // SET: ECDSA over canonical {"body","integratedTime","logID","logIndex"}.
        let set_payload = format!(
            r#"{{"body":"{}","integratedTime":{},"logID":"{}","logIndex":{}}}"#,
            e["canonicalizedBody"].as_str().unwrap(),
            e["integratedTime"].as_str().unwrap(),
            hex::encode(k.rekor_v1.log_id()),
            e["logIndex"].as_str().unwrap()
        );
        p256_verify(
            &k.rekor_v1.key,
            set_payload.as_bytes(),
            &b64(&e["inclusionPromise"]["signedEntryTimestamp"]),
        );
        let (cp, _) = check_entry_proof(e);
        assert!(cp.starts_with("rekor.sigil.test - "));
        let sigs = sig_lines(&cp);
        assert_eq!(sigs.len(), 1);
        assert_eq!(sigs[0].0, "rekor.sigil.test");
        assert_eq!(&sigs[0].1[..4], &k.rekor_v1.log_id()[..4]);
        let (note_body, _) = cp.split_once("\n\n").unwrap();
        p256_verify(
            &k.rekor_v1.key,
            format!("{note_body}\n").as_bytes(),
            &sigs[0].1[4..],
        );
    }
}

#[test]
fn rekor_v2_entry_has_ed25519_checkpoint_with_c2sp_key_hint_and_cosignatures() {
    let mut k = kit();
    k.rekor_v2
        .witnesses
        .push(sigil_testkit::rekor::Witness::new(7, "witness.sigil.test"));
    let v = k
        .sign(&BundleSpec::rekor_v2(), Content::Message(b"m".to_vec()))
        .unwrap()
        .value();
    let e = &v["verificationMaterial"]["tlogEntries"][0];
    assert!(e.get("integratedTime").is_none() && e.get("inclusionPromise").is_none());
    assert_eq!(e["kindVersion"]["version"], "0.0.2");
    let KeyPair::Ed25519(sk) = &k.rekor_v2.key else {
        panic!()
    };
    let mut id_input = b"log2025-1.rekor.sigil.test\n\x01".to_vec();
    id_input.extend(sk.verifying_key().to_bytes());
    let key_id: [u8; 32] = Sha256::digest(&id_input).into();
    assert_eq!(b64(&e["logId"]["keyId"]), key_id);
    let (cp, _) = check_entry_proof(e);
    assert!(cp.starts_with("log2025-1.rekor.sigil.test\n"));
    let sigs = sig_lines(&cp);
    assert_eq!(sigs.len(), 2);
    assert_eq!(&sigs[0].1[..4], &key_id[..4]);
    let (note_body, _) = cp.split_once("\n\n").unwrap();
    let sig = ed25519_dalek::Signature::from_slice(&sigs[0].1[4..]).unwrap();
    sk.verifying_key()
        .verify_strict(format!("{note_body}\n").as_bytes(), &sig)
        .unwrap();
    assert_eq!(sigs[1].0, "witness.sigil.test");
    assert_eq!(sigs[1].1.len(), 4 + 8 + 64);
}

#[test]
fn rekor_v2_bodies_match_the_entry_kind() {
    let k = kit();
    let dsse = || Content::in_toto(b"a", "https://example.test/p", serde_json::json!({}));
    let m = k.sign(&BundleSpec::rekor_v2(), dsse()).unwrap();
    let body: Value = serde_json::from_slice(&m.tlog_entry.as_ref().unwrap().body).unwrap();
    let env = m.envelope.unwrap();
    let pae = sigil_testkit::rekor::DsseEnvelope::pae(&env.payload_type, &env.payload);
    let spec = &body["spec"]["hashedRekordV002"];
    assert_eq!(b64(&spec["data"]["digest"]), Sha256::digest(&pae).to_vec());
    assert_eq!(
        spec["signature"]["verifier"]["keyDetails"],
        "PKIX_ECDSA_P256_SHA_256"
    );
    let m = k
        .sign(
            &BundleSpec {
                tlog: TlogSpec::RekorV2(V2Kind::Dsse),
                ..BundleSpec::rekor_v2()
            },
            dsse(),
        )
        .unwrap();
    let body: Value = serde_json::from_slice(&m.tlog_entry.unwrap().body).unwrap();
    assert_eq!(body["kind"], "dsse");
    assert!(body["spec"]["dsseV002"]["payloadHash"]["digest"].is_string());
    assert!(
        k.sign(
            &BundleSpec {
                tlog: TlogSpec::RekorV2(V2Kind::Dsse),
                ..BundleSpec::rekor_v2()
            },
            Content::Message(vec![1])
        )
        .is_err()
    );
}

#[test]
fn inclusion_proofs_recompute_to_the_root_for_every_shape() {
    for size in 1..40usize {
        let leaves: Vec<[u8; 32]> = (0..size).map(|i| merkle::leaf_hash(&[i as u8])).collect();
        let root = merkle::root(&leaves);
        for (i, leaf) in leaves.iter().enumerate() {
            let proof = merkle::inclusion_proof(i, &leaves);
            assert_eq!(
                merkle::root_from_proof(i as u64, size as u64, leaf, &proof),
                Some(root)
            );
            if !proof.is_empty() {
                let mut bad = proof.clone();
                bad[0][0] ^= 1;
                assert_ne!(
                    merkle::root_from_proof(i as u64, size as u64, leaf, &bad),
                    Some(root)
                );
            }
        }
    }
}

#[test]
fn hashedrekord_body_is_canonical_and_matches_the_signature() {
    let (m, v) = message_bundle(&BundleSpec::default());
    let e = &v["verificationMaterial"]["tlogEntries"][0];
    let body = String::from_utf8(b64(&e["canonicalizedBody"])).unwrap();
    let expected = format!(
        r#"{{"apiVersion":"0.0.1","kind":"hashedrekord","spec":{{"data":{{"hash":{{"algorithm":"sha256","value":"{}"}}}},"signature":{{"content":"{}","publicKey":{{"content":"{}"}}}}}}}}"#,
        hex::encode(Sha256::digest(b"hello")),
        B64.encode(&m.signature),
        B64.encode(m.leaf.as_ref().unwrap().cert_pem())
    );
    assert_eq!(body, expected);
    p256_verify(&m.signing_key, b"hello", &m.signature);
    assert_eq!(
        v["messageSignature"]["messageDigest"]["algorithm"],
        "SHA2_256"
    );
    assert_eq!(
        b64(&v["messageSignature"]["messageDigest"]["digest"]),
        Sha256::digest(b"hello").to_vec()
    );
}

#[test]
fn dsse_signature_covers_the_pae_and_statement_subject_has_no_name() {
    let k = kit();
    let m = k
        .sign(
            &BundleSpec::default(),
            Content::in_toto(
                b"artifact",
                "https://example.test/p",
                serde_json::json!({"x": 1}),
            ),
        )
        .unwrap();
    let v = m.value();
    let env = &v["dsseEnvelope"];
    let payload = b64(&env["payload"]);
    let pae = sigil_testkit::rekor::DsseEnvelope::pae("application/vnd.in-toto+json", &payload);
    p256_verify(&m.signing_key, &pae, &b64(&env["signatures"][0]["sig"]));
    let st: Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(st["_type"], "https://in-toto.io/Statement/v1");
    assert!(st["subject"][0].get("name").is_none());
    assert_eq!(
        st["subject"][0]["digest"]["sha256"],
        hex::encode(Sha256::digest(b"artifact"))
    );
}

#[test]
fn bundle_versions_use_the_right_media_type_and_certificate_field() {
    for (version, media, single) in [
        (
            BundleVersion::V01,
            "application/vnd.dev.sigstore.bundle+json;version=0.1",
            false,
        ),
        (
            BundleVersion::V02,
            "application/vnd.dev.sigstore.bundle+json;version=0.2",
            false,
        ),
        (
            BundleVersion::V03,
            "application/vnd.dev.sigstore.bundle.v0.3+json",
            true,
        ),
        (
            BundleVersion::V03Alt,
            "application/vnd.dev.sigstore.bundle+json;version=0.3",
            true,
        ),
    ] {
        let (_, v) = message_bundle(&BundleSpec {
            version,
            ..BundleSpec::default()
        });
        assert_eq!(v["mediaType"], media);
        let vm = &v["verificationMaterial"];
        assert_eq!(vm.get("certificate").is_some(), single);
        assert_eq!(vm.get("x509CertificateChain").is_some(), !single);
    }
    let (_, v) = message_bundle(&BundleSpec {
        version: BundleVersion::V01,
        chain: ChainSpec::WithRoot,
        ..BundleSpec::default()
    });
    assert_eq!(
        v["verificationMaterial"]["x509CertificateChain"]["certificates"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn managed_key_bundle_has_hint_and_pem_key() {
    let k = kit();
    let m = k
        .sign(&BundleSpec::managed_key(), Content::Message(b"x".to_vec()))
        .unwrap();
    let v = m.value();
    assert!(v["verificationMaterial"]["publicKey"]["hint"].is_string());
    assert_eq!(
        m.public_key_pem.as_deref(),
        Some(k.managed_public_key_pem().as_str())
    );
    assert!(m.leaf.is_none());
    p256_verify(
        &k.managed_key,
        b"x",
        &b64(&v["messageSignature"]["signature"]),
    );
    assert_eq!(k.sign_blob(b"x"), m.signature);
}

#[test]
fn timestamp_imprints_the_signature_and_options_apply() {
    let k = kit();
    let (m, v) = message_bundle(&BundleSpec::rekor_v2());
    let tsr = b64(
        &v["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"][0]["signedTimestamp"],
    );
    assert_eq!(tsr, m.timestamp.clone().unwrap());
    let imprint = Sha256::digest(&m.signature);
    assert!(tsr.windows(32).any(|w| w == &imprint[..]));
    assert!(
        tsr.windows(k.tsa.signer.cert_der.len())
            .any(|w| w == k.tsa.signer.cert_der.as_slice())
    );
    let (m2, _) = message_bundle(&BundleSpec {
        timestamp: TimestampSpec::without_certs(),
        ..BundleSpec::rekor_v2()
    });
    let tsr2 = m2.timestamp.unwrap();
    assert!(
        !tsr2
            .windows(k.tsa.signer.cert_der.len())
            .any(|w| w == k.tsa.signer.cert_der.as_slice())
    );
    let token = sigil_testkit::tsa::token_of(&tsr2);
    assert_eq!(&token[..2], &[0x30, 0x82]);
}

#[test]
fn trusted_root_lists_every_service_with_its_log_ids() {
    let k = kit();
    let tr: Value = serde_json::from_str(&k.trusted_root_json()).unwrap();
    assert_eq!(
        tr["mediaType"],
        "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
    );
    assert_eq!(b64(&tr["tlogs"][0]["logId"]["keyId"]), k.rekor_v1.log_id());
    assert_eq!(
        b64(&tr["tlogs"][0]["publicKey"]["rawBytes"]),
        k.rekor_v1.key.spki_der()
    );
    assert_eq!(tr["tlogs"][1]["publicKey"]["keyDetails"], "PKIX_ED25519");
    assert_eq!(b64(&tr["tlogs"][1]["logId"]["keyId"]), k.rekor_v2.log_id());
    assert_eq!(b64(&tr["ctlogs"][0]["logId"]["keyId"]), k.ct_log.log_id());
    assert_eq!(
        tr["certificateAuthorities"][0]["certChain"]["certificates"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        tr["timestampAuthorities"][0]["certChain"]["certificates"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        tr["tlogs"][0]["publicKey"]["validFor"]["start"],
        "2020-01-01T00:00:00Z"
    );
    let spec = TrustRootSpec {
        tsa: None,
        rekor_v1: Some(ValidFor::between(0, 86_400)),
        ..TrustRootSpec::default()
    };
    let tr: Value = serde_json::from_str(&k.trusted_root_json_with(&spec)).unwrap();
    assert!(tr["timestampAuthorities"].as_array().unwrap().is_empty());
    assert_eq!(
        tr["tlogs"][0]["publicKey"]["validFor"]["end"],
        "1970-01-02T00:00:00Z"
    );
}

#[test]
fn same_seed_mints_identical_bundles_and_other_seeds_differ() {
    let spec = BundleSpec {
        timestamp: TimestampSpec::embedded(),
        ..BundleSpec::default()
    };
    let a = Testkit::new(1)
        .sign(&spec, Content::Message(b"m".to_vec()))
        .unwrap()
        .json;
    let b = Testkit::new(1)
        .sign(&spec, Content::Message(b"m".to_vec()))
        .unwrap()
        .json;
    let c = Testkit::new(2)
        .sign(&spec, Content::Message(b"m".to_vec()))
        .unwrap()
        .json;
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(
        Testkit::new(1).trusted_root_json(),
        Testkit::new(1).trusted_root_json()
    );
}

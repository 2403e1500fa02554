//! What the benches share: one P-384 signature check ready to run, the unit
//! the parallel-versus-sequential measurements are made of.
#![allow(clippy::expect_used, dead_code, unreachable_pub)]

use sigil_verifier::crypto::{HashAlgorithm, PublicKey};

/// One P-384 check ready to run: a key, a message and its signature.
pub struct Check {
    pub key: PublicKey,
    pub message: Vec<u8>,
    pub signature: Vec<u8>,
}

impl Check {
    pub fn p384(message_len: usize) -> Self {
        use aws_lc_rs::encoding::AsDer as _;
        use aws_lc_rs::signature::KeyPair as _;
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let pair = aws_lc_rs::signature::EcdsaKeyPair::generate(
            &aws_lc_rs::signature::ECDSA_P384_SHA384_ASN1_SIGNING,
        )
        .expect("key generation");
        let spki = pair.public_key().as_der().expect("public key DER");
        let message = vec![0x5a_u8; message_len];
        let signature = pair
            .sign(&rng, &message)
            .expect("signing")
            .as_ref()
            .to_vec();
        Self {
            key: PublicKey::from_spki_der(spki.as_ref()).expect("sigil parses the key"),
            message,
            signature,
        }
    }

    pub fn run(&self) -> bool {
        self.key
            .verify(
                std::hint::black_box(&self.message),
                &self.signature,
                HashAlgorithm::Sha384,
            )
            .is_ok()
    }
}

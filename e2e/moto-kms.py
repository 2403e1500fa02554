"""moto's server for e2e/kms-fixtures.sh, with AWS KMS Sign honouring MessageType=DIGEST.

moto 5.2.5 ignores MessageType (its KMS docs say DIGEST "is not yet implemented") and
hashes a DIGEST message again before signing, as if it were RAW. cosign's awskms
signer sends the image payload's SHA-256 with MessageType=DIGEST, so through plain moto
its signatures are over the wrong bytes, and every verifier (cosign's own included)
rightly rejects them. This wrapper signs DIGEST messages as AWS KMS does: the given
digest, not hashed again. Everything sigil itself calls (GetPublicKey, SigV4
authentication) stays moto's code.

Usage: python moto-kms.py -H 127.0.0.1 -p PORT   (moto_server's arguments)
"""

import base64
import binascii
import json

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from cryptography.hazmat.primitives import hashes
from moto.kms.exceptions import ValidationException
from moto.kms.responses import KmsResponse
from moto.kms.utils import ECDSAPrivateKey
from moto.server import main

HASHES = {
    "ECDSA_SHA_256": hashes.SHA256(),
    "ECDSA_SHA_384": hashes.SHA384(),
    "ECDSA_SHA_512": hashes.SHA512(),
}

_raw_sign = KmsResponse.sign


def _sign(self):
    if self._get_param("MessageType") != "DIGEST":
        return _raw_sign(self)
    key = self.kms_backend.describe_key(self._get_param("KeyId"))
    algorithm = self._get_param("SigningAlgorithm")
    if not isinstance(key.private_key, ECDSAPrivateKey) or algorithm not in HASHES:
        raise ValidationException(
            f"moto-kms.py signs DIGEST messages with ECDSA keys only, not {algorithm}"
        )
    message = self._get_param("Message")
    if isinstance(message, str):
        try:
            message = base64.b64decode(message, validate=True)
        except binascii.Error as e:
            raise ValidationException(f"Message is not base64: {e}") from e
    digest = HASHES[algorithm]
    if len(message) != digest.digest_size:
        raise ValidationException(
            f"a DIGEST message for {algorithm} has {digest.digest_size} bytes, not {len(message)}"
        )
    signature = key.private_key.private_key.sign(message, ec.ECDSA(Prehashed(digest)))
    return json.dumps(
        {
            "KeyId": key.arn,
            "Signature": base64.b64encode(signature).decode(),
            "SigningAlgorithm": algorithm,
        }
    )


KmsResponse.sign = _sign

if __name__ == "__main__":
    main()

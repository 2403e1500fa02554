#!/usr/bin/env bash
# Mints every testkit scenario and checks it with independent tools:
# sigstore-python (offline, the kit's own ClientTrustConfig) and openssl.
# Usage: scripts/check-with-sigstore-python.sh [OUT_DIR]
# Needs python3 (creates ./.venv with sigstore from PyPI on first run) and openssl.
set -uo pipefail

crate_dir="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$crate_dir/out}"
venv="$crate_dir/.venv"

if [ ! -x "$venv/bin/sigstore" ]; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q sigstore || exit 1
fi
echo "sigstore-python: $("$venv/bin/sigstore" --version)"

(cd "$crate_dir" && cargo run -q -p sigil-testkit --example mint -- "$out") || exit 1

pass=0
failed=0
while read -r name expect; do
  dir="$out/$name"
  log="$dir/sigstore-python.log"
  if (cd "$dir" && "$venv/bin/sigstore" --trust-config trust_config.json verify identity --offline \
        --bundle bundle.sigstore.json --cert-identity "$(cat identity)" \
        --cert-oidc-issuer "$(cat issuer)" artifact) >"$log" 2>&1; then
    got=ok
  else
    got=fail
  fi
  if [ "${expect#nocheck:}" != "$expect" ]; then
    echo "INFO  $name (sigstore-python: $got; cannot judge: ${expect#nocheck:})"
  elif [ "$got" = "$expect" ]; then
    echo "PASS  $name (sigstore-python: $got, expected $expect)"
    pass=$((pass + 1))
  else
    echo "FAIL  $name (sigstore-python: $got, expected $expect): $(tail -n 3 "$log" | tr '\n' ' ')"
    failed=$((failed + 1))
  fi
done <"$out/scenarios.txt"

# openssl: the leaf chains to the CA at signing time; the SCT parses;
# the TSA response parses and verifies against the TSA root.
ossl_check() {
  local what="$1"; shift
  if "$@" >/dev/null 2>&1; then echo "PASS  openssl: $what"; pass=$((pass + 1));
  else echo "FAIL  openssl: $what"; failed=$((failed + 1)); fi
}
leaf="$out/v1-message-v0.3/leaf.pem"
ossl_check "leaf chains to Fulcio root (at signing time)" \
  openssl verify -CAfile "$out/fulcio-root.pem" -untrusted "$out/fulcio-intermediate.pem" \
    -x509_strict -purpose any -attime 1760000100 "$leaf"
ossl_check "leaf shows an embedded SCT" \
  sh -c "openssl x509 -in '$leaf' -noout -text | grep -q 'Signed Certificate Timestamp'"
tsr="$out/v2-message-tsa-embedded/timestamp.tsr"
ossl_check "TSA reply parses" openssl ts -reply -in "$tsr" -text
ossl_check "TSA reply verifies (imprint = SHA-256 of the signature)" \
  openssl ts -verify -in "$tsr" -data "$out/v2-message-tsa-embedded/signature.bin" \
    -CAfile "$out/tsa-root.pem" -untrusted "$out/tsa-signer.pem"
ossl_check "TSA reply without certs verifies with the signer given" \
  openssl ts -verify -in "$out/v2-message-tsa-no-certs/timestamp.tsr" \
    -data "$out/v2-message-tsa-no-certs/signature.bin" \
    -CAfile "$out/tsa-root.pem" -untrusted "$out/tsa-signer.pem"
if openssl ts -verify -in "$out/tsa-wrong-imprint_fail/timestamp.tsr" \
    -data "$out/tsa-wrong-imprint_fail/signature.bin" \
    -CAfile "$out/tsa-root.pem" -untrusted "$out/tsa-signer.pem" >/dev/null 2>&1; then
  echo "FAIL  openssl: wrong-imprint TSA reply verified"; failed=$((failed + 1))
else
  echo "PASS  openssl: wrong-imprint TSA reply rejected"; pass=$((pass + 1))
fi

# Python `cryptography` (independent of sigstore-python's verifier): the
# managed-key signature, and the Rekor v1 SET and checkpoint signature.
if "$venv/bin/python" - "$out" <<'PY'; then pass=$((pass + 1)); else failed=$((failed + 1)); fi
import base64, json, sys
from pathlib import Path
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
out = Path(sys.argv[1])
d = out / "managed-key-v1"
key = serialization.load_pem_public_key((d / "key.pub").read_bytes())
b = json.loads((d / "bundle.sigstore.json").read_text())
key.verify(base64.b64decode(b["messageSignature"]["signature"]), (d / "artifact").read_bytes(), ec.ECDSA(hashes.SHA256()))
tr = json.loads((out / "trusted_root.json").read_text())
rekor = serialization.load_der_public_key(base64.b64decode(tr["tlogs"][0]["publicKey"]["rawBytes"]))
e = b["verificationMaterial"]["tlogEntries"][0]
payload = json.dumps({"body": e["canonicalizedBody"], "integratedTime": int(e["integratedTime"]),
                      "logID": base64.b64decode(e["logId"]["keyId"]).hex(), "logIndex": int(e["logIndex"])},
                     sort_keys=True, separators=(",", ":")).encode()
rekor.verify(base64.b64decode(e["inclusionPromise"]["signedEntryTimestamp"]), payload, ec.ECDSA(hashes.SHA256()))
cp = e["inclusionProof"]["checkpoint"]["envelope"]
note, sigs = cp.split("\n\n", 1)
sig = base64.b64decode(sigs.split(" ")[-1])
rekor.verify(sig[4:], (note + "\n").encode(), ec.ECDSA(hashes.SHA256()))
print("PASS  python-cryptography: managed-key signature, SET and checkpoint signature verify")
PY

echo "$pass passed, $failed failed"
[ "$failed" -eq 0 ]

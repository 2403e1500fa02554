#!/usr/bin/env bash
# Real KMS servers + cosign signatures made with KMS-held keys, for `key.kms`.
#
# Starts on free 127.0.0.1 ports: olareg (registry), OpenBao in dev mode
# (transit engine; the Vault-compatible API behind hashivault://) and moto in
# server mode (AWS KMS behind awskms://). cosign creates one key in each KMS
# and signs an image with it, offline (no log entry); one more image is signed
# by a local file key and one is left unsigned. Then runs the given command
# with SIGIL_KMS_FIXTURES naming the fixture file, and stops everything on exit.
#
#   e2e/kms-fixtures.sh [-- COMMAND...]   default command: the ignored KMS
#                                         tests of sigil-cli and sigil-controller
# Google Cloud KMS and Azure Key Vault have no server that runs here: sigil's
# clients for them are checked against mock servers only (crates/sigil-kms).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD

BIN=$(scripts/install-tools.sh cosign crane olareg openbao moto)
export PATH="$BIN:$PATH"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-kms.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# shellcheck source=e2e/lib.sh
. e2e/lib.sh   # free_port, wait_url, push_image

P_REG=$(free_port); P_BAO=$(free_port); P_MOTO=$(free_port)
REG=127.0.0.1:$P_REG
olareg serve --addr 127.0.0.1 --port "$P_REG" --store-type mem >"$WORK/olareg.log" 2>&1 &
PIDS+=($!)
# Dev mode: in memory, unsealed, a known root token; nothing reaches disk.
BAO_TOKEN=sigil-e2e-root
bao server -dev -dev-root-token-id="$BAO_TOKEN" -dev-listen-address="127.0.0.1:$P_BAO" \
  >"$WORK/bao.log" 2>&1 &
PIDS+=($!)
# moto with Sign honouring MessageType=DIGEST, as cosign's awskms signer needs
# (e2e/moto-kms.py says why); moto_server links into moto's venv.
MOTO_PY=$(dirname "$(readlink -f "$BIN/moto")")/python
"$MOTO_PY" e2e/moto-kms.py -H 127.0.0.1 -p "$P_MOTO" >"$WORK/moto.log" 2>&1 &
PIDS+=($!)

up() { # what url
  wait_url "$2" 20 || { echo "$1 did not come up at $2" >&2; cat "$WORK"/*.log >&2; exit 1; }
}
up olareg "http://$REG/v2/"
up OpenBao "http://127.0.0.1:$P_BAO/v1/sys/health"
up moto "http://127.0.0.1:$P_MOTO/moto-api/"

export VAULT_ADDR=http://127.0.0.1:$P_BAO VAULT_TOKEN=$BAO_TOKEN
bao secrets enable transit >/dev/null
# moto accepts any credentials; SigV4 is still computed and sent.
export AWS_ACCESS_KEY_ID=sigil-e2e AWS_SECRET_ACCESS_KEY=sigil-e2e-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$P_MOTO

cd "$WORK"
export COSIGN_PASSWORD=
export COSIGN_YES=true
ORIG_HOME=$HOME
export TUF_ROOT=$WORK/tuf HOME=$WORK
VAULT_URI=hashivault://sigil-release
# A ClusterImagePolicy names AWS keys by ARN (as policy-controller requires);
# 123456789012 is moto's account.
AWS_URI=awskms:///arn:aws:kms:us-east-1:123456789012:alias/sigil-release
cosign generate-key-pair --kms "$VAULT_URI" >/dev/null 2>&1
mv cosign.pub vault.pub
cosign generate-key-pair --kms "$AWS_URI" >/dev/null 2>&1
mv cosign.pub aws.pub
cosign generate-key-pair --output-key-prefix other >/dev/null 2>&1
SIGN=(--use-signing-config=false --tlog-upload=false --allow-insecure-registry --yes)

V=$(push_image "$REG" kms/app vault vault)
VL=$(push_image "$REG" kms/app vault-legacy vault-legacy)
A=$(push_image "$REG" kms/app aws aws)
O=$(push_image "$REG" kms/app other other)
U=$(push_image "$REG" kms/app unsigned unsigned)
cosign sign --key "$VAULT_URI" "${SIGN[@]}" "$REG/kms/app@$V" >/dev/null 2>&1
cosign sign --key "$VAULT_URI" "${SIGN[@]}" --new-bundle-format=false "$REG/kms/app@$VL" >/dev/null 2>&1
cosign sign --key "$AWS_URI" "${SIGN[@]}" "$REG/kms/app@$A" >/dev/null 2>&1
cosign sign --key other.key "${SIGN[@]}" "$REG/kms/app@$O" >/dev/null 2>&1

FIX=$WORK/fixtures.env
{
  echo "REG=$REG"
  echo "VAULT_ADDR=$VAULT_ADDR"
  echo "VAULT_TOKEN=$VAULT_TOKEN"
  echo "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"
  echo "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID"
  echo "AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY"
  echo "AWS_REGION=$AWS_REGION"
  echo "VAULT_URI=$VAULT_URI"
  echo "AWS_URI=$AWS_URI"
  echo "VAULT_PUB=$WORK/vault.pub"
  echo "AWS_PUB=$WORK/aws.pub"
  echo "VAULT_SIGNED=$REG/kms/app@$V"
  echo "VAULT_SIGNED_LEGACY=$REG/kms/app@$VL"
  echo "AWS_SIGNED=$REG/kms/app@$A"
  echo "OTHER_SIGNED=$REG/kms/app@$O"
  echo "UNSIGNED=$REG/kms/app@$U"
} >"$FIX"
echo "fixtures: $FIX" >&2
export SIGIL_KMS_FIXTURES=$FIX
export HOME=$ORIG_HOME
# The tests take every setting from the fixture file, never from here.
unset VAULT_ADDR VAULT_TOKEN AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION AWS_ENDPOINT_URL
cd "$REPO_ROOT"

if [ "${1:-}" = "--" ]; then
  shift
  "$@"
  exit $?
fi

cargo test -q --workspace --test kms_policy -- --ignored --test-threads 2
# The controller's KMS tests are the only ignored unit tests of the workspace.
cargo test -q --workspace --lib -- --ignored --test-threads 2 kms::tests

#!/usr/bin/env bash
# The peers' own install manifests, from their module sources, with the image
# references pointed at images built here (bench/peers/image.sh). Prints YAML
# on stdout, for `kubectl apply --server-side -f -`.
#
# Usage: bench/peers/manifests.sh policy-controller WEBHOOK-IMAGE
#        bench/peers/manifests.sh kyverno KYVERNO-IMAGE KYVERNOPRE-IMAGE
# IMAGE: REGISTRY/REPOSITORY@sha256:DIGEST (what image.sh --push prints).
#
# What differs from a user's install, besides the images, and why (nothing
# may leave this machine):
#   policy-controller: config/ in kustomization order, the ko:// reference
#     replaced, and `--disable-tuf` added to the webhook's arguments (it
#     fetches the public Sigstore TUF root at start otherwise; the benchmark's
#     policies are key-only).
#   kyverno: `helm template` of charts/kyverno with the admission controller
#     only (the background, cleanup and reports controllers are off: image
#     verification is admission), no helm hooks or tests (they run the
#     kyverno-cli and readiness-checker images, which are not built here),
#     plain HTTP allowed to registries (features.registryClient.allowInsecure),
#     and only the default registry credential helper (the cloud ones call
#     metadata endpoints). TUF is off by default in Kyverno.
set -euo pipefail
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd -- "$HERE/../.." && pwd)

die() { printf 'peer-manifests: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '6,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

# The module's source directory and version, as the wrapper module pins them.
module_field() { # PEER MODULE FIELD
    (cd "$HERE/$1" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go mod download -json "$2" 2>/dev/null |
        python3 -c '
import json, sys
d = json.load(sys.stdin)
if d.get("Error") or not d.get(sys.argv[1]):
    sys.exit(1)
print(d[sys.argv[1]])' "$3") ||
        die "cannot get $2 as $HERE/$1/go.mod pins it (go mod download $2 from $HERE/$1)"
}

check_ref() { # REF: REGISTRY/REPOSITORY@sha256:HEX
    [[ $1 =~ ^[^/@]+/[^@]+@sha256:[0-9a-f]{64}$ ]] || die "image $1 is not REGISTRY/REPOSITORY@sha256:DIGEST"
}

policy_controller() {
    local image=$1 src
    check_ref "$image"
    src=$(module_field policy-controller github.com/sigstore/policy-controller Dir)
    python3 - "$src/config" "$image" <<'PY'
import os, re, sys
config, image = sys.argv[1:3]
# The files, in the order config/kustomization.yaml lists them (ko apply -f
# config/ takes the directory, but the kustomization states the set).
kust = open(os.path.join(config, "kustomization.yaml")).read()
block = re.search(r"^resources:\n((?:\s+- .+\n)+)", kust, re.M)
if not block:
    sys.exit(f"peer-manifests: error: no resources list in {config}/kustomization.yaml")
files = re.findall(r"- (\S+)", block.group(1))
if "webhook.yaml" not in files:
    files.append("webhook.yaml")
ko = "ko://github.com/sigstore/policy-controller/cmd/webhook"
out = []
for name in files:
    text = open(os.path.join(config, name)).read()
    if name == "webhook.yaml":
        for needle in (f"image: {ko}\n", "args: [\n"):
            if text.count(needle) != 1:
                sys.exit(f"peer-manifests: error: {config}/webhook.yaml no longer has one {needle.strip()!r}; "
                         "update bench/peers/manifests.sh for this policy-controller release")
        text = text.replace(f"image: {ko}\n", f"image: {image}\n")
        text = text.replace("args: [\n", 'args: [\n          "--disable-tuf",\n')
    if "ko://" in text:
        sys.exit(f"peer-manifests: error: {config}/{name} has a ko:// reference this script does not replace")
    out.append(f"# policy-controller config/{name}\n{text.strip()}\n")
print("---\n".join(out), end="")
PY
}

# REGISTRY/REPOSITORY@DIGEST as the chart's image values; the tag is
# VERSION@DIGEST, so the chart's "registry/repository:tag" pins the digest.
chart_image() { # VALUE-PREFIX REF VERSION
    local prefix=$1 ref=$2 version=$3 name
    name=${ref%@*}
    printf '%s\n' --set "$prefix.registry=${name%%/*}" --set "$prefix.repository=${name#*/}" \
        --set-string "$prefix.tag=$version@${ref#*@}"
}

kyverno() {
    local image=$1 pre=$2 src version helm args=()
    check_ref "$image"
    check_ref "$pre"
    src=$(module_field kyverno github.com/kyverno/kyverno Dir)
    version=$(module_field kyverno github.com/kyverno/kyverno Version)
    helm=$("$REPO/scripts/install-tools.sh" helm)/helm
    mapfile -t args < <(chart_image admissionController.container.image "$image" "$version"
        chart_image admissionController.initContainer.image "$pre" "$version")
    # The chart declares three dependencies from remote chart repositories
    # (kyverno-api, openreports, reports-server), which helm wants present in
    # charts/ even when their conditions are off, and which this machine
    # cannot fetch. A copy of the chart without them renders the rest as is;
    # kyverno-api's part (the policies.kyverno.io CRDs) comes from the same
    # module's config/crds below. openreports and reports-server are off by
    # default.
    CHART_COPY=$(mktemp -d "${TMPDIR:-/tmp}/kyverno-chart.XXXXXX")
    trap 'rm -rf -- "$CHART_COPY"' EXIT
    cp -R "$src/charts/kyverno" "$CHART_COPY/"
    chmod -R u+w "$CHART_COPY"
    python3 - "$CHART_COPY/kyverno/Chart.yaml" <<'PY' || die "cannot drop the remote dependencies from the chart's Chart.yaml"
import re, sys
path = sys.argv[1]
text = open(path).read()
head, sep, deps = text.partition("\ndependencies:\n")
if not sep:
    sys.exit("no dependencies list")
entries = re.split(r"(?m)^(?=  - name: )", deps)
kept = [e for e in entries if e.strip() and "repository:" not in e]
dropped = [re.search(r"name: (\S+)", e).group(1) for e in entries if "repository:" in e]
if sorted(dropped) != ["kyverno-api", "openreports", "reports-server"]:
    sys.exit(f"unexpected remote dependencies {dropped}")
open(path, "w").write(head + sep + "".join(kept))
PY
    # helm template does not make the namespace that `helm install
    # --create-namespace` would; first, so that everything in it applies.
    printf -- 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kyverno\n'
    # --kube-version: the local cluster's (helm template has no cluster to ask).
    "$helm" template kyverno "$CHART_COPY/kyverno" --namespace kyverno --no-hooks --skip-tests \
        --kube-version "${SIGIL_PEERS_KUBE_VERSION:-v1.37.2}" \
        --include-crds \
        "${args[@]}" \
        --set backgroundController.enabled=false \
        --set cleanupController.enabled=false \
        --set reportsController.enabled=false \
        --set webhooksCleanup.enabled=false \
        --set crds.migration.enabled=false \
        --set features.registryClient.allowInsecure=true \
        --set 'features.registryClient.credentialHelpers={default}' ||
        die "helm template of $src/charts/kyverno failed"
    local crd
    for crd in "$src"/config/crds/policies.kyverno.io/*.yaml; do
        printf -- '---\n'
        cat -- "$crd"
    done
}

(($# >= 1)) || usage
case $1 in
    policy-controller) (($# == 2)) || usage; policy_controller "$2" ;;
    kyverno) (($# == 3)) || usage; kyverno "$2" "$3" ;;
    *) usage ;;
esac

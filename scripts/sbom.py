#!/usr/bin/env python3
"""An SPDX 2.3 SBOM of sigil's image, from what built it.

The image is made of Debian packages (their dpkg entries are in the image,
var/lib/dpkg/status.d/, written by scripts/oci-image.py), sigil's three
binaries, whose Rust crates `cargo tree` lists, and the CUE module, whose Go
modules `go list -deps` lists. The sources are exact: no scanner guesses.
Deterministic: the same inputs give the same bytes (the creation time is
SOURCE_DATE_EPOCH).

Usage:
  cargo tree -e normal,no-proc-macro --prefix none -f '{p}' \\
      -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli > crates.txt
  scripts/build-cue-wasm.sh --modules > go-modules.txt
  scripts/sbom.py --layout target/oci/sigil --crates crates.txt \\
      --go-modules go-modules.txt \\
      --name ghcr.io/sigil-dev/sigil --version 1.2.3 > sbom.spdx.json

The release workflow attaches the output as a cosign attestation
(`--type spdxjson`).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import io
import json
import os
import re
import sys
import tarfile

SOURCE = "https://github.com/sigil-dev/sigil"


def blob(layout: str, digest: str) -> bytes:
    algo, hexdigest = digest.split(":", 1)
    with open(os.path.join(layout, "blobs", algo, hexdigest), "rb") as f:
        return f.read()


def debian_packages(layout: str) -> tuple[str, list[dict[str, str]]]:
    """(manifest digest, dpkg entries found in the image's layers)."""
    with open(os.path.join(layout, "index.json"), "rb") as f:
        index = json.load(f)
    manifest_digest = index["manifests"][0]["digest"]
    manifest = json.loads(blob(layout, manifest_digest))
    packages = []
    for layer in manifest["layers"]:
        data = blob(layout, layer["digest"])
        if layer["mediaType"].endswith("+gzip"):
            data = gzip.decompress(data)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                if not (m.isfile() and m.name.startswith("var/lib/dpkg/status.d/")):
                    continue
                f = tar.extractfile(m)
                fields = {}
                for line in (f.read().decode() if f else "").splitlines():
                    if line and not line[0].isspace() and ":" in line:
                        k, v = line.split(":", 1)
                        fields[k] = v.strip()
                if "Package" in fields and "Version" in fields:
                    packages.append(fields)
    return manifest_digest, sorted(packages, key=lambda p: p["Package"])


CRATE = re.compile(r"^([A-Za-z0-9_.-]+) v(\S+)(?: \((.+)\))?$")


def crates(text: str) -> list[tuple[str, str, bool]]:
    """(name, version, from crates.io) of each crate `cargo tree -f '{p}'` lists."""
    found = {}
    for line in text.splitlines():
        line = line.strip().removesuffix(" (*)")
        if not line:
            continue
        m = CRATE.match(line)
        if not m:
            raise SystemExit(f"sbom: cannot read this cargo tree line: {line!r}")
        name, version, source = m.group(1), m.group(2), m.group(3) or ""
        # A path source (a workspace crate) would name the build machine's checkout.
        found[(name, version)] = not source
    return sorted((n, v, registry) for (n, v), registry in found.items())


def go_modules(path: str | None) -> list[tuple[str, str]]:
    """(module path, version) of each module `go list -deps` names for the CUE
    module; sigil's own guest module (no version) is part of sigil."""
    if path is None:
        return []
    out = set()
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 2:
                out.add((fields[0], fields[1]))
            elif len(fields) > 2:
                raise SystemExit(f"sbom.py: {path}: not `MODULE VERSION`: {line.strip()!r}")
    return sorted(out)


def go_escape(path: str) -> str:
    """The module proxy's case encoding: an upper-case letter is `!` and its lower case."""
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), path)


def spdx_id(kind: str, name: str, version: str) -> str:
    return "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]", "-", f"{kind}-{name}-{version}")


def build(args: argparse.Namespace) -> dict:
    digest, debs = debian_packages(args.layout)
    with open(args.crates) as f:
        rust = crates(f.read())
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0") or 0)
    created = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    image_id = "SPDXRef-image"
    packages = [{
        "SPDXID": image_id,
        "name": args.name,
        "versionInfo": args.version,
        "downloadLocation": "NOASSERTION",
        "primaryPackagePurpose": "CONTAINER",
        "checksums": [{"algorithm": "SHA256", "checksumValue": digest.split(":", 1)[1]}],
        "externalRefs": [{
            "referenceCategory": "PACKAGE-MANAGER",
            "referenceType": "purl",
            "referenceLocator": f"pkg:oci/sigil@{digest.replace(':', '%3A')}?repository_url={args.name}",
        }],
    }]
    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", "relatedSpdxElement": image_id}]
    for p in debs:
        pid = spdx_id("deb", p["Package"], p["Version"])
        arch = p.get("Architecture", "all")
        packages.append({
            "SPDXID": pid,
            "name": p["Package"],
            "versionInfo": p["Version"],
            "supplier": "Organization: Debian",
            "downloadLocation": "NOASSERTION",
            "externalRefs": [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:deb/debian/{p['Package']}@{p['Version']}?arch={arch}&distro=debian-12",
            }],
        })
        relationships.append({"spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": pid})
    for path, version in go_modules(args.go_modules):
        pid = spdx_id("go", path, version)
        packages.append({
            "SPDXID": pid,
            "name": path,
            "versionInfo": version,
            "downloadLocation": f"https://proxy.golang.org/{go_escape(path)}/@v/{version}.zip",
            "externalRefs": [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:golang/{path}@{version}",
            }],
        })
        relationships.append({"spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": pid})
    for name, version, registry in rust:
        pid = spdx_id("crate", name, version)
        entry = {
            "SPDXID": pid,
            "name": name,
            "versionInfo": version,
            "downloadLocation": f"https://crates.io/api/v1/crates/{name}/{version}/download" if registry else SOURCE,
        }
        if registry:
            entry["externalRefs"] = [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:cargo/{name}@{version}",
            }]
        packages.append(entry)
        relationships.append({"spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": pid})
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{args.name}@{digest}",
        "documentNamespace": f"{SOURCE}/spdx/{digest.split(':', 1)[1]}",
        "creationInfo": {"created": created, "creators": ["Tool: sigil-scripts-sbom.py"]},
        "packages": packages,
        "relationships": relationships,
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="sbom.py", description=__doc__.splitlines()[0])
    p.add_argument("--layout", required=True, help="the image's OCI layout (scripts/image.sh)")
    p.add_argument("--crates", required=True, help="`cargo tree -f '{p}' --prefix none` output")
    p.add_argument("--go-modules", help="the CUE module's Go modules, `MODULE VERSION` per line "
                   "(scripts/build-cue-wasm.sh --modules)")
    p.add_argument("--name", default="ghcr.io/sigil-dev/sigil")
    p.add_argument("--version", default="dev")
    args = p.parse_args(argv)
    try:
        doc = build(args)
    except (OSError, KeyError, ValueError, tarfile.TarError) as e:
        print(f"sbom: error: {e}", file=sys.stderr)
        return 1
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Prints an OCI layout's image size: "<compressed bytes> <unpacked bytes>".

Compressed is the sum of the layer blobs; unpacked the sum of the regular
files in them. scripts/image.sh and bench/peers/image.sh write it beside
their layouts as LAYOUT.size, so sigil's image and the peers' are counted
the same way.

Usage: scripts/oci-size.py LAYOUT-DIR
"""

import gzip
import io
import json
import os
import sys
import tarfile


def blob(layout: str, digest: str) -> bytes:
    with open(os.path.join(layout, "blobs", *digest.split(":")), "rb") as f:
        return f.read()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    layout = argv[0]
    try:
        with open(os.path.join(layout, "index.json")) as f:
            index = json.load(f)
        manifest = json.loads(blob(layout, index["manifests"][0]["digest"]))
        compressed = unpacked = 0
        for layer in manifest["layers"]:
            data = blob(layout, layer["digest"])
            compressed += len(data)
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
                unpacked += sum(m.size for m in tar.getmembers() if m.isfile())
    except (OSError, ValueError, KeyError, IndexError, tarfile.TarError) as e:
        print(f"oci-size: {layout} is not a readable OCI image layout: {e}", file=sys.stderr)
        return 1
    print(compressed, unpacked)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

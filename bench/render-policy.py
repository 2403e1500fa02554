#!/usr/bin/env python3
"""Renders one of bench/policies/*.yaml for a run: @REGISTRY@ becomes the
registry the benchmark's images are under (as pods name it), and the line
@PUBLIC_KEY@ becomes the PEM public key, each line at that indentation.

Usage: bench/render-policy.py POLICY.yaml REGISTRY PUBLIC-KEY.pem > policy.yaml
"""

import re
import sys


def render(template: str, registry: str, pem: str) -> str:
    lines = pem.strip().splitlines()
    if not lines or not lines[0].startswith("-----BEGIN ") or not lines[-1].startswith("-----END "):
        raise ValueError("the public key is not PEM (-----BEGIN ... -----END ...)")
    if not re.fullmatch(r"[A-Za-z0-9.-]+(:[0-9]+)?", registry):
        raise ValueError(f"registry {registry!r} is not HOST[:PORT]")
    text = template.replace("@REGISTRY@", registry)
    text, n = re.subn(r"^([ \t]*)@PUBLIC_KEY@$",
                      lambda m: "\n".join(m.group(1) + line for line in lines), text, flags=re.M)
    if n != 1:
        raise ValueError(f"want one line that is only @PUBLIC_KEY@, found {n}")
    if "@" in re.sub(r"(?m)^\s*#.*$", "", text):
        raise ValueError("a placeholder is left after rendering")
    return text


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    path, registry, key = sys.argv[1:4]
    try:
        print(render(open(path).read(), registry, open(key).read()), end="")
    except (OSError, ValueError) as e:
        sys.exit(f"render-policy: {path}: {e}")


if __name__ == "__main__":
    main()

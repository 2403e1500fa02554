#!/usr/bin/env python3
"""Checks docs/architecture.md against the workspace (make test-scripts).

The table between `<!-- crates: begin -->` and `<!-- crates: end -->` must
name every workspace member once, and nothing else; each crate's **uses**
column must be exactly its sigil dependencies (normal, not dev or build);
every use must point to a lower floor; the test crates (sigil-testdata,
sigil-testkit) must not be a normal dependency of any crate but the e2e suite.

Usage: scripts/check-architecture.py [METADATA.json]
  (default: runs `cargo metadata --no-deps`, which builds nothing)
Then it breaks the workspace on purpose (a crate the document does not name,
a dependency it does not list, a use of a higher floor) and fails unless
each breakage is caught.
"""
import copy
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
TEST_CRATES = {"sigil-testdata", "sigil-testkit"}
TEST_FLOOR = "test"


def workspace(metadata):
    """{crate: set of its normal sigil dependencies} of the workspace members."""
    members = set(metadata["workspace_members"])
    crates = {}
    for package in metadata["packages"]:
        if package["id"] not in members:
            continue
        crates[package["name"]] = {
            d["name"] for d in package["dependencies"]
            if d["name"].startswith("sigil-") and d.get("kind") is None
        }
    return crates


def table(text):
    """{crate: (floor, set of uses)} from the document's crate table."""
    match = re.search(r"<!-- crates: begin -->(.*?)<!-- crates: end -->", text, re.S)
    if not match:
        raise SystemExit(f"{DOC}: no `<!-- crates: begin -->` ... `<!-- crates: end -->` table")
    rows = {}
    problems = []
    for line in match.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("floor", "") or set(cells[0]) <= {"-"}:
            continue
        floor, crate, _owns, uses = cells
        crate = crate.strip("`")
        if crate in rows:
            problems.append(f"{crate} is named twice")
        used = set() if uses in ("—", "-", "") else {u.strip().strip("`") for u in uses.split(",")}
        rows[crate] = (floor, used)
    return rows, problems


def check(crates, rows):
    problems = []
    for crate in sorted(set(crates) - set(rows)):
        problems.append(f"{crate} is a workspace crate the document does not name: add its row (floor, owns, uses)")
    for crate in sorted(set(rows) - set(crates)):
        problems.append(f"{crate} is in the document but not in the workspace: remove its row")
    for crate in sorted(set(crates) & set(rows)):
        floor, used = rows[crate]
        actual = crates[crate]
        if used != actual:
            problems.append(
                f"{crate}: the document says it uses {sorted(used)}, Cargo.toml says {sorted(actual)}")
        if floor == TEST_FLOOR:
            continue
        if not floor.isdigit():
            problems.append(f"{crate}: floor {floor!r} is neither a number nor {TEST_FLOOR!r}")
            continue
        for dep in sorted(actual):
            dep_floor = rows.get(dep, (None,))[0]
            if dep_floor is not None and dep_floor.isdigit() and int(dep_floor) >= int(floor):
                problems.append(f"{crate} (floor {floor}) uses {dep} (floor {dep_floor}): not a lower floor")
        for dep in sorted(actual & TEST_CRATES):
            problems.append(f"{crate} depends on the test crate {dep}: make it a dev-dependency")
    return problems


def main(argv):
    if len(argv) > 1:
        metadata = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    else:
        out = subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
            cwd=REPO, check=True, capture_output=True, text=True)
        metadata = json.loads(out.stdout)
    rows, problems = table(DOC.read_text(encoding="utf-8"))
    crates = workspace(metadata)
    problems += check(crates, rows)
    for p in problems:
        print(f"check-architecture: {DOC.relative_to(REPO)}: {p}", file=sys.stderr)
    if problems:
        return 1
    missed = [name for name, broken in breakages(crates) if not check(broken, rows)]
    if missed:
        print(f"check-architecture: self-test: not caught: {', '.join(missed)}", file=sys.stderr)
        return 1
    print(f"check-architecture: {len(rows)} crates on their floors, as the document says "
          f"(self-test: every breakage caught)", file=sys.stderr)
    return 0


def breakages(crates):
    """(name, a broken copy of `crates`) for the self-test."""
    new_crate = copy.deepcopy(crates)
    new_crate["sigil-unnamed"] = set()
    upward = copy.deepcopy(crates)
    upward["sigil-verifier"].add("sigil-cli")
    test_dep = copy.deepcopy(crates)
    test_dep["sigil-webhook"].add("sigil-testkit")
    gone = copy.deepcopy(crates)
    gone.pop("sigil-runtime", None)
    return [("a crate the document does not name", new_crate),
            ("a use of a higher floor", upward),
            ("a test crate as a normal dependency", test_dep),
            ("a crate the document names that is gone", gone)]


if __name__ == "__main__":
    sys.exit(main(sys.argv))

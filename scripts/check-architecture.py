#!/usr/bin/env python3
"""Checks docs/architecture.md against the workspace (make test-scripts).

The table between `<!-- crates: begin -->` and `<!-- crates: end -->` must
name every workspace member once, and nothing else; each crate's **uses**
column must be exactly its sigil dependencies (normal, not dev or build);
every use must point to a lower floor; the test crates (sigil-testdata,
sigil-testkit, sigil-fakecloud) must not be a normal dependency of any crate but the e2e suite.
Inside each crate, the top-level modules must not import each other in a
circle: every `crate::<module>` path in a module's code (comments and the
`#[cfg(test)]` part at the end of a file left out) is an edge to that module,
and a cycle among them fails with the modules it passes through.

Usage: scripts/check-architecture.py [METADATA.json]
  (default: runs `cargo metadata --no-deps`, which builds nothing)
Then it breaks the workspace on purpose (a crate the document does not name,
a dependency it does not list, a use of a higher floor, two modules that
import each other) and fails unless each breakage is caught.
"""
import copy
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
TEST_CRATES = {"sigil-testdata", "sigil-testkit", "sigil-fakecloud"}
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


CRATE_PATH = re.compile(r"\bcrate::(?:\{\s*)?([a-z_][a-z0-9_]*)")


TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;")


def test_files(src):
    """The files of modules declared `#[cfg(test)] mod name;` under `src`."""
    out = set()
    for path in src.rglob("*.rs"):
        text = path.read_text(encoding="utf-8")
        own_dir = path.parent if path.name in ("lib.rs", "main.rs", "mod.rs") else path.with_suffix("")
        for name in TEST_MODULE.findall(text):
            out.add(own_dir / f"{name}.rs")
            out.update((own_dir / name).rglob("*.rs"))
    return out


def module_edges(src):
    """{module: set of modules its code names through `crate::`} of one crate's
    src/ directory. A module is a top-level file or directory of src/ (a
    directory's files count as one module); the crate roots (lib.rs, main.rs),
    src/bin/ and test-only modules (`#[cfg(test)] mod name;`) are left out,
    and so are comments and everything from a file's first `#[cfg(test)]` on
    (tests may use whatever they test)."""
    roots = {"lib", "main"}
    skip = test_files(src)
    modules = {}
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        if rel.parts[0] == "bin" or path in skip:
            continue
        module = rel.parts[0].removesuffix(".rs")
        if module in roots:
            continue
        text = path.read_text(encoding="utf-8").split("#[cfg(test)]", 1)[0]
        code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
        modules.setdefault(module, set()).update(CRATE_PATH.findall(code))
    return {m: {d for d in deps if d in modules and d != m} for m, deps in modules.items()}


def cycles(edges):
    """Cycles of `edges`, each as a list of modules (the first repeated at the
    end), found by a depth-first walk from each module in order: not every
    cycle, but at least one wherever there is a circle."""
    found = []
    seen = set()
    def walk(node, stack):
        for dep in sorted(edges.get(node, ())):
            if dep in stack:
                cycle = stack[stack.index(dep):] + [dep]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    found.append(cycle)
            elif dep not in done:
                walk(dep, stack + [dep])
        done.add(node)
    done = set()
    for node in sorted(edges):
        if node not in done:
            walk(node, [node])
    return found


def check_modules(crate_edges):
    problems = []
    for crate, edges in sorted(crate_edges.items()):
        for cycle in cycles(edges):
            problems.append(
                f"{crate}: modules import each other in a circle: {' -> '.join(cycle)}; "
                "move what they share into a lower module both can use")
    return problems


def crate_sources(metadata):
    """{crate: its src/ directory} of the workspace members."""
    members = set(metadata["workspace_members"])
    return {p["name"]: Path(p["manifest_path"]).parent / "src"
            for p in metadata["packages"] if p["id"] in members}


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
    crate_edges = {c: module_edges(d) for c, d in crate_sources(metadata).items() if d.is_dir()}
    module_problems = check_modules(crate_edges)
    for p in problems:
        print(f"check-architecture: {DOC.relative_to(REPO)}: {p}", file=sys.stderr)
    for p in module_problems:
        print(f"check-architecture: {p}", file=sys.stderr)
    if problems or module_problems:
        return 1
    missed = [name for name, broken in breakages(crates) if not check(broken, rows)]
    if not check_modules(module_breakage(crate_edges)):
        missed.append("two modules that import each other")
    if missed:
        print(f"check-architecture: self-test: not caught: {', '.join(missed)}", file=sys.stderr)
        return 1
    print(f"check-architecture: {len(rows)} crates on their floors, as the document says, "
          f"{sum(len(e) for e in crate_edges.values())} modules without import circles "
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


def module_breakage(crate_edges):
    """A copy of `crate_edges` where one module imports one that imports it
    back through a third (a three-module circle) in the verifier."""
    broken = copy.deepcopy(crate_edges)
    edges = broken.setdefault("sigil-verifier", {})
    for a, b, c in (("circle_a", "circle_b", "circle_c"),):
        edges[a] = {b}
        edges[b] = {c}
        edges[c] = {a}
    return broken


if __name__ == "__main__":
    sys.exit(main(sys.argv))

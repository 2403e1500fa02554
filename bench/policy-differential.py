#!/usr/bin/env python3
"""The policy differential's corpus and report (bench/policy-differential.sh).

  pairs CORPUS.yaml FIXTURES.env
      One line per (policy, image) pair: "ID<TAB>POLICY-SOURCE<TAB>IMAGE-NAME<TAB>REFERENCE".
  render CORPUS.yaml ID FIXTURES.env TRUST-ROOT-NAME > policy.yaml
      The pair set's policy (policy-controller's apiVersion) on this run's
      registries and keys.
  trustroot TRUSTED_ROOT.json NAME > trustroot.yaml
      A policy-controller TrustRoot (spec.sigstoreKeys) holding that trust root.
  record RUN ID SOURCE IMAGE-NAME REFERENCE CONVERT-OUTPUT >> results.jsonl
      One pair's result line from the tools' RUN.{pc,sigil}.{rc,stdout,stderr}.
  meta COMMAND DATE SIGIL-VERSION SIGIL-COMMIT PC-VERSION COSIGN-VERSION PROXY PROXY-HITS > meta.json
  report CORPUS.yaml REASONS.yaml RESULTS.jsonl META.json > docs/policy-differential.md
  --check
      Renders every pair set of bench/differential/ that lives in this
      repository, a TrustRoot and a report from made-up inputs (no registry).

Policies come from policy-controller's test data (``pc:PATH``, read at run time
from $POLICY_CONTROLLER_TESTDATA or ``shared/policy-controller-testdata`` beside the checkout,
never copied here) or from bench/differential/ (``edge/FILE``). Rendering
changes only what a local registry needs:
  - every glob becomes the pair set's ``globs`` (default: both registries, **),
    except in repository files, where @OLAREG@ / @DOCKREG@ become the registries;
  - a key's ``data`` becomes the fixture key the pair set names (a repository
    file names the fixture key, e.g. ``data: KEY1``);
  - a keyless authority, and any ``ctlog`` with a URL, gets the run's
    ``trustRootRef`` where it has none: without one policy-controller fetches
    the public-good TUF root, which this machine must never reach.
"""

import base64
import json
import os
import re
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DIFF_DIR = os.path.join(HERE, "differential")


def pc_testdata_default():
    """policy-controller's test data where sigil-testdata looks for it: a
    `shared/` directory beside the checkout or any directory above it, then
    the cache scripts/fetch-testdata.sh fills."""
    checkout = os.path.dirname(HERE)
    here = checkout
    while True:
        candidate = os.path.join(here, "shared", "policy-controller-testdata")
        if os.path.isdir(candidate):
            return candidate
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return os.path.join(checkout, ".cache", "testdata", "shared", "policy-controller-testdata")

KEY_NAMES = ("KEY1", "KEY2", "P384KEY", "RSAKEY", "HASHKEY")


class CorpusError(Exception):
    pass


def load_corpus(path):
    with open(path) as f:
        corpus = yaml.safe_load(f)
    if not isinstance(corpus, list) or not corpus:
        raise CorpusError(f"{path}: want a non-empty list of pair sets")
    ids = set()
    for i, entry in enumerate(corpus):
        where = f"{path}: entry {i}"
        if not isinstance(entry, dict):
            raise CorpusError(f"{where}: not a mapping")
        for field in ("id", "policy", "images"):
            if field not in entry:
                raise CorpusError(f"{where}: no `{field}`")
        if entry["id"] in ids:
            raise CorpusError(f"{where}: id {entry['id']} twice")
        ids.add(entry["id"])
        if not isinstance(entry["images"], list) or not entry["images"]:
            raise CorpusError(f"{where} ({entry['id']}): `images` must list fixture names")
        if "key" in entry and entry["key"] not in KEY_NAMES:
            raise CorpusError(f"{where} ({entry['id']}): key {entry['key']} is none of {KEY_NAMES}")
    return corpus


def entry_by_id(corpus, pair_id):
    for entry in corpus:
        if entry["id"] == pair_id:
            return entry
    raise CorpusError(f"no pair set {pair_id} in the corpus")


def read_fixtures(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                out[k] = v
    return out


def policy_path(source):
    if source.startswith("pc:"):
        base = os.environ.get("POLICY_CONTROLLER_TESTDATA") or pc_testdata_default()
        return os.path.join(base, source[3:])
    return os.path.join(DIFF_DIR, source)


def pem_of(fixtures, key_name):
    path = fixtures.get(key_name)
    if not path:
        raise CorpusError(f"the fixtures have no {key_name}")
    with open(path) as f:
        pem = f.read().strip() + "\n"
    if not pem.startswith("-----BEGIN "):
        raise CorpusError(f"{key_name} ({path}) is not a PEM public key")
    return pem


def render_doc(doc, entry, fixtures, trust_root, upstream):
    spec = doc.get("spec")
    if doc.get("kind") != "ClusterImagePolicy" or not isinstance(spec, dict):
        raise CorpusError(f"{entry['id']}: {entry['policy']} is not a ClusterImagePolicy")
    regs = {"@OLAREG@": fixtures.get("OLAREG", ""), "@DOCKREG@": fixtures.get("DOCKREG", "")}

    def fill(text):
        for k, v in regs.items():
            if k in text and not v:
                raise CorpusError(f"{entry['id']}: the fixtures name no registry for {k}")
            text = text.replace(k, v)
        return text

    if upstream:
        globs = entry.get("globs", ["@OLAREG@/**", "@DOCKREG@/**"])
        spec["images"] = [{"glob": fill(g)} for g in globs]
    else:
        for image in spec.get("images", []):
            image["glob"] = fill(image["glob"])
    for authority in spec.get("authorities", []):
        key = authority.get("key")
        if isinstance(key, dict) and "data" in key:
            name = key["data"].strip()
            if name in KEY_NAMES:
                key["data"] = pem_of(fixtures, name)
            elif upstream and "key" in entry:
                key["data"] = pem_of(fixtures, entry["key"])
            else:
                raise CorpusError(f"{entry['id']}: a key authority of {entry['policy']} needs `key:` in the corpus")
        keyless = authority.get("keyless")
        if isinstance(keyless, dict):
            keyless.setdefault("trustRootRef", trust_root)
        ctlog = authority.get("ctlog")
        if isinstance(ctlog, dict) and (ctlog.get("url") or isinstance(keyless, dict)):
            ctlog.setdefault("trustRootRef", trust_root)
    return doc


def render(entry, fixtures, trust_root):
    path = policy_path(entry["policy"])
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
    except OSError as e:
        raise CorpusError(f"{entry['id']}: cannot read {path}: {e}") from e
    upstream = entry["policy"].startswith("pc:")
    docs = [render_doc(d, entry, fixtures, trust_root, upstream) for d in docs]
    if not docs:
        raise CorpusError(f"{entry['id']}: {path} holds no document")
    return yaml.safe_dump_all(docs, sort_keys=False)


def pairs(corpus, fixtures):
    for entry in corpus:
        for name in entry["images"]:
            ref = fixtures.get(name)
            if not ref:
                raise CorpusError(f"{entry['id']}: the fixtures have no image {name}")
            yield entry["id"], entry["policy"], name, ref


def pem(label, der):
    b64 = base64.b64encode(der).decode()
    body = "\n".join(b64[i:i + 64] for i in range(0, len(b64), 64))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n"


def trustroot(trusted_root, name):
    """A TrustRoot whose sigstoreKeys are `trusted_root` (trusted_root.json's
    shape: DER in base64, which sigstoreKeys carries as base64 of PEM)."""

    def b64pem(label, der_b64):
        return base64.b64encode(pem(label, base64.b64decode(der_b64)).encode()).decode()

    def log(t):
        return {
            "baseURL": t["baseUrl"],
            "hashAlgorithm": {"SHA2_256": "sha-256", "SHA2_384": "sha-384", "SHA2_512": "sha-512"}.get(
                t.get("hashAlgorithm", "SHA2_256"), "sha-256"),
            "publicKey": b64pem("PUBLIC KEY", t["publicKey"]["rawBytes"]),
        }

    def ca(c):
        chain = "".join(pem("CERTIFICATE", base64.b64decode(x["rawBytes"]))
                        for x in c["certChain"]["certificates"])
        subject = c.get("subject", {})
        return {
            "subject": {"organization": subject.get("organization", ""),
                        "commonName": subject.get("commonName", "")},
            "uri": c.get("uri", ""),
            "certChain": base64.b64encode(chain.encode()).decode(),
        }

    keys = {
        "certificateAuthorities": [ca(c) for c in trusted_root.get("certificateAuthorities", [])],
        # policy-controller's tester reads Rekor v1 logs only; a Rekor v2 key
        # (Ed25519, no SETs) would not verify any legacy signature.
        "tLogs": [log(t) for t in trusted_root.get("tlogs", []) if not t["baseUrl"].startswith("https://log2")],
        "ctLogs": [log(t) for t in trusted_root.get("ctlogs", [])],
        "timestampAuthorities": [ca(c) for c in trusted_root.get("timestampAuthorities", [])],
    }
    if not keys["certificateAuthorities"]:
        raise CorpusError("the trusted root has no certificate authority")
    return yaml.safe_dump({
        "apiVersion": "policy.sigstore.dev/v1alpha1",
        "kind": "TrustRoot",
        "metadata": {"name": name},
        "spec": {"sigstoreKeys": keys},
    }, sort_keys=False)


def pc_verdict(result):
    """policy-tester exits 1 both when it denies (its JSON on stdout) and when
    it fails (log.Fatal: an invalid policy, an unreadable trust root)."""
    if result["pc_exit"] == 0:
        return "admit"
    if result["pc_exit"] == 1 and result.get("pc_json"):
        return "deny"
    return "error"


def sigil_verdict(result):
    return {0: "admit", 3: "admit (warn)", 1: "deny"}.get(result["sigil_exit"], "error")


def admits(verdict):
    return verdict.startswith("admit")


def cell(text, limit=220):
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    return text.replace("|", "\\|")


def load_reasons(path):
    with open(path) as f:
        reasons = yaml.safe_load(f) or []
    out = {}
    for i, r in enumerate(reasons):
        if not isinstance(r, dict) or not {"id", "image", "reason"} <= set(r):
            raise CorpusError(f"{path}: entry {i} needs id, image and reason")
        out[(r["id"], r["image"])] = r["reason"].strip()
    return out


def report(corpus, reasons, results, meta):
    lines = []
    rows = []
    agree = 0
    unexplained = []
    for r in results:
        pc = pc_verdict(r)
        sg = sigil_verdict(r)
        same = pc != "error" and sg != "error" and admits(pc) == admits(sg)
        agree += same
        reason = reasons.get((r["id"], r["image_name"]))
        if not same and not reason:
            unexplained.append(f"{r['id']} × {r['image_name']}")
        rows.append((r, pc, sg, same, reason))
    stale = [f"{k[0]} × {k[1]}" for k in reasons
             if not any((r["id"], r["image_name"]) == k and not same for r, _, _, same, _ in rows)]
    n = len(rows)
    proxied = [str(i) for i, (r, *_) in enumerate(rows, 1) if "proxyconnect" in r["pc_message"]]
    tuf = [str(i) for i, (r, *_) in enumerate(rows, 1) if "tuf" in r["pc_message"].lower()]
    if not proxied:
        proxy_what = "-"
    elif all("searching log query" in rows[int(i) - 1][0]["pc_message"] for i in proxied):
        proxy_what = ("each a Rekor entry search, `searching log query`, for a key authority with a `ctlog` URL and a"
                      " signature without a log entry")
    else:
        proxy_what = "see their messages below"
    lines += [
        "# Verdict differential: sigil and policy-controller's `policy-tester`",
        "",
        "<!-- Written by bench/policy-differential.sh; do not edit by hand. -->",
        "",
        "Every row below is one run of both tools on one (policy, image) pair; nothing is filled in by hand except",
        "the reasons under *Disagreements* (bench/differential/reasons.yaml). The policies are policy-controller's own",
        "example ClusterImagePolicies (its test data, `pc:`, read at run time) and sigil's edge cases",
        "(bench/differential/edge/), rewritten to the local registries, keys and trust root as",
        "bench/policy-differential.py says. policy-tester judges the policy as written; sigil judges it after",
        "`sigil policy convert` (the documented migration path, docs/migration.md).",
        "",
        f"- Command: `{meta['command']}`",
        f"- Date: {meta['date']}; {meta['sigil_version']} (commit {meta['sigil_commit']});"
        f" policy-tester {meta['pc_version']}; cosign {meta['cosign_version']}",
        f"- Registries: olareg and docker-registry on 127.0.0.1. policy-tester ran with every keyless authority and"
        f" every `ctlog` URL given the run's TrustRoot (`--trustroot`), `TUF_ROOT` in an empty directory and"
        f" `HTTPS_PROXY`/`HTTP_PROXY={meta['proxy']}`, where nothing listens, so that anything it tried to reach"
        f" off this machine failed at once. It tried in {len(proxied)} pair(s) ({', '.join(proxied) or 'none'}:"
        f" {proxy_what});"
        f" {len(tuf)} answer(s) mention TUF. For a policy with several authorities policy-tester's answer names one"
        f" failing authority, not always the same one from run to run (pc-key-and-keyless × OLAREG_LEGACY named the"
        f" key authority's Rekor search in one run and the keyless authority in the next), so that count can change;"
        f" the verdicts did not.",
        "",
        f"**{n} pairs: {agree} agree, {n - agree} disagree.**",
        "",
        "| # | policy | image | policy-tester | sigil | agree |",
        "|---|---|---|---|---|---|",
    ]
    for i, (r, pc, sg, same, _) in enumerate(rows, 1):
        lines.append(f"| {i} | {r['id']} | {r['image_name']} | {pc} | {sg} | {'yes' if same else '**no**'} |")
    lines += ["", "## Disagreements", ""]
    if n == agree:
        lines.append("None.")
    for i, (r, pc, sg, same, reason) in enumerate(rows, 1):
        if same:
            continue
        lines += [
            f"### {i}. {r['id']} × {r['image_name']}: policy-tester {pc}, sigil {sg}",
            "",
            reason or "**No reason recorded yet** (bench/differential/reasons.yaml).",
            "",
            f"- policy-tester: {cell(r['pc_message'] or '(no output)', 600)}",
            f"- sigil: {cell(r['sigil_message'] or '(no output)', 600)}",
            "",
        ]
    lines += ["## What each tool said", "",
              "| # | policy-tester (exit, output) | sigil (exit, output) |", "|---|---|---|"]
    for i, (r, _, _, _, _) in enumerate(rows, 1):
        lines.append(f"| {i} | {r['pc_exit']}: {cell(r['pc_message'] or '-')} | "
                     f"{r['sigil_exit']}: {cell(r['sigil_message'] or '-')} |")
    convert = {r["id"]: r.get("convert", "") for r in results}
    lines += ["", "## The pair sets", "",
              "`sigil policy convert` warns where it knows sigil will judge differently; its warnings are quoted.",
              "", "| policy | source | changed for this run | `sigil policy convert` warned |", "|---|---|---|---|"]
    for e in corpus:
        warned = [w.split("warning: ", 1)[1] for w in convert.get(e["id"], "").splitlines() if "warning: " in w]
        lines.append(f"| {e['id']} | `{e['policy']}` | {cell(e.get('note', ''), 400)} | "
                     f"{cell(' / '.join(warned), 700) if warned else '-'} |")
    if stale:
        lines += ["", "Reasons recorded for pairs that agree in this run (stale): " + ", ".join(stale) + "."]
    return "\n".join(lines) + "\n", unexplained


def check():
    """Renders the repository's own corpus files with made-up fixtures."""
    corpus = load_corpus(os.path.join(DIFF_DIR, "corpus.yaml"))
    reasons = load_reasons(os.path.join(DIFF_DIR, "reasons.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        fake_pem = pem("PUBLIC KEY", b"\x30" * 91)
        fixtures = {"OLAREG": "127.0.0.1:5001", "DOCKREG": "127.0.0.1:5002"}
        for k in KEY_NAMES:
            p = os.path.join(tmp, k)
            with open(p, "w") as f:
                f.write(fake_pem)
            fixtures[k] = p
        images = {name for e in corpus for name in e["images"]}
        for name in images:
            fixtures[name] = f"127.0.0.1:5001/test/app@sha256:{'0' * 64}"
        rendered = 0
        for e in corpus:
            if e["policy"].startswith("pc:"):
                continue
            docs = list(yaml.safe_load_all(render(e, fixtures, "difftest")))
            for d in docs:
                assert d["apiVersion"].startswith("policy.sigstore.dev/"), (e["id"], d["apiVersion"])
                for g in d["spec"]["images"]:
                    assert g["glob"].startswith("127.0.0.1:500"), (e["id"], g)
                for a in d["spec"].get("authorities", []):
                    if "key" in a:
                        assert a["key"]["data"] == fake_pem, (e["id"], a)
                    if "keyless" in a:
                        assert a["keyless"]["trustRootRef"] == "difftest", (e["id"], a)
            assert "@" not in re.sub(r"@sha256|@v[0-9]", "", yaml.safe_dump_all(docs)), e["id"]
            rendered += 1
        assert rendered, "no repository pair set rendered"
        for (pair_id, image) in reasons:
            e = entry_by_id(corpus, pair_id)
            assert image in e["images"], f"reasons.yaml: {pair_id} has no image {image}"
        # A TrustRoot from a made-up trusted_root.json, read back.
        der = b"\x30\x03\x02\x01\x01"
        tr = yaml.safe_load(trustroot({
            "certificateAuthorities": [{"subject": {"organization": "o", "commonName": "c"}, "uri": "http://ca",
                                        "certChain": {"certificates": [{"rawBytes": base64.b64encode(der).decode()}]}}],
            "tlogs": [{"baseUrl": "http://rekor", "hashAlgorithm": "SHA2_256",
                       "publicKey": {"rawBytes": base64.b64encode(der).decode()}},
                      {"baseUrl": "https://log2025-1.rekor.example", "publicKey": {"rawBytes": ""}}],
            "ctlogs": [],
        }, "difftest"))
        keys = tr["spec"]["sigstoreKeys"]
        assert base64.b64decode(keys["certificateAuthorities"][0]["certChain"]).decode() == pem("CERTIFICATE", der)
        assert [t["baseURL"] for t in keys["tLogs"]] == ["http://rekor"], keys["tLogs"]
        # The report from made-up results: one agreement, one explained and
        # one unexplained disagreement.
        e = corpus[0]
        meta = {k: "x" for k in ("command", "date", "sigil_version", "sigil_commit", "pc_version",
                                 "cosign_version", "proxy", "proxy_hits")}
        results = [
            {"id": e["id"], "image_name": "A", "pc_exit": 1, "pc_json": True, "sigil_exit": 1, "pc_message": "no", "sigil_message": "no"},
            {"id": e["id"], "image_name": "B", "pc_exit": 0, "sigil_exit": 3, "pc_message": "", "sigil_message": "w"},
            {"id": e["id"], "image_name": "C", "pc_exit": 1, "sigil_exit": 0, "pc_message": "a|b", "sigil_message": ""},
        ]
        text, unexplained = report(corpus, {(e["id"], "C"): "because"}, results, meta)
        assert "**3 pairs: 2 agree, 1 disagree.**" in text, text
        assert "because" in text and "a\\|b" in text and unexplained == [], (text, unexplained)
        _, unexplained = report(corpus, {}, results, meta)
        assert unexplained == [f"{e['id']} × C"], unexplained
    print(f"policy-differential: {len(corpus)} pair sets, {rendered} repository files rendered; "
          f"{len(reasons)} reasons; TrustRoot and report render", file=sys.stderr)


def read_text(path):
    with open(path, errors="replace") as f:
        return f.read().strip()


def record(run, pair_id, source, name, ref, convert):
    """One pair's result line, from the files bench/policy-differential.sh's
    run_tool wrote for each tool (RUN.pc.* and RUN.sigil.*)."""
    pc_out = read_text(run + ".pc.stdout")
    return {
        "id": pair_id, "source": source, "image_name": name, "image": ref,
        "pc_exit": int(read_text(run + ".pc.rc")),
        "pc_json": pc_out.startswith("{"),
        # Its verdict is the JSON on stdout; stderr holds zap's log lines, kept
        # only when there is no verdict to show (a log.Fatal).
        "pc_message": pc_out or read_text(run + ".pc.stderr")[-2000:],
        "sigil_exit": int(read_text(run + ".sigil.rc")),
        "sigil_message": "\n".join(
            x for x in (read_text(run + ".sigil.stdout"), read_text(run + ".sigil.stderr")) if x),
        # What `sigil policy convert` said about the policy (its warnings are
        # the places where it knows sigil judges differently).
        "convert": read_text(convert),
    }


META_KEYS = ("command", "date", "sigil_version", "sigil_commit", "pc_version", "cosign_version",
             "proxy", "proxy_hits")


def main(argv):
    try:
        if argv[:1] == ["--check"]:
            check()
        elif argv[:1] == ["pairs"] and len(argv) == 3:
            for p in pairs(load_corpus(argv[1]), read_fixtures(argv[2])):
                print("\t".join(p))
        elif argv[:1] == ["render"] and len(argv) == 5:
            entry = entry_by_id(load_corpus(argv[1]), argv[2])
            print(render(entry, read_fixtures(argv[3]), argv[4]), end="")
        elif argv[:1] == ["record"] and len(argv) == 7:
            print(json.dumps(record(*argv[1:])))
        elif argv[:1] == ["meta"] and len(argv) == 1 + len(META_KEYS):
            print(json.dumps(dict(zip(META_KEYS, argv[1:]))))
        elif argv[:1] == ["trustroot"] and len(argv) == 3:
            with open(argv[1]) as f:
                print(trustroot(json.load(f), argv[2]), end="")
        elif argv[:1] == ["report"] and len(argv) == 5:
            corpus = load_corpus(argv[1])
            with open(argv[3]) as f:
                results = [json.loads(line) for line in f if line.strip()]
            with open(argv[4]) as f:
                meta = json.load(f)
            text, unexplained = report(corpus, load_reasons(argv[2]), results, meta)
            print(text, end="")
            for u in unexplained:
                print(f"policy-differential: no reason recorded for the disagreement {u}", file=sys.stderr)
        else:
            sys.exit(__doc__)
    except (CorpusError, OSError, KeyError, ValueError, yaml.YAMLError) as e:
        sys.exit(f"policy-differential: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])

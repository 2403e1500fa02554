#!/usr/bin/env python3
"""The Kyverno conversion differential's corpus and report (bench/kyverno-differential.sh).

  pairs CORPUS.yaml FIXTURES.env
      One line per (policy, image) pair:
      "ID<TAB>POLICY-FILE<TAB>IMAGE-NAME<TAB>REFERENCE<TAB>SIGIL-SETUP" (`trust-root` or `-`).
  render CORPUS.yaml ID FIXTURES.env > policy.yaml
      The pair set's Kyverno policy on this run's registries, keys, test
      Sigstore and Notary root.
  render-sigil CORPUS.yaml ID FIXTURES.env > policy.yaml
      What `sigil policy convert` reads: the same, except for a pair set with
      `sigil: trust-root`, whose Rekor and CT log keys are left out, as a user
      does when the conversion says that they belong in a TrustRoot.
  sigstore TRUSTED_ROOT.json DIR >> FIXTURES.env
      The test Sigstore's Fulcio certificates, Rekor and CT log keys as PEM
      files in DIR, for Kyverno's keyless rules; prints their fixture lines.
  pod REFERENCE > pod.yaml
      The Pod that `kyverno apply` judges: one container running REFERENCE.
  push-notation REGISTRY REPOSITORY SUBJECT-DIGEST ENVELOPE FORMAT CHAIN.pem
      Pushes a Notary Project signature manifest (artifactType
      application/vnd.cncf.notary.signature) whose subject is SUBJECT-DIGEST,
      holding ENVELOPE (jws or cose), as Notation does; prints its digest.
  record RUN ID SOURCE IMAGE-NAME REFERENCE CONVERT-OUTPUT >> results.jsonl
      One pair's result line from the tools' RUN.{kyverno,sigil}.{rc,stdout,stderr}.
  meta COMMAND DATE MACHINE SIGIL-VERSION SIGIL-COMMIT KYVERNO-VERSION PROXY > meta.json
  report CORPUS.yaml REASONS.yaml RESULTS.jsonl META.json > docs/kyverno-differential.md
  --check
      Renders every pair set with made-up fixtures and a report from made-up
      results (no registry, no Kyverno).

The policies live in bench/differential/kyverno/. Rendering replaces @OLAREG@
and @DOCKREG@ in any string with the run's registries, a string that is
exactly @KEY1@, @KEY2@, @NOTARY_ROOT@, @FULCIO_ROOTS@, @REKOR_KEY@ or
@CTLOG_KEY@ with that PEM, and @REKOR_URL@ with the test Rekor's URL. The shared pieces
(fixture files, PEM keys, table cells, reasons) are policy-differential.py's.
"""

import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
KYV_DIR = os.path.join(HERE, "differential", "kyverno")

_spec = importlib.util.spec_from_file_location("policy_differential", os.path.join(HERE, "policy-differential.py"))
pd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pd)
CorpusError = pd.CorpusError

PEM_NAMES = ("KEY1", "KEY2", "NOTARY_ROOT", "FULCIO_ROOTS", "REKOR_KEY", "CTLOG_KEY")
VALUE_NAMES = ("REKOR_URL",)
SIGIL_SETUPS = ("trust-root",)
NOTARY_SIGNATURE = "application/vnd.cncf.notary.signature"
ENVELOPE_TYPES = {"jws": "application/jose+json", "cose": "application/cose"}
EMPTY_CONFIG = b"{}"
# A registry answers within this many seconds or the push fails.
HTTP_TIMEOUT = 20


def load_corpus(path):
    with open(path) as f:
        corpus = yaml.safe_load(f)
    if not isinstance(corpus, list) or not corpus:
        raise CorpusError(f"{path}: want a non-empty list of pair sets")
    ids = set()
    for i, entry in enumerate(corpus):
        where = f"{path}: entry {i}"
        if not isinstance(entry, dict) or not {"id", "policy", "images"} <= set(entry):
            raise CorpusError(f"{where}: needs id, policy and images")
        if entry["id"] in ids:
            raise CorpusError(f"{where}: id {entry['id']} twice")
        ids.add(entry["id"])
        if not isinstance(entry["images"], list) or not entry["images"]:
            raise CorpusError(f"{where} ({entry['id']}): `images` must list fixture names")
        if entry.get("sigil", "-") not in SIGIL_SETUPS + ("-",):
            raise CorpusError(f"{where} ({entry['id']}): `sigil` is one of {SIGIL_SETUPS}")
    return corpus


def drop_log_keys(value):
    """The policy without `rekor.pubkey` and `ctlog.pubkey` (an emptied
    `ctlog` goes too)."""
    if isinstance(value, list):
        return [drop_log_keys(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k in ("rekor", "ctlog") and isinstance(v, dict):
            v = {kk: vv for kk, vv in v.items() if kk != "pubkey"}
            if not v:
                continue
        out[k] = drop_log_keys(v)
    return out


def render(entry, fixtures, for_sigil=False):
    path = os.path.join(KYV_DIR, entry["policy"])
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    if not docs:
        raise CorpusError(f"{entry['id']}: {path} holds no document")
    regs = {"@OLAREG@": fixtures.get("OLAREG", ""), "@DOCKREG@": fixtures.get("DOCKREG", "")}

    def fill(value):
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        if not isinstance(value, str):
            return value
        m = re.fullmatch(r"@([A-Z0-9_]+)@", value)
        if m and m.group(1) in PEM_NAMES:
            return pd.pem_of(fixtures, m.group(1))
        if m and m.group(1) in VALUE_NAMES:
            if not fixtures.get(m.group(1)):
                raise CorpusError(f"{entry['id']}: the fixtures have no {m.group(1)}")
            return fixtures[m.group(1)]
        for k, v in regs.items():
            if k in value and not v:
                raise CorpusError(f"{entry['id']}: the fixtures name no registry for {k}")
            value = value.replace(k, v)
        if re.search(r"@[A-Z0-9_]+@", value):
            raise CorpusError(f"{entry['id']}: {value!r} names no fixture this script knows")
        return value

    docs = [fill(d) for d in docs]
    if for_sigil and entry.get("sigil") == "trust-root":
        docs = [drop_log_keys(d) for d in docs]
    return yaml.safe_dump_all(docs, sort_keys=False)


def pairs(corpus, fixtures):
    for entry in corpus:
        for name in entry["images"]:
            ref = fixtures.get(name)
            if not ref:
                raise CorpusError(f"{entry['id']}: the fixtures have no image {name}")
            yield entry["id"], entry["policy"], name, ref, entry.get("sigil", "-")


def sigstore(trusted_root, out_dir):
    """PEM files of a trusted_root.json's Fulcio certificates and its (Rekor
    v1) transparency log and CT log keys, and the fixture lines naming them."""
    os.makedirs(out_dir, exist_ok=True)
    import base64
    certs = "".join(pd.pem("CERTIFICATE", base64.b64decode(c["rawBytes"]))
                    for ca in trusted_root.get("certificateAuthorities", [])
                    for c in ca["certChain"]["certificates"])
    tlogs = [t for t in trusted_root.get("tlogs", []) if not t["baseUrl"].startswith("https://log2")]
    ctlogs = trusted_root.get("ctlogs", [])
    if not certs or not tlogs or not ctlogs:
        raise CorpusError("the trusted root needs a certificate authority, a Rekor v1 log and a CT log")
    files = {
        "FULCIO_ROOTS": ("fulcio-roots.pem", certs),
        "REKOR_KEY": ("rekor.pub", pd.pem("PUBLIC KEY", base64.b64decode(tlogs[0]["publicKey"]["rawBytes"]))),
        "CTLOG_KEY": ("ctlog.pub", pd.pem("PUBLIC KEY", base64.b64decode(ctlogs[0]["publicKey"]["rawBytes"]))),
    }
    lines = []
    for name, (file, text) in files.items():
        path = os.path.join(out_dir, file)
        with open(path, "w") as f:
            f.write(text)
        lines.append(f"{name}={path}")
    lines.append(f"REKOR_URL={tlogs[0]['baseUrl'].rstrip('/')}")
    return lines


def pod(ref):
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "differential", "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": ref}]},
    }, sort_keys=False)


def _request(method, url, data=None, headers=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as resp:
        return resp.status, dict(resp.headers), resp.read()


def _push_blob(base, repo, blob):
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    _, headers, _ = _request("POST", f"{base}/v2/{repo}/blobs/uploads/")
    location = headers.get("Location") or headers.get("location")
    if not location:
        raise CorpusError(f"{base}: a blob upload answered without a Location")
    if location.startswith("/"):
        location = base + location
    sep = "&" if "?" in location else "?"
    _request("PUT", f"{location}{sep}digest={digest}", blob, {"Content-Type": "application/octet-stream"})
    return digest


def _pem_certs_der(path):
    import base64
    with open(path) as f:
        text = f.read()
    return [base64.b64decode("".join(b.split()))
            for b in re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", text, re.S)]


def push_notation(registry, repo, subject, envelope_path, fmt, chain):
    """The signature manifest Notation pushes: an OCI image manifest with the
    Notary artifactType, the empty config, the envelope as its one layer, the
    signed image as its subject, and the chain's thumbprints annotated."""
    base = f"http://{registry}"
    _, headers, body = _request("GET", f"{base}/v2/{repo}/manifests/{subject}",
                                headers={"Accept": "application/vnd.oci.image.manifest.v1+json,"
                                                   "application/vnd.oci.image.index.v1+json"})
    subject_type = headers.get("Content-Type") or headers.get("content-type")
    with open(envelope_path, "rb") as f:
        envelope = f.read()
    env_digest = _push_blob(base, repo, envelope)
    config_digest = _push_blob(base, repo, EMPTY_CONFIG)
    thumbprints = [hashlib.sha256(der).hexdigest() for der in _pem_certs_der(chain)]
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": NOTARY_SIGNATURE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": config_digest,
                   "size": len(EMPTY_CONFIG)},
        "layers": [{"mediaType": ENVELOPE_TYPES[fmt], "digest": env_digest, "size": len(envelope)}],
        "subject": {"mediaType": subject_type, "digest": subject, "size": len(body)},
        "annotations": {"io.cncf.notary.x509chain.thumbprint#S256": json.dumps(thumbprints)},
    }, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    _request("PUT", f"{base}/v2/{repo}/manifests/{digest}", manifest,
             {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    return digest


SUMMARY = re.compile(r"pass: (\d+), fail: (\d+), warn: (\d+), error: (\d+), skip: (\d+)")


NOISE = re.compile(r"^(Warning: .* is deprecated and will be removed.*|Applying \d+ policy rule\(s\) to .*|-+|"
                   r"\*\*Info\*\* Multiple valid certificate chains found.*)$")


def kyverno_said(message):
    """Kyverno's answer without the lines every run prints: ClusterPolicy's
    deprecation notice (naming this run's temporary file), the count of rules
    applied, and cosign's note on choosing among certificate chains."""
    return "\n".join(line for line in message.splitlines() if line.strip() and not NOISE.match(line.strip()))


def kyverno_counts(result):
    m = SUMMARY.search(result["kyverno_message"])
    return tuple(int(x) for x in m.groups()) if m else None


def kyverno_verdict(result):
    """`kyverno apply --audit-warn` counts each rule's result. Kyverno's
    webhook blocks on a failed Enforce rule and, under the default
    failurePolicy Fail, on a rule that errs; an Audit rule's failure is a
    warning."""
    counts = kyverno_counts(result)
    if counts is None:
        return "error"
    passed, failed, warned, errored, skipped = counts
    if failed:
        return "deny"
    if errored:
        return "deny (rule error)"
    if warned:
        return "admit (warn)"
    if passed:
        return "admit"
    if skipped:
        return "admit (skip)"
    return "admit (no rule)"


def sigil_verdict(result):
    return {0: "admit", 3: "admit (warn)", 1: "deny"}.get(result["sigil_exit"], "error")


def admits(verdict):
    return verdict.startswith("admit")


# A warning or an error of `sigil policy convert` about a document ("FILE:
# warning: document 0 (...): ..."), not its closing count.
CONVERT_SAID = re.compile(r"^\S+: (warning|error): (document .*)$")


def report(corpus, reasons, results, meta):
    rows = []
    agree = 0
    unexplained = []
    for r in results:
        kv, sg = kyverno_verdict(r), sigil_verdict(r)
        same = "error" not in (kv, sg) and admits(kv) == admits(sg)
        agree += same
        reason = reasons.get((r["id"], r["image_name"]))
        if not same and not reason:
            unexplained.append(f"{r['id']} × {r['image_name']}")
        rows.append((r, kv, sg, same, reason))
    stale = [f"{k[0]} × {k[1]}" for k in reasons
             if not any((r["id"], r["image_name"]) == k and not same for r, _, _, same, _ in rows)]
    n = len(rows)
    tally = {}
    for _, kv, sg, _, _ in rows:
        tally[(kv, sg)] = tally.get((kv, sg), 0) + 1
    lines = [
        "# Conversion differential: Kyverno and `sigil policy convert`",
        "",
        "<!-- Written by bench/kyverno-differential.sh; do not edit by hand. -->",
        "",
        "Every row below is one run of both tools on one (policy, image) pair; nothing is filled in by hand except",
        "the reasons under *Disagreements* (bench/differential/kyverno/reasons.yaml). The policies are Kyverno",
        "ClusterPolicies and ImageValidatingPolicies (bench/differential/kyverno/), written with this run's",
        "registries, keys and Notary Project root. Kyverno judges each as written, with `kyverno apply` on a Pod",
        "running the image; sigil judges what `sigil policy convert` made of it, with `sigil policy test`.",
        "",
        f"- Command: `{meta['command']}`",
        f"- Date: {meta['date']}; machine: {meta['machine']}",
        f"- {meta['sigil_version']} (commit {meta['sigil_commit']}); Kyverno CLI {meta['kyverno_version']}",
        "- Images: cosign-signed and attested fixtures in olareg and docker-registry on 127.0.0.1"
        " (e2e/registry-fixtures.sh), keyless images signed through the testkit's Sigstore (its Fulcio, Rekor and"
        " CT log), and images signed with notation-go (the testkit's notation-signer, JWS and COSE). Kyverno"
        " ran with `HTTPS_PROXY`/`HTTP_PROXY="
        f"{meta['proxy']}`, where nothing listens, an empty `TUF_ROOT`, `HOME` and `DOCKER_CONFIG`, so that"
        f" anything it tried to reach off this machine failed at once; {meta.get('proxy_hits', '0')} of its"
        " answers mention that proxy.",
        "- Verdicts: Kyverno's webhook blocks a Pod when an Enforce rule fails and, under the default"
        " `failurePolicy: Fail`, when a rule errs (`deny (rule error)`); an Audit rule's failure is a warning"
        " (`kyverno apply --audit-warn`). sigil's are `sigil policy test --no-match allow`'s exit status (0 admit,"
        " 3 admit with a warning, 1 deny): Kyverno admits an image that no rule selects, or that only Audit rules"
        " select, which in sigil is `noMatchPolicy: allow`. For an ImageValidatingPolicy the CLI prints a failure"
        " as `failed as audit warning` whatever its `validationActions`, but counts it as a failure; these"
        " policies say `validationActions: [Deny]`, so the webhook denies.",
        "",
        f"**{n} pairs: {agree} agree, {n - agree} disagree.**",
        "",
        "| Kyverno | sigil | pairs |",
        "|---|---|---|",
    ]
    for (kv, sg), count in sorted(tally.items()):
        lines.append(f"| {kv} | {sg} | {count} |")
    lines += ["", "| # | policy | image | Kyverno | sigil | agree |", "|---|---|---|---|---|---|"]
    for i, (r, kv, sg, same, _) in enumerate(rows, 1):
        lines.append(f"| {i} | {r['id']} | {r['image_name']} | {kv} | {sg} | {'yes' if same else '**no**'} |")
    lines += ["", "## Disagreements", ""]
    if n == agree:
        lines.append("None.")
    for i, (r, kv, sg, same, reason) in enumerate(rows, 1):
        if same:
            continue
        lines += [
            f"### {i}. {r['id']} × {r['image_name']}: Kyverno {kv}, sigil {sg}",
            "",
            reason or "**No reason recorded yet** (bench/differential/kyverno/reasons.yaml).",
            "",
            f"- Kyverno: {pd.cell(kyverno_said(r['kyverno_message']) or '(no output)', 600)}",
            f"- sigil: {pd.cell(r['sigil_message'] or '(no output)', 600)}",
            "",
        ]
    lines += ["## What each tool said", "",
              "| # | Kyverno (exit, output) | sigil (exit, output) |", "|---|---|---|"]
    for i, (r, _, _, _, _) in enumerate(rows, 1):
        lines.append(f"| {i} | {r['kyverno_exit']}: {pd.cell(kyverno_said(r['kyverno_message']) or '-')} | "
                     f"{r['sigil_exit']}: {pd.cell(r['sigil_message'] or '-')} |")
    convert = {r["id"]: r.get("convert", "") for r in results}
    lines += ["", "## The pair sets", "",
              "What `sigil policy convert` reported: its warnings (where it knows sigil judges differently) and"
              " its errors (what it left out) are quoted. A keyless rule off the public-good Sigstore names that"
              " instance's log keys, which the conversion refuses (they belong in a TrustRoot); sigil then judged"
              " the rule as a user rewrites it after that error, without the keys, with the test Sigstore as the"
              " cluster's default TrustRoot.",
              "", "| policy | file | `sigil policy convert` said |", "|---|---|---|"]
    for e in corpus:
        said = [f"{m.group(1)}: {m.group(2)}"
                for m in map(CONVERT_SAID.match, convert.get(e["id"], "").splitlines()) if m]
        setup = "(the log keys left out, the default TrustRoot) " if e.get("sigil") == "trust-root" else ""
        lines.append(f"| {e['id']} | `bench/differential/kyverno/{e['policy']}` | "
                     f"{setup}{pd.cell(' / '.join(said), 700) if said else '-'} |")
    if stale:
        lines += ["", "Reasons recorded for pairs that agree in this run (stale): " + ", ".join(stale) + "."]
    return "\n".join(lines) + "\n", unexplained


def record(run, pair_id, source, name, ref, convert):
    out = pd.read_text(run + ".kyverno.stdout")
    err = pd.read_text(run + ".kyverno.stderr")
    return {
        "id": pair_id, "source": source, "image_name": name, "image": ref,
        "kyverno_exit": int(pd.read_text(run + ".kyverno.rc")),
        # Its verdict is on stdout (the rule results and the counts); stderr
        # holds its log lines, kept when something went wrong.
        "kyverno_message": "\n".join(x for x in (out, err[-2000:]) if x),
        "sigil_exit": int(pd.read_text(run + ".sigil.rc")),
        "sigil_message": "\n".join(
            x for x in (pd.read_text(run + ".sigil.stdout"), pd.read_text(run + ".sigil.stderr")) if x),
        "convert": pd.read_text(convert),
    }


META_KEYS = ("command", "date", "machine", "sigil_version", "sigil_commit", "kyverno_version", "proxy",
             "proxy_hits")


def check():
    corpus = load_corpus(os.path.join(KYV_DIR, "corpus.yaml"))
    reasons = pd.load_reasons(os.path.join(KYV_DIR, "reasons.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        fake_pem = pd.pem("PUBLIC KEY", b"\x30" * 91)
        fixtures = {"OLAREG": "127.0.0.1:5001", "DOCKREG": "127.0.0.1:5002", "REKOR_URL": "http://rekor.example"}
        for k in PEM_NAMES:
            p = os.path.join(tmp, k)
            with open(p, "w") as f:
                f.write(fake_pem)
            fixtures[k] = p
        for name in {name for e in corpus for name in e["images"]}:
            fixtures[name] = f"127.0.0.1:5001/test/app@sha256:{'0' * 64}"
        for e in corpus:
            text = render(e, fixtures)
            assert not re.search(r"@[A-Z0-9_]+@", text), (e["id"], text)
            for d in yaml.safe_load_all(text):
                assert d["apiVersion"].split("/")[0] in ("kyverno.io", "policies.kyverno.io"), e["id"]
                assert "127.0.0.1:500" in yaml.safe_dump(d), e["id"]
            assert "BEGIN PUBLIC KEY" in text, e["id"]
            for_sigil = render(e, fixtures, True)
            if e.get("sigil") == "trust-root":
                assert "pubkey" in text and "pubkey" not in for_sigil, e["id"]
                assert "http://rekor.example" in for_sigil, e["id"]
            else:
                assert for_sigil == text, e["id"]
        for (pair_id, image) in reasons:
            entry = next((e for e in corpus if e["id"] == pair_id), None)
            assert entry and image in entry["images"], f"reasons.yaml: {pair_id} has no image {image}"
        import base64
        der = base64.b64encode(b"\x30\x03\x02\x01\x01").decode()
        lines = sigstore({
            "certificateAuthorities": [{"certChain": {"certificates": [{"rawBytes": der}, {"rawBytes": der}]}}],
            "tlogs": [{"baseUrl": "https://log2025-1.rekor.example", "publicKey": {"rawBytes": der}},
                      {"baseUrl": "http://rekor.example/", "publicKey": {"rawBytes": der}}],
            "ctlogs": [{"baseUrl": "http://ctfe.example", "publicKey": {"rawBytes": der}}],
        }, os.path.join(tmp, "sigstore"))
        got = dict(line.split("=", 1) for line in lines)
        assert got["REKOR_URL"] == "http://rekor.example", got
        with open(got["FULCIO_ROOTS"]) as f:
            assert f.read().count("BEGIN CERTIFICATE") == 2
        with open(got["REKOR_KEY"]) as f:
            assert f.read().startswith("-----BEGIN PUBLIC KEY-----")
        assert yaml.safe_load(pod("127.0.0.1:5001/a@sha256:00"))["spec"]["containers"][0]["image"] \
            == "127.0.0.1:5001/a@sha256:00"
        meta = {k: "x" for k in META_KEYS}
        line = "pass: {}, fail: {}, warn: {}, error: {}, skip: {}"
        e = corpus[0]
        results = [
            {"id": e["id"], "image_name": "A", "kyverno_exit": 1, "kyverno_message": line.format(0, 1, 0, 0, 0),
             "sigil_exit": 1, "sigil_message": "no"},
            {"id": e["id"], "image_name": "B", "kyverno_exit": 0, "kyverno_message": line.format(0, 0, 1, 0, 0),
             "sigil_exit": 3, "sigil_message": "w"},
            {"id": e["id"], "image_name": "C", "kyverno_exit": 1, "kyverno_message": line.format(0, 0, 0, 1, 0),
             "sigil_exit": 0, "sigil_message": "a|b"},
            {"id": e["id"], "image_name": "D", "kyverno_exit": 2, "kyverno_message": "panic",
             "sigil_exit": 1, "sigil_message": ""},
        ]
        assert [kyverno_verdict(r) for r in results] == ["deny", "admit (warn)", "deny (rule error)", "error"]
        noisy = ("Warning: /tmp/p.yaml: kyverno.io/v1 ClusterPolicy is deprecated and will be removed in a future"
                 " release; migrate\n\nApplying 3 policy rule(s) to 1 resource(s)...\nfailed\n"
                 + line.format(0, 1, 0, 0, 0))
        assert kyverno_said(noisy) == "failed\n" + line.format(0, 1, 0, 0, 0), kyverno_said(noisy)
        for r in results:
            r["convert"] = ("/tmp/p.yaml: changed: document 0 (x): y\n"
                            "/tmp/p.yaml: warning: document 0 (x): skipped\nerror: 1 item(s) need attention")
        text, unexplained = report(corpus, {(e["id"], "C"): "because", (e["id"], "D"): "so"}, results, meta)
        assert "| warning: document 0 (x): skipped |" in text, text
        assert "**4 pairs: 2 agree, 2 disagree.**" in text, text
        assert "because" in text and "a\\|b" in text and unexplained == [], (text, unexplained)
        _, unexplained = report(corpus, {}, results, meta)
        assert unexplained == [f"{e['id']} × C", f"{e['id']} × D"], unexplained
    print(f"kyverno-differential: {len(corpus)} pair sets render; {len(reasons)} reasons; report renders",
          file=sys.stderr)


def main(argv):
    try:
        if argv[:1] == ["--check"]:
            check()
        elif argv[:1] == ["pairs"] and len(argv) == 3:
            for p in pairs(load_corpus(argv[1]), pd.read_fixtures(argv[2])):
                print("\t".join(p))
        elif argv[:1] in (["render"], ["render-sigil"]) and len(argv) == 4:
            entry = next((e for e in load_corpus(argv[1]) if e["id"] == argv[2]), None)
            if entry is None:
                raise CorpusError(f"no pair set {argv[2]} in the corpus")
            print(render(entry, pd.read_fixtures(argv[3]), argv[0] == "render-sigil"), end="")
        elif argv[:1] == ["sigstore"] and len(argv) == 3:
            with open(argv[1]) as f:
                print("\n".join(sigstore(json.load(f), argv[2])))
        elif argv[:1] == ["pod"] and len(argv) == 2:
            print(pod(argv[1]), end="")
        elif argv[:1] == ["push-notation"] and len(argv) == 7:
            print(push_notation(*argv[1:]))
        elif argv[:1] == ["record"] and len(argv) == 7:
            print(json.dumps(record(*argv[1:])))
        elif argv[:1] == ["meta"] and len(argv) == 1 + len(META_KEYS):
            print(json.dumps(dict(zip(META_KEYS, argv[1:]))))
        elif argv[:1] == ["report"] and len(argv) == 5:
            corpus = load_corpus(argv[1])
            with open(argv[3]) as f:
                results = [json.loads(line) for line in f if line.strip()]
            with open(argv[4]) as f:
                meta = json.load(f)
            text, unexplained = report(corpus, pd.load_reasons(argv[2]), results, meta)
            print(text, end="")
            for u in unexplained:
                print(f"kyverno-differential: no reason recorded for the disagreement {u}", file=sys.stderr)
        else:
            sys.exit(__doc__)
    except (CorpusError, OSError, KeyError, ValueError, yaml.YAMLError) as e:
        sys.exit(f"kyverno-differential: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])

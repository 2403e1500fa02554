#!/usr/bin/env python3
"""A SLSA v1 provenance predicate for sigil's image, built in GitHub Actions.

What built it (the workflow, its run), from what (the commit, and each
Debian package of the base with the SHA-256 of its .deb), and when. The
release workflow signs it as a cosign attestation (`--type slsaprovenance1`),
so a policy can require images built by this repository's release workflow
from a tag.

Usage (in the workflow, after `make image`):
  scripts/provenance.py --debs "$(scripts/fetch-debs.sh libc6 ...)" > provenance.json
Reads GITHUB_SERVER_URL, GITHUB_REPOSITORY, GITHUB_REPOSITORY_ID,
GITHUB_REPOSITORY_OWNER_ID, GITHUB_SHA, GITHUB_REF, GITHUB_WORKFLOW_REF,
GITHUB_EVENT_NAME, GITHUB_RUN_ID, GITHUB_RUN_ATTEMPT, RUNNER_ENVIRONMENT.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

BUILD_TYPE = "https://actions.github.io/buildtypes/workflow/v1"
REQUIRED = (
    "GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA", "GITHUB_REF",
    "GITHUB_WORKFLOW_REF", "GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT",
)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def predicate(env: dict[str, str], debs: list[str], started: str, finished: str) -> dict:
    missing = [k for k in REQUIRED if not env.get(k)]
    if missing:
        raise ValueError(f"not in a GitHub Actions run: {', '.join(missing)} unset")
    server, repo = env["GITHUB_SERVER_URL"], env["GITHUB_REPOSITORY"]
    # GITHUB_WORKFLOW_REF: owner/repo/.github/workflows/release.yaml@refs/tags/v1.2.3
    workflow_path = env["GITHUB_WORKFLOW_REF"].split("@", 1)[0].removeprefix(repo + "/")
    dependencies = [{
        "uri": f"git+{server}/{repo}@{env['GITHUB_REF']}",
        "digest": {"gitCommit": env["GITHUB_SHA"]},
    }]
    for path in sorted(debs):
        dependencies.append({
            "name": os.path.basename(path),
            "digest": {"sha256": sha256_file(path)},
        })
    run = f"{server}/{repo}/actions/runs/{env['GITHUB_RUN_ID']}/attempts/{env['GITHUB_RUN_ATTEMPT']}"
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "workflow": {"ref": env["GITHUB_REF"], "repository": f"{server}/{repo}", "path": workflow_path},
            },
            "internalParameters": {
                "github": {
                    "event_name": env.get("GITHUB_EVENT_NAME", ""),
                    "repository_id": env.get("GITHUB_REPOSITORY_ID", ""),
                    "repository_owner_id": env.get("GITHUB_REPOSITORY_OWNER_ID", ""),
                    "runner_environment": env.get("RUNNER_ENVIRONMENT", ""),
                },
            },
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {"id": f"{server}/{repo}/{workflow_path}@{env['GITHUB_REF']}"},
            "metadata": {"invocationId": run, "startedOn": started, "finishedOn": finished},
        },
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="provenance.py", description=__doc__.splitlines()[0])
    p.add_argument("--debs", default="", help="newline-separated .deb paths of the image's base")
    p.add_argument("--started", default="", help="RFC 3339 start of the build")
    p.add_argument("--finished", default="", help="RFC 3339 end of the build")
    args = p.parse_args(argv)
    debs = [d for d in args.debs.splitlines() if d.strip()]
    try:
        doc = predicate(dict(os.environ), debs, args.started, args.finished)
    except (OSError, ValueError) as e:
        print(f"provenance: error: {e}", file=sys.stderr)
        return 1
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

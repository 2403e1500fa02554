#!/usr/bin/env bash
# Runs shellcheck over every shell script in the repository and over the `run:`
# steps of the GitHub workflows (each step checked as a bash script), so the
# kind workflow, which cannot run on machines without Docker, stays correct
# by reading.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PATH="$(scripts/install-tools.sh shellcheck):$PATH"

mapfile -t scripts < <(git ls-files '*.sh' .ci/run)
shellcheck -x "${scripts[@]}"

steps=$(mktemp -d)
trap 'rm -rf "$steps"' EXIT
python3 - "$steps" .github/workflows/*.yaml <<'PY'
import pathlib, sys, yaml
out = pathlib.Path(sys.argv[1])
for wf in sys.argv[2:]:
    doc = yaml.safe_load(open(wf))
    if not isinstance(doc, dict) or "jobs" not in doc:
        sys.exit(f"{wf}: not a workflow (no jobs)")
    for job_name, job in doc["jobs"].items():
        if "runs-on" not in job or not job.get("steps"):
            sys.exit(f"{wf}: job {job_name} needs runs-on and steps")
        for i, step in enumerate(job["steps"]):
            if "run" in step:
                name = f"{pathlib.Path(wf).stem}.{job_name}.{i}.sh"
                (out / name).write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + step["run"])
            elif "uses" not in step:
                sys.exit(f"{wf}: job {job_name} step {i} has neither run nor uses")
PY
shopt -s nullglob
extracted=("$steps"/*.sh)
if [ ${#extracted[@]} -gt 0 ]; then
  # GitHub expressions (${{ ... }}) are not shell; none may appear in run steps.
  # shellcheck disable=SC2016 # a literal GitHub expression opener
  if grep -lF '${{' "${extracted[@]}"; then
    echo "lint-shell: a workflow run step uses \${{ }}; pass it through env instead" >&2
    exit 1
  fi
  shellcheck "${extracted[@]}"
fi
echo "lint-shell: ${#scripts[@]} scripts and ${#extracted[@]} workflow steps clean"

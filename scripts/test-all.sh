#!/usr/bin/env bash
# The whole test suite on a fresh machine: makes a private venv with tox, runs every tox env
# (two at a time), and prints a closing "N passed, N failed, N skipped" line summed over the
# envs' JUnit reports. Exit status is tox's.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${TOX_VENV:-.tox-runner}
if [ ! -x "$VENV/bin/tox" ]; then
    "$PY" -m venv "$VENV" && "$VENV/bin/python" -m pip install -q --disable-pip-version-check 'tox>=4.11,<5' || exit 1
fi
ENVS=${TOX_ENVS:-numpy,torch,jax,strict,plugins,lint,type,docs}
"$VENV/bin/tox" run-parallel -p "${TOX_PARALLEL:-2}" --parallel-no-spinner -e "$ENVS" "$@"
status=$?
"$VENV/bin/python" - <<'PY'
import glob
import xml.etree.ElementTree as ET

totals = {"passed": 0, "failed": 0, "skipped": 0}
for path in sorted(glob.glob(".tox/*/junit*.xml")):
    root = ET.parse(path).getroot()
    for suite in root.iter("testsuite"):
        tests = int(suite.get("tests", 0))
        failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        totals["passed"] += tests - failed - skipped
        totals["failed"] += failed
        totals["skipped"] += skipped
        print(f"{path}: {tests - failed - skipped} passed, {failed} failed, {skipped} skipped")
print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
PY
exit $status

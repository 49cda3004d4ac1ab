#!/usr/bin/env bash
# The whole test suite on a fresh machine: makes a private venv with tox, runs every tox env
# (two at a time; a line as each starts and finishes, and every 30 s while they run), then a
# table of this run's envs and a closing "N passed, N failed, N skipped" line counted from the
# JUnit reports this run wrote. Exit status: 0 only if every env passed.
#   TOX_ENVS=numpy,lint bash scripts/test-all.sh      # some envs only
#   TOX_PARALLEL=1 bash scripts/test-all.sh            # one at a time
#   bash scripts/test-all.sh -- -k rotary              # arguments after -- go to pytest
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${TOX_VENV:-.tox-runner}
if [ ! -x "$VENV/bin/tox" ]; then
    "$PY" -m venv "$VENV" && "$VENV/bin/python" -m pip install -q --disable-pip-version-check 'tox>=4.11,<5' || exit 1
fi
# Longest first, so two at a time finish together; mypy (the `type` env) runs in the plugins env.
ENVS=${TOX_ENVS:-jax,torch,plugins,flax,keras,packaging,numpy,strict,docs,lint}
exec "$VENV/bin/python" scripts/run_envs.py "$VENV/bin/tox" "$ENVS" "${TOX_PARALLEL:-2}" "$@"

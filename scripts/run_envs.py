"""Run tox envs a few at a time, say as each starts and finishes, and count only this run.

Called by ``scripts/test-all.sh`` with the tox runner's Python: ``run_envs.py TOX ENVS PARALLEL
[-- tox args]``. Each env runs as its own ``tox run -e ENV`` (tox locks the shared packaging env),
with its output in ``.tox/_logs/ENV.log``; a line is printed when an env starts, every 30 s while
envs run (with pytest's percentage), and when it finishes, with its counts from the JUnit reports
it wrote in this run (older reports are deleted first, so nothing stale is counted). The closing
table has every env of this run, with its wall time and the CPU time of its processes (tox,
pip, pytest and what they started: on a shared machine wall time says more about the load than
about the env), and the load average at the start and the end; the last line sums them as
``N passed, N failed, N skipped``, where an env that failed without a failing test (lint, type,
docs, an install error) counts as one failure.

Order: longest first, so that the lanes end together. An env's wall time is kept in
``.tox/_logs/times.json`` after each run; envs with a kept time run in decreasing order of it,
those without one (a fresh clone: all) first and in the order given.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

LOGS = Path(".tox/_logs")
TIMES = LOGS / "times.json"
TICK = 30.0
NEED_GB = 8.0


@dataclass
class Env:
    name: str
    proc: subprocess.Popen[bytes] | None = None
    start: float = 0.0
    start_wall: float = 0.0
    end: float = 0.0
    cpu: float = 0.0
    status: int | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return LOGS / f"{self.name}.log"

    def reports(self) -> list[str]:
        return sorted(glob.glob(f".tox/{self.name}/junit*.xml"))


def clock(t0: float) -> str:
    s = int(time.monotonic() - t0)
    return f"[{s // 60:02d}:{s % 60:02d}]"


def progress(env: Env) -> str:
    """pytest's last ``[ NN%]`` in the env's log, or the last tox phase."""
    try:
        text = env.log.read_bytes()[-20000:].decode(errors="replace")
    except OSError:
        return ""
    pct = re.findall(r"\[\s*(\d+)%\]", text)
    if pct:
        return f"tests {pct[-1]}%"
    phase = re.findall(r"^\S+: (install_deps|install_package|commands\[\d+\]|packaging)", text,
                       flags=re.M)
    return phase[-1].replace("_", " ") if phase else "setting up"


def count(env: Env) -> dict[str, int]:
    """Test counts from the env's JUnit reports of this run; a report that cannot be read (cut
    short, e.g. when the disk filled) counts as one failed test and is named, not a crash."""
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for path in env.reports():
        try:
            if os.path.getmtime(path) < env.start_wall:
                continue
            suites = list(ET.parse(path).getroot().iter("testsuite"))
        except (ET.ParseError, OSError) as err:
            print(f"    ! {env.name}: cannot read the test report {path}: {err}", flush=True)
            totals["failed"] += 1
            continue
        for suite in suites:
            tests = int(suite.get("tests", 0))
            failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skipped = int(suite.get("skipped", 0))
            totals["passed"] += tests - failed - skipped
            totals["failed"] += failed
            totals["skipped"] += skipped
    return totals


def describe(env: Env) -> str:
    """The env's test counts, or for a tool env (lint, type, docs) its last line of output
    before tox's own summary, e.g. ``All checks passed!``."""
    c = env.counts
    if env.reports() and sum(c.values()):
        return f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped"
    try:
        lines = env.log.read_text(errors="replace").splitlines()
    except OSError:
        return "no output"
    said = [ln.strip() for ln in lines if ln.strip() and not re.match(
        rf"^\s*({re.escape(env.name)}: |congratulations|evaluation failed)", ln)]
    return said[-1][:90] if said else "no output"


def check_disk() -> None:
    """Warn before starting when the disk is short: a full run writes about 6.5 GB of envs (each
    framework env has its own PyTorch or JAX), and a disk that fills mid-run fails envs with
    empty logs and cut reports, which read like test failures."""
    free = shutil.disk_usage(".").free / 2**30
    if free < NEED_GB:
        print(f"WARNING: {free:.1f} GiB free on this disk; a full run needs about {NEED_GB:.0f} "
              f"GiB (free space, e.g. old clones' .tox folders, first)", flush=True)


def kept_times() -> dict[str, float]:
    """Each env's wall time in the last run that ran it (empty if none or unreadable)."""
    try:
        data = json.loads(TIMES.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))} \
        if isinstance(data, dict) else {}


def longest_first(names: list[str], times: dict[str, float]) -> list[str]:
    """``names`` with the kept ones in decreasing order of their time, after the others (whose
    time is unknown) in the order given."""
    return sorted(names, key=lambda n: (n in times, -times.get(n, 0.0)))


def keep_times(envs: list[Env]) -> None:
    times = kept_times()
    times.update({e.name: round(e.end - e.start, 1) for e in envs if e.status == 0})
    TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")


def reap(env: Env) -> int | None:
    """The env's exit status once it has finished (None before), with the CPU time of its
    processes (its own and every descendant it waited for) from ``wait4``."""
    assert env.proc is not None
    pid, status, usage = os.wait4(env.proc.pid, os.WNOHANG)
    if pid == 0:
        return None
    env.proc.returncode = os.waitstatus_to_exitcode(status)
    env.cpu = usage.ru_utime + usage.ru_stime
    return env.proc.returncode


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str]) -> int:
    tox, names, parallel = argv[0], [n for n in argv[1].split(",") if n], int(argv[2])
    extra = argv[3:]
    check_disk()
    LOGS.mkdir(parents=True, exist_ok=True)
    envs = [Env(n) for n in longest_first(names, kept_times())]
    for env in envs:
        for path in env.reports():
            os.remove(path)
    t0 = time.monotonic()
    load0 = load()
    print(f"{clock(t0)} running {len(envs)} tox envs, {parallel} at a time: "
          f"{', '.join(e.name for e in envs)}; logs in {LOGS}/; load average {load0}", flush=True)
    waiting: list[Env] = list(envs)
    running: list[Env] = []
    last_tick = time.monotonic()
    while waiting or running:
        while waiting and len(running) < parallel:
            env = waiting.pop(0)
            env.start = time.monotonic()
            env.start_wall = time.time() - 1
            with env.log.open("wb") as log:
                env.proc = subprocess.Popen([tox, "run", "-e", env.name, *extra], stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            running.append(env)
            print(f"{clock(t0)} ▶ {env.name} started", flush=True)
        time.sleep(0.5)
        for env in list(running):
            rc = reap(env)
            if rc is None:
                continue
            env.end, env.status = time.monotonic(), rc
            env.counts = count(env)
            running.remove(env)
            mark = "✔" if rc == 0 else "✘"
            print(f"{clock(t0)} {mark} {env.name} {'ok' if rc == 0 else f'FAILED (exit {rc})'} "
                  f"in {env.end - env.start:.0f} s ({env.cpu:.0f} s CPU): {describe(env)}",
                  flush=True)
            if rc != 0:
                tail = env.log.read_text(errors="replace").splitlines()[-40:]
                if not tail:
                    tail = [f"(empty log; {shutil.disk_usage('.').free / 2**30:.1f} GiB free)"]
                print("\n".join(f"    | {line}" for line in tail), flush=True)
        if running and time.monotonic() - last_tick >= TICK:
            last_tick = time.monotonic()
            now = ", ".join(f"{e.name} ({time.monotonic() - e.start:.0f} s, {progress(e)})"
                            for e in running)
            print(f"{clock(t0)} … running: {now}", flush=True)

    print(f"\n{'env':<10} {'result':<8} {'time':>7} {'CPU':>7}  tests")
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for env in envs:
        result = "ok" if env.status == 0 else "FAILED"
        print(f"{env.name:<10} {result:<8} {env.end - env.start:>6.0f}s {env.cpu:>6.0f}s  "
              f"{describe(env)}")
        for k in totals:
            totals[k] += env.counts.get(k, 0)
        if env.status != 0 and not env.counts.get("failed"):
            totals["failed"] += 1
    keep_times(envs)
    print(f"wall time {time.monotonic() - t0:.0f} s, CPU {sum(e.cpu for e in envs):.0f} s "
          f"(on {os.cpu_count()} CPUs; load average {load0} at the start, {load()} at the end)")
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 0 if all(e.status == 0 for e in envs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

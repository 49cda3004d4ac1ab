"""The distribution as the core sees it: the entry point and hook, the kernel's attributes and
status, the ``PEREGISTRY_NATIVE`` switch, the typing files, and (where the installed core has
it) the core's own ``check_rotation_kernel``."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata, resources

import numpy as np
import pytest

import peregistry_rotary_c
from peregistry_rotary_c import CRotationKernel, plugin


def test_entry_point_and_hook() -> None:
    eps = [e for e in metadata.entry_points(group="peregistry") if e.name == "peregistry-rotary-c"]
    assert len(eps) == 1 and eps[0].value == "peregistry_rotary_c.plugin"
    assert eps[0].load() is plugin
    kernels = plugin.peregistry_rotation_kernels()
    assert [type(k) for k in kernels] == [CRotationKernel]
    assert metadata.version("peregistry-rotary-c") == peregistry_rotary_c.__version__ == "0.1.0"


def test_kernel_attributes(kernel: CRotationKernel) -> None:
    assert kernel.name == "c-rotary" and kernel.priority == 0 and kernel.ulps == 0
    assert kernel.status() == "active"
    assert "c-rotary" in repr(kernel)
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="layout: expected 'half' or 'interleaved', got 'diagonal'"):
        kernel.rotate(x, x[:, :4], x[:, :4], layout="diagonal")
    assert kernel.rotate(object(), None, None, layout="half") is None  # not an array it knows


def test_typing_files_are_shipped() -> None:
    files = resources.files("peregistry_rotary_c")
    assert files.joinpath("py.typed").is_file()
    assert "def rotate(" in files.joinpath("_rotary.pyi").read_text()


_STATUS = ("import numpy as np, warnings; warnings.simplefilter('default');"
           "from peregistry_rotary_c import CRotationKernel; k = CRotationKernel();"
           "x = np.ones((2, 8), np.float32);"
           "print(k.status()); print(k.rotate(x, x[:, :4], x[:, :4], layout='half') is None)")


def _run(value: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PEREGISTRY_NATIVE=value)
    return subprocess.run([sys.executable, "-c", _STATUS], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("value", "status", "declines"), [
    ("0", "off (PEREGISTRY_NATIVE=0)", True), ("off", "off (PEREGISTRY_NATIVE=off)", True),
    ("1", "active", False), ("", "active", False),
    ("maybe", "off (PEREGISTRY_NATIVE='maybe' is not one of 1/0, true/false, yes/no, on/off)", True),
])
def test_the_native_switch(value: str, status: str, declines: bool) -> None:
    r = _run(value)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [status, str(declines)]
    if value == "maybe":  # a typo is said, not silently taken
        assert "RuntimeWarning" in r.stderr and "'maybe'" in r.stderr


def test_not_built_is_a_status_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from peregistry_rotary_c import kernel as kmod

    for name in ("loaded", "module", "status"):  # (restored afterwards)
        monkeypatch.setattr(kmod.STATE, name, getattr(kmod.STATE, name))
    kmod.STATE.loaded = False
    monkeypatch.setitem(sys.modules, "peregistry_rotary_c._rotary", None)  # import fails
    monkeypatch.delenv("PEREGISTRY_NATIVE", raising=False)
    k = CRotationKernel()
    assert k.status().startswith("not built (")
    x = np.ones((2, 8), np.float32)
    assert k.rotate(x, x[:, :4], x[:, :4], layout="half") is None


def test_the_core_lists_the_kernel() -> None:
    import peregistry as per

    kernels = getattr(per.rope, "kernels", None)
    if kernels is None:
        pytest.skip("this peregistry has no rotation kernels (per.rope.kernels)")
    mine = [k for k in kernels() if k.name == "c-rotary"]
    assert len(mine) == 1 and mine[0].status == "active", mine


def test_the_core_check_passes_the_kernel(kernel: CRotationKernel) -> None:
    """peregistry.testing.check_rotation_kernel on NumPy (and torch, which takes about two
    minutes with its compiled checks, with PEREGISTRY_RC_CHECK_TORCH=1)."""
    try:
        from peregistry.testing import check_rotation_kernel
    except ImportError:
        pytest.skip("this peregistry has no check_rotation_kernel")
    backends = "numpy,torch" if os.environ.get("PEREGISTRY_RC_CHECK_TORCH") == "1" else "numpy"
    report = check_rotation_kernel(kernel, backends=backends)
    assert report.ok, report

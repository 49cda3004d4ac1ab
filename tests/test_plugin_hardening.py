"""Hostile and careless plugins, as real installed distributions (the ``make_dist`` fixture):
a hook written as a generator that raises part-way, a module calling ``sys.exit`` at import or in
a hook, encoder names that would forge rows of ``peregistry list`` or hide from the command
line, and plugin strings with newlines. Each is isolated: the plugin is shown broken with its
error, every other encoder keeps working.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import peregistry as per
from peregistry.registry import Registry

pytestmark = pytest.mark.backend_free  # plugins' strings and imports, on NumPy

SWITCHES = ("PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD", "PEREGISTRY_LOAD_PLUGINS",
            "PEREGISTRY_DISABLED_PLUGINS")

ENCODER_CLASS = """
import peregistry as per

def make(name):
    class Enc(per.AbsoluteEncoder):
        \"\"\"A test encoder.\"\"\"
        dim = per.Option(int)

        def _encode(self, positions, *, params, ctx):
            return ctx.xp.zeros((*positions.shape, self.dim), dtype=ctx.wide)

    Enc.name = name
    return Enc
"""

GOOD = ENCODER_CLASS + """
@per.hookimpl
def peregistry_encoders():
    return [make("still-good")]
"""


def run_fresh(site: Path, *args: str, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    """``python <args>`` in a fresh process that sees the distributions in ``site``."""
    base = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    base["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False,
                          env={**base, **(env or {})}, timeout=300)


# -- item 10: a generator hook that raises part-way ----------------------------------------------
GENERATOR = ENCODER_CLASS + """
@per.hookimpl
def peregistry_encoders():
    yield make("gen-first")
    raise RuntimeError("generator broke half-way")
    yield make("gen-second")
"""


def test_generator_hook_raising_part_way_is_isolated(make_dist: Any) -> None:
    make_dist("pe-generator", {"pe_generator": GENERATOR}, {"gen": "pe_generator"}, version="0.2")
    make_dist("pe-good", {"pe_good": GOOD}, {"good": "pe_good"})
    reg = Registry()
    rows = reg.list_encoders()  # no longer raises
    bad = [r for r in rows if r.plugin.distribution == "pe-generator"]
    assert len(bad) == 1 and bad[0].status == "error" and bad[0].name is None
    assert bad[0].error == ("hook peregistry_encoders() raised RuntimeError: "
                            "generator broke half-way")
    assert reg.get_encoder("still-good", dim=2).name == "still-good"
    assert reg.get_encoder("sinusoidal", dim=4).name == "sinusoidal"
    for name in ("gen-first", "gen-second"):  # a hook that raised provides nothing
        with pytest.raises(per.EncoderNotFoundError) as info:
            reg.get_encoder(name, dim=2)
        assert "pe-generator 0.2: hook peregistry_encoders() raised RuntimeError: generator " \
               "broke half-way" in str(info.value)


# -- item 11: sys.exit at import and in a hook ---------------------------------------------------
EXITS_AT_IMPORT = "import sys\nsys.exit(3)\n"

EXITS_IN_HOOK = ENCODER_CLASS + """
import sys

@per.hookimpl
def peregistry_encoders():
    sys.exit("no encoders today")
"""


@pytest.fixture
def exiting_site(make_dist: Any) -> Path:
    make_dist("pe-exit-import", {"pe_exit_import": EXITS_AT_IMPORT}, {"exit": "pe_exit_import"})
    make_dist("pe-exit-hook", {"pe_exit_hook": EXITS_IN_HOOK}, {"exit-hook": "pe_exit_hook"})
    info = make_dist("pe-good", {"pe_good": GOOD}, {"good": "pe_good"})
    return info.parent


def test_sys_exit_at_import_or_in_a_hook_is_isolated_in_process(exiting_site: Path) -> None:
    reg = Registry()
    rows = {r.plugin.distribution: r for r in reg.list_encoders() if r.name is None}
    assert rows["pe-exit-import"].status == "error"
    assert rows["pe-exit-import"].error == \
        'plugin "pe_exit_import" called sys.exit(3) while importing'
    assert rows["pe-exit-hook"].error == \
        "hook peregistry_encoders() called sys.exit('no encoders today')"
    assert reg.get_encoder("still-good", dim=2).name == "still-good"


def test_sys_exit_at_import_does_not_kill_the_cli_or_list_encoders(exiting_site: Path) -> None:
    out = run_fresh(exiting_site, "-m", "peregistry", "list")
    assert out.returncode == 0, out.stderr
    assert 'plugin "pe_exit_import" called sys.exit(3) while importing' in out.stdout
    assert "called sys.exit('no encoders today')" in out.stdout
    assert "still-good" in out.stdout and "sinusoidal" in out.stdout
    out = run_fresh(exiting_site, "-c", textwrap.dedent("""
        import peregistry as per
        rows = per.list_encoders()
        print(sorted(r.plugin.distribution for r in rows if r.status == "error"))
        print(per.get_encoder("still-good", dim=2).name)
        try:
            per.get_encoder("exit-encoder")
        except per.EncoderNotFoundError as exc:
            print(exc)
    """))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "['pe-exit-hook', 'pe-exit-import']"
    assert lines[1] == "still-good"
    assert "pe-exit-import 1.0: plugin \"pe_exit_import\" called sys.exit(3) while importing" \
        in lines[2]


def test_keyboard_interrupt_in_a_plugin_is_not_swallowed(make_dist: Any) -> None:
    make_dist("pe-interrupt", {"pe_interrupt": "raise KeyboardInterrupt\n"},
              {"interrupt": "pe_interrupt"})
    with pytest.raises(KeyboardInterrupt):
        Registry().list_encoders()


def test_a_conflict_names_the_builtin_first_whatever_the_order_of_sys_path(make_dist: Any) -> None:
    make_dist("aaa-pe", {"aaa_pe": ENCODER_CLASS + """
@per.hookimpl
def peregistry_encoders():
    return [make("sinusoidal")]
"""}, {"aaa": "aaa_pe"})  # on sys.path before the built-ins
    with pytest.raises(per.PluginConflictError,
                       match=f"peregistry {per.__version__} and aaa-pe 1.0"):
        Registry().get_encoder("sinusoidal", dim=4)


# -- item 12: encoder names, and plugin strings in `peregistry list` -----------------------------
BAD_NAMES = ENCODER_CLASS + """
@per.hookimpl
def peregistry_encoders():
    return [make("-dash"), make("two words"), make("tab\\tname"), make("bell\\x07"),
            make("fine-name")]
"""

FORGER = ENCODER_CLASS + """
@per.hookimpl
def peregistry_encoders():
    return [make("x\\nforged-name  absolute  peregistry 0.1.0  ok")]
"""

FORGED_ERROR = ENCODER_CLASS + """
@per.hookimpl
def peregistry_encoders():
    raise RuntimeError("bad\\nforged-error  absolute  peregistry 0.1.0  ok")
"""

FORGED_SUMMARY = ENCODER_CLASS + """
enc = make("summary-forger")
enc.summary = "first\\nforged-summary  absolute  peregistry 0.1.0  ok"

@per.hookimpl
def peregistry_encoders():
    return [enc]
"""


def test_invalid_encoder_names_make_their_plugin_broken_naming_it(make_dist: Any) -> None:
    make_dist("pe-bad-names", {"pe_bad_names": BAD_NAMES}, {"bad": "pe_bad_names"})
    reg = Registry()
    rows = [r for r in reg.list_encoders() if r.plugin.distribution == "pe-bad-names"]
    assert [r.name for r in rows] == ["fine-name"]  # the valid one is kept, shown broken
    error = rows[0].error or ""
    assert rows[0].status == "error"
    for shown in ("'-dash' starts with '-'", "'two words' has whitespace",
                  r"'tab\tname' has whitespace", r"'bell\x07' has whitespace or unprintable"):
        assert shown in error, error
    with pytest.raises(per.EncoderNotFoundError) as info:
        reg.get_encoder("-dash")
    assert "pe-bad-names 1.0: hook peregistry_encoders() returned make.<locals>.Enc, whose encoder " \
           "name '-dash' starts with '-'" in str(info.value)
    assert reg.get_encoder("sinusoidal", dim=4).name == "sinusoidal"


def test_in_process_plugins_get_the_same_name_check() -> None:
    class Enc(per.AbsoluteEncoder):
        """Test."""

        name = "new\nline"
        dim = per.Option(int)

    class Plugin:
        @per.hookimpl
        def peregistry_encoders(self) -> Any:
            return [Enc]

    reg = Registry(entry_points=False)
    reg.register(Plugin(), name="liner")
    (row,) = reg.list_encoders()
    assert row.status == "error" and row.name is None and row.plugin.name == "liner"
    assert r"'new\nline' has whitespace" in (row.error or "")


def test_plugin_strings_cannot_forge_rows_of_peregistry_list(make_dist: Any) -> None:
    make_dist("pe-forger", {"pe_forger": FORGER}, {"forger": "pe_forger"})
    make_dist("pe-forged-error", {"pe_forged_error": FORGED_ERROR}, {"ferr": "pe_forged_error"})
    info = make_dist("pe-forged-summary", {"pe_forged_summary": FORGED_SUMMARY},
                     {"fsum": "pe_forged_summary"})
    out = run_fresh(info.parent, "-m", "peregistry", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert not [ln for ln in lines if ln.startswith("forged")], out.stdout
    assert r"bad\nforged-error" in out.stdout  # the error is kept, escaped onto its line
    assert r"'x\nforged-name" in out.stdout
    out = run_fresh(info.parent, "-m", "peregistry", "show", "summary-forger")
    assert out.returncode == 0, out.stderr
    assert not [ln for ln in out.stdout.splitlines() if ln.startswith("forged")], out.stdout


# -- item 13: the switch that removed the built-ins is named ---------------------------------------
def test_disabling_the_builtins_is_named_when_one_is_asked_for(
        make_dist: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    make_dist("pe-axial", {"pe_axial": ENCODER_CLASS + """
@per.hookimpl
def peregistry_encoders():
    return [make("axial-rotary")]
"""}, {"axial": "pe_axial"})
    monkeypatch.setenv("PEREGISTRY_DISABLED_PLUGINS", "Peregistry")
    reg = Registry()
    with pytest.raises(per.EncoderNotFoundError) as info:
        reg.get_encoder("rotary")
    msg = str(info.value)
    assert msg.startswith("no encoder named 'rotary'. The built-in encoders are switched off "
                          "(disabled by PEREGISTRY_DISABLED_PLUGINS='Peregistry'; remove "
                          "'peregistry' from it to get them back)."), msg
    assert "Did you mean 'axial-rotary'?" in msg  # still offered, after the cause
    rows = {r.plugin.name: r for r in reg.list_encoders() if r.name is None}
    assert rows["sinusoidal"].error == "disabled by PEREGISTRY_DISABLED_PLUGINS='Peregistry'"


def test_the_builtins_survive_the_third_party_switches(
        make_dist: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    make_dist("pe-good", {"pe_good": GOOD}, {"good": "pe_good"})
    monkeypatch.setenv("PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PEREGISTRY_LOAD_PLUGINS", "pe-other")
    reg = Registry()
    assert reg.get_encoder("rotary", dim=8).name == "rotary"
    with pytest.raises(per.EncoderNotFoundError) as info:
        reg.get_encoder("still-good")
    assert "switched off" not in str(info.value)


def test_the_cli_names_the_switch_too(tmp_path: Path) -> None:
    out = run_fresh(tmp_path, "-m", "peregistry", "show", "rotary",
                    env={"PEREGISTRY_DISABLED_PLUGINS": "peregistry"})
    assert out.returncode == 2
    assert "The built-in encoders are switched off (disabled by " \
           "PEREGISTRY_DISABLED_PLUGINS='peregistry'" in out.stderr, out.stderr

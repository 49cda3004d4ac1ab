"""The private torch names the core still uses (outside ``peregistry/testing/``), each asserted
to exist and to mean what the core reads it for: a torch release that removes or changes one
fails here, loudly, instead of silently taking a wrong path. docs/architecture.md lists them
with why no public name serves."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

#: (dotted name, where the core reads it): the whole list; the last test holds the sources to it.
PRIVATE = {
    "torch._C._functorch.peek_interpreter_stack": "backends/_torch.py: is a torch.func transform running",
    "torch._C._functorch.is_functorch_wrapped_tensor": "backends/_torch.py: a vmap/grad wrapper",
    "torch._is_functional_tensor": "backends/_torch.py: a functionalization wrapper",
    "torch._subclasses.fake_tensor.is_fake": "backends/_torch.py: a tensor without values",
    "torch.autograd.forward_ad._current_level": "rope/_torch.py: a forward-mode level is open",
    "torch.distributed.tensor._utils.compute_local_shape_and_global_offset":
        "rope/_torch.py: a DTensor shard's rows",
    "torch._dynamo.mark_dynamic": "backends/_torch.py: the suite's dynamic-shape compiles",
    "torch._dynamo.testing.CompileCounterWithBackend": "backends/_torch.py: counting compiles",
    "torch._inductor.compile_fx": "backends/_torch.py: imported once with its warning silenced",
}


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("dotted", sorted(PRIVATE))
def test_the_private_name_exists(dotted: str) -> None:
    try:
        _resolve(dotted)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"torch {torch.__version__} has no {dotted} ({PRIVATE[dotted]}): {exc}; "
                    f"peregistry's core reads it, see docs/architecture.md")


def test_the_functorch_stack_is_empty_outside_transforms_only() -> None:
    peek = torch._C._functorch.peek_interpreter_stack
    assert peek() is None
    seen = []
    torch.func.vmap(lambda x: (seen.append(peek()), x)[1])(torch.ones(2, 3))
    assert seen and seen[0] is not None


def test_wrappers_are_told_apart() -> None:
    fc = torch._C._functorch
    x = torch.ones(2, 3)
    assert not fc.is_functorch_wrapped_tensor(x) and not torch._is_functional_tensor(x)
    seen = []
    torch.func.vmap(lambda t: (seen.append(fc.is_functorch_wrapped_tensor(t)), t)[1])(x)
    assert seen == [True]
    from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
    assert is_fake(fake) and not is_fake(x)


def test_the_forward_mode_level_is_an_int_read_as_open_inside_dual_level() -> None:
    import torch.autograd.forward_ad as fwad

    assert fwad._current_level == -1
    with fwad.dual_level():
        assert fwad._current_level >= 0


def test_the_sources_use_no_other_private_torch_name() -> None:
    """Every private torch name in ``peregistry/`` outside ``testing/`` is on the list above."""
    root = Path(__file__).resolve().parents[1] / "peregistry"
    found: dict[str, list[str]] = {}
    pattern = re.compile(r"torch(?:\.[A-Za-z_]\w*)*\._\w+(?:\.\w+)*|_current_level|"
                         r"compute_local_shape_and_global_offset")
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("testing/"):
            continue
        for line in path.read_text().splitlines():
            code = line.split("#", 1)[0]
            if code.lstrip().startswith(("``", "*", '"', "'")):
                continue
            for m in pattern.findall(code):
                found.setdefault(m, []).append(rel)
    allowed = set(PRIVATE) | {n.rsplit(".", 1)[-1] for n in PRIVATE}
    allowed |= {".".join(n.split(".")[:k]) for n in PRIVATE for k in range(2, n.count(".") + 1)}
    unknown = {m: sorted(set(f)) for m, f in found.items()
               if m not in allowed and not any(m.startswith(a + ".") or a.startswith(m)
                                               for a in PRIVATE)}
    assert not unknown, (f"private torch names not listed in {os.path.basename(__file__)} "
                         f"(and docs/architecture.md): {unknown}")

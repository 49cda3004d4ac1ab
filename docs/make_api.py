"""Write ``docs/api.md``, the API reference, from the code: signatures as the source annotates
them (``typing.get_overloads`` for overloaded functions) and docstrings turned into Markdown, so
the page reads as it is on the repository's web page and in the Sphinx build (myst) alike, and
cannot drift from the code::

    python docs/make_api.py           # rewrite docs/api.md, then commit it
    python docs/make_api.py --check   # exit 1 if docs/api.md is not what the code gives

``tests/test_api_reference.py`` runs the check. :data:`SECTIONS` lists what the page documents.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
PAGE = DOCS / "api.md"

#: (heading, module, intro, [member paths relative to the module; "Class.attr" for members]).
SECTIONS: list[tuple[str, str, str, list[str]]] = [
    ("`peregistry`", "peregistry", "", [
        "get_encoder", "list_encoders", "register", "unregister", "convert", "from_hf_config",
        "positions_from_attention_mask"]),
    ("Encoder base classes", "peregistry", "The kinds' base classes, which plugins subclass.", [
        "Encoder", "Encoder.name", "Encoder.kind", "Encoder.options", "Encoder.learned",
        "Encoder.init", "AbsoluteEncoder", "AbsoluteEncoder.encode", "AbsoluteEncoder.out_dim",
        "RotaryEncoder", "RotaryEncoder.rotate", "RotaryEncoder.cos_sin", "RotaryEncoder.tables",
        "RotaryEncoder.query_scale", "RotaryEncoder.text_positions", "BiasEncoder",
        "BiasEncoder.bias", "RelativeEmbedding", "RelativeEmbedding.embed", "Option"]),
    ("`peregistry.hf_config`", "peregistry.hf_config", "", [
        "register_model_conventions", "unregister_model_conventions", "ConfigError",
        "NoPositionalEncodingError"]),
    ("`peregistry.rope`", "peregistry.rope", "The rotation on arrays alone, and rotation kernels "
     "(fast paths from plugins: [plugins](plugins.md#rotation-kernels)).", [
        "apply_rotation", "kernels", "RotationKernel", "RotationKernel.rotate"]),
    ("`peregistry.multimodal`", "peregistry.multimodal", "", [
        "position_ids", "batch_position_ids", "num_tokens", "segment_spans", "SegmentBase", "Text",
        "Image", "Video", "Audio", "AudioVisual"]),
    ("`peregistry.parallel`", "peregistry.parallel", "Packed sequences and context parallelism; "
     "the pictures and the mapping to TransformerEngine and flash-attention are in "
     "[sharded and distributed arrays](distributed.md).", [
        "packed_positions", "sequence_ids", "positions_from_sequence_ids", "packed_mask",
        "packed_bias", "pack_ids", "shard_tokens", "shard_positions", "zigzag_bounds",
        "zigzag_shard", "shard_bounds", "shard_offset", "shard_ids"]),
    ("`peregistry.testing`", "peregistry.testing", "", [
        "check_encoder", "parametrize_with_checks", "cases_for", "check_rotation_kernel", "Case",
        "Report", "ReportRow"]),
    ("`peregistry.plugin`", "peregistry.plugin", "", []),
    ("`peregistry.plot`", "peregistry.plot", "", [
        "make_figure", "plot_to_file", "PlotSettings", "PLOTS", "PLOT_KINDS_BY_KIND"]),
]

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|obj|exc|const):`~?([^`<]*?)(?: <[^>]*>)?`")


def _role(m: re.Match[str]) -> str:
    text = m.group(0)
    target = m.group(1)
    return f"`{target.rsplit('.', 1)[-1] if ':`~' in text else target}`"


def markdown(doc: str) -> str:
    """A docstring (reST as the code writes it) as Markdown: roles and ``literals`` to code
    spans, ``>>>`` examples to ``pycon`` blocks, ``::`` literal blocks to plain fenced blocks
    (``text`` blocks hold the signatures: :func:`signature_view`)."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i].strip() if lines[i].lstrip().startswith((">>>", "...")) else lines[i])
                i += 1
            out += ["", "```pycon", *block, "```", ""]
            continue
        if line.rstrip().endswith("::") and i + 1 < len(lines) and not lines[i + 1].strip():
            head = line.rstrip()[:-2].rstrip()
            out.append(_inline(head + ":") if head else "")
            i += 2
            block = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            indent = min((len(b) - len(b.lstrip()) for b in block if b.strip()), default=0)
            out += ["", "```", *(b[indent:] for b in block), "```", ""]  # (prose: not a signature)
            continue
        out.append(_inline(line))
        i += 1
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _inline(line: str) -> str:
    line = _ROLE.sub(_role, line)
    line = re.sub(r"``([^`]+?)``", r"`\1`", line)
    line = re.sub(r"^(\s*):param (\w+):", r"\1- `\2`:", line)
    line = re.sub(r"^(\s*):(returns?|raises?) ?(\w*):", lambda m: f"{m[1]}- {m[2]} {m[3]}:".replace(" :", ":"), line)
    return line


def _signature(name: str, obj: Any) -> list[str]:
    """``def name(...)`` lines as the source annotates them (each overload, if any)."""
    fn = obj.fget if isinstance(obj, property) else obj
    if isinstance(obj, property):
        ann = inspect.signature(fn).return_annotation
        return [f"{name}: {ann}" if ann is not inspect.Signature.empty else name]
    overloads = typing.get_overloads(fn) if callable(fn) else []
    try:
        sigs = [inspect.signature(f) for f in overloads] or [inspect.signature(fn)]
    except (TypeError, ValueError):
        return [name]
    return [f"{name}{_unquoted(s)}" for s in sigs]


class _Raw(str):
    """An annotation shown as the source writes it (``from __future__ import annotations``
    makes every annotation that string)."""

    def __repr__(self) -> str:
        return str(self)


def _unquoted(sig: inspect.Signature) -> str:
    def raw(a: Any) -> Any:
        return _Raw(a) if isinstance(a, str) else a

    params = [p.replace(annotation=raw(p.annotation),
                        default=_Raw(p.default.__name__) if isinstance(p.default, type)
                        and p.default is not p.empty else p.default)
              for p in sig.parameters.values() if p.name != "self"]
    ret = inspect.Signature.empty if sig.return_annotation == "None" else raw(sig.return_annotation)
    return str(sig.replace(parameters=params, return_annotation=ret))


def _resolve(module: str, path: str) -> tuple[Any, Any]:
    owner: Any = importlib.import_module(module)
    obj: Any = owner
    for part in path.split("."):
        owner = obj
        obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
    return owner, obj


def _entry(module: str, path: str) -> list[str]:
    owner, obj = _resolve(module, path)
    member = "." in path
    title = f"{'####' if member else '###'} `{module}.{path}`"
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    kind = ("class" if inspect.isclass(obj) else "property" if isinstance(obj, property)
            else "function" if callable(obj) else "attribute")
    lines = [title, ""]
    if kind == "class":
        bases = _public_bases(obj, module)
        head = f"class {obj.__name__}" + (f"({', '.join(bases)})" if bases else "")
        init = inspect.getattr_static(obj, "__init__", None)
        sig = ""
        if init is not None and init is not object.__init__ and not path.startswith("RotationKernel"):
            try:
                sig = _unquoted(inspect.signature(obj))
            except (TypeError, ValueError):
                sig = ""
        lines += ["```text", head, *([f"{obj.__name__}{sig}"] if sig and sig != "()" else []), "```", ""]
    elif kind in ("function", "property"):
        lines += ["```text", *_signature(path.rsplit(".", 1)[-1], obj), "```", ""]
    else:
        value = obj if not member else getattr(owner, path.rsplit(".", 1)[-1], obj)
        shown = repr(value) if not isinstance(value, dict) else f"dict with keys {sorted(value)}"
        lines += ["```text", f"{path} = {shown}"[:300], "```", ""]
        return lines
    doc = (obj.fget.__doc__ if kind == "property" else obj.__doc__) or ""
    if doc.strip():
        lines += [markdown(doc), ""]
    return lines


def _public_bases(cls: type, module: str) -> list[str]:
    """The nearest public ancestors of ``cls`` (builtins, or names of ``peregistry`` or of
    ``module``): its internal mixins are not the reader's business."""
    spaces = [importlib.import_module("peregistry"), importlib.import_module(module)]

    def public(c: type) -> bool:
        return c.__module__ in ("builtins", "typing") or any(getattr(m, c.__name__, None) is c
                                                             for m in spaces)

    # Generic is how a class takes type parameters, not an ancestor a reader looks up.
    found = [c for c in cls.__mro__[1:] if c not in (object, typing.Generic) and public(c)]
    nearest = [c for c in found if not any(o is not c and issubclass(o, c) for o in found)]
    return [c.__name__ for c in nearest]


def signature_view(text: str) -> list[str]:
    """The lines of a rendered page that state the API (headings, signatures, tables): what
    ``tests/test_api_reference.py`` holds to the code; docstring prose may lag a run behind."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = line == "```text"
            continue
        if fenced or line.startswith(("#", "| ")):
            out.append(line)
    return out


def _builtin_types() -> list[str]:
    """The table of what ``get_encoder`` returns for each built-in name (its overloads)."""
    import peregistry as per

    rows = ["| name | type of `per.get_encoder(name, ...)` |", "| --- | --- |"]
    for f in typing.get_overloads(per.get_encoder):
        name, ret = f.__annotations__["name"], f.__annotations__["return"]
        if name.startswith("Literal["):
            rows.append(f"| `{name[9:-2]}` | `{ret}` |")
    return rows


def render() -> str:
    out = ["# API reference", "",
           "Generated from the code by `python docs/make_api.py` (tests/test_api_reference.py "
           "holds its signatures to the code): each signature as the source annotates it, then its "
           "docstring. Arrays are typed `Any`: an encoder takes and returns the arrays of any "
           "Array API framework (the output's type is the input's).", ""]
    for heading, module, intro, members in SECTIONS:
        out += [f"## {heading}", ""]
        if intro:
            out += [intro, ""]
        if not members:
            doc = importlib.import_module(module).__doc__ or ""
            out += [markdown(doc), ""]
        for path in members:
            out += _entry(module, path)
            if module == "peregistry" and path == "get_encoder":
                out += ["What a built-in name gives a type checker (any other name gives `Encoder`, "
                        "or the class passed as `kind`):", "", *_builtin_types(), ""]
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if PAGE.read_text() != text:
            print(f"{PAGE} is not what the code gives: run python docs/make_api.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A sweep of transformers' own models: for every model family in the installed transformers
(5.23) whose text decoder has a rotary embedding, the family's rotary module (built from its
default config: no weights, a buffer of head_dim/2 frequencies) and its own apply function
against ``peregistry.from_hf_config(config).rotate``; one test id per family and layer type
with its own RoPE settings (``gemma3-sliding_attention``, ``gemma3-full_attention``).

Families are discovered by scanning ``transformers/models/*/modeling_*.py`` for a
``*RotaryEmbedding`` class, so a new transformers release adds its families by itself. Each
discovered family is in exactly one of: the cases (in scope), :data:`OUT_OF_SCOPE` (vision or
audio 2-D/encoder rotary; the reason given), and among the cases :data:`XFAIL` (strict: a family
that starts passing must leave the list) — none is skipped silently. ``test_coverage`` states the
coverage from the cases' results: those that passed in this session (:data:`RESULTS`, filled by
the sweep as it runs; a case the session did not run, as with ``-k test_coverage``, is run there)
over the in-scope cases, at least :data:`MIN_PASSING` at the pinned release.

Torch env only (the selected backend must include torch) and only where transformers imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.hf_config import ConfigError, NoPositionalEncodingError

#: Families whose rotary embedding is not a text decoder's, with the reason.
OUT_OF_SCOPE: dict[str, str] = {
    **{f: "vision tower only (2-D rotary over image patches)" for f in (
        "edgetam_video", "exaone4_5", "glm5_next", "inkling2", "kimi_k25", "lfm3_vl", "pixtral",
        "sam2_video", "sam3", "sam3_tracker_video", "video_llama_3")},
    "efficientloftr": "image matcher: 2-D rotary over feature-map coordinates",
    "eomt_dinov3": "vision transformer: 2-D rotary over patch coordinates",
    "mlcd": "vision model: 'axial' 2-D rotary over patch coordinates",
    "esmfold2": "protein structure model: rotary over 3-D spatial pairs",
    "musicflamingo": "audio model: rotary over audio frame times",
    "nemotron3_diarization": "audio diarization encoder",
    **{f: "audio/video perception encoder (PE), not a text decoder" for f in (
        "pe_audio", "pe_audio_video", "pe_video")},
}

#: In-scope cases that do not pass yet (strict xfail), by family or ``family-layer_type``.
XFAIL: dict[str, str] = {}

#: Default configs that are not self-consistent for the rotary module alone (an odd rotary
#: width, or M-RoPE sections that need a partial_rotary_factor), made so as real checkpoints are.
_GLM_V = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                              "partial_rotary_factor": 0.5, "mrope_section": [8, 12, 12]}}
CONFIG_KWARGS: dict[str, dict[str, Any]] = {
    "glm4_moe": {"head_dim": 128}, "glm4v_moe": {"head_dim": 128}, "glm4v": _GLM_V,
    "glm_ocr": {"head_dim": 128, **_GLM_V}, "glm_image": _GLM_V,
    "zamba2": {"use_mem_rope": True},  # off by default: no RoPE at all
    "qwen3_omni_moe": {"head_dim": 128},  # the default 2048 // 28 heads is odd
    "cohere_compass": {"rope_parameters": {"full_attention": {
        "rope_type": "default", "rope_theta": 1e4, "mrope_section": [24, 20, 20]}}},
    # HunyuanOCR's text config: XD-RoPE over 4 axes, "xdrope" (read as "dynamic") with a fixed
    # NTK alpha; the default config has no sections, with which its rotary module cannot run
    "hunyuan_vl": {"head_dim": 128, "rope_parameters": {
        "rope_type": "xdrope", "rope_theta": 1e4, "alpha": 1000.0, "factor": 1.0,
        "xdrope_section": [16, 16, 16, 16]}},
    "qwen4_exp": {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                      "partial_rotary_factor": 0.25,
                                      "mrope_section": [11, 11, 10]}},
}

#: Families whose config holds several transformers, each with its own rotary module: one
#: case per sub-config.
SUB_CONFIGS: dict[str, tuple[str, ...]] = {
    "blt": ("encoder_config", "global_config", "decoder_config")}

_SEQ = 24
#: The transformers release the lists above were made for (tox.ini's torch env pins it).
PINNED = "5.23.0"
#: Cases that pass at the pinned release, at least: the coverage this file states.
MIN_PASSING = 191
#: Whether each case (by id) passed, as run in this session.
RESULTS: dict[str, bool] = {}


def _models_dir() -> Path | None:
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "models"


def discover() -> dict[str, list[str]]:
    """``{family: [rotary class names]}`` of every modeling module defining one (text scan)."""
    root = _models_dir()
    if root is None:
        return {}
    out = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        f = d / f"modeling_{d.name}.py"
        if f.exists():
            names = re.findall(r"^class (\w*RotaryEmbedding)\b", f.read_text(), re.M)
            if names:
                out[d.name] = names
    return out


def _module(family: str) -> Any:
    return importlib.import_module(f"transformers.models.{family}.modeling_{family}")


def _rotary_class(family: str, names: list[str]) -> Any:
    text = [n for n in names if "Text" in n] or [n for n in names
                                                   if not re.search("Vision|ViT", n)]
    return getattr(_module(family), text[0])


def _config(family: str, rotary: Any, sub: str | None = None) -> Any:
    """The family's (text) config with its defaults: what the rotary module is built from."""
    mod = _module(family)
    ann = inspect.signature(rotary.__init__).parameters["config"].annotation
    cls = getattr(mod, ann.strip("'\"")) if isinstance(ann, str) else ann
    cfg = cls(**CONFIG_KWARGS.get(family, {}))
    if sub is not None:
        return getattr(cfg, sub)
    return cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg


def _layer_types(cfg: Any) -> list[str | None]:
    """The layer types with their own RoPE settings (``[None]``: one setting for all)."""
    rp = getattr(cfg, "rope_parameters", None)
    lts = getattr(cfg, "layer_types", None) or []
    if not isinstance(rp, dict) or not rp or {"rope_type", "rope_theta"} & set(rp):
        return [None]
    if not all(isinstance(v, dict) or v is None for v in rp.values()):
        return [None]
    keys = [k for k, v in rp.items() if v is not None]
    # DeepSeek-V4 keys them by its own labels (main, compress), not by layer_types
    return [k for k in keys if k in lts] or keys or [None]


def _cases() -> list[Any]:
    """``pytest.param(family, names, layer_type, sub)`` per in-scope case (torch env only)."""
    found = discover()
    if "torch" not in BACKENDS or not found:
        return []
    logging.getLogger("transformers").setLevel(logging.ERROR)  # default configs' complaints
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _collect(found)


def _collect(found: dict[str, list[str]]) -> list[Any]:
    cases = []
    for family, names in found.items():
        if family in OUT_OF_SCOPE:
            continue
        for sub in SUB_CONFIGS.get(family, (None,)):
            try:
                lts = _layer_types(_config(family, _rotary_class(family, names), sub))
            except Exception:  # the case itself reports the error (or its xfail)
                lts = [None]
            for lt in lts:
                cid = _case_id(family, lt, sub)
                reason = XFAIL.get(cid) or XFAIL.get(family)
                marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
                cases.append(pytest.param(family, names, lt, sub, id=cid, marks=marks))
    return cases


def _case_id(family: str, layer_type: str | None, sub: str | None) -> str:
    return "-".join(p for p in (family, sub, layer_type) if p is not None)


CASES = _cases()


def _ours(cfg: Any, layer_type: str | None) -> Any:
    """``from_hf_config``; a model with NoPE layers but one rotary module: a RoPE layer's."""
    try:
        return per.from_hf_config(cfg, layer_type=layer_type)
    except ConfigError as exc:
        if layer_type is not None or "pass layer_type" not in str(exc):
            raise
    for i in range(int(cfg.num_hidden_layers)):
        try:
            return per.from_hf_config(cfg, layer_type=i)
        except NoPositionalEncodingError:
            continue
    raise AssertionError("no layer uses RoPE")


def _attention_interleaves(src: str, cfg: Any) -> bool:
    """Whether the family's text attention calls its interleaved apply function: as the config
    flag its code reads says (``if self.config.rope_interleave:``), else whether the attention
    classes call it at all. Read from the model's code, never from our encoder's options."""
    bodies = [b for b in re.split(r"^class ", src, flags=re.M)
              if re.match(r"\w*Attention\b", b) and not re.match(r"\w*(Vision|Audio|Indexer)", b)]
    if any("self.config.rope_interleave" in b for b in bodies):
        return bool(cfg.rope_interleave)
    return any("apply_rotary_pos_emb_interleave(" in b for b in bodies)


def _apply(mod: Any, cfg: Any, e: Any, out: Any, q: Any) -> Any:
    """What the family's own apply function does to ``q`` with the module's output ``out``."""
    import torch

    src = Path(mod.__file__).read_text()
    names = [n for n in re.findall(r"^def (apply\w*rotary\w*|apply_\w*rope\w*)\(", src, re.M)
             if "vision" not in n]
    inter = [n for n in names if "interleave" in n]
    fn = getattr(mod, inter[0] if inter and _attention_interleaves(src, cfg) else names[0])
    if not isinstance(out, tuple):  # complex freqs_cis (Llama 4, DeepSeek-V2)
        try:
            got = fn(q, q, out)[0]
            if got.shape == q.shape:
                return fn, got
        except RuntimeError:
            pass
        x = q.transpose(1, 2)  # (batch, seq, heads, dim)
        return fn, fn(x, x, out)[0].transpose(1, 2)
    cos, sin = out
    params = list(inspect.signature(fn).parameters)
    extra = {}
    if "mrope_section" in params:
        extra["mrope_section"] = e.options["sections"]

    def call(x: Any) -> Any:
        if len(params) > 1 and params[1] in ("k", "key", "key_states", "xk", "k_states"):
            return fn(x, x, cos, sin, **extra)[0]
        return fn(x, cos, sin, **extra)

    try:
        got = call(q)
        if got.shape == q.shape:
            return fn, got
    except RuntimeError:
        pass
    # partial rotary applied outside the apply function (GPT-NeoX, Phi): the rotated part only
    error: Exception = AssertionError("no rotary width fits")
    for rd in (cos.shape[-1], 2 * cos.shape[-1]):
        try:
            return fn, torch.cat([call(q[..., :rd]), q[..., rd:]], dim=-1)
        except RuntimeError as exc:
            error = exc
    raise error


@pytest.mark.skipif(not CASES, reason="needs transformers and torch among the selected backends")
@pytest.mark.parametrize(("family", "names", "layer_type", "sub"), CASES)
def test_family_matches_transformers(family: str, names: list[str], layer_type: str | None,
                                     sub: str | None) -> None:
    """The case's result is kept in :data:`RESULTS` (passed only if every assertion held)."""
    cid = _case_id(family, layer_type, sub)
    RESULTS[cid] = False
    check_case(family, names, layer_type, sub)
    RESULTS[cid] = True


def check_case(family: str, names: list[str], layer_type: str | None, sub: str | None) -> None:
    """The family's rotary module and apply function against ``from_hf_config(config).rotate``,
    with controls that the comparison sees each convention; raises where they differ."""
    import torch

    rotary_cls = _rotary_class(family, names)
    cfg = _config(family, rotary_cls, sub)
    rotary = rotary_cls(cfg)
    e = _ours(cfg, layer_type)
    dim = int(e.options["dim"])
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, _SEQ, dim, generator=gen)
    if e.name == "mrope":  # distinct positions per axis
        pos = torch.randint(0, 4 * _SEQ, (e.num_axes, 1, _SEQ), generator=gen)
    else:
        pos = torch.arange(_SEQ)[None]
    takes_type = len(inspect.signature(rotary.forward).parameters) >= 3
    with torch.no_grad():
        out = rotary(q, pos, layer_type) if layer_type is not None and takes_type \
            else rotary(q, pos)
        fn, theirs = _apply(_module(family), cfg, e, out, q)

    def ours(enc: Any) -> Any:
        got = enc.rotate(q, pos[:, :, None, :] if enc.name == "mrope" else pos[0])
        if "interleave" in fn.__name__:  # DeepSeek's output is de-interleaved: evens, then odds
            rd = enc._rotary_dim()
            got = torch.cat([got[..., :rd:2], got[..., 1:rd:2], got[..., rd:]], dim=-1)
        return got

    # transformers forms angles in float32: off by ~eps·position (positions < 4·seq), times |q|
    # and the attention factor (below 2 here)
    eps = float(np.finfo(np.float32).eps)
    tol = 8 * eps * 4 * _SEQ * float(q.abs().max()) * 2
    err = float((ours(e) - theirs).abs().max())
    assert err <= tol, f"{family}[{layer_type}]: max |ours - transformers| = {err:.3g} > " \
                       f"{tol:.3g}; {e!r}"
    assert float((theirs - q).abs().max()) > 100 * tol, "the model's rotation is the identity"
    # the controls: the other pair layout, direction and (partial rotary) rotated features are
    # far off, so the comparison sees each convention
    swaps = [("layout", ("half", "interleaved")), ("direction", ("positive", "negative"))]
    if e._rotary_dim() < dim:
        swaps.append(("rotary_features", ("first", "last")))
    for option, (a, b) in swaps:
        other = per.get_encoder(e.name, **{**e.options, option: b if e.options[option] == a
                                           else a})
        assert float((ours(other) - theirs).abs().max()) > 100 * tol, \
            f"{family}: {option} not seen"


@pytest.mark.skipif(not CASES, reason="needs transformers and torch among the selected backends")
def test_coverage() -> None:
    """Every discovered family is a case or out of scope (with a reason); the lists name real
    families; the coverage (cases that passed / in-scope cases, from the results) is at least
    what this file states."""
    import transformers

    found = discover()
    ids = {p.id for p in CASES}
    families = {p.values[0] for p in CASES}
    assert families | set(OUT_OF_SCOPE) >= set(found)
    assert not families & set(OUT_OF_SCOPE)
    for p in CASES:  # a case this session did not run (-k test_coverage): run it here
        if p.id not in RESULTS:
            try:
                check_case(*p.values)
            except Exception:  # (as the case itself would fail: its own report says why)
                RESULTS[p.id] = False
            else:
                RESULTS[p.id] = True
    passing = sum(RESULTS[p.id] for p in CASES)
    failing = sorted(p.id for p in CASES if not RESULTS[p.id])
    print(f"\nhf sweep coverage: {passing}/{len(CASES)} in-scope cases pass "
          f"({len(families)} families, {len(OUT_OF_SCOPE)} out of scope; transformers "
          f"{transformers.__version__})")
    if transformers.__version__ == PINNED:  # the lists are those of the pinned release
        assert set(OUT_OF_SCOPE) <= set(found), sorted(set(OUT_OF_SCOPE) - set(found))
        stale = [k for k in XFAIL if k not in ids and k not in families]
        assert not stale, f"XFAIL names no case: {stale}"
        assert passing >= MIN_PASSING, (
            f"coverage fell to {passing}/{len(CASES)} (at least {MIN_PASSING} pass at "
            f"{PINNED}); failing: {failing[:10]}")

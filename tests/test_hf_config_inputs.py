"""``from_hf_config`` on the configs a porter actually meets, mistakes included: every key that
changes the rotation is read wherever it appears, a layer type without settings gets what
transformers gives it (or an error naming it), explicit values are never replaced or truncated,
and every bad value is a ``ConfigError`` naming the key, the value and the model type, bounded
in time and length however many layers the config claims (issue 30, items 1-6)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.hf_config import (
    ConfigError,
    NoPositionalEncodingError,
    register_model_conventions,
    unregister_model_conventions,
)

LLAMA: dict[str, Any] = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
                         "rope_theta": 1e4}


def opts(config: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return dict(per.from_hf_config(config, **kw).options)


# -- 1. rope_interleave is read wherever it appears -----------------------------------------

@pytest.mark.parametrize("model_type", ["axk1", "youtu", "deepseek_v3", "mistral4",
                                        "glm4_moe_lite"])
def test_rope_interleave_flag_families(model_type: str) -> None:
    base = {"model_type": model_type, "head_dim": 64, "rope_theta": 1e4}
    # the config classes default it to True; a config.json may leave it out
    assert opts(base)["layout"] == "interleaved"
    assert opts({**base, "rope_interleave": True})["layout"] == "interleaved"
    assert opts({**base, "rope_interleave": False})["layout"] == "half"


def test_rope_interleave_read_for_any_model_type() -> None:
    unknown = {"model_type": "my_mla", "head_dim": 64, "rope_theta": 1e4}
    assert opts(unknown)["layout"] == "half"
    assert opts({**unknown, "rope_interleave": True})["layout"] == "interleaved"
    with pytest.raises(ConfigError, match=r"'my_mla'.*rope_interleave='yes' must be true or "
                                          r"false"):
        opts({**unknown, "rope_interleave": "yes"})


@pytest.mark.parametrize("model_type", ["deepseek_v32", "axk2"])
def test_deepseek_v32_main_attention_is_interleaved(model_type: str) -> None:
    # its MLA calls apply_rotary_pos_emb_interleave; only the lightning indexer is half
    assert opts({"model_type": model_type, "qk_rope_head_dim": 64,
                 "rope_theta": 1e4})["layout"] == "interleaved"


def test_mrope_interleaving_follows_the_family_code() -> None:
    # no transformers model reads mrope_interleaved: Qwen3-VL always interleaves its axes
    q3 = {"model_type": "qwen3_vl_text", "head_dim": 128, "rope_parameters": {
        "rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
        "mrope_interleaved": False}}
    assert opts(q3)["interleaved"] is True
    with pytest.raises(ConfigError, match=r"'my_vl'.*mrope_interleaved=1 must be true or false"):
        opts({**q3, "model_type": "my_vl",
              "rope_parameters": {**q3["rope_parameters"], "mrope_interleaved": 1}})


def _transformers_models() -> Path | None:
    if "torch" not in BACKENDS:
        return None
    try:
        import transformers
    except ImportError:
        return None
    return Path(transformers.__file__).parent / "models"


def _flag_families() -> list[str]:
    root = _transformers_models()
    if root is None:
        return []
    return sorted(p.parent.name for p in root.glob("*/configuration_*.py")
                  if re.search(r"^\s+rope_interleave\s*:", p.read_text(), re.M))


@pytest.mark.skipif(not _flag_families(),
                    reason="needs transformers (torch env) to list its configs' rope_interleave")
@pytest.mark.parametrize("family", _flag_families() or ["none"])
def test_every_transformers_rope_interleave_config(family: str) -> None:
    """Every transformers config class with a ``rope_interleave`` attribute: its modeling code
    branches on it (checked here), and our layout follows it both ways."""
    root = _transformers_models()
    assert root is not None
    modeling = (root / family / f"modeling_{family}.py").read_text()
    assert "self.config.rope_interleave" in modeling, f"{family} does not read the flag"
    mod = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    cls = next(v for k, v in vars(mod).items() if k.endswith("Config") and isinstance(v, type)
               and "rope_interleave" in getattr(v, "__annotations__", {}))
    for flag in (True, False):
        cfg = cls(rope_interleave=flag)
        assert opts(cfg)["layout"] == ("interleaved" if flag else "half"), family
        # the same from the config.json dict without the key: the class default (True)
        raw = {k: v for k, v in cfg.to_dict().items() if k != "rope_interleave"}
        assert opts(raw)["layout"] == "interleaved"


# -- 2. a listed layer type missing from rope_parameters -----------------------------------

GEMMA3: dict[str, Any] = {
    "model_type": "gemma3_text", "head_dim": 64, "num_attention_heads": 4, "hidden_size": 256,
    "num_hidden_layers": 6, "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0,
                                           "rope_theta": 1e6}}}


def test_missing_layer_type_gets_what_gemma3_fills_in() -> None:
    sliding = opts(GEMMA3, layer_type="sliding_attention")
    assert (sliding["theta"], sliding["scaling"]) == (10000.0, None)
    assert opts(GEMMA3, layer_type=0) == sliding
    full = opts(GEMMA3, layer_type=5)
    assert (full["theta"], full["scaling"]["factor"]) == (1e6, 8.0)
    assert opts({**GEMMA3, "rope_local_base_freq": 5e4}, layer_type=0)["theta"] == 5e4
    with pytest.raises(ConfigError, match="pass layer_type="):
        opts(GEMMA3)  # the two types differ


def test_missing_layer_type_of_an_unknown_family_is_named() -> None:
    other = {**GEMMA3, "model_type": "my_model"}
    for layer in ("sliding_attention", 0, None):
        with pytest.raises(ConfigError, match=r"'my_model'.*layer type 'sliding_attention' is "
                                              r"listed in layer_types but rope_parameters"):
            opts(other, layer_type=layer)
    assert opts(other, layer_type=5)["theta"] == 1e6
    register_model_conventions("my_model", layer_rope_defaults={
        "sliding_attention": ("rope_local_base_freq", 10_000.0)})
    try:
        assert opts(other, layer_type=0)["theta"] == 10_000.0
    finally:
        unregister_model_conventions("my_model")


def test_missing_layer_type_advice_depends_on_what_was_passed() -> None:
    """Loading a config.json with AutoConfig fills in the class's defaults; advising it to the
    user who passed the loaded object is advice to do what was done (issue 42)."""
    other = {**GEMMA3, "model_type": "my_model"}

    class Loaded:  # a PretrainedConfig as from_hf_config reads it
        model_type = "my_model"

        def to_dict(self) -> dict[str, Any]:
            return dict(other)

    with pytest.raises(ConfigError, match="pass the config loaded by transformers"):
        opts(other)
    with pytest.raises(ConfigError, match="'sliding_attention' is listed") as info:
        opts(Loaded())  # type: ignore[arg-type]
    assert "AutoConfig" not in str(info.value) and "layer_rope_defaults" in str(info.value)


@pytest.mark.skipif(_transformers_models() is None, reason="needs transformers (torch env)")
def test_missing_layer_type_matches_transformers() -> None:
    from transformers import Gemma3TextConfig

    cfg = Gemma3TextConfig(**{k: v for k, v in GEMMA3.items() if k != "model_type"})
    filled = cfg.rope_parameters["sliding_attention"]
    ours = opts(GEMMA3, layer_type="sliding_attention")
    assert (filled["rope_type"], float(filled["rope_theta"])) == ("default", ours["theta"])
    assert opts(cfg, layer_type="sliding_attention") == ours


# -- 3, 4. explicit values are never replaced or truncated --------------------------------

T5: dict[str, Any] = {"model_type": "t5", "num_heads": 8, "relative_attention_num_buckets": 16,
                      "relative_attention_max_distance": 64}


def test_t5_explicit_values_are_kept() -> None:
    got = opts(T5, layer_type="encoder")
    assert (got["num_buckets"], got["max_distance"]) == (16, 64)
    bare = {"model_type": "t5", "num_heads": 8}
    got = opts(bare, layer_type="encoder")
    assert (got["num_buckets"], got["max_distance"]) == (32, 128)  # T5Config's defaults
    for key in ("relative_attention_num_buckets", "relative_attention_max_distance"):
        with pytest.raises(ConfigError, match=rf"'t5'.*{key}=0 must be an integer >= 1"):
            opts({**T5, key: 0}, layer_type="encoder")


@pytest.mark.parametrize(("config", "key"), [
    ({**LLAMA, "head_dim": 128.5}, "head_dim"),
    ({"model_type": "gptj", "head_dim": 64, "rotary_dim": 31.5}, "rotary_dim"),
    ({"model_type": "qwen2_vl", "head_dim": 128, "rope_parameters": {
        "rope_type": "default", "rope_theta": 1e6, "mrope_section": [16.5, 24, 24]}},
     r"mrope_section\[0\]"),
    ({**T5, "num_heads": 8.5}, "num_heads"),
    ({**LLAMA, "hidden_size": 256.5}, "hidden_size"),
])
def test_non_integer_sizes_are_refused(config: dict[str, Any], key: str) -> None:
    layer = "encoder" if config["model_type"] == "t5" else None
    with pytest.raises(ConfigError, match=rf"model type '{config['model_type']}'.*{key}="
                                          rf"[0-9.]+ must be an integer .*not truncated"):
        opts(config, layer_type=layer)


def test_integral_floats_are_the_integers_they_equal() -> None:
    assert opts({**LLAMA, "head_dim": 64.0})["dim"] == 64


# -- 5. every bad value names its key ------------------------------------------------------

BAD: list[tuple[dict[str, Any], str]] = [
    ({**LLAMA, "num_attention_heads": 0}, r"num_attention_heads=0 must be an integer >= 1"),
    ({**LLAMA, "rope_theta": "ten"}, r"rope_theta='ten' must be a finite number > 0"),
    ({**LLAMA, "rope_theta": -1.0}, r"rope_theta=-1.0 must be a number > 0"),
    ({**LLAMA, "hidden_size": [256]}, r"hidden_size=\[256\] must be an integer"),
    ({**LLAMA, "rope_scaling": "linear"}, r"rope_scaling='linear' must be a dict"),
    ({**LLAMA, "rope_parameters": ["default"]}, r"rope_parameters=\['default'\] must be a dict"),
    ({**LLAMA, "rope_scaling": {"rope_type": 3}}, r"rope_type=3 must be a string"),
    ({**LLAMA, "partial_rotary_factor": 1.5}, r"partial_rotary_factor=1.5 must be in \(0, 1\]"),
    ({**LLAMA, "max_position_embeddings": "4k", "rope_scaling": {"rope_type": "dynamic",
                                                                 "factor": 2.0}},
     r"max_position_embeddings='4k' must be an integer"),
    ({"model_type": "qwen2_vl", "head_dim": 128, "rope_parameters": {
        "rope_type": "default", "rope_theta": 1e6, "mrope_section": 5}},
     r"mrope_section=5 must be a list of integers"),
    ({**LLAMA, "layer_types": "full_attention"}, r"layer_types must be a list"),
    ({**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 0.0}},
     r"refused by 'rotary'.*factor"),
]


@pytest.mark.parametrize(("config", "message"), BAD)
def test_bad_values_name_key_value_and_model_type(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"model type 'llama'|model type 'qwen2_vl'") as info:
        opts(config)
    assert re.search(message, str(info.value)), str(info.value)


def test_layer_count_that_is_not_a_number() -> None:
    with pytest.raises(ConfigError, match=r"'llama'.*num_hidden_layers='thirty-two' must be an "
                                          r"integer >= 0"):
        opts({**LLAMA, "num_hidden_layers": "thirty-two"}, layer_type=3)


@pytest.mark.parametrize(("config", "message"), BAD[:3] + BAD[9:10])
def test_cli_bad_config_is_a_usage_error(tmp_path: Path, config: dict[str, Any],
                                         message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    run = subprocess.run([sys.executable, "-m", "peregistry", "show", "--hf-config", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert re.search(message, run.stderr), run.stderr
    assert "ConfigError" not in run.stderr and "model type" in run.stderr



#: Configs whose layers differ, and what the CLI's message must say (issue 42: the Python
#: spelling ``layer_type=`` told a CLI user to pass an option the CLI does not have).
LAYERS_DIFFER: list[tuple[dict[str, Any], list[str], str]] = [
    (GEMMA3, [], r"pass --layer-type one of 'full_attention' \(RoPE"),
    ({**T5, "is_encoder_decoder": True}, [], r"pass --layer-type encoder or decoder"),
    ({**T5, "is_encoder_decoder": True}, ["--layer-type", "middle"],
     r"pass --layer-type encoder or decoder \(got --layer-type middle\)"),
    (GEMMA3, ["--layer-type", "global"], r"unknown --layer-type 'global'"),
    ({"model_type": "lfm3", "head_dim": 16, "num_attention_heads": 4, "num_hidden_layers": 3,
      "layer_types": ["conv", "full_attention", "sliding_attention"],
      "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}},
     [], r"pass --layer-type one of '(full|sliding)_attention'"),
]


@pytest.mark.parametrize(("config", "flags", "message"), LAYERS_DIFFER)
def test_cli_says_layer_type_as_the_cli_spells_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any],
        flags: list[str], message: str) -> None:
    from peregistry.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["show", "--hf-config", str(path), *flags]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "layer_type=" not in err and "layer_type " not in err, err
    with pytest.raises(ConfigError, match="layer_type[= ]"):  # the Python API keeps its own
        per.from_hf_config(config, layer_type=flags[-1] if flags else None)

# -- 6. bounded work and short messages, however many layers -------------------------------

LLAMA4: dict[str, Any] = {"model_type": "llama4_text", "head_dim": 64, "rope_theta": 5e5}


def test_a_trillion_layers_are_not_listed() -> None:
    start = time.perf_counter()
    huge = {**LLAMA4, "num_hidden_layers": 10**12}
    assert opts(huge, layer_type=0)["layout"] == "interleaved"
    with pytest.raises(NoPositionalEncodingError, match="layer 3 "):
        opts(huge, layer_type=3)
    with pytest.raises(NoPositionalEncodingError, match="layer 999999999999 "):
        opts(huge, layer_type=10**12 - 1)
    with pytest.raises(ConfigError, match="out of range"):
        opts(huge, layer_type=10**12)
    assert time.perf_counter() - start < 5.0  # nothing proportional to the layer count


def test_the_nope_layers_are_summarized() -> None:
    with pytest.raises(ConfigError) as info:
        opts({**LLAMA4, "num_hidden_layers": 10**7})
    message = str(info.value)
    assert len(message) < 600, message
    assert "[3, 7, 11, ..., 9999999]" in message and "2,500,000 of 10,000,000 layers" in message
    mask = [0 if i % 3 == 0 else 1 for i in range(30_000)]
    with pytest.raises(ConfigError) as info:
        opts({**LLAMA4, "num_hidden_layers": 30_000, "no_rope_layers": mask})
    assert len(str(info.value)) < 600 and "(10,000 layers)" in str(info.value)


def test_per_layer_overrides_read_only_the_listed_layers() -> None:
    config = {**LLAMA, "num_hidden_layers": 10**12, "per_layer_config": {"7": {"head_dim": 32}}}
    start = time.perf_counter()
    assert opts(config, layer_type=7)["dim"] == 32
    assert opts(config, layer_type=8)["dim"] == 64
    with pytest.raises(ConfigError, match="differ in per_layer_config"):
        opts(config)
    assert time.perf_counter() - start < 5.0


def test_rope_scaling_layers_choose_the_scaled_layers() -> None:
    """Molmo2: only the layers in rope_scaling_layers apply the scaling; the others keep the
    theta with the default rope type (its Molmo2RotaryEmbedding(scaled=False))."""
    molmo = {"model_type": "molmo2_text", "head_dim": 16, "num_hidden_layers": 3,
             "rope_scaling_layers": [0, 2],
             "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e4}}
    assert opts(molmo, layer_type=0)["scaling"] == {"type": "linear", "factor": 2.0}
    unscaled = opts(molmo, layer_type=1)
    assert (unscaled["scaling"], unscaled["theta"]) == (None, 5e4)
    with pytest.raises(ConfigError, match=r"rope_scaling_layers \[0, 2\] apply the scaling"):
        opts(molmo)
    assert opts({**molmo, "rope_scaling_layers": [0, 1, 2]})["scaling"]["factor"] == 2.0

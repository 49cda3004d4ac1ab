"""``peregistry.from_hf_config``: every mapping rule on plain ``config.json`` dicts (no
transformers), the errors, and — where transformers is installed, in the torch env — tiny models'
own rotary modules and apply functions against ``enc.rotate``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.hf_config import (
    MODEL_CONVENTIONS,
    ConfigError,
    NoPositionalEncodingError,
    register_model_conventions,
    unregister_model_conventions,
)

LLAMA: dict[str, Any] = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
         "max_position_embeddings": 256}
LLAMA3: dict[str, Any] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def enc(config: dict[str, Any], **kw: Any) -> Any:
    return per.from_hf_config(config, **kw)


def opts(config: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return dict(enc(config, **kw).options)


# -- rotary options ---------------------------------------------------------------------------
def test_defaults_head_dim_and_theta() -> None:
    e = enc(LLAMA)
    assert (e.name, e.options["dim"], e.options["theta"]) == ("rotary", 16, 10000.0)
    assert opts({**LLAMA, "head_dim": 32})["dim"] == 32
    assert opts({**LLAMA, "rope_theta": 5e5})["theta"] == 5e5
    assert opts({"model_type": "mixtral", "head_dim": 8})["theta"] == 1e6  # table default


def test_v4_and_v5_equivalents_give_equal_encoders() -> None:
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"rope_theta": 5e5, "rope_scaling": {"type": "llama3", **LLAMA3}},
         {"rope_parameters": {"rope_theta": 5e5, **LLAMA3}}),
        ({"rope_theta": 1e6, "rope_scaling": {"type": "linear", "factor": 2.0}},
         {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}}),
        ({"rope_theta": 1e4, "partial_rotary_factor": 0.5},
         {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                              "partial_rotary_factor": 0.5}}),
    ]
    for old, new in pairs:
        assert enc({**LLAMA, **old}) == enc({**LLAMA, **new}), (old, new)
    neox = {"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4}
    assert enc({**neox, "rotary_pct": 0.25, "rotary_emb_base": 10000}) == enc(
        {**neox, "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.25}})


def test_partial_rotary() -> None:
    assert opts({**LLAMA, "partial_rotary_factor": 0.5})["rotary_dim"] == 8
    assert opts({"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4,
                 "rotary_pct": 0.5})["rotary_dim"] == 8
    assert opts({"model_type": "gpt_neox", "hidden_size": 64,  # the class default, 0.25
                 "num_attention_heads": 4})["rotary_dim"] == 4
    gptj = opts({"model_type": "gptj", "n_embd": 64, "n_head": 2, "rotary_dim": 8})
    assert (gptj["dim"], gptj["rotary_dim"], gptj["layout"]) == (32, 8, "interleaved")


def test_derived_scaling_defaults() -> None:
    dyn = opts({**LLAMA, "rope_scaling": {"type": "dynamic", "factor": 2.0}})["scaling"]
    assert dyn["original_max_position_embeddings"] == 256  # max_position_embeddings
    yarn = opts({**LLAMA, "rope_parameters": {"rope_type": "yarn",
                                               "original_max_position_embeddings": 64}})
    assert yarn["scaling"]["factor"] == 4.0  # 256 / 64
    yarn = opts({**LLAMA, "rope_parameters": {"rope_type": "yarn", "factor": 2.0}})
    assert yarn["scaling"]["original_max_position_embeddings"] == 256
    short = [1.0] * 8
    phi3: dict[str, Any] = {"model_type": "phi3", "hidden_size": 64, "num_attention_heads": 4,
            "max_position_embeddings": 1024, "original_max_position_embeddings": 128,
            "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": short,
                             "original_max_position_embeddings": 999}}
    lr = opts(phi3)["scaling"]
    assert (lr["original_max_position_embeddings"], lr["factor"]) == (128, 8.0)
    su = {**phi3, "rope_scaling": {**phi3["rope_scaling"], "type": "su"}}  # Phi-3's old name
    assert enc(su) == enc(phi3)


def test_deepseek_head_dim_and_layout_flag() -> None:
    ds = {"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 4,
          "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "rope_theta": 1e4}
    assert (opts(ds)["dim"], opts(ds)["layout"]) == (8, "interleaved")
    assert opts({**ds, "rope_interleave": False})["layout"] == "half"
    assert opts({**ds, "model_type": "deepseek_v2"})["layout"] == "interleaved"


@pytest.mark.parametrize("model_type", ["gptj", "codegen", "cohere", "glm", "glm4", "llama4_text",
                                        "ernie4_5", "helium"])
def test_interleaved_families(model_type: str) -> None:
    assert MODEL_CONVENTIONS[model_type]["layout"] == "interleaved"
    assert opts({"model_type": model_type, "head_dim": 8, "rope_theta": 1e4})["layout"] == \
        "interleaved"


def test_mrope_sections_and_interleaving() -> None:
    old: dict[str, Any] = {"model_type": "qwen2_vl", "hidden_size": 128, "num_attention_heads": 4,
           "rope_theta": 1e6, "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]}}
    new = {"model_type": "qwen2_vl", "text_config": {
        "model_type": "qwen2_vl_text", "hidden_size": 128, "num_attention_heads": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                            "mrope_section": [4, 6, 6]}}}
    e = enc(old)
    assert (e.name, e.options["sections"], e.options["interleaved"]) == ("mrope", (4, 6, 6), False)
    assert e == enc(new)
    q3 = {"model_type": "qwen3_vl", "text_config": {
        "model_type": "qwen3_vl_text", "head_dim": 16,
        "rope_parameters": {"rope_theta": 5e6, "mrope_section": [4, 2, 2]}}}
    assert opts(q3)["interleaved"] is True  # the table: Qwen3-VL's config does not say
    flagged = {**old, "rope_scaling": {**old["rope_scaling"], "mrope_interleaved": True,
                                       "mrope_section": [6, 5, 5]}}
    # Qwen2-VL's code rotates contiguous sections and reads no such key (nor does any
    # transformers model): the family's convention stands; a family the table does not know
    # reads the key (vLLM's reading)
    assert opts(flagged)["interleaved"] is False
    assert opts({**flagged, "model_type": "my_vl"})["interleaved"] is True
    bare = {"model_type": "qwen3_vl_text", "head_dim": 128, "rope_theta": 5e6}
    assert opts(bare)["sections"] == (24, 20, 20)  # the rotary module's default
    omni = {"model_type": "qwen2_5_omni", "thinker_config": {"text_config": new["text_config"]}}
    assert enc(omni) == e
    half = enc({**old, "partial_rotary_factor": 0.5,
                "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}})
    assert (half.options["rotary_dim"], half.options["sections"]) == (16, (2, 3, 3))
    with pytest.raises(ValueError, match="'sections'.*rotary_dim/2 = 8"):
        enc({**old, "partial_rotary_factor": 0.5})  # the sections of the whole head


def test_mrope_partial_rotary_families() -> None:
    """Qwen3.5 (interleaved axes), GLM-4V (interleaved pairs), GLM-4V-MoE: M-RoPE on the first
    rotary_dim = head_dim * partial_rotary_factor features."""
    qwen35 = {"model_type": "qwen3_5", "text_config": {
        "model_type": "qwen3_5_text", "head_dim": 64, "rope_parameters": {
            "rope_theta": 1e7, "mrope_section": [3, 3, 2], "partial_rotary_factor": 0.25}}}
    assert opts(qwen35) == {**opts(qwen35), "rotary_dim": 16, "sections": (3, 3, 2),
                            "interleaved": True, "layout": "half"}
    glm4v = {"model_type": "glm4v_text", "head_dim": 128, "rope_parameters": {
        "rope_theta": 1e4, "partial_rotary_factor": 0.5, "mrope_section": [8, 12, 12]}}
    assert opts(glm4v) == {**opts(glm4v), "rotary_dim": 64, "interleaved": False,
                           "layout": "interleaved"}
    moe = {**glm4v, "model_type": "glm4v_moe_text"}
    assert opts(moe) == {**opts(glm4v), "layout": "half"}


def test_variant_families_from_config_dicts() -> None:
    """Gemma 4's proportional full layers and their per_layer_config head_dim, DeepSeek-V4's
    [nope | rope] heads, nanochat's negative direction, Mistral 4's MLA partial factor, the
    head-width keys of Zamba2 and JetMoe, MiniMax-M3's unread rotary_dim."""
    gemma4 = {"model_type": "gemma4_text", "head_dim": 16, "num_hidden_layers": 2,
              "layer_types": ["sliding_attention", "full_attention"],
              "per_layer_config": {"01": {"head_dim": 64}},
              "rope_parameters": {
                  "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                  "full_attention": {"rope_type": "proportional", "rope_theta": 1e6,
                                     "partial_rotary_factor": 0.25}}}
    full = opts(gemma4, layer_type="full_attention")
    assert (full["dim"], full["rotary_dim"], full["scaling"]) == (64, None, {
        "type": "proportional", "partial_rotary_factor": 0.25, "factor": 1.0})
    assert opts(gemma4, layer_type=1) == full and opts(gemma4, layer_type=0)["dim"] == 16
    v4 = {"model_type": "deepseek_v4", "head_dim": 48, "qk_rope_head_dim": 16,
          "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 1 / 3}}
    main = opts(v4, layer_type="main")  # labels as DeepseekV4Config splits a flat config
    assert main == {**main, "dim": 48, "rotary_dim": 16, "rotary_features": "last",
                    "layout": "interleaved"}
    assert opts({"model_type": "nanochat", "head_dim": 16})["direction"] == "negative"
    mistral4 = {"model_type": "mistral4", "head_dim": 32, "qk_rope_head_dim": 16,
                "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.5}}
    assert (opts(mistral4)["dim"], opts(mistral4)["rotary_dim"]) == (16, None)
    assert opts({"model_type": "zamba2", "hidden_size": 64, "num_attention_heads": 4,
                 "attention_head_dim": 32, "use_mem_rope": True, "rope_theta": 1e4})["dim"] == 32
    with pytest.raises(NoPositionalEncodingError, match="use_mem_rope is false"):
        enc({"model_type": "zamba2", "attention_head_dim": 32, "use_mem_rope": False,
             "rope_theta": 1e4})
    assert opts({"model_type": "jetmoe", "hidden_size": 64, "num_attention_heads": 4,
                 "kv_channels": 32, "rope_theta": 1e4})["dim"] == 32
    minimax = {"model_type": "minimax_m3_vl_text", "head_dim": 32, "rotary_dim": 16,
               "rope_parameters": {"rope_theta": 1e4}}
    assert opts(minimax)["rotary_dim"] is None
    assert opts({**minimax, "model_type": "gptj"})["rotary_dim"] == 16


def test_per_layer_overrides_that_differ_and_new_convention_keys() -> None:
    cfg = {"model_type": "gemma4_text", "head_dim": 16, "num_hidden_layers": 3,
           "layer_types": ["full_attention"] * 3,
           "per_layer_config": {"1": {"head_dim": 64}, "2": {"sliding_window": 8}},
           "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    with pytest.raises(ConfigError, match="layers of type 'full_attention' differ in "
                                          "per_layer_config.*pass a layer index"):
        enc(cfg, layer_type="full_attention")
    assert opts(cfg, layer_type=1)["dim"] == 64
    assert opts(cfg, layer_type=2)["dim"] == 16  # sliding_window does not shape RoPE
    for key, bad in (("rotary_features", "middle"), ("direction", "up"),
                     ("reads_rotary_dim", "no"), ("mrope_map", (1, 2))):
        with pytest.raises(ValueError, match=f"{key}="):
            register_model_conventions("my_model", **{key: bad})
    register_model_conventions("my_model", direction="negative", rotary_features="last")
    try:
        o = opts({"model_type": "my_model", "head_dim": 16, "rotary_dim": 8, "rope_theta": 1e4})
        assert (o["direction"], o["rotary_features"], o["rotary_dim"]) == ("negative", "last", 8)
    finally:
        unregister_model_conventions("my_model")


# -- layer types and NoPE ---------------------------------------------------------------------
GEMMA3: dict[str, Any] = {"model_type": "gemma3_text", "head_dim": 8, "max_position_embeddings": 64,
          "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
          "rope_parameters": {
              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
              "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}


def test_layer_types_differ() -> None:
    with pytest.raises(ConfigError, match="sliding_attention.*full_attention"):
        enc(GEMMA3)
    full = enc(GEMMA3, layer_type="full_attention")
    assert (full.options["theta"], full.options["scaling"]["type"]) == (1e6, "linear")
    assert enc(GEMMA3, layer_type=0).options["scaling"] is None
    assert enc(GEMMA3, layer_type=2) == full
    with pytest.raises(ConfigError, match="unknown layer_type 'chunked'.*sliding_attention"):
        enc(GEMMA3, layer_type="chunked")
    with pytest.raises(ConfigError, match="layer index 3 is out of range"):
        enc(GEMMA3, layer_type=3)
    v4 = {"model_type": "gemma3_text", "head_dim": 8, "layer_types": GEMMA3["layer_types"],
          "rope_theta": 1e6, "rope_local_base_freq": 10000.0,
          "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    for lt in ("sliding_attention", "full_attention"):
        assert enc(v4, layer_type=lt) == enc(GEMMA3, layer_type=lt)
    same = {**GEMMA3, "rope_parameters": {"rope_theta": 1e4}}  # Gemma 2: one setting
    assert enc(same) == enc(same, layer_type="full_attention")


def test_nope_layers() -> None:
    llama4 = {"model_type": "llama4_text", "head_dim": 8, "rope_theta": 5e5,
              "num_hidden_layers": 4, "no_rope_layers": [1, 1, 1, 0],
              "layer_types": ["chunked_attention"] * 3 + ["full_attention"]}
    with pytest.raises(ConfigError, match="'full_attention' \\(no positional encoding\\)"):
        enc(llama4)
    with pytest.raises(NoPositionalEncodingError, match="layer 3 uses no positional encoding"):
        enc(llama4, layer_type=3)
    with pytest.raises(NoPositionalEncodingError, match="layer type 'full_attention'"):
        enc(llama4, layer_type="full_attention")
    assert enc(llama4, layer_type="chunked_attention").options["layout"] == "interleaved"
    assert enc(llama4, layer_type=0) == enc(llama4, layer_type="chunked_attention")
    bare = {"model_type": "llama4_text", "head_dim": 8, "num_hidden_layers": 8,
            "no_rope_layers": []}  # empty: the class default, every 4th layer NoPE
    with pytest.raises(NoPositionalEncodingError):
        enc(bare, layer_type=7)
    assert enc(bare, layer_type=6).name == "rotary"
    smol = {"model_type": "smollm3", "head_dim": 8, "rope_theta": 1e4, "num_hidden_layers": 8,
            "no_rope_layer_interval": 4, "layer_types": ["full_attention"] * 8}
    with pytest.raises(ConfigError, match="\\[3, 7\\] use no positional encoding"):
        enc(smol, layer_type="full_attention")
    assert enc(smol, layer_type=2).name == "rotary"
    with pytest.raises(NoPositionalEncodingError):
        enc(smol, layer_type=7)
    with pytest.raises(NoPositionalEncodingError, match="every layer.*use_rope is false"):
        enc({**LLAMA, "use_rope": False})
    nested_none = {**GEMMA3, "rope_parameters": {**GEMMA3["rope_parameters"],
                                                 "full_attention": None}}
    with pytest.raises(NoPositionalEncodingError, match="entry is None"):
        enc(nested_none, layer_type="full_attention")


# -- issue 42, item 10: layers without attention (LFM2's and LFM3's conv layers) ---------------

#: LFM3's layout: conv layers beside full and sliding attention, RoPE keyed by the attention types.
LFM3: dict[str, Any] = {
    "model_type": "lfm3", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
    "num_hidden_layers": 8, "layer_types": ["conv", "conv", "full_attention", "conv",
                                            "sliding_attention", "conv", "full_attention", "conv"],
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                        "full_attention": {"rope_type": "default", "rope_theta": 1e6,
                                           "partial_rotary_factor": 0.5}}}
#: LFM2's: one flat RoPE setting, conv layers beside full attention.
LFM2: dict[str, Any] = {
    "model_type": "lfm2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
    "layer_types": ["conv", "full_attention", "conv", "full_attention"],
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}


def _check_no_attention_layers(lfm3: Any, lfm2: Any) -> None:
    with pytest.raises(ConfigError) as info:
        enc(lfm3)
    message = str(info.value)
    assert "the layers use different positional encodings; pass layer_type= one of " in message
    assert "'full_attention' (RoPE" in message and "'sliding_attention' (RoPE" in message, message
    assert "'conv'" in message and "no attention" in message, message
    assert "no entry" not in message and "AutoConfig" not in message, message
    assert not isinstance(info.value, NoPositionalEncodingError)
    assert enc(lfm3, layer_type="full_attention").options["theta"] == 1e6
    assert enc(lfm3, layer_type=4) == enc(lfm3, layer_type="sliding_attention")
    for which in ("conv", 0, 7):
        with pytest.raises(NoPositionalEncodingError,
                           match="'conv'.*has no attention.*with attention: "
                                 "'(full|sliding)_attention', '(sliding|full)_attention'$"
                           ) as info:
            enc(lfm3, layer_type=which)
        assert (f"layer {which} " in str(info.value)) == isinstance(which, int), info.value
    assert enc(lfm2) == enc(lfm2, layer_type="full_attention") == enc(lfm2, layer_type=3)
    for which in ("conv", 2):
        with pytest.raises(NoPositionalEncodingError, match="'conv'.*has no attention"):
            enc(lfm2, layer_type=which)


def test_layers_without_attention_have_no_encoder() -> None:
    """Issue 42, item 10: a conv layer has no attention, so no positional encoding; the error
    for layers that differ names the attention layer types to choose from."""
    _check_no_attention_layers(LFM3, LFM2)
    # an entry for a layer type is read whatever its name (a linear attention with RoPE)
    rope_on_linear = {**LFM3, "layer_types": ["linear_attention", "full_attention"],
                      "num_hidden_layers": 2, "rope_parameters": {
                          **LFM3["rope_parameters"],
                          "linear_attention": {"rope_type": "default", "rope_theta": 5e4}}}
    assert enc(rope_on_linear, layer_type="linear_attention").options["theta"] == 5e4
    hybrid = {**LFM2, "model_type": "qwen3_next",
              "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    assert enc(hybrid) == enc(hybrid, layer_type="full_attention")
    with pytest.raises(NoPositionalEncodingError, match="'linear_attention'.*has no attention"):
        enc(hybrid, layer_type="linear_attention")


@pytest.mark.skipif("torch" not in BACKENDS, reason="transformers is in the torch env")
def test_layers_without_attention_from_transformers_configs() -> None:
    """The same from the transformers config objects of LFM3 and LFM2 (and from their
    ``to_dict()``); Qwen3-Next's and MiniMax's linear attention layers likewise."""
    transformers = pytest.importorskip("transformers")
    small = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    lfm3 = transformers.Lfm3Config(**small, head_dim=16, num_hidden_layers=8,
                                   layer_types=LFM3["layer_types"],
                                   rope_parameters=LFM3["rope_parameters"])
    lfm2 = transformers.Lfm2Config(**small, num_hidden_layers=4, full_attn_idxs=[1, 3],
                                   rope_parameters=LFM2["rope_parameters"])
    _check_no_attention_layers(lfm3, lfm2)
    _check_no_attention_layers(lfm3.to_dict(), lfm2.to_dict())
    default = transformers.Lfm3Config()  # its own defaults: a proportional full attention
    assert enc(default, layer_type="full_attention") == enc(default.to_dict(),
                                                            layer_type="full_attention")
    lfm2_moe = {"num_hidden_layers": 4, "layer_types": LFM2["layer_types"]}
    for name, kwargs in (("Qwen3NextConfig", {}), ("MiniMaxConfig", {}),
                         ("Lfm2MoeConfig", lfm2_moe)):
        cfg = getattr(transformers, name)(**kwargs)
        kinds = [t for t in dict.fromkeys(cfg.layer_types) if t != "full_attention"]
        assert kinds, name
        assert enc(cfg) == enc(cfg, layer_type="full_attention") == enc(cfg.to_dict())
        for kind in kinds:
            with pytest.raises(NoPositionalEncodingError, match="has no attention"):
                enc(cfg, layer_type=kind)


# -- issue 42, item 11: Llama 4's layer types from a config.json without layer_types -----------

LLAMA4_DICTS: dict[str, dict[str, Any]] = {
    "mask": {"no_rope_layers": [1, 1, 1, 0, 1, 1, 1, 0]},
    "empty-mask": {"no_rope_layers": []},        # the class default: every 4th layer NoPE
    "no-mask": {},
    "interval-2": {"no_rope_layer_interval": 2},
    "no-nope": {"no_rope_layers": [1] * 8},       # every layer RoPE: no full_attention layer
}


def _llama4(case: str) -> dict[str, Any]:
    return {"model_type": "llama4_text", "hidden_size": 64, "num_attention_heads": 4,
            "head_dim": 16, "num_hidden_layers": 8, "rope_theta": 5e5,
            "attention_chunk_size": 8192, **LLAMA4_DICTS[case]}


def _outcome(config: Any, layer_type: Any) -> Any:
    """The encoder, or the class of the error (messages may word the derivation)."""
    try:
        return enc(config, layer_type=layer_type)
    except ConfigError as exc:
        return type(exc)


@pytest.mark.parametrize("case", list(LLAMA4_DICTS))
def test_llama4_layer_types_from_a_config_dict(case: str) -> None:
    """Issue 42, item 11: without ``layer_types``, Llama 4's are derived as Llama4TextConfig
    does: a RoPE layer (no_rope_layers 1) is 'chunked_attention', a NoPE layer
    'full_attention'."""
    config = _llama4(case)
    assert enc(config, layer_type="chunked_attention") == enc(config, layer_type=0)
    if case == "no-nope":
        assert enc(config) == enc(config, layer_type="chunked_attention")
        with pytest.raises(ConfigError, match="unknown layer_type 'full_attention'; the "
                                              "config's layer types: 'chunked_attention'"):
            enc(config, layer_type="full_attention")
    else:
        with pytest.raises(NoPositionalEncodingError, match="layer type 'full_attention'"):
            enc(config, layer_type="full_attention")
        with pytest.raises(ConfigError, match="pass layer_type= one of 'chunked_attention' "
                                              r"\(RoPE.*'full_attention' \(no positional"):
            enc(config)
    with pytest.raises(ConfigError, match="unknown layer_type 'sliding_attention'.*"
                                          "'chunked_attention'"):
        enc(config, layer_type="sliding_attention")
    composite = {"model_type": "llama4", "text_config": config}
    assert enc(composite, layer_type="chunked_attention") == enc(config, layer_type=0)


def test_llama4_layer_types_need_the_layer_count() -> None:
    bare = {"model_type": "llama4_text", "head_dim": 16, "rope_theta": 5e5}
    for which in ("full_attention", "chunked_attention"):
        with pytest.raises(ConfigError, match="num_hidden_layers") as info:
            enc(bare, layer_type=which)
        assert "layer_types" in str(info.value) and "no_rope_layers" in str(info.value)
    huge = {**bare, "num_hidden_layers": 10**12}  # never listed
    assert enc(huge, layer_type="chunked_attention") == enc(huge, layer_type=0)
    with pytest.raises(NoPositionalEncodingError, match="layer type 'full_attention'"):
        enc(huge, layer_type="full_attention")


@pytest.mark.skipif("torch" not in BACKENDS, reason="transformers is in the torch env")
@pytest.mark.parametrize("case", list(LLAMA4_DICTS))
def test_llama4_dict_and_transformers_config_agree(case: str) -> None:
    transformers = pytest.importorskip("transformers")
    config = _llama4(case)
    obj = transformers.Llama4TextConfig(**{k: v for k, v in config.items() if k != "model_type"})
    for layer_type in ("chunked_attention", "full_attention", None, 0, 3, 7):
        assert _outcome(config, layer_type) == _outcome(obj, layer_type), (case, layer_type)


# -- T5 and ALiBi -----------------------------------------------------------------------------
def test_t5() -> None:
    t5 = {"model_type": "t5", "num_heads": 8, "relative_attention_num_buckets": 16,
          "relative_attention_max_distance": 64, "is_encoder_decoder": True}
    with pytest.raises(ConfigError, match="layer_type='encoder' or 'decoder'"):
        enc(t5)
    e, d = enc(t5, layer_type="encoder"), enc(t5, layer_type="decoder")
    assert (e.name, e.options["num_heads"], e.options["num_buckets"],
            e.options["max_distance"]) == ("t5", 8, 16, 64)
    assert (e.options["bidirectional"], d.options["bidirectional"]) == (True, False)
    assert enc({**t5, "is_decoder": True}) == d


def test_alibi() -> None:
    assert opts({"model_type": "bloom", "n_head": 12}) == {"num_heads": 12, "max_bias": 8.0}
    assert opts({"model_type": "falcon", "num_attention_heads": 8, "alibi": True}) == \
        {"num_heads": 8, "max_bias": 8.0}
    assert enc({"model_type": "falcon", "num_attention_heads": 8, "hidden_size": 64,
                "alibi": False}).name == "rotary"
    assert opts({"model_type": "mpt", "n_heads": 4, "attn_config": {"alibi": True}}) == \
        {"num_heads": 4, "max_bias": 8.0}
    assert opts({"model_type": "mpt", "n_heads": 4,  # MPT's alibi_bias_max is max_bias
                 "attn_config": {"alibi": True, "alibi_bias_max": 16}}) == \
        {"num_heads": 4, "max_bias": 16.0}
    with pytest.raises(ConfigError, match="MPT's ALiBi slopes for 56 heads"):
        enc({"model_type": "mpt", "n_heads": 56, "attn_config": {"alibi": True}})
    assert enc({"model_type": "baichuan", "hidden_size": 5120,
                "num_attention_heads": 40}).name == "alibi"
    assert enc({"model_type": "baichuan", "hidden_size": 4096,
                "num_attention_heads": 32}).name == "rotary"


# -- errors and the table ---------------------------------------------------------------------
def test_unknown_rope_type_names_it_model_type_and_registered_types() -> None:
    with pytest.raises(ConfigError) as info:
        enc({**LLAMA, "rope_parameters": {"rope_type": "xpos", "rope_theta": 1e4}})
    text = str(info.value)
    assert "'xpos'" in text and "'llama'" in text and "llama3, longrope, ntk, proportional" in text


def test_unsupported_families_say_so() -> None:
    with pytest.raises(ConfigError, match="'blt'.*not supported: a BLT config holds several "
                                          "transformers"):
        enc({"model_type": "blt", "hidden_size": 64, "num_attention_heads": 4})


def test_hunyuan_vl_xdrope_from_a_config_dict() -> None:
    """HunyuanOCR's config.json (legacy keys: type "xdrope", xdrope_section, a fixed NTK alpha):
    mrope with one axis per feature, chunk k of 2·section[k] features on axis k, and theta
    stretched by alpha^(d/(d-2)); written out here from HF's recomposition_frequencies and
    compute_ntk_alpha_rope_parameters (tests/test_xdrope.py runs HF's own code)."""
    hunyuan = {"model_type": "hunyuan_vl", "text_config": {
        "model_type": "hunyuan_vl_text", "head_dim": 16, "rope_theta": 1e4, "rope_scaling": {
            "type": "xdrope", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32, "beta_slow": 1,
            "mscale": 1.0, "mscale_all_dim": 1.0, "xdrope_section": [1, 2, 3, 2]}}}
    o = opts(hunyuan)
    assert (o["sections"], o["layout"], o["interleaved"], o["pair_axes"], o["scaling"]) == \
        ((1, 2, 3, 2), "half", False, None, None)
    assert o["feature_axes"] == (0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3)
    assert o["theta"] == 1e4 * 1000.0 ** (16 / 14)
    # without alpha, "dynamic" stays transformers' dynamic NTK (sequence-length dependent)
    plain = {**hunyuan["text_config"], "max_position_embeddings": 64,
             "rope_scaling": {"type": "dynamic", "factor": 2.0, "xdrope_section": [2, 2, 2, 2]}}
    o = opts(plain)
    assert (o["theta"], o["scaling"]["type"], o["feature_axes"][:4]) == (1e4, "dynamic",
                                                                        (0, 0, 0, 0))
    # HunYuan's dense and MoE models read the same alpha
    dense = {"model_type": "hunyuan_v1_dense", "head_dim": 32, "rope_parameters": {
        "rope_type": "dynamic", "rope_theta": 1e4, "alpha": 50.0, "factor": 1.0}}
    e = enc(dense)
    assert (e.name, e.options["theta"], e.options["scaling"]) == ("rotary",
                                                                   1e4 * 50.0 ** (32 / 30), None)


def test_ernie_vl_axis_map_and_config_aliases() -> None:
    """Ernie-4.5-VL's mrope_section (h, w, t): sections (t, h, w) and its pair map (h, w
    alternating over the first h + w pairs, then t), interleaved pairs; a transformers config's
    attribute_map aliases (Moonshine's num_attention_heads) are read."""
    ernie = {"model_type": "ernie4_5_vl_moe", "text_config": {
        "model_type": "ernie4_5_vl_moe_text", "head_dim": 20, "rope_parameters": {
            "rope_theta": 5e5, "mrope_section": [3, 3, 4]}}}
    o = opts(ernie)
    assert (o["sections"], o["layout"], o["interleaved"]) == ((4, 3, 3), "interleaved", False)
    assert o["pair_axes"] == (1, 2, 1, 2, 1, 2, 0, 0, 0, 0)

    class Moonshine:  # the duck of a PretrainedConfig with an attribute_map
        attribute_map: ClassVar[dict[str, str]] = {
            "num_attention_heads": "decoder_num_attention_heads"}

        def to_dict(self) -> dict[str, Any]:
            return {"model_type": "moonshine", "hidden_size": 160,
                    "decoder_num_attention_heads": 8, "rope_theta": 1e4}

    assert opts(Moonshine())["dim"] == 20  # type: ignore[arg-type]


def test_missing_keys_are_named() -> None:
    with pytest.raises(ConfigError, match="'mistral'.*no 'head_dim' and no 'hidden_size'"):
        enc({"model_type": "mistral", "num_attention_heads": 4})
    with pytest.raises(ConfigError, match="'gpt2'.*no positional-encoding settings"):
        enc({"model_type": "gpt2", "n_embd": 64})
    with pytest.raises(TypeError, match="PretrainedConfig or the dict"):
        per.from_hf_config(["not", "a", "config"])
    with pytest.raises(ValueError, match="rotary_dim"):  # odd: the encoder's own check
        enc({**LLAMA, "partial_rotary_factor": 0.33})  # 16·0.33 → 5


def test_register_model_conventions() -> None:
    cfg = {"model_type": "my_model", "head_dim": 8}
    with pytest.raises(ConfigError, match="register_model_conventions"):
        enc(cfg)
    register_model_conventions("my_model", layout="interleaved", theta=123.0)
    try:
        assert (opts(cfg)["layout"], opts(cfg)["theta"]) == ("interleaved", 123.0)
        with pytest.raises(ValueError, match="unknown key colour"):
            register_model_conventions("my_model", colour="red")
        with pytest.raises(ValueError, match="layout='diagonal'"):
            register_model_conventions("my_model", layout="diagonal")
    finally:
        unregister_model_conventions("my_model")
    assert "my_model" not in MODEL_CONVENTIONS


def test_pretrained_config_duck() -> None:
    class FakeConfig:  # what from_hf_config uses of a PretrainedConfig
        default_theta = 500000.0

        def to_dict(self) -> dict[str, Any]:
            return {"model_type": "mine", "head_dim": 8, "rope_parameters": {"rope_type":
                                                                            "default"}}

    assert per.from_hf_config(FakeConfig()).options["theta"] == 500000.0


def test_import_peregistry_imports_no_transformers() -> None:
    code = ("import sys, peregistry as per; per.from_hf_config({'model_type': 'llama', "
            "'head_dim': 8}); bad = [m for m in ('transformers', 'torch', 'jax') "
            "if m in sys.modules]; print(bad); assert not bad")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_cli_show_hf_config(tmp_path: Path) -> None:
    from peregistry.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA3))
    assert main(["show", "--hf-config", str(path), "--layer-type", "full_attention",
                 "--positions", "0:2", "--format", "json"]) == 0
    assert main(["show", "--hf-config", str(path)]) == 2  # the layers differ
    assert main(["show", "rotary", "--hf-config", str(path)]) == 2


# -- against transformers' own code (torch env) -----------------------------------------------
def _hf_cases() -> list[tuple[str, str, dict[str, Any], str]]:
    """(id, transformers config class, its kwargs, how to apply) for tiny models."""
    small = {"hidden_size": 32, "num_attention_heads": 2, "max_position_embeddings": 64}
    lr = [1.0, 1.5, 2.0, 3.0]
    return [
        ("llama", "LlamaConfig", small, "std"),
        ("llama-linear", "LlamaConfig", {**small, "rope_scaling": {
            "rope_type": "linear", "factor": 2.0}}, "std"),
        ("llama-dynamic", "LlamaConfig", {**small, "max_position_embeddings": 16,
                                          "rope_scaling": {"rope_type": "dynamic",
                                                           "factor": 2.0}}, "std"),
        # HunYuan's fixed NTK alpha ("dynamic" with an alpha; without it, dynamic NTK)
        ("hunyuan_v1_dense-alpha", "HunYuanDenseV1Config", {**small, "head_dim": 16,
                                                            "rope_parameters": {
            "rope_type": "dynamic", "rope_theta": 1e4, "alpha": 50.0, "factor": 1.0}}, "std"),
        ("hunyuan_v1_moe-dynamic", "HunYuanMoEV1Config", {**small, "head_dim": 16,
                                                          "max_position_embeddings": 16,
                                                          "rope_parameters": {
            "rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}}, "std"),
        ("llama-yarn", "LlamaConfig", {**small, "rope_scaling": {
            "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}}, "std"),
        ("llama-llama3", "LlamaConfig", {**small, "rope_theta": 5e5, "rope_scaling": {
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}, "std"),
        ("llama-longrope", "LlamaConfig", {**small, "head_dim": 8, "rope_scaling": {
            "rope_type": "longrope", "short_factor": lr, "long_factor": lr[::-1],
            "original_max_position_embeddings": 16}}, "std"),
        ("phi3-longrope", "Phi3Config", {**small, "original_max_position_embeddings": 16,
                                         "rope_scaling": {"type": "longrope",
                                                          "short_factor": lr * 2,
                                                          "long_factor": lr[::-1] * 2}}, "std"),
        ("gpt_neox", "GPTNeoXConfig", {**small, "rotary_pct": 0.5}, "std"),
        ("gptj", "GPTJConfig", {"n_embd": 32, "n_head": 2, "rotary_dim": 8}, "gptj"),
        ("gemma", "GemmaConfig", {**small, "head_dim": 16}, "std"),
        ("qwen2", "Qwen2Config", {**small, "rope_theta": 1e6}, "std"),
        ("cohere", "CohereConfig", small, "std"),
        ("glm", "GlmConfig", {**small, "head_dim": 16}, "std"),
        ("deepseek_v3", "DeepseekV3Config", {
            **small, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8,
            "kv_lora_rank": 8, "q_lora_rank": 8, "n_routed_experts": 4,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                             "original_max_position_embeddings": 16, "mscale": 1.0,
                             "mscale_all_dim": 1.0}}, "deepseek"),
        ("deepseek_v2", "DeepseekV2Config", {
            **small, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8,
            "kv_lora_rank": 8, "q_lora_rank": 8, "n_routed_experts": 4,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                             "original_max_position_embeddings": 16, "mscale": 0.707,
                             "mscale_all_dim": 0.707}}, "complex"),
        ("llama4_text", "Llama4TextConfig", {
            **small, "head_dim": 16, "num_hidden_layers": 4, "rope_scaling": {
                "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
         "complex-bshd:chunked_attention"),
        ("qwen2_vl", "Qwen2VLTextConfig", {**small, "rope_scaling": {
            "type": "mrope", "mrope_section": [2, 3, 3]}}, "mrope"),
        ("qwen3_vl", "Qwen3VLTextConfig", {**small, "head_dim": 16, "rope_parameters": {
            "rope_type": "default", "rope_theta": 5e6, "mrope_section": [4, 2, 2]}}, "mrope"),
        ("gemma3-full", "Gemma3TextConfig", {
            **small, "head_dim": 16, "num_hidden_layers": 2, "sliding_window_pattern": 2,
            "layer_types": ["sliding_attention", "full_attention"], "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}},
         "layer:full_attention"),
    ]


def _rotary_module(cfg: Any) -> Any:
    """The model's text rotary embedding module, built from ``cfg``."""
    import importlib

    model_type = cfg.model_type.removesuffix("_text")
    mod = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    return next(getattr(mod, n) for n in dir(mod)
                if n.endswith("RotaryEmbedding") and "Vision" not in n)(cfg)


def _hf_rotate(kind: str, cfg: Any, q: Any, pos: Any) -> Any:
    """What the model's own rotary module and apply function do to ``q`` (1, H, S, D)."""
    import importlib

    import torch

    model_type = cfg.model_type.removesuffix("_text")
    mod = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    if kind == "gptj":
        rd = cfg.rotary_dim
        sincos = mod.create_sinusoidal_positions(64, rd)[pos]  # (1, S, rd)
        sin, cos = torch.split(sincos, rd // 2, dim=-1)
        x = q.transpose(1, 2)  # GPT-J: (batch, seq, heads, dim)
        out = torch.cat([mod.apply_rotary_pos_emb(x[..., :rd], sin, cos), x[..., rd:]], dim=-1)
        return out.transpose(1, 2)
    rotary = _rotary_module(cfg)
    kind, _, layer = kind.partition(":")
    if kind.startswith("complex"):  # DeepSeek-V2, Llama 4: complex freqs_cis, view_as_complex
        freqs_cis = rotary(q, pos)
        if kind == "complex":
            return mod.apply_rotary_emb(q, q, freqs_cis)[0]
        return mod.apply_rotary_emb(q.transpose(1, 2), q.transpose(1, 2),  # (b, s, h, d)
                                    freqs_cis)[0].transpose(1, 2)
    cos, sin = rotary(q, pos, layer) if kind == "layer" else rotary(q, pos)
    if kind == "deepseek":
        return mod.apply_rotary_pos_emb_interleave(q, q, cos, sin)[0]
    rd = cos.shape[-1]
    out = mod.apply_rotary_pos_emb(q[..., :rd], q[..., :rd], cos, sin)[0]
    return torch.cat([out, q[..., rd:]], dim=-1)


@pytest.mark.skipif("torch" not in BACKENDS, reason="compared with transformers in the torch env")
@pytest.mark.parametrize("case", _hf_cases(), ids=lambda c: c[0])
def test_matches_transformers(case: tuple[str, str, dict[str, Any], str]) -> None:
    transformers = pytest.importorskip("transformers")
    import torch

    _, cls_name, kwargs, kind = case
    cfg = getattr(transformers, cls_name)(**kwargs)
    layer = kind.partition(":")[2] or None
    e: Any = per.from_hf_config(cfg, layer_type=layer)
    assert per.from_hf_config(json.loads(cfg.to_json_string()), layer_type=layer) == e
    dim = cfg.to_dict().get("qk_rope_head_dim") or e.options["dim"]
    seq = 40  # past every original_max_position_embeddings above: long/dynamic paths run
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, seq, dim, generator=gen)
    ids = torch.arange(seq)[None]
    if kind == "mrope":
        ids = torch.randint(0, seq, (3, 1, seq), generator=gen)
        ours = e.rotate(q, ids[:, :, None, :])
    else:
        ours = e.rotate(q, ids[0])
    if kind == "deepseek":  # HF returns the pairs de-interleaved: evens' results, then odds'
        ours = torch.cat([ours[..., 0::2], ours[..., 1::2]], dim=-1)
    theirs = _hf_rotate(kind, cfg, q, ids)
    # transformers forms angles in float32: off by ~eps·position, times |q| and the attention
    # factor (below 2 for every case here)
    eps = float(np.finfo(np.float32).eps)
    tol = 8 * eps * seq * float(q.abs().max()) * 2
    err = float((ours - theirs).abs().max())
    assert err <= tol, f"{case[0]}: max |ours - transformers| = {err:.3g} > {tol:.3g}; {e!r}"
    if kind.partition(":")[0] in ("std", "layer") and e.options["layout"] == "half":
        rotary = _rotary_module(cfg)  # the tables too, when the layouts agree (DESIGN.md)
        cos, sin = rotary(q, ids, layer) if layer else rotary(q, ids)
        our_cos, our_sin = e.cos_sin(ids, dtype=torch.float32)
        table_tol = 8 * eps * seq * 2
        assert float((our_cos - cos).abs().max()) <= table_tol, f"{case[0]}: cos"
        assert float((our_sin - sin).abs().max()) <= table_tol, f"{case[0]}: sin"
    # the control: the other pair layout is far off, so the comparison sees the layout
    flip = "half" if e.options["layout"] == "interleaved" else "interleaved"
    other: Any = per.get_encoder(e.name, **{**e.options, "layout": flip})
    wrong = other.rotate(q, ids[:, :, None, :] if kind == "mrope" else ids[0])
    if kind == "deepseek":
        wrong = torch.cat([wrong[..., 0::2], wrong[..., 1::2]], dim=-1)
    assert float((wrong - theirs).abs().max()) > 100 * tol, f"{case[0]}: layout not seen"


@pytest.mark.skipif("torch" not in BACKENDS, reason="compared with transformers in the torch env")
@pytest.mark.parametrize("heads", [8, 12])
def test_bloom_alibi_slopes_match_transformers(heads: int) -> None:
    transformers = pytest.importorskip("transformers")
    import torch
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    e: Any = per.from_hf_config(transformers.BloomConfig(n_head=heads, hidden_size=8 * heads))
    theirs = build_alibi_tensor(torch.ones(1, 2), heads, torch.float64)[:, 0, 1]  # slope · 1
    np.testing.assert_allclose(np.asarray(e.slopes, dtype=np.float64), theirs.numpy(),
                               rtol=4 * float(np.finfo(np.float32).eps))


@pytest.mark.skipif("torch" not in BACKENDS, reason="compared with transformers in the torch env")
@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_t5_buckets_match_transformers(stack: str) -> None:
    transformers = pytest.importorskip("transformers")
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    cfg = transformers.T5Config(num_heads=2, d_model=16, d_kv=8, relative_attention_num_buckets=8,
                                relative_attention_max_distance=20)
    e: Any = per.from_hf_config(cfg, layer_type=stack)
    table = np.repeat(np.arange(8, dtype=np.float64)[:, None], 2, axis=1)  # bias = bucket
    pos = np.arange(48)
    ours = e.bias(pos, pos, params={"table": table})[0]
    rel = torch.arange(48)[None, :] - torch.arange(48)[:, None]  # k - q, as T5Attention
    bucket: Any = T5Attention._relative_position_bucket
    theirs = bucket(rel, bidirectional=stack == "encoder", num_buckets=8, max_distance=20)
    np.testing.assert_array_equal(ours, theirs.numpy())

"""``peregistry.integrations.transformers`` on tiny random models of ten families (issue 31,
item 1): patched, each model's logits stay within float32 drift of its own, greedy
``generate()`` gives the same tokens with the KV cache and left padding, ``torch.compile``
works, and ``unpatch`` gives the model's own code back bit for bit. The reference is the model
itself, unpatched. Torch env only (transformers is installed there)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

if "torch" not in BACKENDS:
    pytest.skip("torch not selected (PEREGISTRY_BACKENDS)", allow_module_level=True)
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from peregistry.integrations.transformers import patch, patched, unpatch  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps)
BASE: dict[str, Any] = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                            pad_token_id=0)
CAUSAL: dict[str, dict[str, Any]] = {
    "llama": dict(rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 16, "rope_theta": 5e5}),
    "qwen2": {},
    # 6 layers: sliding and full attention layer types, each with its own RoPE
    "gemma3_text": dict(num_hidden_layers=6, head_dim=16, sliding_window=8),
    "phi3": dict(rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 8,
                                  "long_factor": [2.0] * 8, "rope_theta": 1e4},
                 original_max_position_embeddings=16, max_position_embeddings=64),
    "gpt_neox": {},  # partial rotary (0.25)
    "deepseek_v3": dict(rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                         "original_max_position_embeddings": 16,
                                         "rope_theta": 1e4},
                        max_position_embeddings=64, qk_rope_head_dim=8, qk_nope_head_dim=8,
                        v_head_dim=16, kv_lora_rank=16, q_lora_rank=None, n_routed_experts=4,
                        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
                        moe_intermediate_size=32, num_key_value_heads=4),
    # every 4th layer NoPE (no_rope_layer_interval), interleaved complex freqs_cis
    "llama4_text": dict(head_dim=16, intermediate_size_mlp=128, num_local_experts=2),
    "bloom": dict(n_layer=2, n_head=4),
}


def _quiet() -> Any:
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    return warnings.catch_warnings()


def causal(model_type: str) -> Any:
    with _quiet():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        config = transformers.AutoConfig.for_model(model_type, **{**BASE, **CAUSAL[model_type]})
        return transformers.AutoModelForCausalLM.from_config(config).eval()


def t5() -> Any:
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                   num_heads=4, decoder_start_token_id=0, pad_token_id=0)
    return transformers.T5ForConditionalGeneration(config).eval()


def qwen2_vl() -> Any:
    torch.manual_seed(0)
    config = transformers.Qwen2VLConfig(
        text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=160,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                          "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, patch_size=2,
                           spatial_merge_size=2, temporal_patch_size=2, in_channels=3),
        image_token_id=150, video_token_id=151, vision_start_token_id=152,
        vision_end_token_id=153)
    return transformers.Qwen2VLForConditionalGeneration(config).eval()


def inputs(kind: str) -> dict[str, Any]:
    """A batch of two, the first row left-padded (right-padded for T5's encoder)."""
    gen = torch.Generator().manual_seed(1)
    if kind == "qwen2_vl":  # text, one 4x4-patch image (4 tokens after merging), text
        ids = torch.cat([torch.randint(1, 100, (1, 3), generator=gen),
                         torch.tensor([[152, 150, 150, 150, 150, 153]]),
                         torch.randint(1, 100, (1, 4), generator=gen)], 1)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "pixel_values": torch.randn(16, 24, generator=gen),
                "image_grid_thw": torch.tensor([[1, 4, 4]]),
                "mm_token_type_ids": (ids == 150).long()}
    ids = torch.randint(1, 128, (2, 20), generator=gen)
    mask = torch.ones_like(ids)
    if kind == "t5":
        mask[0, 15:] = 0
    else:
        mask[0, :5] = 0
    ids = ids * mask  # padding is the pad token
    return {"input_ids": ids, "attention_mask": mask}


def logits(model: Any, kind: str, batch: dict[str, Any]) -> Any:
    with torch.no_grad():
        if kind == "t5":
            dec = torch.randint(1, 128, (2, 6), generator=torch.Generator().manual_seed(2))
            return model(**batch, decoder_input_ids=dec).logits
        return model(**batch).logits


def greedy(model: Any, batch: dict[str, Any]) -> Any:
    with torch.no_grad():
        return model.generate(**batch, max_new_tokens=8, do_sample=False, use_cache=True)


MODELS: dict[str, Callable[[], Any]] = {
    **{t: (lambda t=t: causal(t)) for t in CAUSAL}, "t5": t5, "qwen2_vl": qwen2_vl}


def _replaced(model: Any) -> list[str]:
    """The modules whose positional code is now peregistry's (bound on the instance)."""
    out = []
    for name, module in model.named_modules():
        for attr in ("forward", "compute_bias", "build_alibi_tensor"):
            bound = module.__dict__.get(attr)
            if getattr(getattr(bound, "__func__", None), "__module__", "") == \
                    "peregistry.integrations.transformers":
                out.append(f"{name}.{attr}")
    return out


@pytest.mark.parametrize("kind", list(MODELS))
def test_patched_model_is_the_model(kind: str) -> None:
    model = MODELS[kind]()
    batch = inputs(kind)
    want = logits(model, kind, batch)
    want_tokens = greedy(model, batch)
    assert patch(model) is model
    assert _replaced(model), "nothing was patched"
    got = logits(model, kind, batch)
    # float32 angles in the model's tables (peregistry's are exact): a few eps per layer
    tol = 32 * EPS32 * max(1.0, float(want.abs().max()))
    err = float((got - want).abs().max())
    assert err <= tol, f"{kind}: patched logits differ by {err:.3g} > {tol:.3g}"
    assert torch.equal(greedy(model, batch), want_tokens)
    assert unpatch(model) is model
    assert not _replaced(model)
    assert torch.equal(logits(model, kind, batch), want)  # the model's own code, bit for bit


@pytest.mark.parametrize("kind", ["llama", "gemma3_text"])
def test_torch_compile_of_a_patched_model(kind: str) -> None:
    import os

    from peregistry.backends._torch import COMPILE_BACKEND_ENV

    model = patch(MODELS[kind]())
    batch = inputs(kind)
    want = logits(model, kind, batch)
    compiled = torch.compile(model, fullgraph=True,
                             backend=os.environ.get(COMPILE_BACKEND_ENV, "aot_eager"))
    got = logits(compiled, kind, batch)
    assert float((got - want).abs().max()) <= 32 * EPS32 * max(1.0, float(want.abs().max()))


def test_patch_is_idempotent_and_patched_restores() -> None:
    model = causal("llama")
    batch = inputs("llama")
    own = logits(model, "llama", batch)
    with patched(model) as m:
        assert m is model and _replaced(model)
        first = _replaced(model)
        patch(model)  # a second patch changes nothing
        assert _replaced(model) == first
    assert not _replaced(model)
    assert torch.equal(logits(model, "llama", batch), own)
    patch(model)
    with patched(model):
        pass
    assert _replaced(model)  # patched before the block: stays patched


def test_unsupported_model_names_its_type() -> None:
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64)
    model = transformers.GPT2LMHeadModel(config)
    with pytest.raises(ValueError, match="model type 'gpt2' has no positional encoding"):
        patch(model)
    assert not hasattr(model, "_peregistry_patched")


def test_tables_that_differ_are_refused_and_nothing_is_patched() -> None:
    model = causal("qwen2")
    model.config.rope_parameters["rope_theta"] = 1234.0  # the module was built with 10000
    with pytest.raises(ValueError, match="model type 'qwen2'.*does not reproduce; not patched"):
        patch(model)
    assert not _replaced(model) and not hasattr(model, "_peregistry_patched")



def test_bench_row(capsys: pytest.CaptureFixture[str]) -> None:
    from peregistry.cli import main

    assert main(["bench", "hf-llama-patched", "--backend", "torch", "--backend", "numpy",
                 "--quick", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    torch_row = next(line.split() for line in out.splitlines()
                     if line.startswith("hf-llama-patched") and " torch " in line)
    assert torch_row[-1].endswith("x") and torch_row[-2].endswith("x"), torch_row
    assert "skipped hf-llama-patched on numpy: a transformers model runs on torch" in out


def test_a_copy_of_a_patched_model_unpatches_itself_only() -> None:
    import copy

    model = patch(causal("llama"))
    twin = copy.deepcopy(model)
    assert _replaced(twin)
    unpatch(twin)
    assert not _replaced(twin) and _replaced(model)
    unpatch(model)
    assert not _replaced(model)
    batch = inputs("llama")
    assert torch.equal(logits(model, "llama", batch), logits(twin, "llama", batch))


def test_a_model_cast_before_patching_is_refused_with_the_reason() -> None:
    model = causal("llama").to(torch.bfloat16)  # casts inv_freq too
    with pytest.raises(ValueError, match="buffers are torch.bfloat16.*patch the model before "
                                         "casting it"):
        patch(model)
    cast_after = patch(causal("llama")).to(torch.bfloat16)  # the documented order
    batch = inputs("llama")
    own = logits(unpatch(causal("llama")).to(torch.bfloat16), "llama", batch)
    got = logits(cast_after, "llama", batch)
    assert got.dtype == torch.bfloat16
    assert float((got.float() - own.float()).abs().max()) <= 0.1 * float(own.abs().max())


def test_only_modules_that_take_position_ids_are_patched() -> None:
    class TimeRotaryEmbedding(torch.nn.Module):  # an audio tower's, by its signature
        def forward(self, timestamps: Any, seq_len: int) -> Any:
            return timestamps

    model = causal("qwen2")
    model.time_rotary = TimeRotaryEmbedding()
    patch(model)
    assert _replaced(model) == ["model.rotary_emb.forward"]


def test_one_module_per_kind_of_layer_is_matched_to_its_encoder() -> None:
    """Molmo2: a scaled and an unscaled rotary module, chosen per layer by
    rope_scaling_layers; each gets the encoder whose tables it gives."""
    config = transformers.Molmo2TextConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, rope_scaling_layers=[0],
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4})
    torch.manual_seed(0)
    model = transformers.Molmo2TextModel(config).eval()
    ids = torch.randint(1, 128, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(ids).last_hidden_state
        patch(model)
        got = model(ids).last_hidden_state
    assert len(_replaced(model)) == 2
    assert float((got - want).abs().max()) <= 32 * EPS32 * max(1.0, float(want.abs().max()))


# -- issue 42, item 2: patch() neither reads nor changes what the model ran before -------------

#: Rotary modules whose tables change with the length of what they ran: dynamic NTK (grown
#: past original_max_position_embeddings, reset below it) and LongRoPE (long or short factors).
#: ``original_max_position_embeddings`` 16 (at most the probe's length) or 32 (above it).
STATEFUL: dict[str, dict[str, Any]] = {
    "dynamic-16": dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4,
                                        "original_max_position_embeddings": 16},
                       max_position_embeddings=16),
    "dynamic-32": dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4,
                                        "original_max_position_embeddings": 32},
                       max_position_embeddings=32),
    "longrope": CAUSAL["phi3"],
}


def _stateful(kind: str) -> Any:
    model_type = "phi3" if kind == "longrope" else "llama"
    with _quiet():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        config = transformers.AutoConfig.for_model(model_type, **{**BASE, **STATEFUL[kind]})
        return transformers.AutoModelForCausalLM.from_config(config).eval()


def _rotary_state(model: Any) -> dict[str, Any]:
    """Every buffer and attribute of the model's rotary modules (the patch's own bound
    methods and records aside): the tensors themselves (their identity) and copies of their
    values."""
    out: dict[str, Any] = {}
    for name, module in model.named_modules():
        if not type(module).__name__.endswith("RotaryEmbedding"):
            continue
        for key, value in module.__dict__.items():
            if key in ("forward", "_peregistry_saved", "_buffers"):
                continue
            out[f"{name}.{key}"] = (value, value.clone()) if torch.is_tensor(value) else value
        for key, value in module._buffers.items():
            out[f"{name}.buffer:{key}"] = (value, None if value is None else value.clone())
    return out


def _same_state(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before.keys() == after.keys(), set(before) ^ set(after)
    for key, value in before.items():
        now = after[key]
        if isinstance(value, tuple) and len(value) == 2 and torch.is_tensor(value[0]):
            assert isinstance(now, tuple) and now[0] is value[0], f"{key}: {now!r:.60} now"
            assert value[0].dtype == value[1].dtype and torch.equal(now[0], value[1]), \
                f"{key}: changed in place"
        else:
            assert now == value, f"{key}: {value!r} -> {now!r}"


@pytest.mark.parametrize("kind", list(STATEFUL))
def test_patch_of_a_model_that_ran_a_long_prompt(kind: str) -> None:
    """The probe runs on a copy of the module from its initial state: a model that ran a prompt
    past original_max_position_embeddings is patched, and its modules are left as they were
    (unpatched, it gives the logits of a twin that was never patched, bit for bit)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 128, (1, 100), generator=gen)
    model, twin = _stateful(kind), _stateful(kind)
    with torch.no_grad():
        model(ids)
        twin(ids)
    before = _rotary_state(model)
    patch(model)
    assert _replaced(model)
    _same_state(before, _rotary_state(model))
    unpatch(model)
    _same_state(before, _rotary_state(model))
    with torch.no_grad():
        assert torch.equal(model(ids[:, :80]).logits, twin(ids[:, :80]).logits)
        assert torch.equal(model(ids[:, :8]).logits, twin(ids[:, :8]).logits)


@pytest.mark.parametrize("kind", list(STATEFUL))
def test_a_refused_patch_leaves_the_modules_as_they_were(kind: str) -> None:
    model = _stateful(kind)
    with torch.no_grad():
        model(torch.randint(1, 128, (1, 100), generator=torch.Generator().manual_seed(1)))
    model.config.rope_parameters["rope_theta"] = 1234.0  # the module was built with 10000
    before = _rotary_state(model)
    with pytest.raises(ValueError, match="does not reproduce; not patched"):
        patch(model)
    assert not _replaced(model)
    _same_state(before, _rotary_state(model))


@pytest.mark.parametrize(("model_type", "extra"), [
    ("lfm3", dict(head_dim=16, num_hidden_layers=8)),  # conv, full and sliding attention
    ("lfm2", dict(num_hidden_layers=4, full_attn_idxs=[1, 3])),  # conv and full attention
])
def test_a_model_with_conv_layers_is_patched(model_type: str, extra: dict[str, Any]) -> None:
    """Issue 42, item 10: layers without attention (LFM's conv layers) have no positional
    encoding; the rotary module serves the attention layer types, and is patched."""
    with _quiet():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        config = transformers.AutoConfig.for_model(model_type, **{**BASE, **extra})
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
    assert "conv" in config.layer_types
    batch = inputs(model_type)
    want = logits(model, model_type, batch)
    patch(model)
    assert _replaced(model) == ["model.rotary_emb.forward"]
    got = logits(model, model_type, batch)
    assert float((got - want).abs().max()) <= 32 * EPS32 * max(1.0, float(want.abs().max()))
    unpatch(model)
    assert torch.equal(logits(model, model_type, batch), want)

"""The cost of :func:`peregistry.integrations.transformers.patch`: a tiny random Llama's forward,
patched against the same model unpatched (a copy with the same weights), on torch."""

from __future__ import annotations

import copy
import importlib.util
from typing import Any

from ._cases import Bench, BenchSkipped, Case


def bench_hf_llama_patched(b: Bench, quick: bool) -> Case:
    """A prefill of a 2-layer Llama (hidden 256, 8 heads of 32, llama3 scaling) through
    ``patch(model)`` against the unpatched model: "hand-written" is transformers' own code."""
    if b.backend.name != "torch":
        raise BenchSkipped("a transformers model runs on torch")
    if importlib.util.find_spec("transformers") is None:
        raise BenchSkipped("transformers is not installed (pip install peregistry[transformers])")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..integrations.transformers import patch

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=4, vocab_size=1024,
                         rope_parameters={"rope_type": "llama3", "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 1024,
                                          "rope_theta": 500000.0})
    theirs: Any = LlamaForCausalLM(config)
    theirs.eval()
    ours = patch(copy.deepcopy(theirs))
    seq = 32 if quick else 512
    ids = torch.randint(0, 1024, (1, seq), generator=torch.Generator().manual_seed(0))

    def run(model: Any) -> Any:
        with torch.no_grad():
            return model(ids).logits

    out = run(ours)
    return Case(lambda: run(ours), lambda: run(theirs), out.clone,
                f"Llama 2 layers, 1x{seq} tokens")

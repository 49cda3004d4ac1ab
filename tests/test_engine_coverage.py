"""Which branches of vLLM's and SGLang's rotary dispatch ``from_hf_config`` reproduces (issue 46).

``tests/data/engine_rope_keys.json`` lists every branch of both engines' ``get_rope``, the config
keys it reads, a config that reaches it and what peregistry builds for that config. A branch
peregistry does not reproduce yet is in :data:`EXPECTED_MISSING`, held exactly: a branch newly
covered must leave it, and a new engine branch (a new release's key) must be classified here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import peregistry as per

pytestmark = pytest.mark.backend_free  # from_hf_config on dicts: the same in every env

DATA = json.loads((Path(__file__).parent / "data" / "engine_rope_keys.json").read_text("utf-8"))

#: Branches without a mapped encoder, and why (docs/porting.md, "Serving engines").
EXPECTED_MISSING: dict[str, str] = {}

BRANCHES = [(f"{engine}:{b['key']}", b) for engine, e in DATA["engines"].items()
            for b in e["branches"]]
BASE = {"hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 32768,
        "rope_theta": 10000.0}


def test_the_list_of_missing_branches_is_exact() -> None:
    """Every branch is classified, and the expected-missing list is exactly the unmapped ones."""
    keys = [k for k, _ in BRANCHES]
    assert len(keys) == len(set(keys)), "a branch is listed twice"
    missing = {k for k, b in BRANCHES if b["peregistry"] is None}
    assert missing - EXPECTED_MISSING.keys() == set(), "new unmapped branches: classify them"
    assert EXPECTED_MISSING.keys() - missing == set(), "covered now: remove from EXPECTED_MISSING"


@pytest.mark.parametrize(("key", "branch"), [b for b in BRANCHES if b[1]["peregistry"]],
                         ids=[k for k, b in BRANCHES if b["peregistry"]])
def test_mapped_branches_build_their_encoder(key: str, branch: dict[str, Any]) -> None:
    """The branch's config, read as its engine reads it (``engine=``), builds the encoder and
    scaling type the list names."""
    config = {**BASE, **branch["sample"]}
    enc = per.from_hf_config(config, engine=key.split(":")[0],
                             layer_type=branch.get("layer_type"))
    want = branch["peregistry"]
    assert enc.name == want["encoder"], key
    scaling = enc.options.get("scaling")
    assert (None if scaling is None else scaling["type"]) == want["scaling"], key


def test_missing_branches_do_not_silently_pass_for_covered() -> None:
    """A missing branch's config (none today; a new engine release may add some) does not build
    the engine's encoder: where from_hf_config accepts it, the result is plain ``rotary``, not
    what the engine builds (documented)."""
    for key, branch in BRANCHES:
        if branch["peregistry"] is not None or branch["sample"] is None:
            continue
        try:
            enc = per.from_hf_config({**BASE, **branch["sample"]})
        except (ValueError, TypeError):
            continue
        assert enc.name == "rotary", key

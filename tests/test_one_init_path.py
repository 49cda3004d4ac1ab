"""One init path (issue 14, item 3): a learned plugin that keeps the documented base
``Encoder.init`` passes the whole suite, as the built-ins (``LearnedParams``) do. The suite's
float64 NumPy reference uses the encoder's own ``init`` with the case's seed, so any ``init`` whose
narrower params round its float64 ones is compared with the right values."""

from __future__ import annotations

from typing import Any

import pytest

import peregistry as per
from peregistry.plugin import Ctx, LearnedParams, clip_distance, distance, gather
from peregistry.testing import check_encoder
from peregistry.testing._core import selected_backends


class PlainInitTable(per.RelativeEmbedding):
    """The docs' ``ClippedTable`` without ``LearnedParams``: the base class's ``init``."""

    name = "test-plain-init-table"
    max_distance = per.Option(int, 4)
    dim = per.Option(int, 6)

    @property
    def out_dim(self) -> int:
        return self.dim

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"table": (2 * self.max_distance + 1, self.dim)}

    def _embed(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        m = self.max_distance
        idx = clip_distance(distance(q, k, ctx=ctx), -m, m, ctx=ctx) + m
        return gather(params["table"], idx, axis=0, ctx=ctx)


class MixinTable(LearnedParams, PlainInitTable):
    name = "test-mixin-table"


@pytest.mark.parametrize("backend", [b.name for b in selected_backends()])
@pytest.mark.parametrize("cls", [PlainInitTable, MixinTable], ids=lambda c: c.name)
def test_either_init_passes_the_whole_suite(cls: type[per.Encoder], backend: str) -> None:
    report = check_encoder(cls(), backends=backend)
    assert report.ok, str(report)
    assert any(r.check == "check_matches_float64_numpy" and r.status == "passed"
               for r in report.rows)

"""``peregistry bench``: each encoder against plain hand-written code in the same framework.

::

    peregistry bench                                  # every benchmarked encoder, every installed framework
    peregistry bench rotary alibi --backend torch     # some of them
    peregistry bench sinusoidal --backend numpy --quick

For each encoder and backend three things are timed *in one run, interleaved* (ours,
hand-written, copy, ours, hand-written, copy, ... in a rotating order, so that drifts of the
machine hit all three alike), and the medians are compared:

* **ours** — the peregistry encoder on the framework's arrays;
* **hand-written** — the plain, obvious code a user would write in that framework, calling the
  framework directly (:mod:`peregistry.bench._hand`: one text serves NumPy, PyTorch,
  ``jax.numpy`` and ``array_api_strict``, which spell these calls alike);
* **copy** — copying an array of the output's size and dtype: the floor of any function that
  must write that many bytes.

The frameworks are reached through their backend adapters (:class:`peregistry.Backend`): all
three run as the framework's users run code (compiled where :attr:`Backend.runs_jitted`, i.e.
``jax.jit`` on JAX) and each timing waits for the result (:meth:`Backend.block_until_ready`).

The table shows the medians and the ratios ``ours / hand-written`` and ``ours / copy``. The
shapes are those of a model's prefill (``--quick``: small shapes and few repetitions, for a
smoke test). Timing values depend on the machine: compare ratios, not milliseconds. Every
built-in encoder has a benchmark (:data:`BENCHMARKS`); a pair whose hand-written code needs a
spelling the framework refuses (``table[idx]`` on array_api_strict) is not timed: the table
shows it as skipped and a note below the table says why.
"""

from __future__ import annotations

from ._cases import BENCHMARKS, Bench, BenchSkipped, Case
from ._compiled import BENCH_ROTATIONS
from ._hand import (
    hand_alibi,
    hand_learned,
    hand_learned_2d,
    hand_mrope,
    hand_rotary,
    hand_shaw,
    hand_sinusoidal,
    hand_t5,
    hand_transformer_xl,
)
from ._hf import bench_hf_llama_patched
from ._timing import (
    FRAMEWORKS,
    BenchRow,
    Progress,
    format_bench_table,
    installed_frameworks,
    run_bench,
    stderr_if_tty,
    time_interleaved,
)

BENCHMARKS["hf-llama-patched"] = bench_hf_llama_patched  # torch only; needs transformers
BENCHMARKS.update(BENCH_ROTATIONS)  # torch.compile's rows (torch only)

__all__ = ["BENCHMARKS", "FRAMEWORKS", "Bench", "BenchRow", "BenchSkipped", "Case", "Progress",
           "format_bench_table", "hand_alibi", "hand_learned", "hand_learned_2d", "hand_mrope",
           "hand_rotary", "hand_shaw", "hand_sinusoidal", "hand_t5", "hand_transformer_xl",
           "installed_frameworks", "run_bench", "stderr_if_tty", "time_interleaved"]

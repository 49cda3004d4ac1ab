"""PyTorch adapter for training: any peregistry encoder as a ``torch.nn.Module``.

``import peregistry`` never imports torch; this module does (import it yourself when you train
in PyTorch)::

    import torch
    import peregistry as per
    from peregistry.torch import EncoderModule     # (= peregistry.integrations.torch)

    pos = EncoderModule(per.get_encoder("learned", num_positions=512, dim=64), seed=0)
    opt = torch.optim.Adam(pos.parameters(), lr=1e-2)
    out = pos(torch.arange(10))          # enc.encode(positions, params=<the nn.Parameters>)

The learned params are ``nn.Parameter`` entries of an ``nn.ParameterDict`` (``pos.params``), so
``state_dict``/``load_state_dict``, ``.to(device, dtype)``, optimizers, DDP and ``torch.compile``
see them as usual (keys ``params.table``, ``params.row``, ``params.col``). Each call passes the
current parameters to the encoder: nothing derived from them is cached, so every optimizer step
is seen by the next forward and no autograd graph outlives its backward (unlike a shape-keyed
cache, such as transformers 5.23's ``DetrLearnedPositionEmbedding``).

``forward`` dispatches on the encoder's kind: ``absolute`` → ``encode(positions)``, ``bias`` →
``bias(q, k)``, ``relative-embedding`` → ``embed(q, k)``, ``rotary`` → ``rotate(x, positions)``.
With ``dtype=None`` the output has the parameters' dtype (after ``.to(torch.float64)`` it is
float64); encoders without params give ``torch.get_default_dtype()``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..kinds.base import Encoder

__all__ = ["EncoderModule"]


class EncoderModule(nn.Module):
    """An encoder with its learned params as ``nn.Parameter`` s.

    :param encoder: an encoder object, e.g. ``per.get_encoder("t5", num_heads=8)``.
    :param seed: seed of ``encoder.init`` (the same values as in NumPy/JAX for that seed).
    :param dtype: dtype of the params (default ``torch.get_default_dtype()``).
    :param device: device of the params.
    :param params: initial values instead of ``encoder.init`` (any framework's arrays; copied).
    """

    def __init__(self, encoder: Encoder, *, seed: int = 0, dtype: Any = None, device: Any = None,
                 params: Any = None) -> None:
        """Register the encoder's learned params (``encoder.init`` with ``seed``, or copies of
        ``params``) as ``nn.Parameter`` s of ``self.params``; none for a parameter-free one."""
        super().__init__()
        if not isinstance(encoder, Encoder):
            raise TypeError(f"EncoderModule: encoder must be a peregistry encoder (from "
                            f"per.get_encoder), got {type(encoder).__qualname__}")
        self.encoder = encoder
        self.params = nn.ParameterDict()
        if params is not None and not encoder.learned:
            raise TypeError(f"EncoderModule: {encoder.name} has no learned parameters; got "
                            f"params={params!r}")
        if encoder.learned:
            if params is None:
                values = encoder.init(torch, seed=seed, dtype=dtype, device=device)
            else:
                from .._convert import convert

                values = convert(params, torch, device)
                values = {k: v.to(dtype=dtype) if dtype is not None else v
                          for k, v in values.items()}
            for key, value in values.items():
                self.params[key] = nn.Parameter(value.detach().clone())

    # -- calls -----------------------------------------------------------------------------------
    def _current(self) -> dict[str, Any] | None:
        """The parameters as the encoder's ``params=`` (None if it learns none)."""
        return dict(self.params.items()) if self.encoder.learned else None

    def _dtype(self, dtype: Any) -> Any:
        """The output dtype: ``dtype``, else the parameters' for a learned encoder."""
        if dtype is None and self.encoder.learned:
            return next(iter(self.params.values())).dtype
        return dtype

    def forward(self, *args: Any, dtype: Any = None, **kwargs: Any) -> Any:
        """The encoder's method for its kind, with this module's params."""
        enc: Any = self.encoder
        kind = enc.kind
        if kind == "absolute":
            return enc.encode(*args, params=self._current(), dtype=self._dtype(dtype), **kwargs)
        if kind == "bias":
            return enc.bias(*args, params=self._current(), dtype=self._dtype(dtype), **kwargs)
        if kind == "relative-embedding":
            return enc.embed(*args, params=self._current(), dtype=self._dtype(dtype), **kwargs)
        if kind == "rotary":
            if dtype is not None:
                raise TypeError(f"{enc.name}: rotary encoders return x's dtype; dtype= is not "
                                f"accepted")
            return enc.rotate(*args, params=self._current(), **kwargs)
        raise TypeError(f"EncoderModule: no forward for encoders of kind {kind!r}")

    def grid(self, h: int, w: int, *, dtype: Any = None) -> Any:
        """``encoder.grid(h, w)`` (``learned-2d``): the ``(h, w, 2·dim)`` cell encodings."""
        enc: Any = self.encoder
        if not hasattr(enc, "grid"):
            raise TypeError(f"{enc.name} has no grid(h, w); only 2-D encoders (learned-2d) do")
        return enc.grid(h, w, params=self._current(), dtype=self._dtype(dtype))

    def resized(self, *args: Any, **kwargs: Any) -> EncoderModule:
        """A new module for ``encoder.resize(params, ...)`` (a longer table, a new grid), its
        params initialised from the interpolated values of this module's."""
        enc: Any = self.encoder
        if not hasattr(enc, "resize"):
            raise TypeError(f"{enc.name} cannot be resized")
        with torch.no_grad():
            new_enc, values = enc.resize(self._current(), *args, **kwargs)
        first = next(iter(self.params.values()))
        return EncoderModule(new_enc, params=values, device=first.device, dtype=first.dtype)

    def extra_repr(self) -> str:
        """The encoder's repr, shown in the module's."""
        return repr(self.encoder)

"""Moved to :mod:`peregistry.rope` (``Frequencies``, ``angles``, ``cos_sin``); kept for older
imports."""

from ..rope._angles import Frequencies, angles, cos_sin

__all__ = ["Frequencies", "angles", "cos_sin"]

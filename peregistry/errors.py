"""Exceptions raised by peregistry. Messages always name what was wrong and what is allowed."""

from __future__ import annotations

__all__ = ["EncoderNotFoundError", "PluginConflictError", "PluginError"]


class PluginError(RuntimeError):
    """A plugin could not be registered or used; the message names the plugin and the cause."""


class PluginConflictError(PluginError):
    """Two plugins claim one name; the message names both distributions."""


class EncoderNotFoundError(LookupError):
    """No encoder has the requested name; the message lists close matches and known names."""

    def __str__(self) -> str:  # LookupError would repr() a single argument
        return str(self.args[0]) if self.args else ""

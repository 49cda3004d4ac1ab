"""The pluggy markers of the ``peregistry`` plugin system, apart from the hook specifications
(:mod:`peregistry._hooks`), so that a module providing hooks (a built-in family, the built-in
adapters and scalings) imports the marker alone: the specifications name the encoder and adapter
classes, whose modules must not import them back."""

from __future__ import annotations

import pluggy

PROJECT = "peregistry"

hookspec = pluggy.HookspecMarker(PROJECT)
#: Marker for plugin hook implementations: ``@peregistry.hookimpl``.
hookimpl = pluggy.HookimplMarker(PROJECT)

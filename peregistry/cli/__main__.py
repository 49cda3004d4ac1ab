"""``python -m peregistry.cli``: the same command line as ``python -m peregistry``."""

from __future__ import annotations

from ._main import main

if __name__ == "__main__":
    raise SystemExit(main())

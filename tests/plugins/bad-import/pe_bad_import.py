"""A plugin whose module fails to import (a missing dependency)."""

import peregistry_missing_dependency  # noqa: F401 - deliberately absent

import peregistry as per


@per.hookimpl
def peregistry_encoders() -> list[type]:
    return []

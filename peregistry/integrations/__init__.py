"""Doors from the libraries users already hold a model in: each module imports its library
when it is imported itself (``import peregistry`` imports none of them)."""

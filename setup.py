"""Build of the one optional C extension, ``peregistry._rotary_kernel`` (everything else is in
pyproject.toml). It is optional: without a C compiler the install still succeeds and the rope
engine uses its framework paths (``peregistry bench`` prints which: see peregistry/rope/_kernel.py)."""

import sys

from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-add, so each product and sum is rounded as the reference
# rotation rounds it (bit-exact with Hugging Face's expression). The kernel is written for GCC or
# Clang with POSIX threads and C11 atomics; MSVC builds skip it.
kernel = Extension(
    "peregistry._rotary_kernel",
    sources=["peregistry/_native/rotary.c"],
    extra_compile_args=["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno", "-pthread"],
    extra_link_args=["-pthread"],
    optional=True,
)

setup(ext_modules=[] if sys.platform == "win32" else [kernel])

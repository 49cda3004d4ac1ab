"""Build of the one optional C extension, ``peregistry._rotary_kernel`` (everything else is in
pyproject.toml). It is optional: without a C compiler the install still succeeds and the
adapters use their pure-Python paths (``peregistry.native_kernel_status()`` says which)."""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    args: list[str] = ["/O2", "/fp:precise"]
    link: list[str] = []
else:
    # -ffp-contract=off: no fused multiply-add, so each product and sum is rounded as the
    # reference rotation rounds it (bit-exact with Hugging Face's expression).
    args = ["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno", "-pthread"]
    link = ["-pthread"]

setup(
    ext_modules=[
        Extension(
            "peregistry._rotary_kernel",
            sources=["peregistry/_native/rotary.c"],
            extra_compile_args=args,
            extra_link_args=link,
            optional=True,
        )
    ]
)

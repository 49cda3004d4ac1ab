"""Build of ``peregistry_rotary_c._rotary``, the one C extension of this distribution (everything
else is in pyproject.toml).

The extension is the distribution's reason to exist, so it is NOT optional: without a working C
compiler the build fails, loudly, and pip installs nothing (never a wheel without its library,
which pip would cache and reuse after a compiler is installed). The core, ``peregistry``, is pure
Python and rotates on its own; install this package only where it builds.
"""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    # The kernel uses POSIX threads (its worker pool, pthread_atfork), C11 atomics and GCC/clang
    # attributes (ISA dispatch); MSVC has none of these. Refuse, rather than build a wheel that
    # would claim to be the accelerator and hold no kernel.
    raise SystemExit(
        "peregistry-rotary-c does not support Windows (POSIX threads and GCC/clang attributes); "
        "peregistry itself runs there without it: pip install peregistry"
    )

# -ffp-contract=off: no fused multiply-add, so each product and each sum is rounded on its own,
# as peregistry's generic rotation rounds them (bit for bit, on every ISA path). -fno-math-errno:
# no errno bookkeeping in vector loops. -fvisibility=hidden: export PyInit__rotary only.
kernel = Extension(
    "peregistry_rotary_c._rotary",
    sources=["src/peregistry_rotary_c/_rotary.c"],
    extra_compile_args=["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno", "-pthread",
                        "-fvisibility=hidden"],
    extra_link_args=["-pthread"],
    optional=False,
)

# force: compile on every build, never reuse objects a previous build left in build/ (pip builds
# in the source tree), so that a build without a compiler fails however the tree was used.
setup(ext_modules=[kernel], options={"build_ext": {"force": True}})

"""Build script: compiles ``agentd_native`` with Cython when it can.

All metadata lives in ``pyproject.toml``; this file only adds the optional C
extensions.  Each ``agentd_native/<name>.py`` of ``NATIVE_MODULES`` (framing,
sse, otlp, traceparent, span) is compiled in Cython's pure Python mode, using the C types
declared in the ``.pxd`` beside it, into ``agentd_native/<name>.<abi>.so``.
Extension modules are found before source modules on import, so the compiled
twin shadows the ``.py``, which stays in place as the fallback.

The build is optional.  If Cython is missing, cythonizing fails, there is no
working C compiler, or ``AGENTD_NO_NATIVE=1`` is set, a warning is printed and
the package installs pure-Python; ``agentd_native.NATIVE`` is then False.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

NATIVE_MODULES = ("framing", "sse", "otlp", "traceparent", "span")

COMPILER_DIRECTIVES = {
    "language_level": 3,
    # Types come from the .pxd files; annotations are for readers and linters.
    "annotation_typing": False,
    # Indices in the hot loops are checked by the code itself and never negative.
    "boundscheck": False,
    "wraparound": False,
    "embedsignature": True,
}


def _warn(message: str) -> None:
    print(f"WARNING: agentd_native: {message}; using the pure-Python fallback", file=sys.stderr)


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


class OptionalBuildExt(build_ext):
    """build_ext that degrades to 'no extensions' instead of failing the install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, compiler unusable, ...
            _warn(f"C extensions not built ({exc.__class__.__name__}: {exc})")

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            _warn(f"{ext.name} not built ({exc.__class__.__name__}: {exc})")


def native_extensions() -> list:
    if _truthy("AGENTD_NO_NATIVE"):
        _warn("AGENTD_NO_NATIVE is set")
        return []
    if sys.implementation.name != "cpython":
        _warn(f"C extensions need CPython, not {sys.implementation.name}")
        return []
    try:
        from Cython.Build import cythonize
        from setuptools import Extension
    except ImportError as exc:
        _warn(f"Cython is not available ({exc})")
        return []
    extensions = [
        Extension(f"agentd_native.{name}", [f"agentd_native/{name}.py"]) for name in NATIVE_MODULES
    ]
    try:
        return cythonize(
            extensions,
            compiler_directives=COMPILER_DIRECTIVES,
            build_dir="build/cython",
            quiet=True,
        )
    except Exception as exc:
        _warn(f"cythonize failed ({exc.__class__.__name__}: {exc})")
        return []


setup(
    ext_modules=native_extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
)

"""Loading both twins of an agentd_native module, for tests that compare them.

The compiled extension shadows the `.py` on a normal import; the pure-Python
twin is loaded from its file under its own module name.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from peers import unavailable

import agentd_native


def load_pure(name: str):
    """agentd_native/<name>.py itself, under its own module name."""
    mod_name = f"agentd_native._pure_{name}"
    if mod_name not in sys.modules:
        path = Path(agentd_native.__file__).with_name(f"{name}.py")
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    return sys.modules[mod_name]


def twin(name: str, which: str):
    """The `python` or `native` twin of agentd_native.<name> (fails under CI if not compiled)."""
    if which == "python":
        module = load_pure(name)
        assert not module.COMPILED
        return module
    module = importlib.import_module(f"agentd_native.{name}")
    if not module.COMPILED:
        unavailable(f"agentd_native.{name} is not compiled; run `pip install -e .`")
    return module

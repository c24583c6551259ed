"""h172: load an earlier helper's script by its path under docs/ (they are not packages)."""

import importlib.util
import os
from types import ModuleType

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def script(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, os.path.join(DOCS, path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

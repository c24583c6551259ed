"""In CI, where a compiler is found, the native extensions must have been built: the
pure-Python fallback would otherwise hide a broken build behind the same answers."""

from __future__ import annotations

import importlib
import os
import shutil
import sysconfig
from pathlib import Path

import pytest

from kinference.routing.prefix_store import PyPrefixStore, new_store
from kinference.routing.rates import Rates
from kinference.routing.scorers.ttft import TtftScorer
from kinference.routing.scorers.ttft_config import TtftConfig


def test_ci_with_a_compiler_runs_the_native_prefix_store() -> None:
    if not os.environ.get("CI") or shutil.which("gcc") is None:
        pytest.skip("only in CI (CI set) with gcc on the PATH")
    importlib.import_module("kinference.native._prefix")  # its build error, if any
    assert not isinstance(new_store(), PyPrefixStore)


def test_the_ttft_form_is_built_where_it_can_be() -> None:
    """As `_chain` (tests/native/test_chain.py): in CI, or with a C compiler and Python's
    headers, the TTFT scorer runs its C form."""
    headers = Path(sysconfig.get_paths()["include"], "Python.h").is_file()
    compiler = shutil.which("gcc") or shutil.which("cc")
    if not os.environ.get("CI") and not (compiler and headers):
        pytest.skip("no C compiler or Python headers here: the pure form is expected")
    importlib.import_module("kinference.native._ttft")  # its build error, if any
    assert TtftScorer(TtftConfig(), Rates())._native is not None
    assert TtftScorer(TtftConfig(), Rates(), native=False)._native is None

"""In CI, where a compiler is found, the native extensions must have been built: the
pure-Python fallback would otherwise hide a broken build behind the same answers."""

from __future__ import annotations

import importlib
import os
import shutil

import pytest

from kinference.routing.prefix_store import PyPrefixStore, new_store
from kinference.routing.rates import Rates
from kinference.routing.scorers.ttft import TtftConfig, TtftScorer


def test_ci_with_a_compiler_runs_the_native_prefix_store() -> None:
    if not os.environ.get("CI") or shutil.which("gcc") is None:
        pytest.skip("only in CI (CI set) with gcc on the PATH")
    importlib.import_module("kinference.native._prefix")  # its build error, if any
    assert not isinstance(new_store(), PyPrefixStore)


def test_ci_with_a_compiler_runs_the_native_ttft_form() -> None:
    if not os.environ.get("CI") or shutil.which("gcc") is None:
        pytest.skip("only in CI (CI set) with gcc on the PATH")
    importlib.import_module("kinference.native._ttft")  # its build error, if any
    assert TtftScorer(TtftConfig(), Rates())._native is not None

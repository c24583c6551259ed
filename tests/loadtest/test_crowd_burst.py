"""`loadtest.crowd_burst` against a real `kinference gateway`, small."""

from __future__ import annotations

import argparse
import ast
import re

import pytest

from loadtest.crowd_burst import run


async def test_a_crowd_past_the_cap_is_answered_503_while_steady_clients_are_served(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINFERENCE_GATEWAY_MAX_CLIENT_CONNECTIONS", "4")  # restored after
    args = argparse.Namespace(cap=4, crowd=12, steady=1, rate=50.0, idle=None, seconds=0.5)
    await run(args)
    out = capsys.readouterr().out
    assert "cap 4, 1 steady clients, 3 idle connections, crowd of 12" in out
    assert re.search(r"steady under crowd: n \d+ .*not 200: 0", out)
    found = re.search(r"crowd over [\d.]+ s: (\{.*?\});", out)
    assert found is not None, out
    outcomes = ast.literal_eval(found.group(1))
    assert set(outcomes) == {"503"}, outcomes  # every place is held: no 200, no reset
    assert outcomes["503"] >= 12

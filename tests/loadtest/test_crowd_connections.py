"""`loadtest.crowd_connections` against a real `kinference gateway`, small."""

from __future__ import annotations

import pytest

from loadtest.crowd_connections import crowd


async def test_a_small_crowd_is_refused_then_served(capsys: pytest.CaptureFixture[str]) -> None:
    await crowd(cap=4, over=12)
    out = capsys.readouterr().out
    assert "503" in out and "released: 4 at once all 200" in out
    assert "log lines about refusals: 1" in out

"""The KV-event intake benchmark runs on its committed recording and reports what it fed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from loadtest import bench_event_intake

RECORDING = Path(__file__).resolve().parents[2] / "docs" / "h201" / "mocker_batches.msgpack"


def test_the_recording_goes_through_the_real_intake(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench_event_intake", str(RECORDING), "--rounds", "2", "--repeat", "2", "--tag", "t"]
    monkeypatch.setattr(sys, "argv", argv)
    bench_event_intake.main()
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    recorded = len(bench_event_intake.messages(RECORDING, 1))
    assert line["tag"] == "t"
    assert line["batches"] == 2 * recorded  # every batch taken, none refused as a gap
    assert line["held_after"] > 0  # the stores reached the index
    assert 0 < line["min_us"] <= line["median_us"]

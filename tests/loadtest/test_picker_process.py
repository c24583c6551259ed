"""The benchmarks' picker process at the priority asked (`--picker-nice`)."""

from __future__ import annotations

import os
from pathlib import Path

from loadtest.picker_process import PickerProcess

POLICY = """pools:
  - name: p
    endpoints: ["127.0.0.1:1"]
    models: [m]
    prefix: {mode: approximate}
"""


async def test_the_picker_runs_at_the_priority_asked(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    lower = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)  # no privilege needed
    picker = await PickerProcess.start(policy, nice=lower)
    try:
        assert os.getpriority(os.PRIO_PROCESS, picker.process.pid) == lower
        assert (await picker.lag())[1] >= 0  # serving
    finally:
        await picker.aclose()

"""`python -m loadtest.sim_engine`: its help, a fleet served until SIGTERM; the cost bench."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from loadtest.sim_engine import bench
from loadtest.sim_engine.__main__ import config_from, main, parser

ROOT = Path(__file__).resolve().parents[2]  # `loadtest` is importable from the checkout


def test_help_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])  # the module run as a program is the fleet test below
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--count", "--model", "--time-scale", "--capacity-blocks", "--api-key"):
        assert flag in out


def test_flags_make_the_config() -> None:
    args = parser().parse_args(
        [
            *("--model", "a", "--model", "b", "--seed", "4", "--time-scale", "0.5"),
            *("--capacity-blocks", "99", "--max-num-seqs", "3", "--api-key", "k"),
            *("--stream-step-s", "0.02", "--max-num-batched-tokens", "512"),
        ]
    )
    config = config_from(args)
    assert config.models == ("a", "b")
    assert (config.seed, config.time_scale, config.capacity_blocks) == (4, 0.5, 99)
    assert (config.max_num_seqs, config.api_key, config.stream_step_s) == (3, "k", 0.02)
    assert (config.max_num_batched_tokens, config.prefill_side_by_side) == (512, False)
    old = config_from(parser().parse_args(["--prefill-side-by-side"]))
    assert (old.max_num_batched_tokens, old.prefill_side_by_side) == (8192, True)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        config_from(parser().parse_args(["--max-num-batched-tokens", "0"]))


def test_a_fleet_serves_until_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "loadtest.sim_engine", *("--port", "0", "--count", "2")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline().split() for _ in range(2)]  # once both serve
        assert [line[:2] for line in lines] == [["engine", "0"], ["engine", "1"]], lines
        with httpx.Client(timeout=10) as client:
            for line in lines:
                body = {"prompt": "hello", "max_tokens": 2}
                answer = client.post(f"{line[2]}/v1/completions", json=body)
                assert answer.json()["usage"]["completion_tokens"] == 2
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_the_cost_bench_runs_quick(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--count", "2", "--rate", "10", "--seconds", "1", "--tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "requests=10 errors=0" in out
    assert "engine CPU" in out and "engine-side TTFT" in out

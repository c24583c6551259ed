"""`loadtest.bench_scale` end to end at its smallest: a real 3-master Redis Cluster, worker
processes running kinference's cluster layer, the probe's propagation delays, the fit and
the extrapolation table. It measures nothing worth reading; it proves the pipeline runs."""

from __future__ import annotations

import pytest

from loadtest import bench_scale
from loadtest.scale_model import Calibration, Scenario, node_loads, predict


def test_the_smoke_run_measures_a_point_and_extrapolates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench_scale.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "| 3 |" in out  # the measured point
    assert "100 x 2000 req/s" in out and ("PASS" in out or "FAIL" in out)
    assert "nan" not in out.split("Calibration")[0]  # the probe saw picks propagate


def test_the_model_spreads_pools_and_keeps_global_keys_on_one_master() -> None:
    loads = node_loads(Scenario(100, 2000, 12))
    assert len(loads) == 3
    shards_only = [load.commands for load in loads[1:]]
    assert shards_only[0] == pytest.approx(shards_only[1])  # 4 pools each
    assert loads[0].commands > shards_only[0]  # + membership, blacklist, statistics
    partitioned = predict(
        Scenario(100, 2000, 48, pools_per_replica=12), Calibration(0, 1e-5, 0, 0, 1e-4, 0)
    )
    everything = predict(Scenario(100, 2000, 48), Calibration(0, 1e-5, 0, 0, 1e-4, 0))
    assert partitioned.apply_cpu == pytest.approx(everything.apply_cpu / 4, rel=0.05)

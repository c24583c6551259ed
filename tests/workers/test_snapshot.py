"""Reading an engine's state from its page: aggregation, fallbacks, LoRA, engine tables."""

from __future__ import annotations

import pytest

from kinference.config.pools import MAX_ENGINE_REQUESTS
from kinference.workers import EngineKind, EngineSnapshot, Series, engine_metrics, read_snapshot
from kinference.workers.snapshot import bounded_count
from tests.workers.pages import triton_text, vllm_page, vllm_text


def read(text: str, kind: str = "vllm") -> EngineSnapshot:
    return read_snapshot(text, engine_metrics(kind), scraped_at=12.5)


def test_sums_requests_and_takes_the_fullest_kv_cache_across_engines() -> None:
    snap = read(vllm_page(waiting=(1, 2), running=(3, 4), kv_usage=(0.25, 0.5), engines=2))
    assert (snap.waiting, snap.running, snap.kv_usage, snap.scraped_at) == (3, 7, 0.5, 12.5)


def test_a_quantity_missing_from_the_page_is_unknown() -> None:
    snap = read("vllm:num_requests_running 2\n")
    assert (snap.waiting, snap.running, snap.kv_usage, snap.lora_adapters) == (
        None,
        2,
        None,
        None,
    )


def test_non_finite_samples_are_ignored() -> None:
    text = (
        'vllm:num_requests_waiting{engine="0"} NaN\n'
        'vllm:num_requests_waiting{engine="1"} 2\n'
        "vllm:num_requests_running +Inf\n"
        "vllm:kv_cache_usage_perc NaN\n"
    )
    snap = read(text)
    assert (snap.waiting, snap.running, snap.kv_usage) == (2, None, None)


def test_out_of_range_values_are_clamped() -> None:
    snap = read(vllm_text(-3, 2.6, 1.7))
    assert (snap.waiting, snap.running, snap.kv_usage) == (0, 3, 1.0)
    assert read(vllm_text(0, 0, -0.5)).kv_usage == 0.0


def test_vllm_before_0_9_reports_kv_use_under_its_old_name() -> None:
    assert read("vllm:gpu_cache_usage_perc 0.375\n").kv_usage == 0.375
    # Both names present (0.9 and 0.10): the current one wins.
    both = "vllm:gpu_cache_usage_perc 0.375\nvllm:kv_cache_usage_perc 0.625\n"
    assert read(both).kv_usage == 0.625


def test_triton_series_are_picked_by_label() -> None:
    snap = read(triton_text(5, 6, 0.25), "trtllm")
    assert (snap.waiting, snap.running, snap.kv_usage) == (5, 6, 0.25)


def test_trtllm_serve_series_win_over_triton_ones() -> None:
    text = triton_text(5, 6, 0.25) + "trtllm_num_requests_waiting 1\n"
    assert read(text, "trtllm").waiting == 1


@pytest.mark.parametrize(
    ("running", "waiting", "adapters"),
    [
        ("a,b", "c", frozenset({"a", "b", "c"})),
        ("a, b", "", frozenset({"a", "b"})),  # the GIE protocol's examples put blanks after commas
        ("", "", frozenset()),  # reported, and none loaded: known to be empty
        ("a,,a", "a", frozenset({"a"})),
    ],
)
def test_lora_adapters_are_running_and_waiting(
    running: str, waiting: str, adapters: frozenset[str]
) -> None:
    text = (
        f'vllm:lora_requests_info{{max_lora="8",running_lora_adapters="{running}",'
        f'waiting_lora_adapters="{waiting}"}} 1.7e9\n'
    )
    snap = read(text)
    assert snap.lora_adapters == adapters
    assert snap.max_lora == 8


def test_lora_uses_the_newest_label_set() -> None:
    text = (
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="new",'
        'waiting_lora_adapters=""} 1.8e9\n'
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",'
        'waiting_lora_adapters=""} 1.7e9\n'
    )
    assert read(text).lora_adapters == frozenset({"new"})


def test_lora_without_max_lora_is_still_read() -> None:
    text = 'vllm:lora_requests_info{running_lora_adapters="a"} 1.7e9\n'
    snap = read(text)
    assert (snap.lora_adapters, snap.max_lora) == (frozenset({"a"}), None)


def test_engines_without_lora_reporting_say_unknown() -> None:
    text = 'vllm:lora_requests_info{running_lora_adapters="a"} 1.7e9\n'
    assert read(text, "sglang").lora_adapters is None


def test_engine_tables() -> None:
    assert {kind.value for kind in EngineKind} == {"vllm", "sglang", "trtllm"}
    assert engine_metrics(EngineKind.VLLM) is engine_metrics("vllm")
    assert engine_metrics("trtllm").metrics_path == "/prometheus/metrics"
    assert engine_metrics("vllm").names == {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:lora_requests_info",
        "vllm:cache_config_info",
    }
    with pytest.raises(ValueError, match="expected one of vllm, sglang, trtllm"):
        engine_metrics("none")


def test_series_match_on_labels() -> None:
    series = Series("m", (("type", "waiting"),))
    assert series.matches({"type": "waiting", "model": "x"})
    assert not series.matches({"type": "active"})
    assert Series("m").matches({})


def test_a_count_past_any_engine_is_read_as_the_cap() -> None:
    """A broken exporter's 1e20 running requests would be 1e20 sequences to every
    estimate that reads them (and loops over them): read as `MAX_ENGINE_REQUESTS`; so
    are finite samples whose sum overflows (it once failed the scrape)."""
    snap = read(vllm_text(1e20, 3e6, 0.5))
    assert (snap.waiting, snap.running) == (MAX_ENGINE_REQUESTS, MAX_ENGINE_REQUESTS)
    assert read(vllm_text(MAX_ENGINE_REQUESTS - 1, 0, 0.5)).waiting == MAX_ENGINE_REQUESTS - 1
    assert bounded_count([1.7e308, 1.7e308]) == MAX_ENGINE_REQUESTS

"""An engine's KV-cache size read from its page (`kinference.workers.capacity`): each engine
kind's series, the preferred alternative, and what a hostile page may say."""

from __future__ import annotations

import pytest

from kinference.workers import engine_metrics, read_snapshot
from kinference.workers.capacity import MAX_BLOCK_TOKENS, MAX_KV_TOKENS
from tests.workers.pages import triton_text, vllm_page, vllm_text


def capacity(text: str, kind: str = "vllm") -> int | None:
    return read_snapshot(text, engine_metrics(kind), scraped_at=0.0).kv_capacity_tokens


def vllm_info(blocks: str, size: str = "16", engine: str = "0", **more: str) -> str:
    """vLLM's `vllm:cache_config_info` as `log_metrics_info` writes it (a subset of the
    CacheConfig fields, each `str(value)`)."""
    labels = {"block_size": size, "cache_dtype": "auto", "engine": engine, **more}
    labels["num_gpu_blocks"] = blocks
    text = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return f"vllm:cache_config_info{{{text}}} 1.0\n"


def test_vllm_blocks_times_block_size() -> None:
    assert capacity(vllm_text(0, 0, 0.1) + vllm_info("1536")) == 1536 * 16
    assert capacity(vllm_info("2048", size="32")) == 2048 * 32


def test_vllm_group_aware_tokens_win_over_the_product() -> None:
    """Newer vLLM labels `kv_cache_size_tokens` (right for hybrid models, where blocks x
    block size is not); where it says nothing ("None"), the product is read."""
    assert capacity(vllm_info("1000", kv_cache_size_tokens="12345")) == 12345
    assert capacity(vllm_info("1000", kv_cache_size_tokens="None")) == 16000


def test_no_size_on_the_page_is_unknown() -> None:
    assert capacity(vllm_text(0, 0, 0.1)) is None
    assert capacity("") is None


@pytest.mark.parametrize(
    ("blocks", "size"),
    [
        ("None", "16"),  # vLLM before its cache is profiled
        ("abc", "16"),
        ("0", "16"),
        ("-5", "16"),
        ("NaN", "16"),
        ("+Inf", "16"),
        ("1_000", "16"),
        ("", "16"),
        ("1536", "0"),
        ("1536", "-16"),
        ("1536", "NaN"),
        ("1536", "sixteen"),
        ("1536", "1e30"),  # a block of more tokens than any engine's
        ("1e-9", "16"),  # less than a token
    ],
)
def test_hostile_labels_say_nothing(blocks: str, size: str) -> None:
    assert capacity(vllm_info(blocks, size)) is None


def test_a_size_past_any_engine_is_read_as_the_bound() -> None:
    assert capacity(vllm_info("1e30")) == MAX_KV_TOKENS
    assert capacity(vllm_info("1.7e308", size=str(MAX_BLOCK_TOKENS))) == MAX_KV_TOKENS
    assert capacity("sglang:max_total_num_tokens 1e30\n", "sglang") == MAX_KV_TOKENS


def test_data_parallel_ranks_read_one_engine_s_cache() -> None:
    """Each rank has its own cache and a request lands in one: the largest, not the sum."""
    text = vllm_info("1000", engine="0") + vllm_info("1200", engine="1")
    assert capacity(text) in (16000, 19200)
    sglang = 'sglang:max_total_num_tokens{dp_rank="0"} 500\nsglang:max_total_num_tokens 700\n'
    assert capacity(sglang, "sglang") == 700


def test_sglang_counts_tokens() -> None:
    assert capacity('sglang:max_total_num_tokens{model_name="m"} 471258\n', "sglang") == 471258
    for hostile in ("0", "-3", "NaN", "+Inf"):
        assert capacity(f"sglang:max_total_num_tokens {hostile}\n", "sglang") is None


def test_trtllm_serve_blocks_times_tokens_per_block() -> None:
    text = "trtllm_kv_cache_max_blocks 6239\ntrtllm_kv_cache_tokens_per_block 64\n"
    assert capacity(text, "trtllm") == 6239 * 64
    assert capacity("trtllm_kv_cache_max_blocks 6239\n", "trtllm") is None  # half a size


def test_triton_blocks_by_label() -> None:
    kv = "nv_trt_llm_kv_cache_block_metrics"
    text = triton_text(0, 0, 0.1) + (
        f'{kv}{{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"}} 64\n'
        f'{kv}{{kv_cache_block_type="used",model="tensorrt_llm",version="1"}} 1\n'
        f'{kv}{{kv_cache_block_type="max",model="tensorrt_llm",version="1"}} 6239\n'
    )
    assert capacity(text, "trtllm") == 6239 * 64


def test_trtllm_serve_wins_over_triton() -> None:
    kv = "nv_trt_llm_kv_cache_block_metrics"
    text = (
        f'{kv}{{kv_cache_block_type="tokens_per"}} 64\n{kv}{{kv_cache_block_type="max"}} 10\n'
        "trtllm_kv_cache_max_blocks 20\ntrtllm_kv_cache_tokens_per_block 32\n"
    )
    assert capacity(text, "trtllm") == 640


def test_a_real_vllm_page_with_its_info_gauge() -> None:
    """The info gauge among a whole page's series."""
    assert capacity(vllm_page() + vllm_info("4096")) == 4096 * 16

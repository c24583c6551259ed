"""An engine's published KV-cache size, scraped by a real picker, bounds what its prefix
index keeps for that engine from the first pick, and the metric says so."""

from __future__ import annotations

from tests.api.helpers import wait_until
from tests.conftest import PickerFactory, RunningPicker
from tests.scenarios.helpers import (
    EnginesFactory,
    chat,
    finish,
    pick_ok,
    routing_yaml,
    start_with,
    system_prompt,
    vllm_pool,
    wait_engines,
    where,
)
from tests.workers.pages import vllm_text

MODEL = "llama-8b-instruct"
METRIC = "kinference_prefix_capacity_blocks"
# 64 blocks of 16 tokens: 1,024 tokens, 64 index blocks (64 bytes, 4 characters a token).
CACHE = 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="64"} 1.0\n'


def capacity(picker: RunningPicker, endpoint: str, source: str) -> float | None:
    labels = {"endpoint": endpoint, "source": source}
    return picker.app.metrics.registry.get_sample_value(METRIC, labels)


async def test_a_published_size_bounds_the_index_and_is_shown_as_the_engine_s(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    engines = await start_engines(2)
    sized, plain = engines.endpoints
    engines[0].text = vllm_text(0, 0, 0.1) + CACHE
    pools = vllm_pool("chat", [sized], [MODEL]) + vllm_pool("spare", [plain], ["other"])
    policy = "pools:\n" + pools + routing_yaml()
    picker = await start_with(start_picker, policy)
    await wait_engines(picker, engines.endpoints)
    await wait_until(lambda: capacity(picker, sized, "engine") == 64, what="the engine's size")
    assert capacity(picker, plain, "bound") == 50_000  # it publishes none: the LRU bound

    router, slot = picker.app.router, picker.app.table.slot(sized)
    for topic in ("tides", "harbours", "lighthouses", "ferries"):  # ~47 blocks each
        result = await pick_ok(picker, chat(MODEL, "Summarise.", system_prompt(topic, 3000)))
        await finish(picker, result)
        assert where(result) == sized
    router.flush_prefix_records()
    assert router.prefix.capacity[slot] == 64
    assert router.prefix.footprint(picker.app.table.slots([sized]))[0] <= 64  # main: ~190

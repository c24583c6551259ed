"""A simulated OpenAI-compatible inference engine for benchmarks and integration tests.

It serves `/v1/chat/completions` and `/v1/completions` (streamed or whole), vLLM's render
endpoints, `/v1/models`, `/health` and a vLLM-named `/metrics`, with the cost model of
`loadtest.engine_model`: a block-LRU prefix cache, prefill time growing with uncached
prompt tokens, decode gaps growing with the running batch, and a waiting queue past
`max_num_seqs`. Run it with `python -m loadtest.sim_engine --help`, or in-process:

    engine = SimEngine(SimEngineConfig(time_scale=0.05))
    port = await engine.start(host="127.0.0.1", port=0)
    ...
    await engine.stop()
"""

from loadtest.sim_engine.config import SimEngineConfig
from loadtest.sim_engine.server import SimEngine, SimEngines, engine_seed

__all__ = ["SimEngine", "SimEngineConfig", "SimEngines", "engine_seed"]

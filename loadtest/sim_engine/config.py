"""Settings of one simulated engine (the CLI flags map onto these fields one to one)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from loadtest.engine_model import Timing
from loadtest.sim_engine.prefill import DEFAULT_BATCHED_TOKENS

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True, slots=True)
class SimEngineConfig:
    """What one simulated engine serves and how fast.

    `time_scale` multiplies every model time before the engine waits it out: 1.0 runs at the
    speed of the modelled GPU, 0.05 twenty times faster, 0 as fast as the machine allows.
    Prompts prefill in turn, in steps of at most `max_num_batched_tokens` (vLLM's setting
    of that name); `prefill_side_by_side` prefills each on its own instead, however many
    run at once (the simulator before 2026-12-06; see `prefill.py`).
    """

    models: tuple[str, ...] = (DEFAULT_MODEL,)
    seed: int = 0
    time_scale: float = 1.0
    capacity_blocks: int = 4096  # KV prefix-cache blocks of `block_chars` characters each
    max_num_seqs: int = 64  # running batch cap; later requests wait in a FIFO queue
    max_num_batched_tokens: int = DEFAULT_BATCHED_TOKENS  # prefill tokens of one step
    prefill_side_by_side: bool = False  # True: no shared prefill, decodes never slowed
    api_key: str | None = None  # set: every /v1 route wants `Authorization: Bearer <key>`
    block_chars: int = 64  # 16 tokens of 4 characters, vLLM's default block size
    default_max_tokens: int = 64  # completion length when a request names none
    max_model_len: int = 131072  # prompt + completion tokens a request may ask for
    stream_step_s: float = 0.001  # tokens due within one step go out in one SSE chunk
    timing: Timing = field(default_factory=Timing)

    def __post_init__(self) -> None:
        if not self.models or any(not m for m in self.models):
            raise ValueError("an engine serves at least one model, each with a name")
        if self.time_scale < 0 or self.stream_step_s < 0:
            raise ValueError("time_scale and stream_step_s must be >= 0")
        if min(self.capacity_blocks, self.max_num_seqs, self.block_chars) < 1:
            raise ValueError("capacity_blocks, max_num_seqs and block_chars must be >= 1")
        if self.max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be >= 1")
        if not 1 <= self.default_max_tokens <= self.max_model_len:
            raise ValueError("default_max_tokens must be in 1..max_model_len")

    def with_seed(self, seed: int) -> SimEngineConfig:
        return replace(self, seed=seed)

"""LoRA affinity: 1 where the engine already has the requested adapter loaded."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kinference.routing.plugins.base import PickContext
from kinference.routing.table import FloatArray


class LoraScorer:
    name: ClassVar[str] = "lora"

    def score(self, ctx: PickContext) -> FloatArray | None:
        mask = ctx.table.lora_mask(ctx.model)
        if mask is None:
            return None  # no engine has it loaded: nothing to tell the candidates apart
        return mask[ctx.slots].astype(np.float64)

"""What a latency or token sample may be before anything learns from it.

Every sample the router learns from comes from a report (`observed_ttft_ms`, the token
counts and the ITL bucket counts are the spec's uint32s; service time is measured on this
replica's clock between two reports of one request, within the request's TTL) or from
another replica's copy of one (the events stream, the per-minute statistics). A number
outside what a report can carry, not finite or negative, is no sample: it comes from a bug
or a foreign writer. Kept, it would stay: an infinite service time or prefill never leaves
an exponentially weighted mean or fit (each later sample folds into infinity), a negative
TTFT makes its worker look faster than free, and both travel to every replica. A report's
prompt tokens are held to the Pick's estimate of that prompt as well (`is_prompt_sample`),
as its TTFT is to the time since the Pick (`Reports.first_token`).
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_SAMPLE = float(2**32 - 1)  # a uint32: the most milliseconds or tokens a report carries


def is_sample(value: float) -> bool:
    """Whether `value` (milliseconds or tokens) is one a report can carry."""
    return 0.0 <= value <= MAX_SAMPLE  # False for NaN as well


def are_counts(counts: Sequence[int]) -> bool:
    """Whether ITL bucket counts are ones a report can carry (each a uint32)."""
    return all(0 <= count <= MAX_SAMPLE for count in counts)


# A report's `prompt_tokens` past this many times the Pick's estimate of the prompt's counted
# part (counted by the tokenizer in precise pools, else its text at the learned characters
# per token) are no count of that prompt: no tokenizer makes 16 times what the prior ratio
# says (`textsize.MIN_RATIO` is 8 times). The prefill fit weighs a sample by its tokens
# squared: one report of a uint32's top against a 1000-token prompt would flatten the
# learned per-token cost for hundreds of reports.
MAX_PROMPT_OVER_ESTIMATE = 16.0
# The same for the estimate's fixed part (`LocalChoice.fixed_tokens`): media parts at a fixed
# size each (`requests.prompt.MEDIA_TOKENS`), which the picker does not see into. A PDF is
# 2,000 tokens there whatever its pages (60 of them make ~40,000), a recording 500 whatever
# its minutes, a video 4,000 whatever its frames: 16 times refused real documents' reports.
MAX_FIXED_OVER_ESTIMATE = 128.0
# Tokens up to which a report is taken whatever the estimate (a short prompt's estimate is
# mostly template and rounding).
MIN_PROMPT_BOUND = 4096.0


def is_prompt_sample(reported: float, estimate: float, fixed: float = 0.0) -> bool:
    """Whether a report's prompt tokens may teach a prefill rate for a prompt the Pick
    estimated at `estimate` tokens, `fixed` of them its fixed part (media, overheads)."""
    counted = max(estimate - fixed, 0.0) * MAX_PROMPT_OVER_ESTIMATE
    return reported <= max(counted + fixed * MAX_FIXED_OVER_ESTIMATE, MIN_PROMPT_BOUND)

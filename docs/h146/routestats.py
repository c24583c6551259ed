"""vllm-64 A/B figures from ab_route.sh's JSON files: per figure, base against branch,
every seed of every arm a value; medians, ranges, exact two-sided Mann-Whitney."""

import glob, json, statistics, sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from mw import p_exact

FIGURES = ("ttft_p50_ms", "ttft_p90_ms", "hit_rate", "window_tok_per_s", "imbalance")
values: dict[str, dict[str, list[float]]] = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    arm = path.rsplit("-", 1)[1][:-5]
    for row in json.load(open(path))["results"]:
        for figure in FIGURES:
            values.setdefault(figure, {}).setdefault(arm, []).append(row[figure])
        values.setdefault("per run p50", {}).setdefault(arm, []).append(
            round(row["ttft_p50_ms"], 1)
        )
for figure in FIGURES:
    arms = values[figure]
    other = next(name for name in arms if name != "base")
    a, b = arms["base"], arms[other]
    show = lambda v: f"{statistics.median(v):.3g} [{min(v):.3g}–{max(v):.3g}]"
    print(f"| {figure} | {show(a)} | {show(b)} | {len(a)}/{len(b)} | {p_exact(a, b):.3f} |")
print(values["per run p50"])

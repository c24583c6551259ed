"""h200: the engines' and their frontends' own timings per row, from the metrics pages saved
before and after each row's requests (docs/h200/trace/sitecustomize.py, H200_PAGES): the
mean per request of each histogram (sum delta / count delta over the 4 engines and their
frontends), in ms.  Usage: python3 pages.py RUN_DIR [ROUTERS as given to --routers]"""

import glob
import re
import sys

NAMES = [
    "vllm:time_to_first_token_seconds",
    "dynamo_work_handler_time_to_first_response_seconds",
    "dynamo_request_plane_roundtrip_ttft_seconds",
    "dynamo_component_router_time_to_first_token_seconds",
    "dynamo_frontend_time_to_first_token_seconds",
    "dynamo_frontend_tokenize_seconds",
    "dynamo_frontend_template_seconds",
    "dynamo_frontend_tokenizer_latency_ms",
    "dynamo_frontend_event_loop_delay_seconds",
    "dynamo_request_plane_queue_seconds",
    "dynamo_request_plane_send_seconds",
    "dynamo_work_handler_network_transit_seconds",
    "dynamo_frontend_stage_duration_seconds",
]


def totals(path):
    out = {}
    for line in open(path):
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$", line.strip())
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        for base in NAMES:
            if name in (base + "_sum", base + "_count"):
                key = base
                if base == "dynamo_frontend_stage_duration_seconds":
                    stage = re.search(r'stage="([^"]+)"', labels)
                    key = f"{base}[{stage.group(1) if stage else '?'}]"
                part = "sum" if name.endswith("_sum") else "count"
                out.setdefault(key, {"sum": 0.0, "count": 0.0})[part] += value
    return out


run = sys.argv[1]
pages = sorted(glob.glob(f"{run}/pages/pages.*.txt"), key=lambda p: int(p.split(".")[-2]))
order = sys.argv[2].split(",") if len(sys.argv) > 2 else ["kinference", "kinference-precise"]
results = []
for i in range(0, len(pages) - 1, 2):
    before, after = totals(pages[i]), totals(pages[i + 1])
    row = {}
    for key, end in after.items():
        start = before.get(key, {"sum": 0.0, "count": 0.0})
        n = end["count"] - start["count"]
        s = end["sum"] - start["sum"]
        scale = 1.0 if key.endswith("_ms") else 1000.0
        row[key] = (n, s / n * scale if n else float("nan"))
    results.append(row)
if order[0] != "kinference":  # the table is approximate, precise
    results.reverse()
rows = ["approximate", "precise"]
keys = sorted(set().union(*[r.keys() for r in results]))
print(
    "| metric (mean per observation, ms) | "
    + " | ".join(rows[: len(results)])
    + " | precise - approximate |"
)
print("|---|" + "--:|" * (len(results) + 1))
for key in keys:
    cells = [results[j].get(key, (0, float("nan"))) for j in range(len(results))]
    diff = cells[1][1] - cells[0][1] if len(cells) > 1 else float("nan")
    print(
        f"| {key} | " + " | ".join(f"{v:.2f} (n {int(n)})" for n, v in cells) + f" | {diff:+.2f} |"
    )

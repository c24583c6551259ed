"""h173: the gateway's hop on Dynamo's workload, step by step (diagnostic).

    python docs/h173/hop.py DIR [SIDE.jsonl]

DIR holds the probe's files (docs/h173/sitecustomize.py: client.*.jsonl from the bench,
gw.*.jsonl and lag.*.jsonl from the gateway). Each client request is joined to the gateway
record whose head arrived first after the client's send (one monotonic clock). SIDE.jsonl
(docs/h170/nvext_run.py) adds the Dynamo frontend's own TTFT, so that client TTFT minus
frontend TTFT is h170's "outside" part, split (docs/benchmarks.md, h173) into A (the
client's call -> its head written), B (-> the frontend received it; for the gateway B1 its
head read, B2 -> upstream written, B3 -> frontend received) and C (the frontend's first
token -> the client sees it; C1 the gateway reads it, C2 writes it, C3 the client sees it),
per router for the client's view. Prints the median, mean and p90 of each step (ms).
"""

from __future__ import annotations

import glob
import json
import statistics
import sys
from typing import Any


def _lines(pattern: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in glob.glob(pattern):
        with open(name) as source:
            rows += [json.loads(line) for line in source]
    return rows


def _joined(folder: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    sent = sorted(_lines(f"{folder}/client.*.jsonl"), key=lambda c: c["called"])
    recs = sorted(
        (r for r in _lines(f"{folder}/gw.*.jsonl") if r.get("arr")), key=lambda r: r["arr"][0]
    )
    pairs, used = [], set()
    for client in sent:
        after = [
            (r["arr"][0] - client["called"], i)
            for i, r in enumerate(recs)
            if i not in used and 0 <= r["arr"][0] - client["called"] < 0.05
        ]
        if after:
            i = min(after)[1]
            used.add(i)
            pairs.append((client, recs[i]))
    return pairs


def _steps(client: dict[str, Any], rec: dict[str, Any]) -> dict[str, float] | None:
    if not (rec.get("uw") and rec.get("cw") and "first" in rec and "ub" in rec):
        return None
    ms = 1e3
    arr, uw_end = rec["arr"][0], rec["uw"][-1][0]
    after_first = [t for t, _ in rec["cw"] if t >= rec["first"]]
    cw = after_first[0] if after_first else rec["cw"][-1][0]
    seen = client["started"] + client["ttft"]
    sched = rec.get("sched", {})
    row = {
        "client send -> head read": (arr - client["called"]) * ms,
        "head read -> Flow.run": (rec["flow"] - arr) * ms,
        "Flow.run -> Pick (push)": (rec["pick0"] - rec["flow"]) * ms,
        "Pick": (rec["pick1"] - rec["pick0"]) * ms,
        "Pick -> dispatch": (rec["disp"] - rec["pick1"]) * ms,
        "dispatch -> upstream written": (uw_end - rec["disp"]) * ms,
        "IN: send -> upstream written": (uw_end - client["called"]) * ms,
        "upstream written -> first read": (rec["ub"][0] - uw_end) * ms,
        "upstream written -> first token seen": (rec["first"] - uw_end) * ms,
        "C2 first token seen -> client write": (cw - rec["first"]) * ms,
        "C3 client write -> client sees token": (seen - cw) * ms,
        "OUT: first token seen -> client sees": (seen - rec["first"]) * ms,
        "client TTFT": client["ttft"] * ms,
        "upstream connects before the write": float(
            sum(1 for t0, _ in rec.get("connect", []) if t0 < rec["uw"][0][0])
        ),
        "new client connection": float(len(rec["arr"]) > 3 and rec["arr"][3] == 0),
    }
    if "flow" in sched and "disp" in sched and rec["arr"][1]:
        row["IN run-queue wait (arr -> disp)"] = (sched["disp"][1] - rec["arr"][1][1]) / 1e6
        row["IN loop CPU (arr -> disp)"] = (sched["disp"][0] - rec["arr"][1][0]) / 1e6
    if "cw_first" in sched and "ub" in sched:
        row["OUT run-queue wait (ub -> cw)"] = (sched["cw_first"][1] - sched["ub"][1]) / 1e6
    return row


def _client_steps(client: dict[str, Any], timing: dict[str, Any], wall: float) -> dict[str, float]:
    """The client's view, any router: its own time before the socket write, the way to the
    Dynamo frontend that served it, and back from the frontend's first token (ms; the
    frontend's `request_received_ms` has ms resolution: +0.5 ms taken as its mean)."""
    received = timing["request_received_ms"] / 1e3 + 0.0005 - wall
    sent_first = received + timing["ttft_ms"] / 1e3
    written = client["w"][0][0]  # the request head's write (httpcore writes head, body, end)
    return {
        "A client: call -> head written": (written - client["called"]) * 1e3,
        "B head written -> frontend received": (received - written) * 1e3,
        "frontend TTFT": timing["ttft_ms"],
        "C frontend first token -> client sees": (client["started"] + client["ttft"] - sent_first)
        * 1e3,
        "client connects": float(len(client.get("c", []))),
        "outside (client TTFT - frontend TTFT)": client["ttft"] * 1e3 - timing["ttft_ms"],
    }


def _by_url(folder: str, side: dict[str, dict[str, Any]], wall: float) -> None:
    rows: dict[str, list[dict[str, float]]] = {}
    for client in _lines(f"{folder}/client.*.jsonl"):
        timing = side.get(client["id"], {}).get("nvext", {}).get("timing")
        if timing:
            rows.setdefault(client["url"], []).append(_client_steps(client, timing, wall))
    for url, found in rows.items():
        print(f"-- client's view, {url}")
        _print(found)


def _print(rows: list[dict[str, float]]) -> None:
    keys = list(dict.fromkeys(key for row in rows for key in row))
    for key in keys:
        values = sorted(r[key] for r in rows if key in r)
        p90 = values[int(0.9 * (len(values) - 1))]
        print(
            f"{key:58s} p50 {statistics.median(values):8.3f}  mean {statistics.fmean(values):8.3f}"
            f"  p90 {p90:8.3f}  n {len(values)}"
        )


def _side(path: str) -> dict[str, dict[str, Any]]:
    return {s["response_id"]: s for s in _lines(path) if s.get("nvext", {}).get("timing")}


def main(argv: list[str]) -> None:
    pairs = _joined(argv[0])
    side = _side(argv[1]) if len(argv) > 1 else {}
    rows = []
    for client, rec in pairs:
        row = _steps(client, rec)
        if row is None:
            continue
        timing = side.get(client["id"], {}).get("nvext", {}).get("timing")
        if timing:
            received = timing["request_received_ms"] / 1e3 + 0.0005 - rec["wall"]
            sent_first = received + timing["ttft_ms"] / 1e3
            row["B1 head written -> gateway head read"] = (rec["arr"][0] - client["w"][0][0]) * 1e3
            row["B2 gateway head read -> upstream written"] = (
                rec["uw"][-1][0] - rec["arr"][0]
            ) * 1e3
            row["B3 upstream written -> frontend received"] = (received - rec["uw"][-1][0]) * 1e3
            row["C1 frontend first token -> gateway sees"] = (rec["first"] - sent_first) * 1e3
            row["outside (client TTFT - frontend TTFT)"] = row["client TTFT"] - timing["ttft_ms"]
        rows.append(row)
    print(f"-- the gateway's steps: {len(pairs)} requests joined, {len(rows)} complete")
    _print(rows)
    if side and pairs:
        _by_url(argv[0], side, pairs[0][1]["wall"])


if __name__ == "__main__":
    main(sys.argv[1:])

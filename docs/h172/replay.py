"""h172: h153's in-process replay (docs/h153/mb.py) on bodies captured from the gateway.

    python docs/h172/replay.py DIR [mb.py's options]

DIR holds `bodies/*.json` (docs/h172/sitecustomize.py with H172_BODIES) and the traced
run's `bench.*.jsonl` (each run's start): seed N replays the N-th run's bodies in order,
warm-ups left out. What the engines generated is in these bodies (the Dynamo mocker's
replies are token ids written as numbers), which mb.py's own bodies (the workload's
canned completions) are not. Kinds by shape: a system message of a document, a shared
system prompt, a first chat turn, a follow-up.
"""

import json
import os
import sys

import h172_load

mb = h172_load.script("h153_mb", "h153/mb.py")


def kind(messages: list[dict]) -> str:
    if any(m["role"] == "assistant" for m in messages):
        return "chat-next"
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    if system.startswith("Answer from the document"):
        return "doc"
    return "shared" if system else "chat-first"


def captured(directory: str) -> list[list[tuple[str, bytes]]]:
    starts = []
    for name in os.listdir(directory):
        if name.startswith("bench."):
            with open(os.path.join(directory, name)) as lines:
                starts += [json.loads(line)["start"] for line in lines]
    starts.sort()
    runs: list[list[tuple[str, bytes]]] = [[] for _ in starts]
    folder = os.path.join(directory, "bodies")
    for name in sorted(os.listdir(folder), key=lambda n: float(n[:-5])):
        at = float(name[:-5])
        with open(os.path.join(folder, name), "rb") as file:
            raw = file.read()
        run = sum(1 for s in starts if s <= at) - 1
        messages = json.loads(raw)["messages"]
        if run >= 0 and not messages[0]["content"].startswith("warm-up"):
            runs[run].append((kind(messages), raw))
    return runs


def main() -> None:
    runs = captured(sys.argv[1])
    mb.bodies = lambda seed, rate, requests: runs[seed - 1]
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    mb.main()


if __name__ == "__main__":
    main()

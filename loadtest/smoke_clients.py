"""Third-party load tools against `kinference gateway`, unmodified: a short smoke.

    python -m loadtest.smoke_clients [--guidellm BIN] [--inference-perf BIN] [--requests 20]
                                     [--remote]

Starts a simulated engine and `kinference gateway` as it ships (hosting the picker, with a
policy naming that engine's pool; `/v1/models` lists its model, no flag needed) on free
loopback ports, or with `--remote` a `kinference serve` and the gateway calling it, then
runs each tool found (on PATH, or the binary given) against the gateway's URL as a
user would, and checks that every request it sent succeeded. Not part of the default test
run: the tools pull in heavy dependencies (torch-free, but datasets, transformers, ...), so
install them apart, e.g.

    python3 -m venv /tmp/loadtools && /tmp/loadtools/bin/pip install guidellm
    python -m loadtest.smoke_clients --guidellm /tmp/loadtools/bin/guidellm

inference-perf (kubernetes-sigs) requires Python 3.12 or later: give its binary from such an
environment with `--inference-perf` (or install it into 3.11 with `pip install
--ignore-requires-python -c <(printf 'numpy<2.4\nav<14.2\n') inference-perf`, which runs).
Neither tool downloads anything: guidellm reads prompts from a text file; inference-perf uses
its `mock` data and a tiny word-level tokenizer this script writes (no model hub here).
inference-perf runs twice, as an OpenAI chat client and as an Anthropic Messages client
(translated to chat for the engine). Exit status 0 when every tool that ran succeeded (a
tool not found is reported as skipped).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from loadtest.servers import REPO_ROOT, free_port
from loadtest.sim_engine import SimEngine, SimEngineConfig

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
READY_TIMEOUT_S = 60.0
# The picker's own metrics listener stays closed (its series are on the gateway's /metrics);
# its default port is a fixed one.
_NO_METRICS_PORT = {"KINFERENCE_METRICS_LISTEN": ""}
TOOL_TIMEOUT_S = 600.0


@dataclass
class Result:
    tool: str
    status: str  # "ok", "failed" or "skipped"
    detail: str


def _spawn(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def _wait_health(url: str, process: subprocess.Popen[bytes]) -> None:
    """Until GET /health answers 200 (the gateway and its picker both up)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_S
    while loop.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the gateway exited while starting")
        proc = await asyncio.create_subprocess_exec(
            "curl", "-sf", "-o", "/dev/null", f"{url}/health",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        if await proc.wait() == 0:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the gateway did not become healthy")


async def _run(argv: list[str], cwd: Path, log: Path) -> int:
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out
        )
        try:
            async with asyncio.timeout(TOOL_TIMEOUT_S):
                return await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return -1


async def guidellm(binary: str, url: str, work: Path, requests: int) -> Result:
    prompts = work / "prompts.txt"
    prompts.write_text("".join(f"Tell me about the number {i} in a sentence.\n" for i in range(50)))
    report = work / "guidellm.json"
    argv = [
        binary, "run",
        "--backend", f"kind=openai_http,target={url},model={MODEL}",
        "--profile", "kind=concurrent,streams=4",
        "--constraint", f"kind=max_requests,count={requests}",
        "--data", f"kind=text_file,path={prompts}",
        "--output", f"kind=json,path={report}",
        "--disable-progress",
    ]  # fmt: skip
    code = await _run(argv, work, work / "guidellm.log")
    if code != 0 or not report.exists():
        return Result("guidellm", "failed", f"exit {code}; see {work / 'guidellm.log'}")
    totals = json.loads(report.read_text())["benchmarks"][0]["scheduler_metrics"]
    done, errored = totals["requests_made"]["successful"], totals["requests_made"]["errored"]
    status = "ok" if done >= requests and errored == 0 else "failed"
    return Result("guidellm", status, f"{done} successful, {errored} errored")


INFERENCE_PERF_CONFIG = """\
load:
  type: constant
  stages:
    - rate: 5
      duration: {seconds}
api:
  type: {api}
  streaming: true
server:
  type: vllm
  model_name: {model}
  base_url: {url}
  ignore_eos: true
data:
  type: mock
tokenizer:
  pretrained_model_name_or_path: {tokenizer}
report:
  request_lifecycle:
    summary: true
storage:
  local_storage:
    path: {reports}
"""


async def inference_perf(binary: str, url: str, work: Path, requests: int) -> Result:
    """Twice: OpenAI chat, then Anthropic Messages (translated to chat for the engine)."""
    details = []
    for api in ("chat", "anthropic_messages"):
        result = await _inference_perf(binary, url, work / api, requests, api)
        if result.status != "ok":
            return result
        details.append(f"{api}: {result.detail}")
    return Result("inference-perf", "ok", "; ".join(details))


async def _inference_perf(binary: str, url: str, work: Path, requests: int, api: str) -> Result:
    config = work / "inference-perf.yaml"
    reports = work / "inference-perf-reports"
    seconds = max(2, requests // 5)
    tokenizer = _write_tokenizer(work / "tokenizer")
    config.write_text(
        INFERENCE_PERF_CONFIG.format(
            seconds=seconds, model=MODEL, url=url, reports=reports, tokenizer=tokenizer, api=api
        )
    )
    code = await _run([binary, "--config_file", str(config)], work, work / "inference-perf.log")
    summaries = sorted(reports.rglob("*summary*.json")) if reports.exists() else []
    if code != 0 or not summaries:
        return Result("inference-perf", "failed", f"exit {code}; see {work / 'inference-perf.log'}")
    text = summaries[0].read_text()
    document = json.loads(text)
    successes = _find_count(document, "successes")
    failures = _find_count(document, "failures")
    status = "ok" if successes and not failures else "failed"
    return Result("inference-perf", status, f"{successes} successful, {failures} failed")


def _write_tokenizer(directory: Path) -> Path:
    """A word-level Hugging Face tokenizer (tokenizer.json) small enough to write by hand."""
    directory.mkdir(parents=True, exist_ok=True)
    words = ["[UNK]", "[PAD]", *(f"w{i}" for i in range(256))]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "WordLevel",
            "vocab": {word: index for index, word in enumerate(words)},
            "unk_token": "[UNK]",
        },
    }
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "[UNK]",
        "pad_token": "[PAD]",
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def _find_count(document: object, key: str) -> int:
    """The `count` under the first `key` anywhere in a report (its layout varies)."""
    if isinstance(document, dict):
        value = document.get(key)
        if isinstance(value, dict) and isinstance(value.get("count"), int):
            return int(value["count"])
        return next((n for v in document.values() if (n := _find_count(v, key))), 0)
    if isinstance(document, list):
        return next((n for v in document if (n := _find_count(v, key))), 0)
    return 0


async def smoke(args: argparse.Namespace) -> list[Result]:
    work = Path(tempfile.mkdtemp(prefix="kinference-smoke-"))
    engine = SimEngine(SimEngineConfig(models=(MODEL,), time_scale=0.02))
    await engine.start()
    policy = work / "policy.yaml"
    policy.write_text(
        "pools:\n  - {namespace: default, name: chat, "
        f'endpoints: ["127.0.0.1:{engine.port}"], models: ["{MODEL}"]}}\n'
    )
    picker_at, gateway_at = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    kinference = [sys.executable, "-m", "kinference"]
    gateway_argv = [*kinference, "gateway", "--listen", gateway_at, "--config", str(policy)]
    processes = []
    if args.remote:
        serve = [*kinference, "serve", "--config", str(policy), "--listen", picker_at]
        processes.append(_spawn(serve, work / "picker.log", _NO_METRICS_PORT))
        gateway_argv += ["--picker", picker_at]
    else:  # the hosted picker's gRPC listener for other callers, on a free port too
        gateway_argv += ["--grpc-listen", picker_at]
    gateway = _spawn(gateway_argv, work / "gateway.log", _NO_METRICS_PORT)
    processes.insert(0, gateway)
    url = f"http://{gateway_at}"
    results: list[Result] = []
    try:
        await _wait_health(url, gateway)
        for name, runner, given in (
            ("guidellm", guidellm, args.guidellm),
            ("inference-perf", inference_perf, args.inference_perf),
        ):
            binary = shutil.which(given or name)
            if binary is None:
                results.append(Result(name, "skipped", "not installed (give its binary)"))
                continue
            results.append(await runner(binary, url, work, args.requests))
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)
        await engine.stop()
    print(f"logs and reports in {work}")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guidellm", help="the guidellm binary (default: on PATH)")
    parser.add_argument("--inference-perf", help="the inference-perf binary (default: on PATH)")
    parser.add_argument("--requests", type=int, default=20, help="requests per tool")
    parser.add_argument(
        "--remote", action="store_true", help="a separate `kinference serve` (--picker)"
    )
    args = parser.parse_args()
    results = asyncio.run(smoke(args))
    for result in results:
        print(f"{result.tool:16} {result.status:8} {result.detail}")
    return 1 if any(result.status == "failed" for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())

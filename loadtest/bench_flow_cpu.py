"""Python CPU of one request flow, by stage, in process, against a no-logic flow.

    python -m loadtest.bench_flow_cpu [--quick] [--pick-cpu]

`bench_picker` (a) measures whole servers over gRPC, where kinference's own Python is one
part of the CPU per flow beside the gRPC core, the event loop and grpc's poller thread. This
benchmark runs the same flow (push the 4 KiB chat body, Pick, pull, both reports) straight
through the service and the protobuf conversions, without gRPC, and splits its time by
stage, so the part kinference can change is measured on its own.

The baseline does for a flow what `loadtest.baseline_server` does, over the same body store:
keep the chunks, answer a constant, hand the chunks back, acknowledge the reports. Every
figure is the lowest mean over several rounds (the least disturbed on a noisy machine). In a
live server the same code costs about twice as much per call (caches are cold between RPCs),
so read the ratio and the shares, not the microseconds.

`--pick-cpu` times the Pick step alone in the calling thread's CPU time (the flow's other
steps run untimed between Picks): on a host shared with other work the wall clock also
counts the time the process was not running, which moved the same code's figure by 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from kinference.api import convert
from kinference.api.framing import encode_chunk
from kinference.app import App
from kinference.bodies import BodyStore, ByteBudget, Pull, Upload
from kinference.config.loader import parse_policy
from kinference.service import PickerService
from kinference.settings import Settings
from kinference.v1 import picker_pb2 as pb
from loadtest.bench_picker import POLICY_YAML
from loadtest.flows import Body, chat_body, final_report

BODY_BYTES = 4096  # as bench_picker (a)
STAGES = ("push", "pick", "pull", "first report", "final report")
Stage = Callable[[], None]


@dataclass(frozen=True)
class Plan:
    flows: int  # per round
    rounds: int


def _timed(stages: list[Stage], totals: list[float]) -> None:
    clock = time.perf_counter
    for index, stage in enumerate(stages):
        start = clock()
        stage()
        totals[index] += clock() - start


class Flow:
    """One request's steps, in STAGES order; the ids carry from one step to the next."""

    def __init__(self, body: Body) -> None:
        self.body = body
        self.stream_id = self.response_id = 0

    def stages(self) -> list[Stage]:
        return [self.push, self.pick, self.pull, self.first_report, self.final_report]

    def _filled(self, upload: Upload) -> Upload:
        for chunk in self.body.chunks:
            upload.add(chunk)
        return upload

    @staticmethod
    def _drain(pull: Pull) -> None:
        for piece in pull.messages():
            encode_chunk(piece)

    def push(self) -> None:
        raise NotImplementedError

    def pick(self) -> None:
        raise NotImplementedError

    def pull(self) -> None:
        raise NotImplementedError

    def first_report(self) -> None:
        raise NotImplementedError

    def final_report(self) -> None:
        raise NotImplementedError


class KinferenceFlow(Flow):
    """The servicer's calls for one flow, with the requests as they arrive on the wire."""

    def __init__(self, app: App, body: Body) -> None:
        super().__init__(body)
        self.service: PickerService = app.service
        self.registry = app.metrics.registry  # what the flows counted, for checks

    def push(self) -> None:
        upload = self._filled(self.service.begin_push(self.body.length, "bench-1"))
        self.stream_id, _ = self.service.commit_push(upload)

    def pick(self) -> None:
        raw = pb.PickRequest(body_stream_id=self.stream_id).SerializeToString()
        call = convert.pick_call(pb.PickRequest.FromString(raw))
        response = convert.pick_response(self.service.pick(call))
        response.SerializeToString()
        self.response_id = response.response_id

    def pull(self) -> None:
        pull = self.service.open_pull(self.response_id)
        self._drain(pull)
        self.service.close_pull(pull, completed=True)

    def first_report(self) -> None:
        request = pb.ReportFirstTokenRequest.FromString(_first_raw(self.response_id))
        known = self.service.first_token(
            request.response_id, request.observed_ttft_ms, request.upstream_status
        )
        pb.ReportFirstTokenResponse(acknowledged=known).SerializeToString()

    def final_report(self) -> None:
        request = pb.ReportFinalTokenRequest.FromString(_final_raw(self.response_id))
        known = self.service.final_token(convert.final_report(request))
        pb.ReportFinalTokenResponse(acknowledged=known).SerializeToString()


class BaselineFlow(Flow):
    """What the no-logic server does per flow, on a bare body store."""

    def __init__(self, store: BodyStore, body: Body) -> None:
        super().__init__(body)
        self.store = store

    def push(self) -> None:
        upload = self._filled(self.store.begin(self.body.length, "bench-1"))
        self.stream_id, _ = self.store.commit(upload)

    def pick(self) -> None:
        raw = pb.PickRequest(body_stream_id=self.stream_id).SerializeToString()
        held = self.store.take(pb.PickRequest.FromString(raw).body_stream_id)
        self.response_id = self.store.id_source.new_id(())
        self.store.park(self.response_id, held)
        pb.PickResponse(
            outcome=pb.PickResponse.OK,
            local=pb.LocalTarget(endpoint="127.0.0.1:8000"),
            response_id=self.response_id,
            body_total_bytes=held.size,
            requested_model="x",
        ).SerializeToString()

    def pull(self) -> None:
        pull = self.store.open_pull(self.response_id)
        self._drain(pull)
        pull.close()

    def first_report(self) -> None:
        pb.ReportFirstTokenRequest.FromString(_first_raw(self.response_id))
        pb.ReportFirstTokenResponse(acknowledged=True).SerializeToString()

    def final_report(self) -> None:
        pb.ReportFinalTokenRequest.FromString(_final_raw(self.response_id))
        pb.ReportFinalTokenResponse(acknowledged=True).SerializeToString()


def _first_raw(response_id: int) -> bytes:
    return pb.ReportFirstTokenRequest(
        response_id=response_id, observed_ttft_ms=5
    ).SerializeToString()


def _final_raw(response_id: int) -> bytes:
    return final_report(response_id).SerializeToString()


def warm_up(flows: list[Flow], count: int) -> None:
    """`count` untimed flows of each kind: caches, id tables, prefix index."""
    for flow in flows:
        stages = flow.stages()
        for _ in range(count):
            _timed(stages, [0.0] * len(stages))


def measure(flows: list[Flow], plan: Plan) -> list[list[float]]:
    """Per flow kind, per stage, microseconds per flow: the lowest round mean. Rounds of
    the kinds alternate, so drift on the machine reaches them alike."""
    warm_up(flows, plan.flows)
    best = [[float("inf")] * len(STAGES) for _ in flows]
    for _ in range(plan.rounds):
        for flow, kept in zip(flows, best, strict=True):
            stages, totals = flow.stages(), [0.0] * len(STAGES)
            for _ in range(plan.flows):
                _timed(stages, totals)
            kept[:] = [min(b, 1e6 * t / plan.flows) for b, t in zip(kept, totals, strict=True)]
    return best


def pick_cpu(flow: Flow, plan: Plan) -> list[float]:
    """Per round, the Pick step's mean thread CPU time (µs) over `plan.flows` whole flows."""
    clock = time.thread_time_ns
    means = []
    for _ in range(plan.rounds):
        spent = 0
        for _ in range(plan.flows):
            flow.push()
            started = clock()
            flow.pick()
            spent += clock() - started
            flow.pull()
            flow.first_report()
            flow.final_report()
        means.append(spent / plan.flows / 1000)
    return means


def render_pick_cpu(kinference: list[float], baseline: list[float]) -> str:
    lowest, middle = min(kinference), statistics.median(kinference)
    return (
        f"Pick, thread CPU µs per flow over {len(kinference)} rounds: lowest round "
        f"{lowest:.1f}, median {middle:.1f}; no-logic baseline lowest {min(baseline):.1f} "
        f"(ratio {lowest / min(baseline):.1f})"
    )


def build_flows(body: Body) -> tuple[KinferenceFlow, BaselineFlow]:
    """Both flows over fresh state; call it in a running event loop (the App's gRPC server,
    never started here, binds to the loop it is built in)."""
    settings = Settings()
    app = App(settings, parse_policy(POLICY_YAML), CollectorRegistry())
    bare = BodyStore(
        ByteBudget(settings.max_buffered_bytes),
        max_body_bytes=settings.max_body_bytes,
        ttl_s=settings.body_ttl_s,
    )
    return KinferenceFlow(app, body), BaselineFlow(bare, body)


def render(kinference: list[float], baseline: list[float]) -> str:
    total_k, total_b = sum(kinference), sum(baseline)
    lines = [
        f"### Python per flow, in process ({BODY_BYTES // 1024} KiB chat body; µs)",
        "",
        "| stage | baseline | kinference | share of kinference |",
        "|---|--:|--:|--:|",
    ]
    for name, base, kinf in zip(STAGES, baseline, kinference, strict=True):
        lines.append(f"| {name} | {base:.1f} | {kinf:.1f} | {100 * kinf / total_k:.0f} % |")
    lines.append(f"| **flow** | {total_b:.1f} | {total_k:.1f} | ratio {total_k / total_b:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="finish in a few seconds")
    parser.add_argument("--pick-cpu", action="store_true", help="Pick alone, thread CPU time")
    args = parser.parse_args(argv)
    plan = Plan(flows=500, rounds=5) if args.quick else Plan(flows=2000, rounds=20)
    print(asyncio.run(_run(plan, pick_only=args.pick_cpu)))
    return 0


async def _run(plan: Plan, *, pick_only: bool = False) -> str:
    kinference, baseline = build_flows(chat_body(BODY_BYTES))
    if pick_only:
        warm_up([kinference, baseline], plan.flows)
        timed = Plan(flows=300, rounds=plan.rounds)
        return render_pick_cpu(pick_cpu(kinference, timed), pick_cpu(baseline, timed))
    kinf_figures, base_figures = measure([kinference, baseline], plan)
    return render(kinf_figures, base_figures)


if __name__ == "__main__":
    sys.exit(main())

"""The picker benchmark's instruments: the skeleton server and the in-process flow timer.

Both feed figures into docs/benchmarks.md, so both must do the flow they claim to: the
skeleton answers the whole contract with a constant decision, and the flow timer's
kinference side really parses, routes and reports (it is not measuring a shortcut).
"""

from __future__ import annotations

import grpc

from kinference.config import parse_policy
from kinference.v1 import picker_pb2_grpc
from loadtest.bench_flow_cpu import (
    STAGES,
    Plan,
    build_flows,
    measure,
    pick_cpu,
    render,
    render_pick_cpu,
)
from loadtest.bench_picker import POLICY_YAML
from loadtest.flows import FlowClient, chat_body
from loadtest.skeleton_server import CONSTANT, skeleton_app
from tests.conftest import PickerFactory, make_settings


async def test_the_skeleton_serves_every_step_with_a_constant_decision() -> None:
    app = skeleton_app(make_settings())
    await app.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
            client = FlowClient(picker_pb2_grpc.PickerStub(channel))
            body = chat_body(4096)
            for _ in range(3):
                picked = await client.pick(await client.push(body))
                assert picked.local.endpoint == CONSTANT.endpoint
                assert await client.pull(picked) == body.length
                await client.report(picked)
        assert app.store.held_bodies == 0
        # Nothing of the routing brain ran: no pick was counted.
        ok = app.metrics.registry.get_sample_value("kinference_picks_total", {"outcome": "ok"})
        assert ok == 0.0
    finally:
        await app.server.stop(None)
        await app.close()


async def test_the_flow_timer_runs_the_real_service_and_reports_every_stage() -> None:
    kinference, baseline = build_flows(chat_body(4096))
    registry = kinference.registry
    kinf_figures, base_figures = measure([kinference, baseline], Plan(flows=20, rounds=2))
    assert len(kinf_figures) == len(base_figures) == len(STAGES)
    assert all(value > 0 for value in kinf_figures + base_figures)
    # The kinference side picked through the router and counted its reports.
    assert registry.get_sample_value("kinference_picks_total", {"outcome": "ok"}) == 60
    final = {"kind": "final_token", "known": "true"}
    assert registry.get_sample_value("kinference_reports_total", final) == 60
    table = render(kinf_figures, base_figures)
    assert "| pick |" in table and "ratio" in table


async def test_the_pick_cpu_timer_times_every_round_of_whole_flows() -> None:
    kinference, baseline = build_flows(chat_body(4096))
    registry = kinference.registry
    kinf_rounds = pick_cpu(kinference, Plan(flows=10, rounds=3))
    base_rounds = pick_cpu(baseline, Plan(flows=10, rounds=2))
    assert len(kinf_rounds) == 3 and len(base_rounds) == 2
    assert all(value > 0 for value in kinf_rounds + base_rounds)
    # Every timed flow ran whole: picked and reported.
    assert registry.get_sample_value("kinference_picks_total", {"outcome": "ok"}) == 30
    final = {"kind": "final_token", "known": "true"}
    assert registry.get_sample_value("kinference_reports_total", final) == 30
    assert "ratio" in render_pick_cpu(kinf_rounds, base_rounds)


async def test_the_two_call_flow_picks_on_push_and_reports_both_tokens_in_one_call(
    start_picker: PickerFactory,
) -> None:
    """`FlowClient.two_call_flow` is the real request with kinference's extensions: the
    push picks (the router counts it), the body comes back inline and is released, and the
    final report applies the folded first token (the request leaves the in-flight count)."""
    picker = await start_picker(parse_policy(POLICY_YAML))
    async with grpc.aio.insecure_channel(picker.target) as channel:
        client = FlowClient(picker_pb2_grpc.PickerStub(channel))
        for _ in range(3):
            await client.two_call_flow(chat_body(4096))
    assert picker.metric("kinference_picks_total", {"outcome": "ok"}) == 3
    final = {"kind": "final_token", "known": "true"}
    assert picker.metric("kinference_reports_total", final) == 3
    assert picker.app.store.held_bodies == 0

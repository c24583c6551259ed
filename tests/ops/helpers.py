"""Traffic that makes a picker export every series it can, and a scrape of /metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
import httpx
from prometheus_client.parser import text_string_to_metric_families

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body
from tests.conftest import MODEL, RunningPicker

# A pool, a provider-only model and a tenant with a budget (usage is kept for it).
OPS_POLICY = f"""
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"]
    models: ["{MODEL}"]
providers:
  - {{namespace: ai, name: openai, api: openai}}
models:
  - name: cloud
    targets:
      - {{provider: ai/openai, model: gpt-4o-mini}}
tenants:
  - {{tenant: team-a, tokens_per_minute: 1000000}}
default_tenant_action: allow
"""
# A replica on Redis answers DEGRADED while its shared view is stale, which a loaded machine
# may make it for a moment; both dispatch.
DISPATCHED = (pb.PickResponse.OK, pb.PickResponse.DEGRADED)
ITL_COUNTS = (3, 5, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)


async def exercise(picker: RunningPicker, request_id: str = "ops-1", content: str = "hi") -> None:
    """One request through every step, one left in flight, a rejected and a malformed one,
    and a provider blacklisted by an Abort."""
    client = picker.client
    pushed = await client.push([chat_body(content=content)], client_request_id=request_id)
    pick = await client.pick(pushed.stream_id, tenant="team-a", client_request_id=request_id)
    assert pick.outcome in DISPATCHED, pick
    await client.pull_all(pick.response_id)
    await client.first_token(pick.response_id, ttft_ms=120)
    await client.final_token(pick.response_id, model=MODEL, prompt_tokens=40,
                             completion_tokens=8, cached_tokens=16,
                             itl_bucket_counts=ITL_COUNTS)  # fmt: skip
    held = await client.pick((await client.push([chat_body()])).stream_id, tenant="team-a")
    assert held.outcome in DISPATCHED, held  # stays in flight: per-endpoint gauges exist
    unknown = await client.pick((await client.push([chat_body("no-such-model")])).stream_id)
    assert unknown.outcome == pb.PickResponse.NO_WORKERS
    malformed = await client.pick((await client.push([b"{not json"])).stream_id)
    assert malformed.outcome == pb.PickResponse.BAD_REQUEST
    cloud = await client.pick((await client.push([chat_body("cloud")])).stream_id)
    assert cloud.outcome in DISPATCHED and cloud.HasField("provider"), cloud
    await client.first_token(cloud.response_id, ttft_ms=300)
    await client.abort(cloud.response_id, pb.AbortRequest.BACKEND_UNAUTHORIZED, "401 from upstream")
    try:  # an RPC error, counted by method and code
        await client.abort(cloud.response_id)
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.NOT_FOUND
    else:
        raise AssertionError("a second Abort of one response must fail")


@dataclass
class Exposition:
    """What one /metrics page holds: family names as queried, sample names, label names."""

    families: dict[str, str] = field(default_factory=dict)  # queried name -> type
    samples: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)
    family_labels: dict[str, set[str]] = field(default_factory=dict)  # queried name -> labels

    def add(self, page: str) -> None:
        for family in text_string_to_metric_families(page):
            if family.name.endswith("_created") and family.type == "gauge":
                continue  # prometheus_client's creation times of counters and histograms
            queried = family.name + ("_total" if family.type == "counter" else "")
            self.families[queried] = family.type
            labels = self.family_labels.setdefault(queried, set())
            for sample in family.samples:
                self.samples.add(sample.name)
                labels.update(name for name in sample.labels if name != "le")
            self.labels.update(labels)


async def scrape(picker: RunningPicker) -> str:
    """The picker's /metrics page over HTTP (it needs `metrics_listen`)."""
    url = f"http://127.0.0.1:{picker.app.metrics_port}/metrics"
    async with httpx.AsyncClient(trust_env=False) as http:
        response = await http.get(url)
    response.raise_for_status()
    return response.text

"""kinference without its routing brain: the same server, body store and background tasks,
with Pick answering a constant destination and the token reports only acknowledged.

    python -m loadtest.skeleton_server --listen 127.0.0.1:50052

`bench_picker` runs it as a third server beside the baseline and kinference, so one run
splits kinference's cost per flow in two: what the gRPC layer and the body handling cost
(this server against the baseline) and what parsing, routing and the reports' bookkeeping
add on top (kinference against this server). It is a measuring instrument, not a mode of
the picker: nothing in `kinference/` knows about it.
"""

from __future__ import annotations

import argparse
import sys

import uvloop
from prometheus_client import CollectorRegistry

from kinference.api.server import build_server
from kinference.api.servicer import PickerServicer
from kinference.app import App
from kinference.bodies import BodyStore
from kinference.config import Policy
from kinference.routing import LocalChoice, Outcome
from kinference.service import FinalReport, PickCall, PickerService, PickResult
from kinference.settings import Settings

# The answer of every Pick, as the baseline server gives it.
CONSTANT = LocalChoice(endpoint="127.0.0.1:8000", slot=0, pool="default/chat", model="x")


class _Parked:
    """Response ids naming a parked body: the ones a new id must not reuse."""

    def __init__(self, store: BodyStore) -> None:
        self._store = store

    def __contains__(self, response_id: object) -> bool:
        return isinstance(response_id, int) and self._store.is_parked(response_id)


class SkeletonService(PickerService):
    """The service's body bookkeeping with a constant decision and no report handling."""

    def pick(self, call: PickCall) -> PickResult:
        body = self.store.take(call.stream_id)
        response_id = self.store.id_source.new_id(_Parked(self.store))
        self.store.park(response_id, body)
        return PickResult(
            Outcome.OK,
            response_id=response_id,
            destination=CONSTANT,
            body_total_bytes=body.size,
            requested_model=CONSTANT.model,
        )

    async def pick_off_loop(self, call: PickCall) -> PickResult:
        return self.pick(call)  # nothing parsed: nothing to move off the loop

    def first_token(self, response_id: int, ttft_ms: int, upstream_status: int) -> bool:
        return True

    def final_token(self, report: FinalReport) -> bool:
        self.store.drop_parked(report.response_id)  # a body nobody pulled
        return True


def skeleton_app(settings: Settings) -> App:
    """A kinference App whose gRPC server calls a SkeletonService over the App's store."""
    app = App(settings, Policy(), CollectorRegistry())
    service = SkeletonService(app.store, app.router, app.inflight, app.metrics)
    servicer = PickerServicer(service, app.metrics, settings.body_idle_timeout_s)
    app.server = build_server(servicer, app.health)  # the App's own is never started
    return app


async def serve(listen: str) -> None:
    await skeleton_app(Settings(listen=listen, metrics_listen="127.0.0.1:0")).serve()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:50052", help="host:port to bind")
    args = parser.parse_args(argv)
    uvloop.run(serve(args.listen))


if __name__ == "__main__":
    sys.exit(main())

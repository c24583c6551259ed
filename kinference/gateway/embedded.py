"""Opening the picker the gateway talks to: hosted in this process, or across gRPC.

In-process (the default, no `--picker`): the gateway builds the picker with the composition
root every `kinference serve` uses (kinference.app.App: the same routing, the same Redis
sharing, the same policy reloads and discovery) and calls it directly; the App still serves
its gRPC service on `KINFERENCE_LISTEN` for other callers, and its own metrics. Remote
(`--picker HOST:PORT`): one long-lived gRPC channel to a `kinference serve` Deployment.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from prometheus_client import CollectorRegistry

from kinference.app import App
from kinference.client import PickerClient
from kinference.config import Policy
from kinference.gateway.local import LocalPicker
from kinference.gateway.port import PickerPort
from kinference.gateway.remote import CHANNEL_OPTIONS, PolicyModels, RemotePicker
from kinference.gateway.settings import GatewaySettings
from kinference.settings import Settings


@contextlib.asynccontextmanager
async def hosted_picker(
    settings: Settings, policy: Policy, registry: CollectorRegistry
) -> AsyncIterator[LocalPicker]:
    """A started picker App in this process, drained and stopped on exit."""
    app = App(settings, policy, registry)
    await app.start()
    try:
        yield LocalPicker(
            app.service,
            idle_timeout_s=settings.body_idle_timeout_s,
            model_names=lambda: app.policy.model_names,
            serving=lambda: not app.store.draining,
        )
    finally:
        await app.drain_and_stop()


@contextlib.asynccontextmanager
async def remote_picker(
    settings: GatewaySettings, picker_settings: Settings | None = None
) -> AsyncIterator[RemotePicker]:
    """A channel to `settings.picker`; the policy file, when given, lists the models."""
    config = picker_settings.config if picker_settings is not None else None
    picker = RemotePicker(
        PickerClient(settings.picker, options=CHANNEL_OPTIONS),
        rpc_timeout_s=settings.rpc_timeout_s,
        models=PolicyModels(config) if config is not None else None,
    )
    try:
        yield picker
    finally:
        await picker.aclose()


def picker_opener(
    settings: GatewaySettings,
    picker_settings: Settings,
    policy: Policy | None,
    registry: CollectorRegistry,
) -> Callable[[], AbstractAsyncContextManager[PickerPort]]:
    """Hosted with `policy` (in-process mode), or remote when `policy` is None."""
    if policy is not None:
        hosted = policy

        def open_hosted() -> AbstractAsyncContextManager[PickerPort]:
            return hosted_picker(picker_settings, hosted, registry)

        return open_hosted

    def open_remote() -> AbstractAsyncContextManager[PickerPort]:
        return remote_picker(settings, picker_settings)

    return open_remote

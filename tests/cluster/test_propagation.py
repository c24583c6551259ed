"""How soon another replica learns a pick: placement and load go out at once, samples
after the batch window (h130: with every event waiting the window and every read pausing
as long, a third of the picks at 18 req/s over 4 replicas were made with another
replica's pick unseen)."""

from __future__ import annotations

from kinference.cluster.outbox import Outbox
from tests.api.helpers import pick_ok, wait_until
from tests.cluster.test_replication import load, long_prompt, total

WINDOW_S = 3600.0  # a batch window no test outlives: what waits for it never arrives


def test_placement_and_load_are_urgent_and_samples_are_not() -> None:
    outbox = Outbox()
    outbox.first_token("10.0.0.1:8000", "m", 40.0)
    outbox.itl("10.0.0.1:8000", "m", [1, 2])
    assert outbox.wakeup.is_set() and not outbox.urgent
    for add in (
        lambda: outbox.picked("10.0.0.1:8000", "m", [1, 2, 3]),
        lambda: outbox.prefilled("10.0.0.1:8000", 7),
        lambda: outbox.released("10.0.0.1:8000"),
    ):
        outbox.take()
        add()
        assert outbox.urgent
    outbox.take()
    assert not outbox.urgent and not outbox.wakeup.is_set()


async def test_a_pick_reaches_another_replica_without_waiting_for_the_batch_window(
    start_replicas,
) -> None:
    a, b = await start_replicas(2)
    node = a.app.cluster
    assert node is not None
    await wait_until(lambda: not node.outbox.wakeup.is_set(), what="a's first flush done")
    node.batch_s = WINDOW_S  # a's samples now wait an hour; its picks must not
    first = await pick_ok(a, long_prompt("tax law"))
    endpoint = first.local.endpoint
    assignment = a.app.inflight.get(first.response_id)
    assert assignment is not None and assignment.local is not None
    hashes = assignment.local.hashes
    slot = b.app.router.table.slot(endpoint)
    # B sees the worker busy and holding the prompt's blocks before any report.
    await wait_until(
        lambda: load(b)[endpoint] == 1 and b.app.router.prefix.match(hashes).get(slot, 0) > 0,
        what="a's pick on b",
    )
    await a.client.final_token(first.response_id, prompt_tokens=10)
    await wait_until(lambda: total(b) == 0, what="a's release on b")

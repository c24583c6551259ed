"""A pool's tokenizer files that do not load: missing or corrupt when the policy is loaded,
or changed at a reload. A Pick for such a pool is routed approximately with a reason
(DEGRADED) that says so, not a traceback logged per Pick nor the file parsed again at every
Pick; the files are tried again at the next policy load (and after a while, in the
background). A reload
loads files that changed since (a new model's tokenizer at the same path); if they do not
load, the one loaded before stays in use."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from kinference.bodies import Body
from kinference.kvcache.blocks import PromptBlocks
from kinference.requests.parse import parse_request
from kinference.tokenize.loaded import RETRY_S, Tokenizers, Unloadable
from kinference.tokenize.plan import plan_of
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.tokenizer import PromptTokenizer
from tests.tokenize.files import precise_chat_policy, write_model, zoo

BS = 4
REF = "default/chat"
TEXT = "the quick brown fox jumps over the lazy dog " * 8


async def _pick(preparer: PromptPreparer) -> tuple[str | None, PromptBlocks | None]:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": TEXT}]}).encode()
    body = Body([raw], reserved=len(raw))
    query = await asyncio.wait_for(preparer.prepare(parse_request(body), body), 30)
    assert query is not None
    return query.problem, query.blocks.get(REF)


def counted_loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """Every `PromptTokenizer.from_files` call from now on (its arguments), appended."""
    loads: list[tuple[object, ...]] = []
    real = PromptTokenizer.from_files.__func__  # type: ignore[attr-defined]

    def counted(cls: type[PromptTokenizer], *args: object, **named: Any) -> PromptTokenizer:
        loads.append(args)
        return real(cls, *args, **named)  # type: ignore[no-any-return]

    monkeypatch.setattr(PromptTokenizer, "from_files", classmethod(counted))
    return loads


async def test_a_corrupt_tokenizer_is_a_reason_not_a_traceback_per_pick(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = write_model(tmp_path)
    policy = precise_chat_policy(files, BS)
    files[0].write_text("{}")  # after validation, which only asks that it exists
    loads = counted_loads(monkeypatch)
    preparer = PromptPreparer(policy)
    try:
        with caplog.at_level(logging.WARNING, logger="kinference.tokenize"):
            problems = [(await _pick(preparer))[0] for _ in range(3)]
        assert problems[0] is not None and "tokenizer" in problems[0]
        assert "does not load" in problems[0] and len(set(problems)) == 1
        assert len(loads) == 1  # not parsed again at every Pick
        assert [r.levelname for r in caplog.records] == ["WARNING"]  # once, no traceback
        assert caplog.records[0].exc_info is None
    finally:
        preparer.close()


async def test_a_tokenizer_fixed_is_loaded_at_the_next_policy_load(tmp_path: Path) -> None:
    files = write_model(tmp_path)
    policy = precise_chat_policy(files, BS)
    good = files[0].read_text()
    files[0].unlink()  # missing at start
    preparer = PromptPreparer(policy)
    try:
        problem, _ = await _pick(preparer)
        assert problem is not None and "does not load" in problem
        files[0].write_text(good)
        preparer.apply_policy(policy)
        await preparer.warmed()
        problem, blocks = await _pick(preparer)
        assert problem is None and blocks is not None and blocks.blocks
    finally:
        preparer.close()


async def test_a_tokenizer_replaced_is_loaded_again_at_a_reload_and_kept_if_broken(
    tmp_path: Path,
) -> None:
    files = write_model(tmp_path)
    policy = precise_chat_policy(files, BS)
    preparer = PromptPreparer(policy)
    try:
        await preparer.warmed()
        _, before = await _pick(preparer)
        files[0].write_text(zoo()["wordpiece"])  # another model's, at the same path
        preparer.apply_policy(policy)
        await preparer.warmed()
        _, after = await _pick(preparer)
        assert before is not None and after is not None and before.tokens != after.tokens
        files[0].write_text("not json")  # a broken copy: the one loaded stays in use
        preparer.apply_policy(policy)
        await preparer.warmed()
        problem, kept = await _pick(preparer)
        assert problem is None and kept is not None and kept.tokens == after.tokens
    finally:
        preparer.close()


def test_a_failed_load_is_retried_in_the_background_not_on_a_picks_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`RETRY_S` after a failed load, the next Pick does not load the ~10 MB file itself
    (it waited for it, or loaded it on the event loop's thread): it is routed approximately
    and queues the retry as the tokenizer thread's background work, once; the Picks after
    that retry find the tokenizer loaded."""
    files = write_model(tmp_path)
    good = files[0].read_text()
    files[0].write_text("{}")
    profile = plan_of(precise_chat_policy(files, BS)).profiles[REF]
    clock, queued, loads = [0.0], [], counted_loads(monkeypatch)
    tokenizers = Tokenizers(lambda: clock[0], later=lambda work: queued.append(work) or True)
    with pytest.raises(Unloadable):
        tokenizers.get(profile)  # the first load, as before
    files[0].write_text(good)
    clock[0] = RETRY_S
    for _ in range(3):
        with pytest.raises(Unloadable):
            tokenizers.get(profile)
    assert len(loads) == 1 and len(queued) == 1  # not loaded on the Picks' path; queued once
    queued.pop()()  # the thread's background turn
    assert len(loads) == 2
    assert tokenizers.get(profile) is tokenizers.values()[0]


def test_a_retry_that_fails_again_waits_another_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = write_model(tmp_path)
    files[0].write_text("{}")
    profile = plan_of(precise_chat_policy(files, BS)).profiles[REF]
    clock, queued = [0.0], []
    tokenizers = Tokenizers(lambda: clock[0], later=lambda work: queued.append(work) or True)
    for at in (0.0, RETRY_S, RETRY_S):
        clock[0] = at
        with pytest.raises(Unloadable):
            tokenizers.get(profile)
    queued.pop()()  # fails again: logged, not raised
    clock[0] = 1.5 * RETRY_S
    with pytest.raises(Unloadable):
        tokenizers.get(profile)
    assert not queued  # not before RETRY_S after the retry
    clock[0] = 2 * RETRY_S
    with pytest.raises(Unloadable):
        tokenizers.get(profile)
    assert len(queued) == 1


def test_a_full_background_queue_leaves_the_retry_to_a_later_pick(tmp_path: Path) -> None:
    files = write_model(tmp_path)
    files[0].write_text("{}")
    profile = plan_of(precise_chat_policy(files, BS)).profiles[REF]
    clock, asked = [0.0], []
    tokenizers = Tokenizers(lambda: clock[0], later=lambda work: asked.append(work) and False)
    with pytest.raises(Unloadable):
        tokenizers.get(profile)
    clock[0] = RETRY_S
    for _ in range(3):
        with pytest.raises(Unloadable):
            tokenizers.get(profile)
    assert len(asked) == 3  # refused each time: asked again by the next Pick


async def test_reloads_that_change_nothing_do_not_load_a_broken_tokenizer_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery reloads the policy at every pod change; each reload loaded every broken
    profile's files again (a real tokenizer.json: ~10 MB of JSON, on the tokenizer thread
    ahead of the Picks' work), past `RETRY_S`. Files unchanged since they failed are tried
    again after `RETRY_S`, or at the first reload once they change."""
    files = write_model(tmp_path)
    good = files[0].read_text()
    files[0].write_text("{}")
    policy = precise_chat_policy(files, BS)
    loads = counted_loads(monkeypatch)
    preparer = PromptPreparer(policy)
    try:
        await preparer.warmed()
        for _ in range(10):  # pods come and go: the same files
            preparer.apply_policy(policy)
            await preparer.warmed()
        assert len(loads) == 1  # 11 before
        files[0].write_text(good)  # fixed: the next reload loads it
        preparer.apply_policy(policy)
        await preparer.warmed()
        assert len(loads) == 2
        problem, blocks = await _pick(preparer)
        assert problem is None and blocks is not None and blocks.blocks
    finally:
        preparer.close()

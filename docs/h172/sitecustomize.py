"""h172 probe: h147's gateway trace (docs/h147/sitecustomize.py, loaded from its file) plus
stamps on the precise Pick's path from push to `ready`: `commit_push` returned, the early
task's start and end (`PickPreparation._prepared`), `PromptPreparer.prepare` entry and exit,
and the loop thread's CPU in `_start` (render + marks) and `_advance` (encode, blocks)."""

import os
import sys
import time

import h172_load

probe = h172_load.script("h147_probe", "h147/sitecustomize.py")

if os.environ.get("H147_TRACE") and "gateway" in " ".join(sys.argv):
    from kinference import preparation as P
    from kinference import service as S
    from kinference.tokenize import prepare as TP

    pc, cur = time.perf_counter, probe.cur

    def stamp(name: str) -> None:
        rec = cur.get()
        if rec is not None:
            rec.setdefault(name, pc())

    of_commit = S.PickerService.commit_push

    def commit_push(self, upload, request_path=""):  # type: ignore[no-untyped-def]
        try:
            return of_commit(self, upload, request_path)
        finally:
            stamp("commit")

    S.PickerService.commit_push = commit_push

    of_prepared = P.PickPreparation._prepared

    async def _prepared(self, body):  # type: ignore[no-untyped-def]
        stamp("early0")
        try:
            return await of_prepared(self, body)
        finally:
            stamp("early1")

    P.PickPreparation._prepared = _prepared

    of_prepare = TP.PromptPreparer.prepare

    bodies = os.environ.get("H172_BODIES")  # scratch: the bodies, to replay in process

    async def prepare(self, request, body):  # type: ignore[no-untyped-def]
        stamp("prep0")
        if bodies:
            with open(os.path.join(bodies, f"{pc():.6f}.json"), "wb") as out:  # noqa: ASYNC230
                out.write(body.read_span(0, body.size))
        try:
            return await of_prepare(self, request, body)
        finally:
            stamp("prep1")

    TP.PromptPreparer.prepare = prepare

    def timed(name: str, original):  # type: ignore[no-untyped-def]
        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            c0 = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                rec = cur.get()
                if rec is not None:
                    rec[name] = rec.get(name, 0.0) + (time.thread_time() - c0) * 1e3

        return wrapped

    TP.PromptPreparer._start = timed("start_ms", TP.PromptPreparer._start)
    TP.PromptPreparer._advance = timed("advance_ms", TP.PromptPreparer._advance)
    TP.prompt_text = timed("text_ms", TP.prompt_text)

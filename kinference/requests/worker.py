"""The parse worker: a process of its own that scans dense chunks and parses big bodies.

    python -m kinference.requests.worker   (started by `requests/offload.py`, never by hand)

It reads frames (`frames.py`) on stdin and answers on stdout, one job at a time:

- `ping`: answers `pong` (the picker's startup waits for it: the worker is ready);

- `scan` (a `JsonScanner` and, as payload, the rest of a chunk): feeds it, answers
  `scanned` with the scanner;
- `parse` (the body's size, path, scanner and shipped spans; the bytes as payload):
  estimates what the parse will hold (`cost.parse_cost`), answers `cost`, then waits for
  `go` (the picker reserved it from the body budget) or `drop`; after `go` answers `parsed`
  with the `InferenceRequest` as `shipping.returned` trims it (or the MalformedRequest
  text), and its resident memory, so that the picker can recycle a bloated worker;
- `translate` (the body's path, the shape it was written in and the one to send; the whole body
  as payload): parses it, answers `cost` (`cost.translation_cost`), and after `go` answers
  `translated` with the `rewrite.Translation` (or the `Untranslatable`), and its memory.

A job that raises anything else answers `failed`. The cyclic collector stays off (the
parse's objects are trees that reference counting frees) and runs once after each job.
The worker stops at the end of stdin: when the picker closes it, or dies. The
process is separate so that a CPU-heavy parse never holds the picker's GIL. It runs at
the picker's priority: at nice 10 the loop's lag was no better (measured), and on a busy
machine dense uploads waited so long for the worker that they hit the idle timeout.
"""

from __future__ import annotations

import gc
import os
import signal
from typing import IO, Any

from kinference.bodies import Body
from kinference.heap import fix_mmap_threshold
from kinference.requests import frames
from kinference.requests.cost import parse_cost, translation_cost
from kinference.requests.fields import MalformedRequest, scan_body
from kinference.requests.parse import InferenceRequest, parse_request
from kinference.requests.rewrite import Translation, translation
from kinference.requests.scan import JsonScanner
from kinference.requests.shapes import Shape
from kinference.requests.shipping import rebuilt, returned
from kinference.requests.translation import Untranslatable


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the picker's to handle
    fix_mmap_threshold()  # its copies of bodies go back to the system after each job
    gc.disable()
    inbox = os.fdopen(os.dup(0), "rb")
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not corrupt the frames
    while (frame := frames.read(inbox)) is not None:
        kind, data, payload = frame
        try:
            _job(kind, data, payload, inbox, outbox)
        except Exception as exc:  # reported to the picker, which fails the call
            # The type only: a message may quote the body, which is never logged or echoed.
            frames.write(outbox, "failed", type(exc).__name__)
        del frame, data, payload
        gc.collect()


def _job(kind: str, data: Any, payload: bytes, inbox: IO[bytes], outbox: IO[bytes]) -> None:
    if kind == "ping":  # the picker waits for it once at startup: imports are done
        frames.write(outbox, "pong", None)
    elif kind == "scan":
        scanner: JsonScanner = data
        scanner.feed(payload)
        frames.write(outbox, "scanned", scanner)
    elif kind == "parse":
        size, path, scanner, spans = data
        body = Body(rebuilt(size, spans, payload), reserved=0, observer=scanner)
        body.request_path = path
        if body.observer is None:  # read span by span, so that large values return as spans
            body.observer = scan_body(body)
        frames.write(outbox, "cost", parse_cost(body))
        answer = frames.read(inbox)
        if answer is not None and answer[0] == "go":
            frames.write(outbox, "parsed", (_parsed(body), _rss_bytes()))
    elif kind == "translate":
        path, written, sent = data
        body = Body([payload], reserved=0)
        request = parse_request(body, path=path)  # validated at Pick already: it parses
        if request.shape is not written:
            raise ValueError("the body parsed as another shape than at Pick")
        frames.write(outbox, "cost", translation_cost(body))
        answer = frames.read(inbox)
        if answer is not None and answer[0] == "go":
            frames.write(outbox, "translated", (_translation(body, request, sent), _rss_bytes()))
    else:
        raise ValueError(f"unknown job {kind!r}")


def _translation(
    body: Body, request: InferenceRequest, sent: Shape
) -> Translation | Untranslatable:
    try:
        return translation(body, request, sent)
    except Untranslatable as exc:
        return exc


def _parsed(body: Body) -> InferenceRequest | str:
    try:
        return returned(parse_request(body, path=body.request_path))
    except MalformedRequest as exc:
        return str(exc)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


if __name__ == "__main__":
    main()

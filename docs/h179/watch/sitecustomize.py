"""h179 scratch probe (not product): a loop-stall watchdog for a `kinference gateway` process.

With H179_WATCH=DIR and PYTHONPATH=docs/h179/watch:<tree>, the gateway process (argv has
"gateway") gets, from its first request on:
- a ticker on its event loop (every TICK_S) stamping `last`, and logging each tick later than
  LATE_S (its lateness: the loop's lag);
- a watchdog thread that wakes every POLL_S, keeps a ring of every thread's /proc schedstat
  (CPU ns, run-queue wait ns), its state and syscall, and, while the loop has not ticked for
  STALL_S, samples the main thread's Python stack (`sys._current_frames()`) up to MAX_SAMPLES
  times a stall, with the main thread's CPU/wait, state and current syscall at that moment;
- per stall (written when the loop ticks again): its span, every thread's CPU and run-queue
  wait deltas over it, the main thread's fault counts, the host's /proc/stat CPU split and
  the watchdog's own lateness (a watchdog that could not run: the GIL held in C, or the
  process descheduled).
- "slow" lines: `PickPreparation.ready` and `LocalPicker.pick` calls over SLOW_S wall, with
  the loop thread's CPU and run-queue wait over them;
- "decide" lines: every decision's thread CPU and wall (`PickerService._decide`), and its
  phases' thread CPU (docs/h179/phases.py; H179_TWICE=1: the parse and the engine signals,
  both pure, run a second time at once and timed apart: the same step warm, in situ) and
  the thread's minor/major faults and involuntary switches over it, 50 decisions a line;
- H179_WARM=1: the engine signals computed (and dropped) when each request's task starts,
  before its body is read ("warm" lines: that warm-up's thread CPU);
- H179_RT=1: the loop thread switched to SCHED_FIFO 1 at the first request (the causal check:
  a thread that never waits for a core behind other processes).
Lines are kept in memory and written at exit (DIR/watch.PID.jsonl), and every 10 s. The
watchdog's scans cost ~2 ms of CPU every 0.5 s (the host's processes) plus ~50 µs per poll.
"""

import os
import sys

_D = os.environ.get("H179_WATCH")
TICK_S, POLL_S, STALL_S, LATE_S, MAX_SAMPLES = 0.010, 0.004, 0.040, 0.020, 40


def _threads():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[int(tid)] = f.read().strip()
        except OSError:
            pass
    return out


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode()
    except OSError:
        return ""


def _sched(tid):
    s = _read(f"/proc/self/task/{tid}/schedstat").split()
    return (int(s[0]), int(s[1]), int(s[2])) if len(s) == 3 else (0, 0, 0)


def _stat(tid):  # state, minflt, majflt, utime, stime (ticks)
    s = _read(f"/proc/self/task/{tid}/stat")
    rest = s[s.rfind(")") + 2 :].split()
    return (rest[0], int(rest[7]), int(rest[9]), int(rest[11]), int(rest[12])) if rest else None


def _syscall(tid):
    return _read(f"/proc/self/task/{tid}/syscall").split(" ")[0].strip()


def _host():
    lines = _read("/proc/stat").splitlines()
    cpu = [int(x) for x in lines[0].split()[1:]] if lines else []
    extra = {
        ln.split()[0]: int(ln.split()[1])
        for ln in lines
        if ln.startswith(("ctxt", "procs_running", "procs_blocked"))
    }
    return cpu, extra, _read("/proc/loadavg").strip()


def _procs():  # pid -> (utime+stime ticks, comm + a little of the command line)
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        s = _read(f"/proc/{pid}/stat")
        if not s:
            continue
        rest = s[s.rfind(")") + 2 :].split()
        try:
            ticks = int(rest[11]) + int(rest[12])
        except (IndexError, ValueError):
            continue
        out[int(pid)] = (ticks, s[s.find("(") + 1 : s.rfind(")")])
    return out


def _start(loop):
    import atexit
    import json
    import threading
    import time
    import traceback

    pc = time.perf_counter
    if os.environ.get("H179_RT"):  # the causal check: the loop thread never waits for a core
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        _LINES.append({"kind": "rt", "policy": os.sched_getscheduler(0)})
    main_tid = threading.get_native_id()
    main_ident = threading.get_ident()
    state = {"last": pc(), "t0": pc(), "wall0": time.time()}
    lines = _LINES

    main_fd = os.open(f"/proc/self/task/{main_tid}/schedstat", os.O_RDONLY)

    def main_sched():
        cpu, wait, slices = os.pread(main_fd, 64, 0).split()
        return int(cpu), int(wait), int(slices)

    state["sched"] = main_sched()

    def tick(due):
        now = pc()
        late = now - due
        sched = main_sched()
        if late > LATE_S:
            s0 = state["sched"]
            lines.append(
                {
                    "kind": "lag",
                    "t": now - state["t0"],
                    "late_ms": late * 1e3,
                    "gap_ms": (now - state["last"]) * 1e3,
                    "cpu_ms": (sched[0] - s0[0]) / 1e6,
                    "wait_ms": (sched[1] - s0[1]) / 1e6,
                    "slices": sched[2] - s0[2],
                    "wall": time.time(),
                }
            )
        state["last"], state["sched"] = now, sched
        loop.call_at(loop.time() + TICK_S, tick, pc() + TICK_S)

    loop.call_soon_threadsafe(tick, pc())

    def snapshot():
        return {tid: (_sched(tid), _stat(tid)) for tid in names}

    names = _threads()

    def flush():
        if not lines:
            return
        with open(f"{_D}/watch.{os.getpid()}.jsonl", "a") as f:
            taken = lines[:]
            del lines[: len(taken)]
            for ln in taken:
                f.write(json.dumps(ln) + "\n")

    def watch():
        nonlocal names
        ring = []  # (t, snapshot)
        stall = None
        prev_wake = pc()
        refreshed = pc()
        last_flush = pc()
        procs_ring, procs_ring_t, procs_at = [], [], [0.0]
        while True:
            time.sleep(POLL_S)
            now = pc()
            over = now - prev_wake - POLL_S
            prev_wake = now
            if now - refreshed > 1.0:
                names, refreshed = _threads(), now
            if now - procs_at[0] > 0.5 and stall is None:
                procs_ring.append(_procs())
                procs_ring_t.append(now)
                del procs_ring[:-2], procs_ring_t[:-2]
                procs_at[0] = now
            snap = snapshot()
            ring.append((now, snap))
            if len(ring) > 400:
                del ring[:100]
            last = state["last"]
            idle = now - last
            if stall is None and idle > STALL_S:
                before = next((s for t, s in reversed(ring) if t <= last), ring[0][1])
                stall = {
                    "kind": "stall",
                    "t_last": last - state["t0"],
                    "last0": last,
                    "samples": [],
                    "before": before,
                    "procs0": procs_ring[0] if procs_ring else {},
                    "host0": _host(),
                    "over_max_ms": over * 1e3,
                }
            if stall is not None:
                if state["last"] != last or idle <= STALL_S:  # ticked again
                    end = state["last"]
                    last = stall.pop("last0")
                    procs1 = _procs()
                    procs0 = stall.pop("procs0")
                    used = sorted(
                        ((v[0] - procs0.get(k, (v[0], ""))[0], k, v[1]) for k, v in procs1.items()),
                        reverse=True,
                    )[:12]
                    stall["top_procs"] = [
                        (
                            round(d * 10, 1),
                            k,
                            n,
                            _read(f"/proc/{k}/cmdline").replace("\0", " ")[:90],
                        )
                        for d, k, n in used
                        if d > 0
                    ]  # ms (100 Hz ticks)
                    stall["procs_window_ms"] = (
                        (pc() - procs_ring_t[0]) * 1e3 if procs_ring_t else None
                    )
                    after = snapshot()
                    before = stall.pop("before")
                    threads = {}
                    for tid, (s1, st1) in after.items():
                        s0, st0 = before.get(tid, ((0, 0, 0), None))
                        threads[names.get(tid, "?") + f"/{tid}"] = {
                            "cpu_ms": (s1[0] - s0[0]) / 1e6,
                            "wait_ms": (s1[1] - s0[1]) / 1e6,
                            "slices": s1[2] - s0[2],
                            "minflt": st1[1] - st0[1] if st0 and st1 else None,
                            "majflt": st1[2] - st0[2] if st0 and st1 else None,
                        }
                    h0, h1 = stall.pop("host0"), _host()
                    stall.update(
                        {
                            "span_ms": (end - last) * 1e3,
                            "t_end": end - state["t0"],
                            "threads": threads,
                            "host_cpu_delta": [b - a for a, b in zip(h0[0], h1[0])],
                            "ctxt_delta": h1[1].get("ctxt", 0) - h0[1].get("ctxt", 0),
                            "procs_running": h1[1].get("procs_running"),
                            "loadavg": h1[2],
                            "wall": state["wall0"] + (last - state["t0"]),
                        }
                    )
                    lines.append(stall)
                    stall = None
                else:
                    stall["over_max_ms"] = max(stall["over_max_ms"], over * 1e3)
                    if len(stall["samples"]) < MAX_SAMPLES:
                        frame = sys._current_frames().get(main_ident)
                        stack = traceback.extract_stack(frame)[-14:] if frame is not None else []
                        s = _sched(main_tid)
                        st = _stat(main_tid)
                        others = {
                            names.get(tid, "?"): (_stat(tid) or ("?",))[0]
                            for tid in names
                            if tid != main_tid
                        }
                        stall["samples"].append(
                            {
                                "at_ms": (now - last) * 1e3,
                                "cpu_ns": s[0],
                                "wait_ns": s[1],
                                "state": st[0] if st else None,
                                "syscall": _syscall(main_tid),
                                "others": others,
                                "watch_over_ms": over * 1e3,
                                "stack": [
                                    f"{fr.filename.split('site-packages/')[-1].split('/h179/')[-1]}:{fr.lineno} {fr.name}"
                                    for fr in stack
                                ],
                            }
                        )
            if now - last_flush > 10.0:
                flush()
                last_flush = now

    threading.Thread(target=watch, name="h179-watch", daemon=True).start()
    atexit.register(flush)


def _slow(lines_of, what, pc, sched):
    """Wrap the async method `what` (module, class, name): calls over SLOW_S wall are logged
    with the main thread's CPU and run-queue wait over them."""
    module, cls, name = what
    of = getattr(cls, name)

    async def timed(self, *a, **k):
        t0, s0 = pc(), sched()
        try:
            return await of(self, *a, **k)
        finally:
            wall = pc() - t0
            if wall > SLOW_S:
                s1 = sched()
                lines_of().append(
                    {
                        "kind": "slow",
                        "what": name,
                        "wall_ms": wall * 1e3,
                        "cpu_ms": (s1[0] - s0[0]) / 1e6,
                        "wait_ms": (s1[1] - s0[1]) / 1e6,
                    }
                )

    setattr(cls, name, timed)


SLOW_S = 0.020
_LINES = []
_DECIDE = []
_PHASES = []
_SERVICES = []
_WARMED = []
_ORIG = {}


def _install():
    import asyncio
    import time

    from kinference import preparation as P
    from kinference.gateway import flow as F
    from kinference.gateway import local as L

    def sched():
        with open("/proc/thread-self/schedstat", "rb") as f:
            cpu, wait, _ = f.read().split()
        return int(cpu), int(wait)

    _slow(lambda: _LINES, (P, P.PickPreparation, "ready"), time.perf_counter, sched)
    from kinference import service as S

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import phases

    from kinference.routing import router as R

    _ORIG["signals"] = R.Router._signals  # unstamped: the warm-up is not the decision's
    take = phases.install()
    of_init = S.PickerService.__init__

    def init(self, *a, **k):
        of_init(self, *a, **k)
        _SERVICES.append(self)

    S.PickerService.__init__ = init
    of_decide = S.PickerService._decide
    tt, pcn = time.thread_time_ns, time.perf_counter_ns

    import resource

    usage, THREAD = resource.getrusage, resource.RUSAGE_THREAD

    def decide(self, *a, **k):  # each decision's thread CPU and wall, ns (one line per 50)
        u0 = usage(THREAD)
        c0, w0 = tt(), pcn()
        try:
            return of_decide(self, *a, **k)
        finally:
            c1, w1 = tt(), pcn()
            u1 = usage(THREAD)
            _DECIDE.append((c1 - c0, w1 - w0))
            ph = take()
            ph["minflt"] = u1.ru_minflt - u0.ru_minflt
            ph["majflt"] = u1.ru_majflt - u0.ru_majflt
            ph["nivcsw"] = u1.ru_nivcsw - u0.ru_nivcsw
            _PHASES.append(ph)
            if len(_DECIDE) >= 50:
                _LINES.append({"kind": "decide", "cpu_wall_ns": _DECIDE[:], "phases": _PHASES[:]})
                del _DECIDE[:], _PHASES[:]

    S.PickerService._decide = decide
    _slow(lambda: _LINES, (L, L.LocalPicker, "pick"), time.perf_counter, sched)

    of_run = F.Flow.run
    started = []

    warm = os.environ.get("H179_WARM")  # the hypothesis check: the engine signals computed
    # (and dropped) when a request's task starts, before its body is read and its Pick runs

    async def run(self, incoming):
        if not started:
            started.append(1)
            _start(asyncio.get_running_loop())
        if warm and _SERVICES:
            router = _SERVICES[0].router
            t0 = time.thread_time_ns()
            _ORIG["signals"](router, router.policy.engine_stale_after_s)
            _WARMED.append(time.thread_time_ns() - t0)
            if len(_WARMED) >= 50:
                _LINES.append({"kind": "warm", "cpu_ns": _WARMED[:]})
                del _WARMED[:]
        return await of_run(self, incoming)

    F.Flow.run = run


if _D and "gateway" in sys.argv:
    os.makedirs(_D, exist_ok=True)
    _install()

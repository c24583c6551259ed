"""h180 scratch probe (not product): each loop stall of `loadtest.picker_process`, attributed.

With H180_WATCH=DIR and PYTHONPATH=docs/h180/watch, the picker process (started by
`loadtest.bench_precise_pick`, which passes its environment on) gets, once it serves:
- a ticker task on its loop sleeping TICK_S (as the bench's own 2 ms lag probe does) and, at
  every wake-up, reading (a few µs) the loop thread's schedstat (CPU ns, run-queue wait ns,
  slices), the picker process's CPU, its bench parent's CPU (the client: 16 conversations
  pushing 1 MiB bodies, and the stand-in engines' ZMQ publishers) and the parse workers'
  (children), by their CPU-time clocks (ns), and the host's /proc/stat busy ticks (10 ms);
  a wake-up later than LATE_S is a "stall" line with each of those deltas over the gap;
- a `gc.callbacks` hook on the loop thread (each collection's CPU and generation);
- a sampler thread (every 1 ms) that, while the ticker is more than SAMPLE_S late, takes the
  loop thread's state (R: on a core or runnable; S: asleep), its syscall and its Python stack
  (`sys._current_frames`; it needs the GIL, so a C call holding it is seen once it returns,
  at the Python line that made it) and the host's procs_running, up to MAX_SAMPLES a stall;
- the workload's bounds: the picker's "lag" answers on stdout (the bench asks one before and
  one after a row's workload) number the phases; phase 1 is the workload.
Lines go to DIR/watch.PID.jsonl at exit.
"""

import os
import sys

_D = os.environ.get("H180_WATCH")
TICK_S, LATE_S, SAMPLE_S, MAX_SAMPLES = 0.002, 0.010, 0.004, 40
_LINES: list = []
_STATE = {"phase": 0}


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode()
    except OSError:
        return ""


def _install():
    import asyncio

    from kinference import heap

    of = heap.start_serving

    async def start_serving(*a, **k):
        result = await of(*a, **k)
        _start(asyncio.get_running_loop())
        return result

    heap.start_serving = start_serving
    _time_calls()

    class Out:  # counts the picker's "lag" answers: the phases of a row
        def __init__(self, inner):
            self.inner = inner

        def write(self, text):
            if text.startswith('{"worst_ms"'):
                _STATE["phase"] += 1
                _LINES.append({"kind": "phase", "phase": _STATE["phase"], "answer": text.strip()})
            return self.inner.write(text)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    sys.stdout = Out(sys.stdout)


SLOW_CPU_S = 0.003  # calls on the loop thread logged past this much CPU


def _time_calls():
    """Calls of a few kvcache steps taking over SLOW_CPU_S of thread CPU: "call" lines."""
    import time

    from kinference.kvcache import ageing, pool

    def wrap(cls, name):
        of = getattr(cls, name)

        def timed(*a, **k):
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                return of(*a, **k)
            finally:
                cpu = time.thread_time() - c0
                if cpu > SLOW_CPU_S:
                    blocks = next((len(x) for x in a[1:] if isinstance(x, (tuple, list))), None)
                    _LINES.append(
                        {
                            "kind": "call",
                            "phase": _STATE["phase"],
                            "what": f"{cls.__name__}.{name}",
                            "cpu_ms": cpu * 1e3,
                            "wall_ms": (time.perf_counter() - w0) * 1e3,
                            "blocks": blocks,
                        }
                    )

        setattr(cls, name, timed)

    for name in ("expect", "complete", "sent", "claim"):
        wrap(pool.PoolCaches, name)
    wrap(ageing.WorkerAges, "touch")


def _start(loop):
    import asyncio
    import atexit
    import ctypes
    import gc
    import json
    import threading
    import time
    import traceback

    pc = time.perf_counter
    libc = ctypes.CDLL(None, use_errno=True)

    def clock_of(pid):
        clk = ctypes.c_int()
        return clk.value if libc.clock_getcpuclockid(pid, ctypes.byref(clk)) == 0 else None

    parent_clk = clock_of(os.getppid())
    children = {}  # pid -> clock id

    def child_cpu():
        out = {}
        for pid, clk in list(children.items()):
            try:
                out[pid] = time.clock_gettime_ns(clk)
            except OSError:
                pass
        return out

    threads = {}  # tid -> (name, schedstat fd) of the picker's other threads

    def find_threads():
        named = {t.native_id: t.name for t in threading.enumerate()}
        for task in os.listdir("/proc/self/task"):
            if int(task) != main_tid and int(task) not in threads:
                try:
                    fd = os.open(f"/proc/self/task/{task}/schedstat", os.O_RDONLY)
                except OSError:
                    continue
                threads[int(task)] = (
                    named.get(int(task)) or _read(f"/proc/self/task/{task}/comm").strip(),
                    fd,
                )

    def thread_cpu():
        out = {}
        for tid, (name, fd) in list(threads.items()):
            try:
                out[f"{name}/{tid}"] = int(os.pread(fd, 64, 0).split()[0])
            except (OSError, IndexError):
                pass
        return out

    def find_children():
        for task in os.listdir("/proc/self/task"):
            for pid in _read(f"/proc/self/task/{task}/children").split():
                if int(pid) not in children and (clk := clock_of(int(pid))) is not None:
                    children[int(pid)] = clk

    main_tid = threading.get_native_id()
    main_ident = threading.get_ident()
    sched_fd = os.open(f"/proc/self/task/{main_tid}/schedstat", os.O_RDONLY)
    stat_fd = os.open("/proc/stat", os.O_RDONLY)

    def host_busy():  # ticks (USER_HZ) of all cores not idle / iowait
        f = os.pread(stat_fd, 160, 0).split(b"\n", 1)[0].split()[1:]
        v = [int(x) for x in f]
        return sum(v) - v[3] - v[4]

    def reading():
        cpu, wait, slices = os.pread(sched_fd, 64, 0).split()
        try:
            parent = time.clock_gettime_ns(parent_clk) if parent_clk is not None else 0
        except OSError:
            parent = 0
        return (
            pc(),
            int(cpu),
            int(wait),
            int(slices),
            time.process_time_ns(),
            parent,
            child_cpu(),
            host_busy(),
            thread_cpu(),
        )

    collections = []  # (start, end, gen, cpu ms) on the loop thread
    began = [0.0, 0.0]

    def on_gc(phase, info):
        if threading.get_ident() != main_ident:
            return
        if phase == "start":
            began[0], began[1] = pc(), time.thread_time()
        else:
            collections.append(
                (began[0], pc(), info["generation"], (time.thread_time() - began[1]) * 1e3)
            )
            del collections[:-5000]

    gc.callbacks.append(on_gc)
    samples = {}  # tick start -> list
    state = {"last": reading()}

    async def ticker():
        try:
            await tick()
        except BaseException as e:
            _LINES.append({"kind": "error", "where": "ticker", "error": repr(e)})
            raise

    async def tick():
        while True:
            before = state["last"]
            await asyncio.sleep(TICK_S)
            now = reading()
            state["last"] = now
            late = now[0] - before[0] - TICK_S
            if late > LATE_S:
                t0, t1 = before[0], now[0]
                gcs = [(g, round(c, 2)) for a, b, g, c in collections if b >= t0 and a <= t1]
                _LINES.append(
                    {
                        "kind": "stall",
                        "phase": _STATE["phase"],
                        "t": t0,
                        "late_ms": late * 1e3,
                        "gap_ms": (t1 - t0) * 1e3,
                        "loop_cpu_ms": (now[1] - before[1]) / 1e6,
                        "loop_wait_ms": (now[2] - before[2]) / 1e6,
                        "slices": now[3] - before[3],
                        "picker_cpu_ms": (now[4] - before[4]) / 1e6,
                        "client_cpu_ms": (now[5] - before[5]) / 1e6,
                        "workers_cpu_ms": sum(
                            v - before[6][k] for k, v in now[6].items() if k in before[6]
                        )
                        / 1e6,
                        "threads_ms": {
                            k: round((v - before[8][k]) / 1e6, 2)
                            for k, v in now[8].items()
                            if k in before[8] and v > before[8][k]
                        },
                        "host_busy_ms": (now[7] - before[7]) * 10.0,
                        "gc": gcs,
                        "samples": samples.pop(t0, []),
                        "loadavg": _read("/proc/loadavg").strip(),
                    }
                )
            samples.pop(before[0], None)

    task = loop.create_task(ticker())
    _STATE["task"] = task

    def sample():
        try:
            sampling()
        except BaseException as e:
            _LINES.append({"kind": "error", "where": "sampler", "error": repr(e)})
            raise

    def sampling():
        refreshed = 0.0
        while True:
            time.sleep(0.001)
            now = pc()
            if now - refreshed > 0.5:
                find_children()
                find_threads()
                refreshed = now
            t0 = state["last"][0]
            if now - t0 < TICK_S + SAMPLE_S:
                continue
            got = samples.setdefault(t0, [])
            if len(got) >= MAX_SAMPLES:
                continue
            frame = sys._current_frames().get(main_ident)
            stack = traceback.extract_stack(frame)[-14:] if frame is not None else []
            st = _read(f"/proc/self/task/{main_tid}/stat")
            running = [
                ln for ln in _read("/proc/stat").splitlines() if ln.startswith("procs_running")
            ]
            got.append(
                {
                    "at_ms": (pc() - t0) * 1e3,
                    "state": st[st.rfind(")") + 2 :].split(" ", 1)[0],
                    "syscall": _read(f"/proc/self/task/{main_tid}/syscall").split(" ")[0].strip(),
                    "running": running[0].split()[1] if running else "?",
                    "stack": [
                        "/".join(fr.filename.rsplit("/", 2)[-2:]) + f":{fr.lineno} {fr.name}"
                        for fr in stack
                    ],
                }
            )

    threading.Thread(target=sample, name="h180-sample", daemon=True).start()

    def flush():
        with open(f"{_D}/watch.{os.getpid()}.jsonl", "a") as f:
            for ln in _LINES:
                f.write(json.dumps(ln) + "\n")

    atexit.register(flush)


if _D and "loadtest.picker_process" in getattr(sys, "orig_argv", []):
    os.makedirs(_D, exist_ok=True)
    _install()

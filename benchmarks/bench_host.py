"""What this machine charges for the kernel work a forked subagent is made of.

    python benchmarks/bench_host.py

Prints one JSON line.  A forked child's cost is mostly memory management:
copy-on-write page faults, the page tables `fork` copies and the exit tears
down (docs/subagents.md).  These figures say how expensive that is *here*, so
the fan-out figures of `bench_fanout.py` can be compared across machines:

* `fault_us_per_page`: first write to a fresh anonymous page, one trap each;
* `populate_us_per_page`: the same pages made present by one `MAP_POPULATE`
  mmap (no trap per page); the difference is what the trap itself costs;
* `cow_us_per_page`: a forked child's first write to a page it shares with
  its parent (the copy-on-write fault every forked subagent takes ≈ 1,000 of);
* `fork_exit_ms`: busy CPU per `fork` + `_exit` of a process holding 16 MiB of
  touched anonymous memory (the size of the `lean` template), 128 at a time;
* `bare_exec_ms`: a bare `sys.executable -c pass`, start to exit (the issue's
  anchor for the exec floor).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import time

PAGE = mmap.PAGESIZE
PAGES = 256
PRIVATE = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS  # mmap's default is MAP_SHARED: never COW


def busy_cpu_s() -> float:
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def fork_burst(n: int) -> None:
    """Fork `n` children that exit at once, then reap them all."""
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)


def best_of(fn, reps: int = 30) -> float:
    return min(fn() for _ in range(reps))


def touch_us(populate: bool) -> float:
    """µs per page to make fresh anonymous pages present and written: by faults, or populated."""
    flags = PRIVATE | (mmap.MAP_POPULATE if populate else 0)
    t0 = time.perf_counter()
    m = mmap.mmap(-1, PAGES * PAGE, flags=flags)
    for i in range(0, PAGES * PAGE, PAGE):
        m[i] = 1
    dt = time.perf_counter() - t0
    m.close()
    return dt / PAGES * 1e6


def cow_us() -> float:
    m = mmap.mmap(-1, PAGES * PAGE, flags=PRIVATE)
    for i in range(0, PAGES * PAGE, PAGE):
        m[i] = 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            t0 = time.perf_counter()
            for i in range(0, PAGES * PAGE, PAGE):
                m[i] = 2
            os.write(w, repr(time.perf_counter() - t0).encode())
        finally:
            os._exit(0)
    dt = float(os.read(r, 64))
    os.waitpid(pid, 0)
    os.close(r)
    os.close(w)
    m.close()
    return dt / PAGES * 1e6


def fork_exit_ms(mib: int = 16, n: int = 128) -> float:
    m = mmap.mmap(-1, mib << 20, flags=PRIVATE)
    for i in range(0, mib << 20, PAGE):
        m[i] = 1
    best = float("inf")
    for _ in range(3):
        cpu0 = busy_cpu_s()
        fork_burst(n)
        best = min(best, (busy_cpu_s() - cpu0) * 1000 / n)
    m.close()
    return best


def bare_exec_ms() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return (time.perf_counter() - t0) * 1000


def main() -> dict:
    return {
        "bench": "host", "python": sys.version.split()[0], "cpus": os.cpu_count(),
        "fault_us_per_page": round(best_of(lambda: touch_us(False)), 2),
        "populate_us_per_page": round(best_of(lambda: touch_us(True)), 2),
        "cow_us_per_page": round(best_of(cow_us, 10), 2),
        "fork_exit_ms": round(fork_exit_ms(), 3),
        "bare_exec_ms": round(best_of(bare_exec_ms, 10), 1),
    }


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    print(json.dumps(main()))

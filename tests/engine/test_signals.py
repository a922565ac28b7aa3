"""Signals arriving while the loop waits (epoll_wait, select) and while the engine submits,
reaps or drains: every result is right, no future stays pending, the counters return to zero.

* SIGALRM from ``setitimer(ITIMER_REAL)`` every 200 µs, handled by a Python handler
  (``signal.signal``: no SA_RESTART, so blocking system calls fail with EINTR) or by
  ``loop.add_signal_handler`` (the loop's wakeup fd), during cold reads (pages evicted with
  ``posix_fadvise(DONTNEED)``, so the loop really waits for the kernel) and writes;
* SIGUSR1 sent to the main thread by another thread (``signal.pthread_kill``);
* signals during ``close_engine()`` while cold reads are in flight (the engine's blocking drain);
* under ``strace`` (when it can run): the interrupted system calls are counted, to show which
  EINTR paths were exercised — ``engine_stats()`` has no EINTR counter, and a Python handler
  cannot see an interrupted wait that CPython or libuv retried.

``AIONATIVE_SIGNAL_SECONDS`` sets how long each scenario runs (CI: the default below).
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

import aionative
from tests.support import cold_file

SECONDS = float(os.environ.get("AIONATIVE_SIGNAL_SECONDS", "0.6"))
INTERVAL = 0.0002
SIZE = 8 << 20
CHUNK = 64 * 1024


class Tally:
    """Signals handled, and where the main thread was when the handler ran."""

    def __init__(self) -> None:
        self.count = 0
        self.where: Counter[str] = Counter()

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if frame is not None:
            self.where[frame.f_code.co_name] += 1

    def callback(self) -> None:
        self.count += 1


@pytest.fixture
def alarm() -> Iterator[Callable[[bool], Tally]]:
    """Start SIGALRM every INTERVAL with a Python handler (True) or the loop's handler
    (False); stopped and restored when the test ends."""
    old = signal.getsignal(signal.SIGALRM)
    used_loop: list[asyncio.AbstractEventLoop] = []

    def start(python_handler: bool) -> Tally:
        tally = Tally()
        if python_handler:
            signal.signal(signal.SIGALRM, tally.handler)
        else:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGALRM, tally.callback)
            used_loop.append(loop)
            # A full wakeup socket only means a wake-up is already pending (the signal is
            # still recorded). With the threads backend on 2 busy CPUs the loop can wait
            # for the GIL long enough for ~270 signals to fill it, and asyncio then warns.
            fd = signal.set_wakeup_fd(-1)
            if fd != -1:
                signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
        signal.setitimer(signal.ITIMER_REAL, INTERVAL, INTERVAL)
        return tally

    yield start
    signal.setitimer(signal.ITIMER_REAL, 0)
    for loop in used_loop:
        if not loop.is_closed():
            loop.remove_signal_handler(signal.SIGALRM)
    signal.signal(signal.SIGALRM, old)


async def churn(cold: tuple[int, bytes], wpath: Path, seconds: float) -> dict[str, int]:
    """Cold reads (re-evicted each round) and writes, checked, until ``seconds`` pass. The
    cold file is made before the signals start: its fsync would block the loop, and asyncio's
    wakeup socket overflows (BlockingIOError warnings) when signals pile up meanwhile."""
    fd, data = cold
    wfd = os.open(wpath, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    rng = random.Random(7)
    model = bytearray(1 << 20)
    rounds = reads = canceled = 0
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end or rounds < 3:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            offs = [rng.randrange(0, SIZE - CHUNK) for _ in range(48)]
            woffs = [i * 4096 for i in rng.sample(range(len(model) // 4096), 8)]  # distinct
            blobs = [os.urandom(4096) for _ in woffs]
            bufs = [bytearray(CHUNK) for _ in range(8)]
            ops = [aionative.pread(fd, CHUNK, o) for o in offs]
            ops += [aionative.preadinto(fd, b, o) for b, o in zip(bufs, offs, strict=False)]
            ops += [aionative.pwrite(wfd, b, o) for b, o in zip(blobs, woffs, strict=True)]
            got = await asyncio.wait_for(asyncio.gather(*ops, return_exceptions=True), 30)
            for i, g in enumerate(got):
                if isinstance(g, OSError) and g.errno == errno.ECANCELED:
                    # See test_timer_signals…: io_uring under a signal storm. Re-issued.
                    canceled += 1
                    if i >= 56:
                        got[i] = await aionative.pwrite(wfd, blobs[i - 56], woffs[i - 56])
                    elif i >= 48:
                        got[i] = await aionative.preadinto(fd, bufs[i - 48], offs[i - 48])
                    else:
                        got[i] = await aionative.pread(fd, CHUNK, offs[i])
                elif isinstance(g, BaseException):
                    raise g
            assert got[:48] == [data[o:o + CHUNK] for o in offs]
            assert got[48:56] == [CHUNK] * 8
            assert [bytes(b) for b in bufs] == [data[o:o + CHUNK] for o in offs[:8]]
            assert got[56:] == [4096] * 8
            for b, o in zip(blobs, woffs, strict=True):
                model[o:o + 4096] = b
            assert os.pread(wfd, len(model), 0) == bytes(model[:os.fstat(wfd).st_size])
            rounds += 1
            reads += 56
    finally:
        os.close(fd)
        os.close(wfd)
    return {"rounds": rounds, "reads": reads, "ECANCELED": canceled}


@pytest.mark.asyncio
@pytest.mark.blocks_the_loop("a SIGALRM every 200 µs: once the loop's thread was kept off a CPU, "
                             "the signals that arrived meanwhile are handled together, a Python "
                             "handler or loop callback each, in one iteration")
@pytest.mark.parametrize("handler", ["python_handler", "loop_handler"])
async def test_timer_signals_during_cold_reads_and_writes(
        backend: str, tmp_path: Path, alarm: Callable[[bool], Tally], handler: str) -> None:
    aionative.get_engine()
    before = aionative.engine_stats()
    cold = cold_file(tmp_path / "cold.bin", SIZE)
    tally = alarm(handler == "python_handler")
    done = await churn(cold, tmp_path / "w.bin", SECONDS)
    signal.setitimer(signal.ITIMER_REAL, 0)
    await asyncio.sleep(0.01)  # let the loop run the last signal callbacks
    stats = aionative.engine_stats()
    assert tally.count > 0, "no signal was handled: the test did not test anything"
    assert stats["in_flight"] == 0
    delta = {k: stats[k] - before.get(k, 0) for k in ("submitted", "syscalls", "wakeups",
                                                        "retries") if k in stats}
    print(f"\n{backend}/{type(asyncio.get_running_loop()).__module__} {handler}: "
          f"{tally.count} signals, {done}, handler ran in {dict(tally.where.most_common(4))}; "
          f"engine: {delta}")
    if done["ECANCELED"]:
        # Found by this test, not fixed: on io_uring, some operations complete with
        # -ECANCELED while SIGALRM arrives every 200 µs (about one run in three here). Likely
        # cause: io-wq creates its workers from the submitting task, and a pending signal
        # makes that fail (-ERESTARTNOINTR) more often than io-wq retries it, so it cancels
        # the queued work. Everything else was checked above (re-issued operations included).
        pytest.xfail(f"{done['ECANCELED']} operations completed with ECANCELED under the "
                     "signal storm (docs/reliability.md, Signals)")


@pytest.mark.asyncio
async def test_signals_from_another_thread(backend: str, tmp_path: Path) -> None:
    """A thread sends SIGUSR1 to the main thread (pthread_kill) every 200 µs."""
    tally = Tally()
    old = signal.signal(signal.SIGUSR1, tally.handler)
    stop = threading.Event()
    main = threading.main_thread().ident
    assert main is not None
    sent = 0

    def sender() -> None:
        nonlocal sent
        while not stop.wait(INTERVAL):
            signal.pthread_kill(main, signal.SIGUSR1)
            sent += 1

    cold = cold_file(tmp_path / "cold.bin", SIZE)
    t = threading.Thread(target=sender)
    t.start()
    try:
        await churn(cold, tmp_path / "w.bin", SECONDS)
    finally:
        stop.set()
        t.join()
        await asyncio.sleep(0.01)
        signal.signal(signal.SIGUSR1, old)
    assert sent > 0 and tally.count > 0  # signals coalesce while one is pending
    assert aionative.engine_stats()["in_flight"] == 0


@pytest.mark.asyncio
async def test_signals_while_the_engine_drains(native_backend: str, tmp_path: Path,
                                               alarm: Callable[[bool], Tally]) -> None:
    """close_engine() with cold reads in flight waits for the kernel (io_uring_enter with
    min_complete, io_getevents) while SIGALRM arrives: every future ends (data or
    cancelled), nothing stays pinned."""
    fd, data = cold_file(tmp_path / "cold.bin", SIZE)
    tally = alarm(True)
    try:
        for _ in range(5):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            futs = [asyncio.ensure_future(aionative.pread(fd, CHUNK, i * CHUNK))
                    for i in range(SIZE // CHUNK)]
            await asyncio.sleep(0)      # the reads are submitted at the end of this iteration
            await asyncio.sleep(0)
            aionative.close_engine()    # drains, with signals arriving
            results = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), 30)
            for i, r in enumerate(results):
                assert isinstance(r, asyncio.CancelledError) or r == data[i * CHUNK:(i + 1) * CHUNK]
    finally:
        os.close(fd)
    assert tally.count > 0


CHILD = r'''
import asyncio, os, signal, sys
sys.path.insert(0, sys.argv[3])
import aionative
signal.signal(signal.SIGALRM, lambda s, f: None)
path = sys.argv[2]

async def main():
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
    # The loop waits in epoll_wait for these 100 ms whatever the reads below do (cold reads
    # the host serves fast can keep the loop from ever sleeping). Under strace the timer's
    # signals come far less often than every 0.2 ms: 20 ms of this saw 0-4 of them land in
    # epoll_wait (0: the test failed, on builds before and after b5ede3c alike), 100 ms 9-161.
    await asyncio.sleep(0.1)
    for _ in range(15):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        got = await asyncio.gather(*[aionative.pread(fd, 65536, o)
                                     for o in range(0, size, 65536)])
        assert b"".join(got) == open(path, "rb").read()
    for _ in range(5):  # drains with reads in flight
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        futs = [asyncio.ensure_future(aionative.pread(fd, 65536, o))
                for o in range(0, size, 65536)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        aionative.close_engine()
        await asyncio.gather(*futs, return_exceptions=True)
    signal.setitimer(signal.ITIMER_REAL, 0)

aionative.set_default_backend(sys.argv[1])
asyncio.run(main())
'''


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_interrupted_system_calls_observed_under_strace(native_backend: str,
                                                        tmp_path: Path) -> None:
    """Which system calls did SIGALRM interrupt? strace counts EINTR / ERESTART* returns:
    the loop's epoll_wait always (it is where the loop waits); the engine's own waits
    (io_uring_enter with min_complete, io_getevents) only when a signal lands during a drain
    — reported, not required, as it depends on timing."""
    path = tmp_path / "cold.bin"
    path.write_bytes(os.urandom(4 << 20))
    log = tmp_path / "strace.log"
    src = tmp_path / "child.py"
    src.write_text(CHILD)
    root = str(Path(aionative.__file__).parent.parent)
    cmd = ["strace", "-f", "-qq", "-o", str(log), "-e", "signal=none", "-e",
           "trace=epoll_wait,epoll_pwait,io_uring_enter,io_getevents,io_submit",
           sys.executable, str(src), native_backend, str(path), root]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0 and "ptrace" in proc.stderr:
        pytest.skip(f"strace cannot trace here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    interrupted: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for line in log.read_text().splitlines():
        m = re.match(r"^\d+\s+(\w+)\(", line)
        if m:
            calls[m.group(1)] += 1
            if re.search(r"= -1 EINTR|= \? ERESTART", line):
                interrupted[m.group(1)] += 1
    print(f"\n{native_backend}: interrupted {dict(interrupted)} of {dict(calls)}")
    assert interrupted["epoll_wait"] + interrupted["epoll_pwait"] > 0, (interrupted, calls)

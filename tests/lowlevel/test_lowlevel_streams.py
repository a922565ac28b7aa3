"""The low-level calls on descriptors without a file position: ``aionative.pread``,
``preadinto`` and ``pwrite`` answer as ``os.pread``/``os.pwrite`` do (OSError ESPIPE), on every
backend and loop, and touch nothing: no byte read from or written to the stream, no counter
consumed, and the loop never blocked (Linux AIO would run them inside ``io_submit``, waiting
for an empty eventfd or a full pipe for ever)."""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import aionative

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("backend")]


def _os_error(fn: Callable[[], object]) -> tuple[object, ...]:
    try:
        fn()
    except OSError as exc:
        return type(exc), exc.errno, exc.strerror, exc.filename
    raise AssertionError("os raised nothing")


async def _our_error(call: object) -> tuple[object, ...]:
    try:
        await call  # type: ignore[misc]
    except OSError as exc:
        return type(exc), exc.errno, exc.strerror, exc.filename
    raise AssertionError("aionative raised nothing")


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


async def test_reads_of_an_empty_pipe_raise_espipe(pipe: tuple[int, int]) -> None:
    r, _ = pipe
    expected = _os_error(lambda: os.pread(r, 10, 0))
    assert expected[1] == errno.ESPIPE
    assert await _our_error(aionative.pread(r, 10, 0)) == expected
    assert await _our_error(aionative.preadinto(r, bytearray(10), 0)) == expected


async def test_a_pipe_with_data_is_left_unread(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"kept")
    expected = _os_error(lambda: os.pread(r, 10, 0))
    assert await _our_error(aionative.pread(r, 10, 0)) == expected
    assert await _our_error(aionative.preadinto(r, bytearray(10), 0)) == expected
    assert os.read(r, 10) == b"kept"


async def test_a_write_to_a_full_pipe_raises_espipe(pipe: tuple[int, int]) -> None:
    _, w = pipe
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 65536)
    except BlockingIOError:
        pass
    expected = _os_error(lambda: os.pwrite(w, b"more", 0))
    assert expected[1] == errno.ESPIPE
    assert await _our_error(aionative.pwrite(w, b"more", 0)) == expected


async def test_a_socket_is_neither_read_nor_sent_to() -> None:
    a, b = socket.socketpair()
    with a, b:
        b.sendall(b"waiting")
        expected_read = _os_error(lambda: os.pread(a.fileno(), 10, 0))
        expected_write = _os_error(lambda: os.pwrite(a.fileno(), b"sent?", 0))
        assert await _our_error(aionative.pread(a.fileno(), 10, 0)) == expected_read
        assert await _our_error(aionative.pwrite(a.fileno(), b"sent?", 0)) == expected_write
        b.setblocking(False)
        with pytest.raises(BlockingIOError):
            b.recv(10)  # nothing was sent
        assert a.recv(10) == b"waiting"


@pytest.mark.parametrize("counter", [0, 5])
async def test_an_eventfd_counter_is_not_consumed(counter: int) -> None:
    efd = os.eventfd(counter, os.EFD_NONBLOCK)
    try:
        expected = _os_error(lambda: os.pread(efd, 8, 0))
        assert expected[1] == errno.ESPIPE
        assert await _our_error(aionative.pread(efd, 8, 0)) == expected
        assert await _our_error(aionative.preadinto(efd, bytearray(8), 0)) == expected
        if counter:
            assert os.eventfd_read(efd) == counter
        else:
            with pytest.raises(BlockingIOError):
                os.eventfd_read(efd)
    finally:
        os.close(efd)


async def test_a_terminal_without_input_raises_espipe() -> None:
    master, slave = os.openpty()
    try:
        expected = _os_error(lambda: os.pread(slave, 10, 0))
        assert await _our_error(aionative.pread(slave, 10, 0)) == expected
        assert await _our_error(aionative.pwrite(slave, b"x", 0)) == _os_error(
            lambda: os.pwrite(slave, b"x", 0))
    finally:
        os.close(master)
        os.close(slave)


async def test_argument_errors_come_before_espipe(pipe: tuple[int, int]) -> None:
    r, w = pipe
    for call, sync in [
        (lambda: aionative.pread(r, -1, 0), lambda: os.pread(r, -1, 0)),
        (lambda: aionative.pread(r, 1, -1), lambda: os.pread(r, 1, -1)),
        (lambda: aionative.pwrite(w, "text", 0), lambda: os.pwrite(w, "text", 0)),  # type: ignore[arg-type]
        (lambda: aionative.preadinto(r, b"readonly", 0), None),
    ]:
        with pytest.raises(Exception) as ours:
            await call()
        assert not (isinstance(ours.value, OSError) and ours.value.errno == errno.ESPIPE)
        if sync is not None:
            with pytest.raises(Exception) as theirs:
                sync()
            assert type(ours.value) is type(theirs.value)


async def test_a_number_refused_as_a_pipe_is_served_once_it_names_a_file(
        tmp_path: Path) -> None:
    """No position is not remembered: the pipe's number, closed and reused for a regular
    file, is read at once (a verdict kept for the loop iteration refused the file)."""
    path = tmp_path / "file"
    path.write_bytes(b"positional")
    for _ in range(20):
        r, w = os.pipe()
        with pytest.raises(OSError) as refused:
            await aionative.pread(r, 5, 0)
        assert refused.value.errno == errno.ESPIPE
        os.close(r)
        fd = os.open(path, os.O_RDONLY)
        try:
            if fd != r:
                continue  # the number went elsewhere: nothing to show this time
            assert await aionative.pread(fd, 5, 0) == b"posit"
            return
        finally:
            os.close(fd)
            os.close(w)
    pytest.skip("the pipe's number was never reused by open()")

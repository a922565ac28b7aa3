"""Backend selection: probe once per process, honour overrides, remember why each better
backend was rejected.

Order of preference: ``io_uring`` -> ``linux_aio`` -> ``threads``. ``io_uring_setup`` failing
with EPERM, ENOSYS or EINVAL means io_uring is unavailable (Docker >= 25 and containerd 2
seccomp profiles, gVisor, ``kernel.io_uring_disabled``); Linux AIO usually survives there.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

BackendName = Literal["io_uring", "linux_aio", "threads"]
BACKENDS: Final[tuple[BackendName, ...]] = ("io_uring", "linux_aio", "threads")
ENV_VAR: Final = "AIONATIVE_BACKEND"

try:
    from . import _core as _core
except ImportError as exc:  # not Linux, or the extension was not built
    _core = None  # type: ignore[assignment]
    _CORE_ERROR: str | None = f"native extension unavailable: {exc}"
else:
    _CORE_ERROR = None


class BackendUnavailableError(RuntimeError):
    """A backend that was asked for by name cannot be used here; the message says why."""


# Errors of the moment, not of the kernel or its configuration: out of descriptors, a
# system-wide table full, Linux AIO's fs.aio-max-nr used up by other contexts. A probe or an
# engine that fails with one is not remembered as unavailable: the next engine asks again.
TRANSIENT_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.EINTR})


@dataclass(frozen=True)
class Probe:
    available: bool
    reason: str = ""
    setup_flags: int = 0
    errno: int = 0  # the system call's error, when unavailable

    @property
    def transient(self) -> bool:
        return not self.available and self.errno in TRANSIENT_ERRNOS

    def error(self) -> OSError:
        """The failure as the OSError the system call raised."""
        return OSError(self.errno, os.strerror(self.errno))


@dataclass
class _State:
    probes: dict[str, Probe] = field(default_factory=dict)
    default: BackendName | None = None  # set_default_backend(); None: environment, then auto


_state = _State()
_lock = threading.Lock()


def _run_probe(name: BackendName) -> Probe:
    if name == "threads":
        return Probe(True)
    if _core is None:
        return Probe(False, _CORE_ERROR or "native extension unavailable")
    if name == "io_uring":
        ok, flags, reason, err = _core.probe_io_uring()
        return Probe(ok, reason, flags, err)
    ok, reason, err = _core.probe_linux_aio()
    return Probe(ok, reason, errno=err)


def probe(name: BackendName) -> Probe:
    """The (cached) result of probing one backend in this process."""
    with _lock:
        p = _state.probes.get(name)
        if p is None:
            p = _run_probe(name)
            if not p.transient:
                _state.probes[name] = p
        return p


def mark_unavailable(name: BackendName, reason: str) -> None:
    """A backend that probed fine but could not make an engine (e.g. ``io_uring_setup``
    failing with ENOMEM under a locked-memory limit for a full-size ring): skip it from now on
    in this process, with the reason ``backend_info()`` shows."""
    with _lock:
        _state.probes[name] = Probe(False, reason)


def available_backends() -> list[BackendName]:
    """Backends usable in this process, best first."""
    return [b for b in BACKENDS if probe(b).available]


def _validate(name: str, source: str) -> BackendName:
    if name not in BACKENDS:
        raise ValueError(f"{source}: unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    return name


def set_default_backend(name: str | None) -> None:
    """Backend for engines created from now on (``None``: environment, then automatic)."""
    _state.default = None if name is None else _validate(name, "set_default_backend")


def requested_backend() -> tuple[BackendName | None, str]:
    """What was asked for, and by whom: (name or None for automatic, source)."""
    if _state.default is not None:
        return _state.default, "set_default_backend()"
    env = os.environ.get(ENV_VAR, "").strip()
    if env and env != "auto":
        return _validate(env, ENV_VAR), ENV_VAR
    return None, "automatic"


def choose(name: str | None = None, passed_over: Mapping[str, str] | None = None
           ) -> tuple[BackendName, dict[str, str]]:
    """Pick a backend: ``name`` if given, else the default or environment, else the best
    available. Returns it with the reasons the better ones were rejected. ``passed_over``:
    backends that failed just now for a passing reason, skipped this once with it."""
    if name is not None:
        wanted: BackendName | None = _validate(name, "backend")
        source = "argument"
    else:
        wanted, source = requested_backend()
    rejected: dict[str, str] = {}
    for b in BACKENDS:
        p = probe(b)
        if passed_over and b in passed_over and wanted is None:
            rejected[b] = passed_over[b]
            continue
        if wanted is not None and b != wanted:
            rejected[b] = f"not requested ({source} asked for {wanted})" if BACKENDS.index(
                b) < BACKENDS.index(wanted) else ""
            continue
        if p.available:
            return b, {k: v for k, v in rejected.items() if v}
        if wanted is not None and p.transient:
            raise p.error()
        if wanted is not None:
            raise BackendUnavailableError(f"aionative backend {b!r} ({source}) is unavailable: {p.reason}")
        rejected[b] = p.reason
    raise AssertionError("the threads backend is always available")  # pragma: no cover


def kernel_release() -> str:
    return os.uname().release if hasattr(os, "uname") else sys.platform

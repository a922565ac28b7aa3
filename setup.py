"""Build of the aionative._core extension.

Environment switches (read at build time):
  AIONATIVE_DEBUG=1     -O0 -g3 and the engine's live-resource counters (AIONATIVE_DEBUG macro)
  AIONATIVE_SANITIZE=1  AddressSanitizer + UndefinedBehaviorSanitizer (implies AIONATIVE_DEBUG)
"""

import os
import sys

from setuptools import Extension, setup

if not sys.platform.startswith("linux"):
    ext_modules = []  # the threads backend is pure Python; the C engine is Linux-only
else:
    debug = os.environ.get("AIONATIVE_DEBUG") == "1"
    sanitize = os.environ.get("AIONATIVE_SANITIZE") == "1"
    cflags = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
              "-Wno-missing-field-initializers", "-fvisibility=hidden"]
    ldflags: list[str] = []
    macros: list[tuple[str, str | None]] = []
    if debug or sanitize:
        cflags += ["-O0", "-g3"]
        macros.append(("AIONATIVE_DEBUG", "1"))
    else:
        cflags += ["-O2"]
    if sanitize:
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer",
               "-fno-sanitize-recover=undefined"]
        cflags += san
        ldflags += san
    ext_modules = [
        Extension(
            "aionative._core",
            sources=["csrc/module.c", "csrc/compat.c", "csrc/engine.c", "csrc/submit.c",
                     "csrc/complete.c", "csrc/loop.c", "csrc/methods.c", "csrc/stats.c", "csrc/inline.c",
                     "csrc/lazy.c", "csrc/lines.c", "csrc/call.c", "csrc/window.c",
                     "csrc/uring.c", "csrc/kaio.c"],
            depends=["csrc/engine.h", "csrc/compat.h", "csrc/submit.h", "csrc/complete.h",
                     "csrc/loop.h", "csrc/methods.h", "csrc/stats.h", "csrc/inline.h", "csrc/lazy.h",
                     "csrc/lines.h", "csrc/call.h", "csrc/window.h", "csrc/module.h",
                     "csrc/uring.h", "csrc/kaio.h", "csrc/uring_abi.h"],
            define_macros=macros,
            extra_compile_args=cflags,
            extra_link_args=ldflags,
        )
    ]

setup(ext_modules=ext_modules)

"""Building the C kernels of reinforge.kernels, on first use, for this machine's CPU.

How: the C compiler ($CC, else cc or gcc) with -O3 -march=native into $REINFORGE_CACHE_DIR
(default ~/.cache/reinforge), named by a hash of the source, the flags, the compiler's version and
the CPU's flags; a second process loads the file in milliseconds. As torch's own inductor does for
CPU kernels, the build happens on the machine that runs it, so the code uses its vector units
(AVX-512 or AVX2), and a shared cache of several CPU kinds keeps one file per kind. A build that
fails is remembered for the process: an engine rebuilt at every weight sync does not retry it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

# -O3 vectorizes the loops; the relaxed-math flags let the compiler reorder the sums (what the
# vector code needs) and keep infinities and NaNs (-inf marks masked slots), unlike -ffast-math.
# On AVX-512 CPUs gcc and clang still prefer 256-bit vectors unless asked (older Intel cores
# clocked down on 512-bit ones): asked, the packed attention's backward ran 1.2x faster on a
# Sapphire-Rapids-class Xeon (forward 1.08x); on x86 CPUs without AVX-512 it changes nothing, and
# it is an x86 option (an ARM compiler would refuse it).
X86 = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686"}
FLAGS = [
    "-O3", "-march=native", *(["-mprefer-vector-width=512"] if X86 else []), "-fPIC", "-shared", "-fopenmp-simd",
    "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros", "-freciprocal-math",
]


class NativeCodeUnavailable(RuntimeError):
    """A C kernel could not be built or loaded here (no compiler, or it failed)."""


def cache_dir() -> Path:
    configured = os.environ.get("REINFORGE_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "reinforge"


def _compiler() -> str:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise NativeCodeUnavailable("no C compiler found (set CC, or install gcc: apt-get install gcc)")
    return compiler


def _cpu_identity() -> str:
    """The CPU's instruction-set flags: -march=native code must not be loaded on another CPU kind."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build(source: Path, directory: Path | None = None) -> Path:
    """The shared library of C file `source`, built now unless `directory` already holds this build."""
    compiler = _compiler()
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise NativeCodeUnavailable(f"the C compiler {compiler!r} does not run: {e}") from e
    # The headers next to the source are part of it (#include "exp_nonpositive.h").
    code = b"\0".join(path.read_bytes() for path in [source, *sorted(source.parent.glob("*.h"))])
    key = hashlib.sha256(b"\0".join([code, " ".join(FLAGS).encode(), version.encode(), _cpu_identity().encode()]))
    directory = directory or cache_dir()
    target = directory / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    # Built under a temporary name and renamed: processes that build at once never load a half-written file.
    fd, partial = tempfile.mkstemp(dir=directory, suffix=".so.partial")
    os.close(fd)
    try:
        done = subprocess.run([compiler, *FLAGS, str(source), "-o", partial, "-lm"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise NativeCodeUnavailable(f"{compiler} failed on {source.name}:\n{done.stderr.strip()}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


@functools.cache
def load_library(source: Path) -> tuple[ctypes.CDLL | None, str]:
    """(the loaded library of `source`, "") or (None, why not); the outcome is kept for the process."""
    try:
        return ctypes.CDLL(str(build(source))), ""
    except (NativeCodeUnavailable, OSError) as e:
        return None, str(e)


@functools.cache
def load_function(source: Path, name: str, *argtypes) -> Callable[..., int]:
    """C function `name` of `source` (returning int: 0, or 1 when out of memory), built on first
    use; raises NativeCodeUnavailable, with the compiler's message, where it cannot be built."""
    library, reason = load_library(source)
    if library is None:
        raise NativeCodeUnavailable(reason)
    function = getattr(library, name)
    function.argtypes, function.restype = list(argtypes), ctypes.c_int
    return function


def unavailable_reason(source: Path) -> str | None:
    """None where `source` builds and loads here, else why not."""
    library, reason = load_library(source)
    return None if library is not None else reason

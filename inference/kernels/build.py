"""Builds the native kernel library once per (sources, torch, compiler, flags) into the model cache.

No setup.py and no -march=native: one binary holds every ISA path (function target attributes)
and picks one at run time, so a cached build also runs on another CPU of the same architecture.
The build happens in a temporary directory that is renamed into place, so a killed build never
leaves a half-written library that a later process would load.

`python -m inference.kernels` builds if needed and prints one line; it exits 0 even when
the build fails (the engine then keeps its float32 path), printing why.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from inference.cache_dir import cache_root

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("dispatch.cpp", "scalar.cpp", "dequant.cpp", "avx2.cpp", "avxvnni.cpp", "avx512.cpp", "neon.cpp", "repack.cpp",
           "ops.cpp", "fused.cpp", "attention.cpp", "float_rows.cpp")
LIB_NAME = "libragk.so"
# -ffp-contract=off: dequantisation must round exactly like gguf's numpy reference.
CFLAGS = ("-O3", "-std=c++17", "-fPIC", "-fopenmp", "-ffp-contract=off", "-fvisibility=hidden", "-w")


class BuildError(RuntimeError):
    """The library could not be built; the message is one line saying why."""


def compiler() -> str | None:
    """CXX if set, else the first C++ compiler on PATH."""
    env = os.environ.get("CXX")
    if env:
        return shutil.which(env) or (env if Path(env).exists() else None)
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _compiler_id(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildError(f"C++ compiler {cxx} does not run: {exc}") from exc
    return out.stdout.splitlines()[0] if out.stdout else cxx


def _torch_flags() -> tuple[list[str], list[str]]:
    import torch
    from torch.utils import cpp_extension

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cflags = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    libdirs = cpp_extension.library_paths()
    ldflags = [f"-L{p}" for p in libdirs] + [f"-Wl,-rpath,{p}" for p in libdirs]
    ldflags += ["-lc10", "-ltorch_cpu", "-ltorch"]
    if sys.platform == "darwin":
        ldflags += ["-undefined", "dynamic_lookup"]
    return cflags, ldflags


def build_key(cxx: str) -> str:
    """Hash of everything the binary depends on: a change to any of them means a fresh build."""
    import torch

    h = hashlib.sha256()
    for path in sorted(CSRC.iterdir()):
        if path.is_file():
            h.update(path.name.encode())
            h.update(path.read_bytes())
    for part in (torch.__version__, _compiler_id(cxx), " ".join(CFLAGS), platform.machine(), sys.platform):
        h.update(part.encode())
    return h.hexdigest()[:20]


def kernels_dir() -> Path:
    return cache_root() / "kernels"


def library_path(cxx: str | None = None) -> Path:
    """Where the library for the current sources/torch/compiler lives (built or not)."""
    cxx = cxx or compiler()
    if cxx is None:
        raise BuildError("no C++ compiler found (install g++ or set CXX)")
    return kernels_dir() / build_key(cxx) / LIB_NAME


def build(verbose: bool = False) -> Path:
    """Return the library path, compiling it first when this key has not been built."""
    cxx = compiler()
    if cxx is None:
        raise BuildError("no C++ compiler found (install g++ or set CXX)")
    target = library_path(cxx)
    if target.is_file():
        return target
    cflags, ldflags = _torch_flags()
    kernels_dir().mkdir(parents=True, exist_ok=True)
    _remove_stale_builds()
    tmp = Path(tempfile.mkdtemp(prefix=f".build-{target.parent.name}-", dir=kernels_dir()))
    try:
        objects = [str(tmp / (Path(src).stem + ".o")) for src in SOURCES]
        # one compiler per core: the sources are independent (~55 s one after another on 2 cores)
        with ThreadPoolExecutor(max_workers=max(1, min(len(SOURCES), os.cpu_count() or 1))) as pool:
            jobs = [pool.submit(_run, [cxx, *CFLAGS, *cflags, "-c", str(CSRC / src), "-o", obj], verbose, src)
                    for src, obj in zip(SOURCES, objects)]
            for job in jobs:
                job.result()  # the first failing source's BuildError, in source order
        _run([cxx, "-shared", "-fopenmp", *objects, "-o", str(tmp / LIB_NAME), *ldflags], verbose, "link")
        for obj in objects:
            Path(obj).unlink()
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        try:
            tmp.rename(target.parent)
        except OSError:
            if not target.is_file():  # not a concurrent build that won the rename
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _remove_stale_builds(max_age_s: float = 3600.0) -> None:
    """Temp dirs left by killed builds (never loaded: only a finished build is renamed into place)."""
    now = time.time()
    for d in kernels_dir().glob(".build-*"):
        try:
            if now - d.stat().st_mtime > max_age_s:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass


def _run(cmd: list[str], verbose: bool, what: str) -> None:
    if verbose:
        print(" ".join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        text = (proc.stderr or proc.stdout or "no output").splitlines()
        first = next((ln for ln in text if "error" in ln), text[0] if text else "no output")
        raise BuildError(f"{what} failed: {first.strip()}")

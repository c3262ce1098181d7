"""The kernel library's build (inference/kernels/build.py) with a stand-in compiler: what a failed
compile leaves behind and how it is reported. The real build is exercised by `make install`."""

from __future__ import annotations

import stat

import pytest

from inference.kernels import build

FAKE_CXX = """#!/bin/sh
[ "$1" = "--version" ] && { echo "fakecc 1.0"; exit 0; }
echo "$@" >> "$(dirname "$0")/calls.log"
case " $* " in *" -shared "*)
  for a in "$@"; do case "$a" in *.o) [ -f "$a" ] || { echo "error: $a missing" >&2; exit 1; };; esac; done;;
esac
out=""; prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"
  prev="$a"
  case "$a" in *{bad}) echo "{bad}:3:1: error: boom" >&2; exit 1;; esac
done
sleep 0.2
: > "$out"
"""


def _fake_compiler(tmp_path, monkeypatch, bad: str):
    cxx = tmp_path / "fakecc"
    cxx.write_text(FAKE_CXX.replace("{bad}", bad))
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))


def test_a_failed_source_is_named_in_one_line_and_nothing_is_left_in_place(tmp_path, monkeypatch):
    """Catches sources compiled in parallel losing the failing one's error (or reporting another
    source), a half-built library put where the loader looks, and temp build dirs left behind."""
    _fake_compiler(tmp_path, monkeypatch, "ops.cpp")
    with pytest.raises(build.BuildError) as err:
        build.build()
    assert str(err.value) == "ops.cpp failed: ops.cpp:3:1: error: boom"
    kernels = tmp_path / "cache" / "kernels"
    assert not list(kernels.rglob(build.LIB_NAME)) and not list(kernels.glob(".build-*"))
    assert not build.library_path().is_file()


def test_every_source_compiled_once_into_its_own_object_then_linked(tmp_path, monkeypatch):
    """Catches the parallel compile dropping or repeating a source, writing one source's object under
    another's name, or linking before every object exists."""
    _fake_compiler(tmp_path, monkeypatch, "no-such-source.cpp")
    path = build.build()
    assert path.is_file() and path == build.library_path()
    calls = [c.split() for c in (tmp_path / "calls.log").read_text().splitlines()]
    compiles = [c for c in calls if "-c" in c]
    pairs = sorted((c[c.index("-c") + 1].rsplit("/", 1)[1], c[c.index("-o") + 1].rsplit("/", 1)[1]) for c in compiles)
    assert pairs == sorted((src, src.replace(".cpp", ".o")) for src in build.SOURCES)
    link = calls[-1]
    assert "-shared" in link and sorted(a.rsplit("/", 1)[1] for a in link if a.endswith(".o")) == sorted(
        src.replace(".cpp", ".o") for src in build.SOURCES)

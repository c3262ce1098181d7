"""The benchmark scripts are how the issues' speed figures are produced: each must at least import
and parse its flags. Catches a rename in one bench module that breaks another's import (session 42
renamed `bench.engine.llama_cpp_single_stream`; `bench/kernel_paths.py` failed at import until
session 43)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_bench_script_imports_and_parses_help() -> None:
    scripts = sorted(p.stem for p in (REPO / "bench").glob("*.py") if not p.stem.startswith("_"))
    assert "engine" in scripts and "kernel_paths" in scripts
    # one interpreter for all: importing torch once keeps this a few seconds
    code = (
        "import contextlib, importlib, io, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "bad = []\n"
        f"for name in {scripts!r}:\n"
        "    try:\n"
        "        mod = importlib.import_module('bench.' + name)\n"
        "    except Exception as e:\n"
        "        bad.append(f'{name}: {type(e).__name__}: {e}')\n"
        "        continue\n"
        "    main = getattr(mod, 'main', None)\n"
        "    if main is None:\n"
        "        continue\n"
        "    sys.argv = [name + '.py', '--help']\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(io.StringIO()):\n"
        "            main()\n"
        "    except SystemExit as e:\n"
        "        if e.code not in (0, None):\n"
        "            bad.append(f'{name}: --help exited {e.code}')\n"
        "    else:\n"
        "        bad.append(f'{name}: --help did not exit')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]

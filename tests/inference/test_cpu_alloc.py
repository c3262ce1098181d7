"""inference.cpu_alloc: large CPU buffers reused from the heap instead of fresh page-faulting mmaps."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from inference.config import EngineConfig

PROBE = textwrap.dedent("""
    import resource, sys, torch
    from inference.cpu_alloc import keep_large_allocations
    on = keep_large_allocations(int(sys.argv[1]))
    def faults_of_a_fresh_tensor(mb):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = torch.empty(mb << 18, dtype=torch.float32)
        t.fill_(1.0)
        del t
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    faults_of_a_fresh_tensor(64)
    # a smaller request fits the freed block whatever its alignment padding
    print(int(on), faults_of_a_fresh_tensor(48))
""")


def _faults(mb: int) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(mb)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    on, faults = out.stdout.split()
    return bool(int(on)), int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_a_freed_large_buffer_is_reused_without_page_faults():
    """Catches the setting not taking effect (wrong mallopt ids, the call never made): with it, a
    48 MB tensor after a freed 64 MB one reuses its heap pages (12,288 pages faulted in otherwise);
    without it (0: glibc's defaults), every such tensor is a fresh mmap that faults in each page."""
    on, faults = _faults(256)
    if not on:
        pytest.skip("not glibc: mallopt unavailable")
    off_flag, faults_off = _faults(0)
    assert not off_flag
    assert faults_off > 10_000
    assert faults < 1_000


def test_the_engine_default_keeps_prompt_sized_buffers():
    """Catches the default drifting to 0 (off) or below a 2,048-token chunk's largest activation of
    a 1.5B model (2,048 x 17,920 floats, 147 MB), where the page faults come back."""
    assert EngineConfig().cpu_alloc_reuse_mb * (1 << 20) > 2048 * 17920 * 4

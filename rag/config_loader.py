"""Generic YAML loading with dotted `--set` overrides and readable validation errors.

Kept apart from the schema (`rag/config.py`) so every CLI command and the server parse config
the same way and errors always name the key path and what would have been allowed.
"""

from __future__ import annotations

import copy
import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message is meant for the user."""


class _Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false. Under YAML 1.1 `type: off` or `--set compress.type=off`
    would arrive as False and fail validation against the "off" option."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))


def load_yaml_text(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = load_yaml_text(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; any other value (lists included) replaces the base value."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a","b","c"], value parsed as YAML so numbers/bools/lists keep their type)."""
    if "=" not in item:
        raise ConfigError(f"--set expects dotted.key=value, got {item!r}")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set has an empty key in {item!r}")
    try:
        value = load_yaml_text(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    for item in overrides:
        parts, value = parse_override(item)
        node: Any = out
        for i, part in enumerate(parts[:-1]):
            nxt = _child(node, part, parts[: i + 1])
            if nxt is None:
                nxt = {}
                _assign(node, part, nxt, parts[: i + 1])
            node = nxt
        _assign(node, parts[-1], value, parts)
    return out


def _child(node: Any, part: str, path: list[str]) -> Any:
    if isinstance(node, list):
        return node[_index(part, node, path)]
    if isinstance(node, dict):
        return node.get(part)
    raise ConfigError(f"--set {'.'.join(path)}: {'.'.join(path[:-1])} is a value, not a section")


def _assign(node: Any, part: str, value: Any, path: list[str]) -> None:
    if isinstance(node, list):
        node[_index(part, node, path)] = value
    elif isinstance(node, dict):
        node[part] = value
    else:
        raise ConfigError(f"--set {'.'.join(path)}: {'.'.join(path[:-1])} is a value, not a section")


def _index(part: str, node: list, path: list[str]) -> int:
    if not part.lstrip("-").isdigit() or not -len(node) <= int(part) < len(node):
        raise ConfigError(f"--set {'.'.join(path)}: {part!r} is not an index of a list of {len(node)} items")
    return int(part)


def validate(model: type[BaseModel], data: dict[str, Any], origin: str = "config") -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        lines = [f"{origin}: {e.error_count()} problem(s):"]
        for err in e.errors():
            lines.append("  - " + describe_error(model, err))
        raise ConfigError("\n".join(lines)) from None


def describe_error(model: type[BaseModel], err: dict[str, Any]) -> str:
    loc = [str(x) for x in err.get("loc", ())]
    path = ".".join(loc) or "<root>"
    if err.get("type") == "extra_forbidden":
        allowed = _allowed_keys(model, loc[:-1])
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"{path}: unknown key{hint}"
    msg = err.get("msg", "invalid value")
    got = err.get("input")
    shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
    return f"{path}: {msg}{shown}"


def _allowed_keys(model: type[BaseModel], loc: list[str]) -> list[str]:
    """Field names of the model found by walking `loc` (best effort through unions and lists)."""
    current: Any = model
    for part in loc:
        current = _field_type(current, part)
        if current is None:
            return []
    models = [m for m in _models_in(current)]
    names: list[str] = []
    for m in models:
        names += [n for n in m.model_fields if n not in names]
    return names


def _field_type(tp: Any, part: str) -> Any:
    for m in _models_in(tp):
        if part in m.model_fields:
            return m.model_fields[part].annotation
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (list, tuple) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    for a in args:
        found = _field_type(a, part)
        if found is not None:
            return found
    return None


def _models_in(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    out: list[type[BaseModel]] = []
    for a in typing.get_args(tp):
        out += _models_in(a)
    return out

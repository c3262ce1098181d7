"""A character-level pushdown automaton that accepts exactly the JSON documents of a schema.

Supported schema subset (what query transforms and most tool calls need): object (properties
emitted in schema order; `required` defaults to all), array (items, minItems, maxItems), string
(enum, maxLength), integer, number, boolean, null. No whitespace outside strings: the output is
compact JSON, which also stops a model from padding forever.

States are hashable tuples so token masks can be cached per state.
"""

from __future__ import annotations

from typing import Any

State = tuple  # stack of frames, innermost last; () = document complete
_DIGITS = "0123456789"


class SchemaError(ValueError):
    pass


class JsonAutomaton:
    def __init__(self, schema: dict[str, Any]):
        self._schemas: list[dict[str, Any]] = []
        root = self._compile(schema)
        self.start: State = (("V", root),)

    # ---- compile -------------------------------------------------------------------------
    def _compile(self, s: dict[str, Any]) -> int:
        if not isinstance(s, dict):
            raise SchemaError(f"schema must be an object, got {s!r}")
        if "enum" in s:
            vals = s["enum"]
            if not all(isinstance(v, str) for v in vals):
                raise SchemaError("only string enums are supported")
            node = {"type": "enum", "values": list(vals)}
        else:
            t = s.get("type")
            if t == "object":
                props = s.get("properties", {})
                required = s.get("required", list(props))
                keys = [k for k in props if k in required]
                node = {"type": "object", "keys": keys, "props": [self._compile(props[k]) for k in keys]}
            elif t == "array":
                node = {"type": "array", "items": self._compile(s.get("items", {"type": "string"})),
                        "min": int(s.get("minItems", 0)), "max": s.get("maxItems")}
            elif t == "string":
                node = {"type": "string", "max": s.get("maxLength")}
            elif t in ("integer", "number", "boolean", "null"):
                node = {"type": t}
            else:
                raise SchemaError(f"unsupported schema type {t!r}")
        self._schemas.append(node)
        return len(self._schemas) - 1

    # ---- run -----------------------------------------------------------------------------
    def is_complete(self, state: State | None) -> bool:
        return state == () or (state is not None and len(state) == 1 and state[0][0] == "N"
                               and self._num_done(state[0]))

    def completion(self, state: State) -> str:
        """The shortest text that completes the document from `state` (used to close in time)."""
        out = []
        for frame in reversed(state):
            kind = frame[0]
            if kind == "L":
                out.append(frame[1][frame[2]:])
            elif kind == "S":
                out.append('n"' if frame[3] else '"')
            elif kind == "E":
                values = [v for v in self._schemas[frame[1]]["values"] if v.startswith(frame[2])]
                out.append(min(values, key=len)[len(frame[2]):] + '"')
            elif kind == "N":
                out.append("" if self._num_done(frame) else "0")
            elif kind == "V":
                out.append(self._min_value(frame[1]))
            elif kind == "A":
                node = self._schemas[frame[1]]
                missing = max(0, node["min"] - frame[2])
                out.append("," * bool(missing) + ",".join([self._min_value(node["items"])] * missing) + "]")
            elif kind == "O":
                node = self._schemas[frame[1]]
                rest = range(frame[2] + 1, len(node["keys"]))
                out.append("".join(f',"{node["keys"][i]}":{self._min_value(node["props"][i])}' for i in rest) + "}")
        return "".join(out)

    def _min_value(self, sid: int) -> str:
        node = self._schemas[sid]
        t = node["type"]
        if t == "object":
            return "{" + ",".join(f'"{k}":{self._min_value(v)}' for k, v in zip(node["keys"], node["props"])) + "}"
        if t == "array":
            return "[" + ",".join([self._min_value(node["items"])] * node["min"]) + "]"
        return {"string": '""', "integer": "0", "number": "0", "boolean": "true", "null": "null"}.get(
            t, '"' + min(node.get("values", [""]), key=len) + '"')

    def feed(self, state: State | None, text: str) -> State | None:
        for ch in text:
            if state is None:
                return None
            state = self.step(state, ch)
        return state

    def step(self, state: State, ch: str) -> State | None:
        if not state:
            return None
        top, rest = state[-1], state[:-1]
        kind = top[0]
        if kind == "V":
            return self._start_value(rest, top[1], ch)
        if kind == "L":  # literal: (L, text, pos)
            text, pos = top[1], top[2]
            if text[pos] != ch:
                return None
            return rest if pos + 1 == len(text) else rest + (("L", text, pos + 1),)
        if kind == "S":
            return self._string(rest, top, ch)
        if kind == "E":  # enum string in progress: (E, sid, typed)
            return self._enum(rest, top, ch)
        if kind == "N":
            return self._number(rest, top, ch)
        if kind == "A":
            return self._array(rest, top, ch)
        if kind == "O":  # object: (O, sid, next key index)
            return self._object(rest, top, ch)
        return None

    def _start_value(self, rest: State, sid: int, ch: str) -> State | None:
        node = self._schemas[sid]
        t = node["type"]
        if t == "object":
            if ch != "{":
                return None
            return self._object_key(rest, sid, 0)
        if t == "array":
            return rest + (("A", sid, 0, "open"),) if ch == "[" else None
        if t == "string":
            return rest + (("S", sid, 0, False),) if ch == '"' else None
        if t == "enum":
            return rest + (("E", sid, ""),) if ch == '"' else None
        if t in ("integer", "number"):
            return self._number(rest, ("N", sid, ""), ch)
        if t == "boolean":
            if ch in "tf":
                word = "true" if ch == "t" else "false"
                return rest + (("L", word, 1),)
            return None
        if t == "null":
            return rest + (("L", "null", 1),) if ch == "n" else None
        return None

    def _object_key(self, rest: State, sid: int, i: int) -> State:
        keys = self._schemas[sid]["keys"]
        if i >= len(keys):
            return rest + (("L", "}", 0),)
        lead = "," if i else ""
        return rest + (("O", sid, i), ("V", self._schemas[sid]["props"][i]),
                       ("L", f'{lead}"{keys[i]}":', 0))

    def _object(self, rest: State, top: tuple, ch: str) -> State | None:
        # The value of key i is complete; move on to key i+1 (or the closing brace).
        nxt = self._object_key(rest, top[1], top[2] + 1)
        return self.step(nxt, ch)

    def _array(self, rest: State, top: tuple, ch: str) -> State | None:
        _, sid, count, phase = top
        node = self._schemas[sid]
        cap = node["max"]
        if phase == "open":
            if ch == "]":
                return rest if node["min"] == 0 else None
            if cap == 0:
                return None
            return self._start_value(rest + (("A", sid, 1, "after"),), node["items"], ch)
        if ch == "]":
            return rest if count >= node["min"] else None
        if ch == "," and (cap is None or count < cap):
            return rest + (("A", sid, min(count + 1, max(node["min"], cap or 0, 1) + 1), "item"),
                           ("V", node["items"]))
        if phase == "item":
            return None
        return None

    def _string(self, rest: State, top: tuple, ch: str) -> State | None:
        _, sid, n, esc = top
        cap = self._schemas[sid]["max"]
        if esc:
            if ch not in '"\\/bfnrt':
                return None
            return rest + (("S", sid, n + 1 if cap else 0, False),)
        if ch == '"':
            return rest
        if ord(ch) < 0x20 or (cap is not None and n >= cap):
            return None
        if ch == "\\":
            return rest + (("S", sid, n, True),)
        return rest + (("S", sid, n + 1 if cap else 0, False),)

    def _enum(self, rest: State, top: tuple, ch: str) -> State | None:
        _, sid, typed = top
        values = self._schemas[sid]["values"]
        if ch == '"':
            return rest if typed in values else None
        t = typed + ch
        return rest + (("E", sid, t),) if any(v.startswith(t) for v in values) else None

    def _num_done(self, top: tuple) -> bool:
        s = top[2]
        return bool(s) and s[-1] in _DIGITS

    def _number(self, rest: State, top: tuple, ch: str) -> State | None:
        _, sid, s = top
        is_int = self._schemas[sid]["type"] == "integer"
        ok = False
        if ch in _DIGITS:
            ok = len(s) < 24 and s not in ("0", "-0")
        elif ch == "-":
            ok = s == ""
        elif ch == "." and not is_int:
            ok = bool(s) and s[-1] in _DIGITS and "." not in s
        if ok:
            return rest + (("N", sid, s + ch),)
        # Anything else ends the number and is handed to the enclosing frame.
        if not self._num_done(top) or not rest:
            return None
        return self.step(rest, ch)

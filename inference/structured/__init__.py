"""Structured output: constrain generation by masking logits (a JSON schema, or a verbatim
span of given passages)."""

from .json_automaton import JsonAutomaton, SchemaError
from .logits_processor import JsonSchemaLogitsProcessor
from .span_constraint import GroundedSpanProcessor, span_sources

__all__ = ["GroundedSpanProcessor", "JsonAutomaton", "JsonSchemaLogitsProcessor", "SchemaError", "span_sources"]

"""Structured output: constrain generation to a JSON schema by masking logits."""

from .json_automaton import JsonAutomaton, SchemaError
from .logits_processor import JsonSchemaLogitsProcessor

__all__ = ["JsonAutomaton", "JsonSchemaLogitsProcessor", "SchemaError"]

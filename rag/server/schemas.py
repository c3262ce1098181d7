"""Request bodies. Unknown fields in our own API are errors (422 naming the field); the
OpenAI-compatible bodies accept extras because real clients send fields we do not use."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Filters = dict[str, Any] | list[str] | None
# A collection name becomes a directory name under the index root: no separators, no dots.
COLLECTION_PATTERN = r"^[\w\-]{1,64}$"
# The engine derives per-sequence seeds from this one; it must stay inside torch's 64-bit range.
SEED_LIMIT = 2**62


class AskOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    passages: bool = Field(True, description="include the passages given to the model")
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    seed: int | None = Field(None, ge=-SEED_LIMIT, le=SEED_LIMIT)


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1)
    filters: Filters = None
    collection: str | None = Field(None, pattern=COLLECTION_PATTERN)
    top_k: int | None = Field(None, ge=1, le=50)
    stream: bool = False
    mode: Literal["short", "long"] | None = Field(None, description=(
        "short: the answer span and its citation; long: a cited explanation (default: answer.mode)"))
    options: AskOptions = Field(default_factory=AskOptions)


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1)
    filters: Filters = None
    collection: str | None = Field(None, pattern=COLLECTION_PATTERN)
    top_k: int | None = Field(None, ge=1, le=1000)
    # global: the entity graph's community summaries with their member chunks (retrieval.graph.summaries)
    mode: Literal["bm25", "dense", "hybrid", "graph", "global"] | None = None


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1)
    title: str = ""
    doc_id: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[\w.\-:/#@]+$")
    metadata: dict[str, Any] = Field(default_factory=dict)
    collection: str = Field("default", pattern=COLLECTION_PATTERN)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = ""

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p["text"] for p in self.content if isinstance(p, dict) and isinstance(p.get("text"), str))
        return self.content or ""


class _OpenAIBase(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-SEED_LIMIT, le=SEED_LIMIT)
    stream: bool = False
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


class RagExtension(BaseModel):
    """The `rag` object of an OpenAI chat request: answer from the index with these options."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["short", "long"] | None = None


class ChatRequest(_OpenAIBase):
    messages: list[ChatMessage] = Field(min_length=1)
    response_format: dict[str, Any] | None = None
    rag: bool | RagExtension = Field(False, description=(
        "answer the last user message from the index, with citations (true, or options such as "
        '{"mode": "short"})'))
    filters: Filters = None
    collection: str | None = Field(None, pattern=COLLECTION_PATTERN)


class CompletionRequest(_OpenAIBase):
    prompt: str | list[str]
    echo: bool = False

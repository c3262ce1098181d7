"""Server settings: limits, auth, CORS, backpressure."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_keys: list[str] = Field(default_factory=list, description="Bearer keys; empty = no auth")
    api_keys_env: str = Field("RAG_API_KEYS", description="comma-separated keys read from this env var too")
    cors_origins: list[str] = Field(default_factory=list)
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    max_tokens_limit: int = Field(1024, ge=1, description="largest max_tokens a request may ask for")
    max_concurrent: int = Field(32, ge=1, description="generation requests admitted at once")
    max_waiting: int = Field(64, ge=0, description="requests queued behind them; beyond this: 429")
    retry_after_s: int = Field(2, ge=1)
    shutdown_grace_s: float = Field(10.0, ge=0)
    model_name: str = Field("ragstack", description="id reported by /v1/models")

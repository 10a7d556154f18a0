"""Judge settings: backend, transport, limits, cache and prices.

Nested under the application settings as ``judge`` (environment
``SIDECAR_JUDGE__...``). Credentials are not settings: the Gemini backend
reads google-genai's own environment (``GOOGLE_API_KEY``/``GEMINI_API_KEY``,
``GOOGLE_GEMINI_BASE_URL``, ``GOOGLE_GENAI_USE_VERTEXAI``,
``GOOGLE_CLOUD_PROJECT``, ``GOOGLE_CLOUD_LOCATION``), and the OpenAI-compatible
backend reads the variable named by ``openai_api_key_env``.
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Characters per data block sent to the judge; screening always covers at least this much.
DEFAULT_MAX_BLOCK_CHARS = 32_768
MAX_BLOCK_CHARS_LIMIT = 262_144
# The data of one conversation's judge request, all turns together (older turns left out).
DEFAULT_MAX_REQUEST_CHARS = 400_000
MIN_REQUEST_CHARS = 16_384


class BackendKind(enum.StrEnum):
    GEMINI = "gemini"  # google-genai; the environment may still select Vertex AI
    VERTEX = "vertex"  # google-genai forced to Vertex AI
    OPENAI = "openai"  # any OpenAI-compatible /chat/completions endpoint


class UnavailablePolicy(enum.StrEnum):
    ERROR = "error"  # emit ERROR verdicts with reason judge_unavailable
    PAUSE = "pause"  # stop consuming until the judge answers again


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    input_per_mtok: Annotated[float, Field(ge=0)]
    output_per_mtok: Annotated[float, Field(ge=0)]


class ShadowSettings(BaseModel):
    """A second judge model that re-judges a share of the judged cases (off by default).

    ``model`` names the shadow model (None: off); ``share`` (0 to 1) is the
    share of judged cases it re-judges, chosen by a hash of the case's trace
    or conversation id, so every replica and restart picks the same ones. The
    shadow's answers never change a verdict; they are compared with the
    primary's per criterion (:mod:`sidecar.drift.shadow_agreement`). At most
    ``max_inflight`` shadow calls wait or run at once (further ones are
    dropped and counted), ``concurrency`` of them at the model. Kappa is
    taken over the latest ``window`` compared cases of each criterion; the
    disagreement detector alarms (level ``alpha``) once the disagreement
    rate is shown to be above ``max_disagreement``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str | None = None
    share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    max_inflight: Annotated[int, Field(ge=1)] = 16
    concurrency: Annotated[int, Field(ge=1, le=256)] = 2
    window: Annotated[int, Field(ge=10)] = 500
    max_disagreement: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.1
    alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.01

    @property
    def enabled(self) -> bool:
        return bool(self.model) and self.share > 0.0


class JudgeSettings(BaseModel):
    """Everything about how judge calls are made, except which model (the rubric says)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    backend: BackendKind = BackendKind.GEMINI
    api_version: str = "v1beta"
    # None keeps google-genai's default (or GOOGLE_GEMINI_BASE_URL / GOOGLE_VERTEX_BASE_URL).
    base_url: str | None = None
    # Vertex AI project and location; None leaves them to the environment.
    project: str | None = None
    location: str | None = None

    timeout_s: Annotated[float, Field(gt=0)] = 30.0
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 4
    backoff_base_s: Annotated[float, Field(gt=0)] = 0.5
    backoff_max_s: Annotated[float, Field(gt=0)] = 20.0
    concurrency: Annotated[int, Field(ge=1, le=256)] = 4
    requests_per_minute: Annotated[float, Field(gt=0)] = 60.0
    tokens_per_minute: Annotated[float, Field(gt=0)] = 200_000.0
    breaker_failures: Annotated[int, Field(ge=1)] = 5
    breaker_reset_s: Annotated[float, Field(gt=0)] = 30.0
    on_judge_unavailable: UnavailablePolicy = UnavailablePolicy.ERROR
    cache_max_entries: Annotated[int, Field(ge=0)] = 10_000
    max_output_tokens: Annotated[int, Field(ge=16)] = 2048
    # Bounded work: each data block shown to the judge is cut to this many
    # characters (the cut is marked in the block and on the criteria), and an
    # HTTP answer longer than max_answer_bytes is dropped unread (ERROR answer_too_large).
    max_block_chars: Annotated[int, Field(ge=1024, le=MAX_BLOCK_CHARS_LIMIT)] = (
        DEFAULT_MAX_BLOCK_CHARS
    )
    max_answer_bytes: Annotated[int, Field(ge=4096)] = 262_144
    # All data blocks of one request together (a conversation of many turns): the oldest
    # turns are left out, the first user input and the most recent turns kept whole.
    max_request_chars: Annotated[int, Field(ge=MIN_REQUEST_CHARS)] = DEFAULT_MAX_REQUEST_CHARS
    # {model: {input_per_mtok, output_per_mtok}} in US dollars per million tokens.
    prices: dict[str, Price] = Field(default_factory=dict)

    shadow: ShadowSettings = Field(default_factory=ShadowSettings)

    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key_env: str = "OPENAI_API_KEY"

    @model_validator(mode="after")
    def _backoff_order(self) -> JudgeSettings:
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError("backoff_max_s must be >= backoff_base_s")
        return self

"""Build the judge service (from settings and the environment) and the sampler from settings."""

from __future__ import annotations

import os
from collections.abc import Mapping

from sidecar.adapters.prometheus import Metrics
from sidecar.judge.config import BackendKind, JudgeSettings
from sidecar.judge.service import JudgeService


def judge_configured(settings: JudgeSettings, environ: Mapping[str, str] = os.environ) -> bool:
    """True when the chosen backend has what it needs to authenticate."""
    match settings.backend:
        case BackendKind.OPENAI:
            # Local OpenAI-compatible servers (Ollama, vLLM) often need no key.
            return bool(settings.openai_base_url)
        case BackendKind.VERTEX:
            return bool(settings.project or environ.get("GOOGLE_CLOUD_PROJECT"))
        case BackendKind.GEMINI:
            if environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in ("1", "true"):
                return bool(settings.project or environ.get("GOOGLE_CLOUD_PROJECT"))
            return bool(environ.get("GOOGLE_API_KEY") or environ.get("GEMINI_API_KEY"))


def judge_credentials_hint() -> str:
    return (
        "no judge credentials (set GOOGLE_API_KEY or GEMINI_API_KEY for the Gemini API, "
        "or GOOGLE_GENAI_USE_VERTEXAI=true with GOOGLE_CLOUD_PROJECT for Vertex AI)."
    )


def build_judge(
    settings: JudgeSettings, metrics: Metrics | None, environ: Mapping[str, str] = os.environ
) -> JudgeService | None:
    """The judge service, or None when no credentials are configured."""
    if not judge_configured(settings, environ):
        return None
    # Imported here: google-genai costs ~40 MB and seconds of start-up per process,
    # which a service or worker without a judge does not pay.
    from sidecar.adapters.judge_backends import make_backend

    return JudgeService(make_backend(settings, environ), settings, metrics or Metrics())

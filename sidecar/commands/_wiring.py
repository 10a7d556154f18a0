"""Build the judge service (from settings and the environment) and the sampler from settings."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.adapters.prometheus import Metrics
from sidecar.errors import ConfigError
from sidecar.evaluate.rubric import Rubric, load_rubrics
from sidecar.judge import Judge
from sidecar.judge.config import BackendKind, JudgeSettings
from sidecar.judge.service import JudgeService
from sidecar.judge.shadow import ShadowJudge


def command_rubrics(given: Path | None, configured: Path) -> tuple[Path, list[Rubric]]:
    """The rubric directory of a command's ``--rubrics`` (else the setting) and its rubrics.

    Without ``--rubrics`` and no directory at the setting's path (a command run
    outside the checkout), the ConfigError says how to give one.
    """
    directory = given or configured
    if given is None and not directory.is_dir():
        raise ConfigError(
            f"{directory}: no rubric directory here; pass --rubrics DIR "
            "(or set rubrics_dir in --config, or SIDECAR_RUBRICS_DIR)"
        )
    return directory, load_rubrics(directory)


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


# Why the judge is on or off: the closed set of ``sidecar_judge_enabled``'s reason label.
JUDGE_REASONS = ("configured", "no_credentials", "no_judge_criteria")


@dataclass(frozen=True, slots=True)
class JudgeState:
    """Whether the judge runs, why, and the rubrics whose judge criteria go SKIPPED."""

    enabled: bool
    reason: str
    skipped_rubrics: tuple[str, ...] = ()

    @classmethod
    def of(cls, rubrics: Sequence[Rubric], judge_on: bool) -> JudgeState:
        judged = tuple(f"{r.id}@{r.version}" for r in rubrics if r.judge is not None)
        if not judged:
            return cls(False, "no_judge_criteria")
        if judge_on:
            return cls(True, "configured")
        return cls(False, "no_credentials", judged)

    def report(self, metrics: Metrics, log: logging.Logger) -> None:
        """Set ``sidecar_judge_enabled`` and warn when judge criteria will be SKIPPED."""
        metrics.judge_enabled.labels(reason=self.reason).set(1 if self.enabled else 0)
        if self.skipped_rubrics:
            log.warning(
                "the judge is off: %s; the judge criteria of %d rubrics (%s) are SKIPPED "
                'and sidecar_judge_enabled{reason="no_credentials"} is 0 '
                "(alert SidecarJudgeDisabled)",
                judge_credentials_hint().rstrip("."),
                len(self.skipped_rubrics),
                ", ".join(self.skipped_rubrics[:10])
                + (", ..." if len(self.skipped_rubrics) > 10 else ""),
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


def with_shadow(
    judge: JudgeService | None, settings: JudgeSettings, metrics: Metrics, spans: Any = None
) -> Judge | None:
    """The pipeline's judge: ``judge``, or a :class:`ShadowJudge` around it when
    ``judge.shadow`` is on (``spans``: records each shadow judgment's span)."""
    shadow = settings.shadow
    if judge is None or not shadow.enabled:
        return judge
    record = getattr(spans, "record_shadow", None)
    return ShadowJudge(
        judge, judge.for_shadow(shadow.concurrency), shadow, metrics, on_shadow=record
    )

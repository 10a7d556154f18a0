"""Rubric fingerprints: catching an edit made without a version bump.

The content hash itself (``Rubric.content_hash``) is
:func:`sidecar.evaluate.rubric_hash.rubric_hash` of the rubric's document.

The rubric version is meant to change whenever the content does. The record
of which content a version had is the rubric file's own optional
``fingerprint: {version, hash}`` line, written by ``sidecar rubrics
fingerprint`` (after each deliberate version bump). It travels with the file
through review, git and ConfigMaps, so ``sidecar rubrics check`` in CI and the
service at start-up compare against the same thing, and nothing else has to
be stored or reachable. The comparison (:func:`check_fingerprint`):

    no fingerprint                         -> UNRECORDED  (a note)
    fingerprint.version != version         -> STALE       (bumped since; a note)
    same version, same hash                -> MATCHES
    same version, different hash           -> CHANGED     (a warning, and
                                              sidecar_rubric_unversioned_changes_total)
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

import yaml

from sidecar.evaluate.rubric import Rubric
from sidecar.safe_yaml import load as load_yaml


class FingerprintStatus(enum.StrEnum):
    UNRECORDED = "unrecorded"
    STALE = "stale"
    MATCHES = "matches"
    CHANGED = "changed"


@dataclass(frozen=True, slots=True)
class FingerprintCheck:
    status: FingerprintStatus
    message: str

    @property
    def warning(self) -> bool:
        """True for the case worth a warning: content changed, version did not."""
        return self.status is FingerprintStatus.CHANGED


def check_fingerprint(rubric: Rubric) -> FingerprintCheck:
    """Compare the rubric's content hash with its recorded fingerprint (module docstring)."""
    recorded = rubric.fingerprint
    current = rubric.content_hash
    label = f"rubric {rubric.id} v{rubric.version}"
    match recorded:
        case None:
            return FingerprintCheck(
                FingerprintStatus.UNRECORDED,
                f"{label}: no fingerprint recorded (hash {current}); "
                "`sidecar rubrics fingerprint` records it",
            )
        case _ if recorded.version != rubric.version:
            return FingerprintCheck(
                FingerprintStatus.STALE,
                f"{label}: fingerprint is of version {recorded.version}; "
                f"`sidecar rubrics fingerprint` records v{rubric.version} (hash {current})",
            )
        case _ if recorded.hash == current:
            return FingerprintCheck(FingerprintStatus.MATCHES, f"{label}: hash {current}")
        case _:
            return FingerprintCheck(
                FingerprintStatus.CHANGED,
                f"{label}: content changed without a version bump (hash {current}, "
                f"recorded {recorded.hash} for this version); verdicts before and after "
                "the edit carry the same version; bump `version` and run "
                "`sidecar rubrics fingerprint`",
            )


# -- writing the fingerprint line ------------------------------------------------------


def fingerprint_line(version: str, content_hash: str) -> str:
    return f"fingerprint: {{version: {json.dumps(version)}, hash: {json.dumps(content_hash)}}}"


def with_fingerprint(text: str, version: str, content_hash: str) -> str:
    """``text`` with its top-level ``fingerprint:`` entry set, everything else untouched.

    An existing entry (one line or a block) is replaced where it stands; otherwise
    the line is appended. Raises ``ValueError`` when the result would not read
    back as the same document plus that fingerprint (an unusual layout).
    """
    line = fingerprint_line(version, content_hash)
    root = yaml.compose(text)
    if not isinstance(root, yaml.MappingNode) or root.flow_style:
        raise ValueError("the top level is not a block mapping")
    existing = next(
        (
            (key, value)
            for key, value in root.value
            if isinstance(key, yaml.ScalarNode) and key.value == "fingerprint"
        ),
        None,
    )
    if existing is not None:
        key, value = existing
        start, end = key.start_mark.index, value.end_mark.index
        # A block value's end mark can run over trailing blank and comment lines.
        tail = text[start:end].splitlines(keepends=True)
        while len(tail) > 1 and (not tail[-1].strip() or tail[-1].lstrip().startswith("#")):
            tail.pop()
        end = start + len("".join(tail).rstrip("\n"))
        new_text = text[:start] + line + text[end:]
    else:
        separator = "" if not text or text.endswith("\n") else "\n"
        new_text = f"{text}{separator}{line}\n"
    expected = dict(load_yaml(text))
    expected["fingerprint"] = {"version": version, "hash": content_hash}
    if load_yaml(new_text) != expected:
        raise ValueError("the fingerprint entry could not be placed")
    return new_text

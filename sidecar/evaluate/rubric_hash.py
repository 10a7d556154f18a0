"""The rubric content hash: which content a verdict was judged under.

``rubric_hash(document)`` is the first 12 hex characters of the SHA-256 of the
rubric's normalised content: the parsed YAML document written as canonical
JSON (keys sorted, no insignificant whitespace, non-ASCII kept), so comments,
key order, quoting and layout do not change it and any change to a value
does. Three top-level keys are left out because they describe the rubric
rather than say what it asks:

- ``fingerprint`` (:mod:`sidecar.drift.fingerprint`), which would otherwise
  change the hash it records;
- ``calibration``, the measurements ``sidecar calibrate --write-rubric``
  records. The ``gate: false`` that command may set is inside
  ``judge.criteria`` and does change the hash;
- ``canary``, which set of labelled traces watches the judge and how often.

The hash goes on every verdict record (``rubric_hash``) and verdict span. It
is computed from the document, so it needs nothing of
:class:`~sidecar.evaluate.rubric.Rubric` (which holds it as ``content_hash``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

HASH_LENGTH = 12
# Top-level keys that describe the rubric rather than say what it asks.
NOT_HASHED = frozenset({"fingerprint", "calibration", "canary"})


def _plain(value: Any) -> Any:
    """JSON-ready data: mapping keys as text, models dumped, dates and the like as text."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | bool | int | float):
        return value
    return str(value)


def rubric_hash(document: Mapping[str, Any]) -> str:
    """The content hash of a parsed rubric document (see the module docstring)."""
    content = {str(k): v for k, v in document.items() if str(k) not in NOT_HASHED}
    canonical = json.dumps(
        _plain(content), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:HASH_LENGTH]

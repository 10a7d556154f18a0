"""Every record sidecar writes to or reads from a topic or a file: one module per family.

    record          where it goes                                    v   module
    verdict         ``kafka.verdict_topic`` (eval_verdicts),          1   :mod:`.verdicts`
                    ``eval_verdicts_backfill``, ``replay`` stdout,
                    ``demo`` and ``canary --verdicts`` files; read by
                    ``calibrate``, ``gate``, ``diff``, ``canary --previous``
      check, criterion   inside the verdict record                    -   :mod:`.verdicts`
    review          ``review.topic`` (eval_review)                    1   :mod:`.reviews`
      transcript, tool call   inside the review record                -   :mod:`.reviews`
    human label     ``review.labels_topic`` (eval_labels),            1   :mod:`.labels`
                    ``calibrate --labels``, canary label files
    adjudication    ``calibrate --adjudication`` files                1   :mod:`.labels`
    pair            ``compare --pairs`` files                         1   :mod:`.pairs`
    turn            ``conversations.topic`` (eval_turns)              1   :mod:`.turn_records`
    state           ``conversations.state_topic``                     1   :mod:`.state_records`
                    (eval_conversations, compacted)

What each keeps of the content (verdict and review records) is one policy,
:mod:`.redaction`. The bases, the field rules and the readers every family
shares are in :mod:`._base`; :func:`validate`, :func:`read_records` and
:func:`record_json` are exported here.

Every record carries its schema version as ``v``. A reader takes its own
version, and records without ``v`` where earlier releases wrote them without
one (verdict files of older versions still read in ``calibrate``, ``gate``
and ``diff``); any other version is refused with a
:class:`~sidecar.errors.RecordError` naming it and the version this release
reads. Parsing is strict (pydantic strict mode: no coercion between types);
the records people also write (verdicts by hand, labels, pairs) ignore
unknown keys and take integer ids, the internal ones (turn, state) refuse
unknown keys.

Not here: the inputs (OTLP spans and logs, whose format is OTLP's, decoded by
:mod:`sidecar.ingest`), dead letters (the input record as it came, the reason
in a header) and the verdict span (OTel).

Dependencies go one way: these modules read the domain types
(:mod:`sidecar.model`, :class:`~sidecar.evaluate.verdict.Verdict`); nothing
in ``evaluate``, ``ingest`` or ``judge`` imports them.
"""

from sidecar.wire._base import read_records, record_json, validate

__all__ = ["read_records", "record_json", "validate"]

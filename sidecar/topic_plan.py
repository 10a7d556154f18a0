"""The Kafka topics a configuration uses, what each needs, and what is wrong with them.

Pure: :func:`plan` reads the settings, :func:`problems` compares the plan with what
the cluster holds (read by :mod:`sidecar.adapters.kafka_admin`). Used by
``sidecar topics plan|create|check`` and by ``sidecar run`` before it consumes.

Co-partitioned topics must have equal partition counts: the spans and logs topics
(a trace's spans and log records must reach the same replica), and the turns and
conversation state topics (a conversation's state lives in the partition of its turns).

Not every topic is needed by every command: :func:`for_run` keeps those ``sidecar run``
uses with the rubrics it loaded (the conversation topics only when some rubric has
``scope: conversation``; never the backfill verdict topic), :func:`for_backfill` those
``sidecar backfill`` uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sidecar.evaluate.rubric import Rubric
from sidecar.settings import Settings, topics_in_use

__all__ = [
    "COPARTITIONED",
    "DEFAULT_PARTITIONS",
    "DEFAULT_REPLICATION",
    "TopicSpec",
    "TopicState",
    "for_backfill",
    "for_run",
    "missing_message",
    "plan",
    "problems",
]

DEFAULT_PARTITIONS = 6
DEFAULT_REPLICATION = 3  # fewer when the cluster has fewer brokers

# Co-partition groups: the fields whose topics must have equal partition counts.
COPARTITIONED: Mapping[str, tuple[str, ...]] = {
    "inputs": ("kafka.topic", "kafka.logs_topic"),
    "conversations": ("conversations.topic", "conversations.state_topic"),
}

# What each topic is for, in `topics plan`.
_ROLES: Mapping[str, str] = {
    "kafka.topic": "input: OTLP spans (from the Collector)",
    "kafka.logs_topic": "input: OTLP logs (GenAI content events)",
    "kafka.dead_letter_topic": "output: records that cannot be decoded or delivered",
    "kafka.verdict_topic": "output: verdict records",
    "kafka.backfill_verdict_topic": "output: verdicts of sidecar backfill",
    "review.topic": "output: cases for human review",
    "review.labels_topic": "input: human labels",
    "conversations.topic": "internal: conversation turns",
    "conversations.state_topic": "internal: decided conversations (compacted)",
}

RUN = "run"
BACKFILL = "backfill"

# Which commands use each topic; the others are used by `sidecar run` only.
_USED_BY: Mapping[str, tuple[str, ...]] = {
    "kafka.topic": (RUN, BACKFILL),
    "kafka.dead_letter_topic": (RUN, BACKFILL),
    "kafka.backfill_verdict_topic": (BACKFILL,),
}

# What the service's principal does on each topic (ACLs: READ and WRITE imply DESCRIBE).
_OPERATIONS: Mapping[str, tuple[str, ...]] = {
    "kafka.topic": ("READ",),
    "kafka.logs_topic": ("READ",),
    "review.labels_topic": ("READ",),
    # The conversation stage writes turns and state, and reads both back.
    "conversations.topic": ("READ", "WRITE"),
    "conversations.state_topic": ("READ", "WRITE"),
}

# The condition under which `sidecar run` uses a topic, beyond its setting being on.
CONVERSATION_RUBRICS = "a scope: conversation rubric"
_WHEN: Mapping[str, str] = {
    "conversations.topic": CONVERSATION_RUBRICS,
    "conversations.state_topic": CONVERSATION_RUBRICS,
}

_CONFIGS: Mapping[str, Mapping[str, str]] = {
    "conversations.state_topic": {"cleanup.policy": "compact"},
}


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic the configuration uses, as it should be created."""

    field: str
    name: str
    partitions: int
    replication: int | None  # None: DEFAULT_REPLICATION, or the broker count when fewer
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    group: str | None = None  # co-partition group
    role: str = ""
    used_by: tuple[str, ...] = (RUN,)  # the commands that use it
    when: str = ""  # the condition under which `run` uses it, if any
    operations: tuple[str, ...] = ("WRITE",)  # what the service's principal does on it

    def used_by_text(self) -> str:
        """``run``, ``backfill``, ``run, backfill``, or ``run (with ...)``, for `topics plan`."""
        return ", ".join(
            f"{c} (with {self.when})" if c == RUN and self.when else c for c in self.used_by
        )


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic as the cluster describes it: its partition count, or why it has none."""

    partitions: int | None = None
    error: str | None = None  # "missing", or why the cluster would not say ("not authorised")


def _group_of(field_name: str) -> str | None:
    for group, fields in COPARTITIONED.items():
        if field_name in fields:
            return group
    return None


def plan(
    settings: Settings, partitions: int = DEFAULT_PARTITIONS, replication: int | None = None
) -> list[TopicSpec]:
    """Every topic of ``settings`` (off ones left out), in ``topics_in_use`` order."""
    return [
        TopicSpec(
            field=name,
            name=topic,
            partitions=partitions,
            replication=replication,
            configs=dict(_CONFIGS.get(name, {})),
            group=_group_of(name),
            role=_ROLES.get(name, ""),
            used_by=_USED_BY.get(name, (RUN,)),
            when=_WHEN.get(name, ""),
            operations=_OPERATIONS.get(name, ("WRITE",)),
        )
        for name, topic in topics_in_use(settings)
    ]


def for_run(specs: Sequence[TopicSpec], rubrics: Sequence[Rubric]) -> list[TopicSpec]:
    """The topics `sidecar run` uses with ``rubrics``: the conversation topics only when
    some rubric has ``scope: conversation`` (else the conversation stage does not start)."""
    conversational = any(r.conversational is not None for r in rubrics)
    return [
        s for s in specs if RUN in s.used_by and (s.when != CONVERSATION_RUBRICS or conversational)
    ]


def for_backfill(specs: Sequence[TopicSpec]) -> list[TopicSpec]:
    """The topics `sidecar backfill` uses: the spans, the dead letters, its verdicts."""
    return [s for s in specs if BACKFILL in s.used_by]


def problems(specs: Sequence[TopicSpec], found: Mapping[str, TopicState]) -> list[str]:
    """What is wrong: missing topics, then co-partitioned topics of unequal counts."""
    found_problems: list[str] = []
    missing = [
        s for s in specs if found.get(s.name, TopicState(error="missing")).error == "missing"
    ]
    if missing:
        found_problems.append(
            "missing topics: " + ", ".join(f"{s.name} ({s.field})" for s in missing)
        )
    for spec in specs:
        state = found.get(spec.name)
        if state is not None and state.error not in (None, "missing"):
            found_problems.append(f"topic {spec.name} ({spec.field}): {state.error}")
    for group in COPARTITIONED:
        members = [
            (s, found[s.name].partitions)
            for s in specs
            if s.group == group and s.name in found and found[s.name].partitions is not None
        ]
        if len({count for _, count in members}) > 1:
            counts = " and ".join(f"{s.name} ({s.field}) has {n}" for s, n in members)
            found_problems.append(
                f"co-partitioned topics differ in partition count: {counts}; "
                "give them the same count"
            )
    return found_problems


def missing_message(
    specs: Sequence[TopicSpec], found: Mapping[str, TopicState], config: str
) -> str:
    """The one line for missing topics: every one named, and the command that creates them."""
    missing = [
        s for s in specs if found.get(s.name, TopicState(error="missing")).error == "missing"
    ]
    names = ", ".join(f"{s.name} ({s.field})" for s in missing)
    return (
        f"{len(missing)} Kafka topic{'s' if len(missing) != 1 else ''} missing: {names}; "
        f"create them with `sidecar topics create --config {config}` "
        "(or turn off what uses them)"
    )

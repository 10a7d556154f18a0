"""The ``eval_turns`` topic on Kafka: the turn producer and the conversation stage's consumer.

The producer is the verdict producer's (:class:`~sidecar.adapters.kafka.KafkaSink`:
idempotent, ``acks=all``, replaced after a failed send) sending to the turns
topic, keyed by conversation id so that every turn of a conversation lands on
one partition. The consumer is the span consumer
(:class:`~sidecar.adapters.kafka.KafkaSource`: manual commits, rebalance
listener) on the turns topic in the conversation stage's own group.
"""

from __future__ import annotations

from sidecar.adapters.kafka import KafkaSink, KafkaSource
from sidecar.settings import ConversationSettings, KafkaSettings

__all__ = ["KafkaTurnSink", "conversation_group", "turn_source"]


def conversation_group(kafka: KafkaSettings, conversations: ConversationSettings) -> str:
    return conversations.group_id or f"{kafka.group_id}.conversations"


def _on_turns(kafka: KafkaSettings, conversations: ConversationSettings) -> KafkaSettings:
    return kafka.model_copy(
        update={
            "topic": conversations.topic,
            "group_id": conversation_group(kafka, conversations),
            "client_id": f"{kafka.client_id}-conversations",
            # The conversation stage reads eval_turns alone, never the logs topic.
            "logs_topic": None,
        }
    )


class KafkaTurnSink(KafkaSink):
    """Producer of turn records (a ``TurnSink``); a send returns once acknowledged."""

    def __init__(self, kafka: KafkaSettings, conversations: ConversationSettings) -> None:
        super().__init__(_on_turns(kafka, conversations))
        self._turns_topic = conversations.topic

    async def send_turn(self, conversation_id: str, payload: bytes) -> None:
        await self._send(self._turns_topic, payload, key=conversation_id.encode("utf-8"))


def turn_source(kafka: KafkaSettings, conversations: ConversationSettings) -> KafkaSource:
    """The conversation stage's consumer of the turns topic, in its own group."""
    return KafkaSource(_on_turns(kafka, conversations))

"""Conversations: evaluating the turns of one session together.

Rubrics with ``scope: conversation`` are not evaluated per trace. The data flow::

    trace stage   trace -> transcript -> key (key.py) -> turn record (turns.py)
                  -> Kafka eval_turns, keyed by conversation id
    conv. stage   eval_turns -> open conversations, bounded (store.py)
                  -> decided when idle / at max_turns / at max_age
                  -> one transcript of all turns (transcript.py)
                  -> checks, screening, sampling by conversation id (evaluate.py)
                  -> judge -> verdict (scope conversation, revision n)
                  -> emit -> commit eval_turns (stage.py)
    replay        turns grouped by key, split at idle gaps, decided at end (group.py)

Everything here but ``stage.py`` is pure: data and ``now`` in, data out.
"""

"""Real agent traces for tests and the demo data.

``adk_agent``: a google-adk 2 agent with a scripted model, run in its own
environment (``adk_env``) and driven from the tests by ``adk_traces``, which
also reads the recorded google-adk 1.14 traces in ``tests/data/adk1``;
``refund_shop``: the tools and scenarios it runs. ``genai_spans``: traces in
the OTel GenAI semantic conventions, written with the OTel SDK directly;
``otlp``: their OTLP encodings; ``runner``: an agent script run in its own
environment, for ``adk_traces`` and ``openai_traces``. All are reproducible:
seeded ids and fixed timestamps give the same OTLP bytes on every run.
"""

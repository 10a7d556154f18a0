"""Real agent traces for tests and the demo data.

``adk_agent``: a google-adk agent with a scripted model, traced by the OTel SDK
(ADK v1 span conventions). ``genai_spans``: traces in the OTel GenAI semantic
conventions, written with the OTel SDK directly. Both are reproducible: seeded
ids and fixed timestamps give the same OTLP bytes on every run.
"""

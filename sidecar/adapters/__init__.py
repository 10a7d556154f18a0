"""Adapters: the only modules that talk to Kafka, the OTel SDK, Prometheus and judge services."""

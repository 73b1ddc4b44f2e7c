"""Operational tools: the ``connectors`` command, checkpoint reading, the progress listener,
Kafka consumer-group lag, and the file sink's idle-part listener and finish/status commands."""

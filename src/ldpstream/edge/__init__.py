"""The ingestion edge: the HTTP service devices send reports to (authenticate, validate, batch for Kafka, spool)."""

"""producer: the device side (spec, budget ledger, wire encoding, Kafka producer, fleet simulator)."""

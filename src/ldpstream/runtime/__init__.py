"""runtime: the plumbing every service shares (settings from the environment, Kafka and Redis clients, the
published specs and strategies on Kafka, the dead-letter topic, metric definitions, the clock). Imports nothing of
ours but `ldp` and the `collection` contract."""

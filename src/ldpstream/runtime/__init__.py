"""runtime: the plumbing every service shares (settings from the environment, Kafka and Redis clients, the
published specs and their one cache, strategies on Kafka, the dead-letter topic, metric definitions, process files).
Imports nothing of ours but `ldpstream.mechanisms` and `ldpstream.contract`."""

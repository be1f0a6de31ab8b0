"""ldpstream: the command line and the local services (Kafka, Redis) it starts."""

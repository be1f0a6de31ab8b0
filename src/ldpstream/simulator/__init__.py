"""The device-fleet simulator: populations with a known truth, fleets perturbed in vectorised chunks and produced
to Kafka or sent through the edge (server install: it uses SciPy, Kafka and aiohttp)."""

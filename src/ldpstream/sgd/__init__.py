"""sgd_coordinator: LDP mini-batch gradient descent over Kafka."""

"""A run's runtime parts: the driver and what it wires together (feeder, evaluation, data, summary)."""

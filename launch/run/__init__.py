"""A run's runtime parts: the driver and what it wires together (startup, stopping, feeder, evaluation, data,
summary), and a run as data started in this process or as its own (spec)."""

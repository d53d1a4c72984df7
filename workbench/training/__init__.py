"""Training: a run's arguments, its recipe, the Trainer it becomes, callbacks and batching."""

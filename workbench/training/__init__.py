"""Training: a run's recipe, the Trainer it becomes, callbacks, and the run it starts."""

"""Forms that start runs: the model and dataset pickers and the train form (above training)."""

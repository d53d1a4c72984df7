"""Run directories: the one writer, its lock, the event log, checkpoints, and reading runs back."""

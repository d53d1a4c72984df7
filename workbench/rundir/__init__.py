"""Run directories: the one writer, its lock, the event log, and reading runs back."""

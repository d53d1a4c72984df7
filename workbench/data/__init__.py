"""The datasets: DataSpec, the bundled offline sets, a dataset's rows checked."""

"""Planning: memory, FLOPs, time and cost of a training run, and the figures behind them."""

"""The shapes a batch takes: length buckets, the collators that pad to them, packing."""

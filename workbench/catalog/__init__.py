"""The model catalog: the model table, the specs built from it, the hub seen offline."""

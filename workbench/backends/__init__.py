"""Devices: one record per backend (hpu, cuda, cpu), the chip table, the device readers."""

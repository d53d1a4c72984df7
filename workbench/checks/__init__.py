"""Checks: ``wb.doctor()`` and the report it writes."""

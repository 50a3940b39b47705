"""Planning: which (check, case) pairs a run holds."""

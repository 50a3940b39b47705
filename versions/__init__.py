"""The libraries a run is keyed by and their releases: one table, standard library only, at the bottom
of the import order, so nox, the suite and the report tools all read the same rows."""

"""Tests of reports/bisection/: the search, its installs, release lists and the command."""

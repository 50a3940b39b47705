"""Bisection across JAX releases: the search, its installs and runs, the release list, the command."""

"""Generic conformance checks that run against every adapter; no check names a subject."""

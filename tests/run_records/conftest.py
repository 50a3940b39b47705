"""The record files' tests build synthetic folders like the report tools' tests: the same fixtures."""

# no_fsync is autouse: it skips fsync unless a test is marked real_fsync (registered by the hook).
from tests.reports.conftest import no_fsync, pytest_configure  # noqa: F401

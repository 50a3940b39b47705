"""Tests of reports/ledger/ and of the ledger file itself."""

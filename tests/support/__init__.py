"""Support shared by the test modules: helpers and fakes that no test module imports from another."""

"""The conformance suites, one module per contract area."""

"""Glue for third-party libraries that several backends share (imported lazily)."""

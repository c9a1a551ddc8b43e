"""A tiny app whose jobs write through the ORM."""

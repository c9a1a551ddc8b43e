"""Integrations with web frameworks: Django, FastAPI/ASGI and friends."""

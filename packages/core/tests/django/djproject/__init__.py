"""The Django project of jobchain.contrib.django's tests (settings only)."""

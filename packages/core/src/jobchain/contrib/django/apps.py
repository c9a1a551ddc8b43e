"""The Django app: ``INSTALLED_APPS += ["jobchain.contrib.django"]``."""

from __future__ import annotations

from jobchain.contrib.django._django import AppConfig


class JobchainConfig(AppConfig):
    """Validates ``settings.JOBCHAIN`` at start-up (ImproperlyConfigured names the key)."""

    name = "jobchain.contrib.django"
    label = "jobchain"
    verbose_name = "jobchain"

    def ready(self) -> None:
        from jobchain.contrib.django import chains
        from jobchain.contrib.django.conf import check_settings

        check_settings()
        chains.close_clients()  # settings read before ready() (none in practice) are re-read


__all__ = ["JobchainConfig"]

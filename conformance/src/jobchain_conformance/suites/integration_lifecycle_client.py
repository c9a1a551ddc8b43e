"""Client cases of the job lifecycle: cancel, redrive, awaiting failed and cancelled chains,
dead-letter listings, bad input."""

from __future__ import annotations

from jobchain_conformance.suites._integration_base import IntegrationSuiteBase
from jobchain_conformance.suites.integration_lifecycle_client_cancel import ClientCancelTests
from jobchain_conformance.suites.integration_lifecycle_client_listing import (
    ClientLifecycleBadInputTests,
    DeadLetterListingTests,
)
from jobchain_conformance.suites.integration_lifecycle_client_redrive import ClientRedriveTests


class ClientLifecycleTests(
    ClientCancelTests,
    ClientRedriveTests,
    DeadLetterListingTests,
    ClientLifecycleBadInputTests,
    IntegrationSuiteBase,
):
    """Lifecycle cases driven through the client."""

"""ClaimStateSuite is a part of StateAdapterSuite: every claim case, nothing the whole suite lacks."""

from __future__ import annotations

from jobchain_conformance import ClaimStateSuite, StateAdapterSuite


def _cases(suite: type) -> set[str]:
    return {name for name in dir(suite) if name.startswith("test_")}


def test_every_claim_case_is_a_case_of_the_whole_state_suite() -> None:
    claim = _cases(ClaimStateSuite)
    assert claim, "the claim suite has no cases"
    assert claim <= _cases(StateAdapterSuite)
    for base in ClaimStateSuite.__mro__[1:]:
        if _cases(base):
            assert issubclass(StateAdapterSuite, base), f"{base.__name__} is not part of StateAdapterSuite"


# Cases whose names mention claims or reaps but test another operation: a claim strategy
# changes only the claim and the reap statements.
NOT_ABOUT_THE_CLAIM = {
    "test_durations_are_nearest_rank_percentiles_of_claim_to_completion": "queue_stats",
    "test_expired_but_unreaped_lease_is_still_renewable": "job_renew_lease",
    "test_reap_params_refuse_a_limit_below_one": "params validation, before any statement",
    "test_worker_cannot_complete_a_job_it_never_claimed": "job_complete",
}


def test_the_claim_suite_holds_every_case_about_claims_and_reaps() -> None:
    claim = _cases(ClaimStateSuite)
    for name in _cases(StateAdapterSuite) - set(NOT_ABOUT_THE_CLAIM):
        if any(word in name for word in ("acquire", "claim", "reap")):
            assert name in claim, f"{name} is about claims or reaps but not in ClaimStateSuite"
    assert set(NOT_ABOUT_THE_CLAIM) <= _cases(StateAdapterSuite), "an exclusion names no case"

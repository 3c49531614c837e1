"""The verify node: whether the service is healthy after the remediation, checked again a few times before it counts
as still failing."""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PolicyContext
from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import Policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import HostUnreachable
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import starts_the_service
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState, Toolkit


class StillFailing(Exception):
    """Verification saw the service still failing (raised so the verify node retries)."""

    def __init__(self, check: Mapping[str, Any]) -> None:
        super().__init__(check.get("summary", "still failing"))
        self.check = check


class VerifyNode(ToolNode):
    node_name = "verify"

    def __init__(self, tools: Toolkit) -> None:
        super().__init__(tools, max_retries=tools.verify_retries, wait=tools.verify_wait)

    def prep(self, state: IncidentState) -> Mapping[str, Any]:
        return state.failure.spec

    def exec(self, prep_res: Mapping[str, Any]) -> Mapping[str, Any] | HostUnreachable:
        try:
            check = self.tools.verify(prep_res)
        except HostUnreachable as exc:
            return exc  # not retried: each try would wait out the connection's timeout again
        if not check.get("healthy"):
            raise StillFailing(check)
        return check

    def exec_fallback(self, prep_res: Mapping[str, Any], exc: Exception) -> Mapping[str, Any]:
        if isinstance(exc, StillFailing):
            return exc.check
        raise exc

    def post(self, state: IncidentState, prep_res: Any, exec_res: Mapping[str, Any] | HostUnreachable) -> str:
        attempt = state.attempt
        if isinstance(exec_res, HostUnreachable):
            attempt.outcome = "unreachable"
            attempt.verification = {"healthy": False, "summary": f"not verified: {exec_res}"}
            state.reason = f"{state.failure.service}: the host stopped answering after the remediation ran; not verified: {exec_res}"
            state.log(self.name, state.reason)
            return "unreachable"
        attempt.verified = bool(exec_res.get("healthy"))
        attempt.verification = {"healthy": attempt.verified, "summary": exec_res.get("summary", ""), "checks": exec_res.get("checks", [])}
        attempt.outcome = "healed" if attempt.verified else "failed"
        if attempt.verified:
            state.log(self.name, "healthy: every check passes")
            return "healthy"
        state.reason = f"still failing after attempt {attempt.number}: {exec_res.get('summary', '')}"
        state.log(self.name, state.reason)
        recorded = starts_that_failed(attempt.results, self.tools.policy_context(state.failure), self.tools.policy)
        for ran, result in zip(attempt.results, recorded, strict=True):
            if ran.status != result.status:
                state.log(self.name, f"{shlex.join(result.argv)} exited {result.rc}, yet {state.failure.service} still fails its checks: "
                                     "recorded as a failed start, with what it printed")
        attempt.results = recorded
        if exec_res.get("failure_class") and exec_res.get("evidence"):
            # the next attempt diagnoses what the service says now (its journal since the failed start included)
            state.failure = Failure.from_check(state.failure.host, exec_res, state.failure.facts)
        return "failing"


def starts_that_failed(results: Sequence[StepResult], context: PolicyContext, policy: Policy) -> list[StepResult]:
    """The steps of an attempt whose service still fails, a start or restart of it that exited 0 recorded as failed:
    Debian's init scripts exit 0 when the daemon refuses its configuration (redis prints "Bad directive" on the start's
    stderr, and its init script says "failed" and exits 0), and what such a start printed is the failure's best words,
    which diagnosis reads from failed steps only. What starts the service is the policy's to say (its rules' effect)."""
    return [dataclasses.replace(result, status="failed")
            if result.status == "ok" and starts_the_service(result.argv, context, policy) else result for result in results]

"""The verify node: whether the service is healthy after the remediation, checked again a few times before it counts
as still failing."""

from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import HostUnreachable
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure
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
        if exec_res.get("failure_class") and exec_res.get("evidence"):
            # the next attempt diagnoses what the service says now (its journal since the failed start included)
            state.failure = Failure.from_check(state.failure.host, exec_res, state.failure.facts)
        return "failing"

"""The record node: each attempt as one episode in memory (a plan that waits for a person stored with it; the canary it
was, settled next), and where the incident goes next."""

from __future__ import annotations

import dataclasses

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.rollout import Canaries
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode, plan_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState, Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import episode_record


class RecordNode(ToolNode):
    node_name = "record"

    def __init__(self, tools: Toolkit) -> None:
        super().__init__(tools, max_retries=3, wait=0.5)

    def prep(self, state: IncidentState) -> tuple[IncidentState, Attempt]:
        """The attempt as it ends now, for exec to record: a copy, since post writes its end on the state."""
        return state, dataclasses.replace(state.attempt, finished_at=self.tools.clock())

    def exec(self, prep_res: tuple[IncidentState, Attempt]) -> tuple[int, str | None] | None:
        state, attempt = prep_res
        if self.tools.memory is None:
            return None
        pending = None
        if attempt.outcome == "awaiting_approval":
            pending = approvals.pending_plan(plan_of(state), state.failure, self.tools.policy, ttl_s=self.tools.approval_ttl)
        return self.tools.memory.record_attempt(
            incident_id=state.incident_id, failure=state.failure, attempt=attempt, pending=pending,
            executed_plan_id=state.approved_plan_id, run_id=self.tools.blast_radius.run_id, relapsed_from=state.relapsed_from,
        )

    def exec_fallback(self, prep_res: tuple[IncidentState, Attempt], exc: Exception) -> MemoryStoreError:
        if isinstance(exc, MemoryStoreError):
            return exc
        raise exc

    def post(self, state: IncidentState, prep_res: tuple[IncidentState, Attempt], exec_res: tuple[int, str | None] | MemoryStoreError | None) -> str:
        attempt = state.attempt
        attempt.finished_at = prep_res[1].finished_at
        # the failure as this attempt saw it: verification may replace it with what the service says next
        state.attempt_records[attempt.number] = {
            **episode_record(state.incident_id, state.failure, attempt, self.tools.blast_radius.run_id, state.relapsed_from), "id": None}
        if isinstance(exec_res, MemoryStoreError):
            state.warnings.append(f"episode of attempt {attempt.number} not recorded: {exec_res}")
        elif exec_res is not None:
            episode_id, plan_id = exec_res
            state.episodes.append(episode_id)
            state.attempt_records[attempt.number]["id"] = episode_id
            state.plan_id = plan_id or state.plan_id
            state.log(self.name, f"episode {episode_id}: {attempt.outcome}")
            self._settle_canary(state, attempt, episode_id)
        if attempt.outcome == "healed":
            return "healed"
        if attempt.outcome == "awaiting_approval":
            return "await"
        if attempt.outcome in ("unreachable", "suspended", "deferred", "in_progress_elsewhere", "halted", "silenced"):
            return attempt.outcome
        if attempt.outcome == "failed" and len(state.attempts) < self.tools.max_attempts:
            return "retry"
        if attempt.outcome == "failed":
            state.reason = f"{state.failure.service}: not healed by attempt {attempt.number}, the last allowed; {state.reason}"
        return "escalate"

    def _settle_canary(self, state: IncidentState, attempt: Attempt, episode_id: int) -> None:
        """When the attempt was the canary of its plan, what the hosts waiting for it learn from its episode. Written
        once the episode is (exec may run again; this may not): a canary not settled is freed once its job ends."""
        canary = state.canaries.get(attempt.number)
        if canary is None or self.tools.memory is None:
            return
        try:
            Canaries(self.tools.memory.database).settle_canary(canary, host=state.failure.host, outcome=attempt.outcome, episode_id=episode_id)
        except MemoryStoreError as exc:
            state.warnings.append(f"the canary of attempt {attempt.number} not settled: {exc}")

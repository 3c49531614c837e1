"""Whether a remediation may run now in this run: the run's error threshold, a new plan's canary, and a fleet incident's."""

from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import process_owner
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.rollout import UNPROVEN_SOURCES, Canaries, CanaryKey, halted_because
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode, plan_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import Deferred, IncidentState, Suspended

# how often a host that waits for a new plan's canary reads how it went (a read without the memory's write lock)
CANARY_POLL_S = 0.25


@dataclass(frozen=True)
class Rollout:
    """What the rollout node asks of the run: the canary the plan needs (None for a plan verified before), and until
    when this host may wait for it."""

    canary: CanaryKey | None
    deadline: float
    # the fleet incident the canary is of, in words ("" for a new plan's canary in its run)
    fleet: str = ""


@dataclass(frozen=True)
class Proceed:
    """The remediation may run here: as its plan's canary, after the canary verified it on ``proven_on``, or as a plan
    that needs none."""

    canary: CanaryKey | None = None
    proven_on: str = ""
    waited: float = 0.0


@dataclass(frozen=True)
class Halted:
    """The run's error threshold was passed: nothing more is attempted in it."""

    why: str


@dataclass(frozen=True)
class FleetHeld:
    """Part of a fleet incident, the plan runs nowhere: a new plan is never tried host by host, and a verified one
    failed on the incident's canary."""

    why: str


class RolloutNode(ToolNode):
    """Whether this remediation may run now in this run: not once the run's error threshold was passed, a new plan only
    on its canary, or after its canary verified it; in a fleet incident, no new plan, and a verified one only on the
    incident's canary or after it verified there."""

    node_name = "rollout"

    def prep(self, state: IncidentState) -> Rollout | FleetHeld:
        if self.tools.memory is None:
            return Rollout(None, self._deadline(state))
        plan, fleet = plan_of(state), state.fleet_incident
        if fleet is None:
            return Rollout(CanaryKey.of(self.tools.blast_radius.run_id, state.failure, plan), self._deadline(state))
        if plan.source in UNPROVEN_SOURCES:
            return FleetHeld(f"{fleet.describe()}; a new plan ({plan.source.value}) is not tried host by host in a fleet incident: "
                             "the cause is most likely what the hosts share")
        return Rollout(CanaryKey.of_fleet_incident(fleet.id, fleet.signature, plan), self._deadline(state), fleet=fleet.describe())

    def exec(self, prep_res: Rollout | FleetHeld) -> Proceed | Halted | Deferred | Suspended | FleetHeld:
        memory, radius, host = self.tools.memory, self.tools.blast_radius, self.tools.target.name
        if isinstance(prep_res, FleetHeld):
            return prep_res
        if memory is None:
            return Proceed()
        halted = halted_because(memory.failed_hosts(radius.run_id), run_hosts=radius.run_hosts, max_fail_percentage=radius.max_fail_percentage)
        if halted is not None:
            return Halted(halted)
        key = prep_res.canary
        if key is None:
            return Proceed()
        began = self.tools.clock()
        while True:
            canary = Canaries(memory.database).canary(key, host=host, owner=process_owner(), at=self.tools.clock())
            waited = self.tools.clock() - began
            if canary.host == host:
                return Proceed(canary=key, waited=waited)
            if canary.outcome == "verified":
                return Proceed(proven_on=canary.host, waited=waited)
            if canary.outcome == "failed" and prep_res.fleet:
                return FleetHeld(f"{prep_res.fleet}; the plan failed verification on {canary.host}, the incident's canary: it runs on no other host")
            if canary.outcome == "failed":
                return Deferred(f"this new plan failed verification on {canary.host}, the first host to try it in this run; "
                                "it runs on no other host")
            thrown = self.tools.suspension()
            if thrown is not None:
                return Suspended(thrown)
            if self.tools.clock() + CANARY_POLL_S >= prep_res.deadline:
                return Deferred(f"this new plan is tried on {canary.host} first, and had not verified there before the incident's "
                                f"deadline ({waited:.0f} s waited)")
            self.tools.sleep(CANARY_POLL_S)

    def post(self, state: IncidentState, prep_res: Rollout | FleetHeld, exec_res: Proceed | Halted | Deferred | Suspended | FleetHeld) -> str:
        service, fleet = state.failure.service, state.fleet_incident
        if fleet is not None:
            state.attempt.fleet_incident = {"id": fleet.id, "hosts": list(fleet.hosts), "summary": fleet.summary, "common": list(fleet.common)}
        if isinstance(exec_res, Suspended):
            return self._suspended(state, exec_res.describe)
        if isinstance(exec_res, FleetHeld):
            return self._held(state, "fleet", f"{service}: nothing ran: {exec_res.why}")
        if isinstance(exec_res, Halted):
            return self._held(state, "halted", f"{service}: {exec_res.why}")
        if isinstance(exec_res, Deferred):
            return self._held(state, "deferred", f"{service}: deferred, nothing ran: {exec_res.why}")
        whose = "the fleet incident" if isinstance(prep_res, Rollout) and prep_res.fleet else "this run"
        what = "the fleet incident's plan" if whose == "the fleet incident" else "a new plan"
        if exec_res.canary is not None:
            state.canaries[state.attempt.number] = exec_res.canary
            state.log(self.name, f"{what}: tried here first, the canary of {whose} ({exec_res.waited:.0f} s waited)")
        elif exec_res.proven_on:
            state.log(self.name, f"{what}, verified on {exec_res.proven_on} first in {whose} ({exec_res.waited:.0f} s waited)")
        return "proceed"

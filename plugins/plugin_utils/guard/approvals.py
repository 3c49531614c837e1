"""Approvals a human can trust.

A plan that needs approval is stored with a hash bound to its exact steps, its host, its service,
its failure fingerprint and the version of the policy that judged it, and with an expiry.
Approving runs exactly that plan, re-validated against the policy at approval time, or nothing:
a changed plan, host or policy, an expired or already decided plan is refused with the reason.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from dataclasses import dataclass
from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._text import moment
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import Policy, PolicyContext, evaluate_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import (
    Decision,
    Failure,
    PendingPlan,
    Plan,
    Verdict,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory

DEFAULT_TTL_S = 24 * 3600


class ApprovalRefused(SentinelError):
    """The plan cannot be run as approved; nothing ran."""


@dataclass(frozen=True)
class StoredPlan:
    plan_id: str
    incident_id: str
    attempt: int
    host: str
    service: str
    fingerprint: str
    plan: Plan
    failure: Failure
    policy_version: str
    policy_file: str
    plan_hash: str
    status: str
    created_at: float
    expires_at: float
    decided_by: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoredPlan:
        plan = Plan.from_dict(json.loads(row["plan_json"]))
        return cls(
            plan_id=row["plan_id"], incident_id=row["incident_id"], attempt=int(row.get("attempt") or 1), host=row["host"],
            service=row["service"], fingerprint=row["fingerprint"], plan=plan,
            failure=Failure.from_check(row["host"], json.loads(row["failure_json"])) if row["failure_json"] != "{}" else _unknown(row),
            policy_version=row["policy_version"], policy_file=row["policy_file"], plan_hash=row["plan_hash"], status=row["status"],
            created_at=row["created_at"], expires_at=row["expires_at"], decided_by=row["decided_by"],
        )

    def summary(self) -> dict[str, Any]:
        """What a human (or an AWX approval node) sees: the argv of each step, escaped, never a raw string."""
        return {
            "plan_id": self.plan_id,
            "host": self.host,
            "service": self.service,
            "status": self.status,
            "steps": [{"argv": list(step.argv), "command": shlex.join(step.argv)} for step in self.plan.steps],
            # what a restore of the last known good configuration puts back, as a diff from the file as it is now
            "puts_back": self.failure.puts_back(self.plan),
            "rationale": self.plan.rationale,
            "source": f"{self.plan.source.value} {self.plan.reference}",
            "failure": self.failure.summary,
            "policy_version": self.policy_version,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            # the same times for the person who decides (the epochs above are for machines)
            "waiting_since": moment(self.created_at),
            "expires": moment(self.expires_at),
            "decided_by": self.decided_by,
        }


def _unknown(row: Mapping[str, Any]) -> Failure:
    return Failure(host=row["host"], service=row["service"], failure_class="unknown", summary="", evidence={}, spec={"name": row["service"]})


def binding_hash(plan: Plan, *, host: str, service: str, fingerprint: str, policy_version: str) -> str:
    """The hash an approval is bound to: every argument of every step, where, for what, under which policy."""
    material = json.dumps(
        {"steps": [list(step.argv) for step in plan.steps], "templates": list(plan.templates), "host": host, "service": service,
         "fingerprint": fingerprint, "policy": policy_version},
        sort_keys=True, separators=(",", ":"),
    )
    return hashlib.sha256(material.encode()).hexdigest()


def pending_plan(plan: Plan, failure: Failure, policy: Policy, *, ttl_s: float, now: float | None = None) -> PendingPlan:
    created = time.time() if now is None else now
    return PendingPlan(
        plan_hash=binding_hash(plan, host=failure.host, service=failure.service, fingerprint=failure.fingerprint, policy_version=policy.version),
        policy_file=policy.source,
        created_at=created,
        expires_at=created + ttl_s,
    )


def load(memory: Memory, plan_id: str) -> StoredPlan:
    row = memory.plan(plan_id)
    if row is None:
        raise ApprovalRefused("no such plan", field="plan_id", value=plan_id, hint="list the pending plans with sentinel.heal.approve")
    return StoredPlan.from_row(row)


def authorize(stored: StoredPlan, *, host: str, policy: Policy, now: float | None = None) -> list[Verdict]:
    """Every check an approval must pass before anything runs; returns the verdicts of today's policy."""
    now = time.time() if now is None else now
    where = f"plan {stored.plan_id}"
    if stored.status != "pending":
        by = f" by {stored.decided_by}" if stored.decided_by else ""
        raise ApprovalRefused(f"{where} was already {stored.status}{by}", field="status", value=stored.status,
                              hint="run heal again for a new plan")
    if now > stored.expires_at:
        raise ApprovalRefused(f"{where} expired at {moment(stored.expires_at, now)}",
                              field="expires_at", value=stored.expires_at, hint="run heal again for a new plan")
    if host != stored.host:
        raise ApprovalRefused(f"{where} was made for host {stored.host}, not {host}", field="host", value=host)
    recomputed = binding_hash(stored.plan, host=stored.host, service=stored.service, fingerprint=stored.fingerprint,
                              policy_version=stored.policy_version)
    if recomputed != stored.plan_hash:
        raise ApprovalRefused(f"{where} changed after it was stored (its hash no longer matches)", field="plan_hash",
                              value=stored.plan_hash, hint="do not edit stored plans; run heal again")
    if policy.version != stored.policy_version:
        raise ApprovalRefused(f"{where} was judged by policy {stored.policy_version}, the policy is now {policy.version}",
                              field="policy_version", value=policy.version, hint="run heal again so the current policy judges a new plan")
    context = PolicyContext.from_failure(stored.failure)
    verdicts, _decision = evaluate_plan([step.argv for step in stored.plan.steps], context, policy)
    blocked = [v for v in verdicts if v.decision is Decision.BLOCK]
    if blocked:
        raise ApprovalRefused(f"{where}: the policy blocks {blocked[0].command!r} ({blocked[0].reason})", field="steps",
                              value=blocked[0].command)
    return verdicts

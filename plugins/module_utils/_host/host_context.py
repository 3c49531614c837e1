"""The incident's context as the host is now, for the judge: what PolicyContext.from_failure reads (the service, its
spec, the evidence, the unit running it), gathered on the host itself, never taken from the request."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PolicyContext, running_unit
from ansible_collections.sentinel.heal.plugins.module_utils._host.host_configuration import other_services
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import evidence_of


class Incident(object):
    """What PolicyContext.from_failure reads, gathered here."""

    def __init__(self, name, spec, evidence, manager):
        self.service = name
        self.init_service = spec.get("service") or name
        self.spec = spec
        self.evidence = evidence
        self.unit = running_unit(evidence, manager)


def context_now(spec, services, manager, checked=None):
    """The incident's context as the host is now: the evidence of its check (``checked``: check_one's result, or one
    failure of check_services') when it has one, else read."""
    evidence = (checked or {}).get("evidence") or evidence_of(spec, manager, others=other_services(spec, services))
    # the repairs the policy allows are done here, without following a link (step_running.repair): none can be redirected
    return PolicyContext.from_failure(Incident(spec["name"], spec, evidence, manager), services.get("probe_hosts") or (),
                                      repairs_without_following_links=True)

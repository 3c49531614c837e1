"""A relapse: a service that fails again within the relapse window after a heal (``relapse_window``, 15 min by default).

The new incident is linked to the heal it relapsed from, and its reason says so first ("nginx healed at ... by ...;
failed again at ..., 2 min later: <the service's words>"); the memory marks that heal relapsed, so its plan is no longer
replayed as a verified fix (store/memory.py). A relapse is healed once more, as any incident. Two things escalate it
at once instead, with the evidence of both times, since something keeps undoing the repair and healing it again would
only hide that: the same cause back after the repair (its file changed again, its port taken again, its configuration
test failing again), and a second relapse in a row (a heal of a relapse that relapsed in turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._text import clock_time, span
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.cause import CONFIG_TEST_FACT, FILE_FACT, PORT_FACT, cause_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Heal, Memory

DEFAULT_RELAPSE_WINDOW_S = 900.0
# the facts of trouble that say a cause came back: a state on the host, found again; a package's change is an event in
# the dpkg log that both failures may read, and says nothing of the repair holding
_RETURNING_FACTS = (CONFIG_TEST_FACT, FILE_FACT, PORT_FACT)


@dataclass(frozen=True)
class Relapse:
    """The heal a failure relapsed from, when the failure was seen, and the heal before it when ``heal`` had healed a
    relapse in turn (a second relapse in a row)."""

    heal: Heal
    failed_at: float
    # the heal that ``heal`` healed the relapse of (its relapsed_from), when there is one
    earlier: Heal | None = None

    def describe(self, failure: Failure) -> str:
        """What happened, in the order it happened, the service's words last."""
        return f"{failure.service} {_story(self.heal, self.failed_at, failure.summary)}"

    def returned(self, failure: Failure) -> dict[str, tuple[str, str]]:
        """The facts of trouble of the heal's failure that are back now, each with what it said then and says now: a
        file changed again after its repair (another mtime), its port held again, its configuration test failing again."""
        then = cause_of(self.heal.evidence, self.heal.results)
        now = cause_of(failure.evidence, {})
        return {name: (then[name], now[name]) for name in then
                if name in now and name.startswith(_RETURNING_FACTS) and (not name.startswith(FILE_FACT) or then[name] != now[name])}

    def escalation(self, failure: Failure) -> str | None:
        """Why the relapse goes to a person without another attempt, or None when it is healed once more."""
        returned = self.returned(failure)
        if returned:
            both = "; ".join(f"{name}: {then} before episode {self.heal.episode_id}'s repair, {now} again now"
                             for name, (then, now) in returned.items())
            changes = failure.evidence.get("changes")
            since = [f"{change.get('package')} {change.get('action')} to {change.get('after')}"
                     for change in (changes.get("packages") or () if isinstance(changes, Mapping) else ())
                     if float(change.get("at") or 0) >= self.heal.finished_at]
            packages = f"; the dpkg log since the repair: {', '.join(since)}" if since else "; no package changed since the repair"
            return (f"the same cause is back after the repair ({both}{packages}{self._units_since(changes)}): something on the host "
                    f"keeps undoing it, so it is not healed again; find what changes it (a timer, a configuration-management run, a "
                    f"person) and stop it")
        if self.earlier is not None:
            return (f"its second relapse in a row: before, {failure.service} "
                    f"{_story(self.earlier, self.earlier.relapsed_at or self.heal.finished_at, self.heal.failed_with)}; neither fix "
                    f"held, so neither is replayed: find what keeps breaking it")
        return None

    def _units_since(self, changes: Any) -> str:
        """The services systemd started between the repair and now, as the host's journal says (a systemd host's check
        reads them: none on another)."""
        if not isinstance(changes, Mapping) or not isinstance(changes.get("units"), list):
            return ""
        ran = []
        for started in changes["units"]:
            after = [float(at) for at in (started.get("at") or ()) if float(at) >= self.heal.finished_at] if isinstance(started, Mapping) else []
            if after:
                ran.append(f"{started.get('unit')} at {', '.join(clock_time(at) for at in after)}")
        return f"; systemd started since the repair: {'; '.join(ran)}" if ran else "; systemd started no other service since the repair"


def relapse_of(memory: Memory | None, failure: Failure, *, now: float, window: float) -> Relapse | None:
    """The heal of this service on this host that the failure seen ``now`` relapsed from, within ``window`` seconds."""
    if memory is None or window <= 0:
        return None
    return _relapse(memory, memory.last_heal(failure.host, failure.service, since=now - window), now)


def relapse_of_incident(memory: Memory | None, incident_id: str) -> Relapse | None:
    """The relapse an incident's first run found, for a later run of the same incident (a plan a person approved): its
    episodes are linked to the same heal."""
    if memory is None or (found := memory.incident_relapse(incident_id)) is None:
        return None
    heal_id, failed_at = found
    return _relapse(memory, memory.heal(heal_id), failed_at)


def _relapse(memory: Memory, heal: Heal | None, failed_at: float) -> Relapse | None:
    if heal is None:
        return None
    return Relapse(heal, failed_at, memory.heal(heal.relapsed_from) if heal.relapsed_from is not None else None)


def _story(heal: Heal, failed_at: float, words: str) -> str:
    by = "; ".join(heal.commands) or "no command"
    return (f"healed at {clock_time(heal.finished_at)} by {by} (episode {heal.episode_id}); failed again at {clock_time(failed_at)}, "
            f"{span(failed_at - heal.finished_at)} later: {words}")

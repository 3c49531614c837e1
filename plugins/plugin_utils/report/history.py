"""The history report: what sentinel.heal did over a past window, from the memory's episodes - the incidents and heal
rate per service per day, the time to heal, the failures seen most, the plans that failed most, and in full the
incidents that still need a person."""

from __future__ import annotations

import shlex
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._text import span
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.page import NEEDS_A_HUMAN, attention_rank, esc, page, status_badge, utc
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.run import incident_html
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.svg import columns, hbars

DAY_S = 86400
TOP = 10
# incidents shown in full (the rest are rows of the table): a window of thousands stays a page people open
MAX_DETAILED = 30
# what an incident became, from the outcome of its last episode (a failed last attempt is what the loop escalated, and
# so is a service the flapping limit refused)
INCIDENT_STATUS = {"failed": "escalated", "blocked": "escalated", "flapping": "escalated"}
TIME_TO_HEAL_BUCKETS = ((10, "< 10 s"), (30, "10-30 s"), (60, "30-60 s"), (300, "1-5 min"), (900, "5-15 min"), (float("inf"), "> 15 min"))


@dataclass(frozen=True)
class Incident:
    """One incident of the window: its episodes, oldest first."""

    episodes: tuple[Mapping[str, Any], ...]

    @property
    def last(self) -> Mapping[str, Any]:
        return self.episodes[-1]

    @property
    def status(self) -> str:
        outcome = str(self.last["outcome"])
        return INCIDENT_STATUS.get(outcome, outcome)

    @property
    def started_at(self) -> float:
        return float(self.episodes[0]["started_at"])

    @property
    def took(self) -> float:
        return float(self.last["finished_at"]) - self.started_at

    @property
    def relapsed_after(self) -> float | None:
        """How long its heal held before the service failed again within the relapse window (None: it held)."""
        relapsed_at = self.last.get("relapsed_at")
        return float(relapsed_at) - float(self.last["finished_at"]) if self.status == "healed" and relapsed_at is not None else None

    @property
    def limit(self) -> Mapping[str, Any] | None:
        """The limit that held the incident back at its last episode, as the episode keeps it (incident.Hold), or None."""
        held = (self.last.get("results") or {}).get("limit")
        return held if isinstance(held, Mapping) else None

    def reason(self) -> str:
        last = self.last
        plan = last.get("plan") or {}
        verification = (last.get("results") or {}).get("verification") or {}
        held = self.limit or {}
        return str(held.get("said") or plan.get("escalation") or verification.get("summary") or last.get("diagnosis") or "")

    def view(self) -> dict[str, Any]:
        """The incident in the form the run report's incident section reads."""
        last = self.last
        return {"host": last["host"], "service": last["service"], "status": self.status, "reason": self.reason(),
                "failure_class": last.get("failure_class"), "summary": last.get("error_text"), "attempt_log": list(self.episodes),
                "plan_id": last.get("plan_id"), "limit": self.limit}


def incidents_of(episodes: Sequence[Mapping[str, Any]]) -> list[Incident]:
    grouped: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for episode in episodes:
        grouped[str(episode["incident_id"])].append(episode)
    return [Incident(tuple(sorted(group, key=lambda e: (e["started_at"], e["attempt"])))) for group in grouped.values()]


def _day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


def _per_service_per_day(incidents: Sequence[Incident], since: float, until: float) -> str:
    days = [_day(at) for at in range(int(since) - int(since) % DAY_S, int(until), DAY_S)] or [_day(since)]
    charts = []
    for service in sorted({str(incident.last["service"]) for incident in incidents}):
        mine = [incident for incident in incidents if incident.last["service"] == service]
        opened = Counter(_day(incident.started_at) for incident in mine)
        # a heal that relapsed is no heal that held: marked, and left out of the rate
        relapsed = Counter(_day(incident.started_at) for incident in mine if incident.relapsed_after is not None)
        healed = Counter(_day(incident.started_at) for incident in mine if incident.status == "healed" and incident.relapsed_after is None)
        rates = [healed[day] / opened[day] if opened[day] else None for day in days]
        total = len(mine)
        rate = sum(healed.values()) / total if total else 0
        relapses = f", {sum(relapsed.values())} healed and relapsed (red)" if relapsed else ""
        charts.append(columns(days, [opened[day] for day in days], rates=rates, marks=[relapsed[day] for day in days], marked="relapsed",
                              title=f"{service}: {total} incident(s), {rate:.0%} healed and held{relapses} (line: that rate per day)"))
    return "<h2>incidents and heal rate per service per day</h2>" + ("".join(charts) or "<p class='muted'>no incident in this window</p>")


def _time_to_heal(incidents: Sequence[Incident]) -> str:
    took = [incident.took for incident in incidents if incident.status == "healed"]
    if not took:
        return "<h2>time to heal</h2><p class='muted'>nothing was healed in this window</p>"
    buckets = Counter(next(label for limit, label in TIME_TO_HEAL_BUCKETS if value < limit) for value in took)
    median = statistics.median(took)
    p90 = sorted(took)[max(0, round(0.9 * len(took)) - 1)]
    return (f"<h2>time to heal</h2><p>{len(took)} healed: median {median:.1f} s, 90th percentile {p90:.1f} s</p>"
            + hbars([(label, buckets[label]) for _limit, label in TIME_TO_HEAL_BUCKETS], title="incidents healed within"))


def _top_fingerprints(incidents: Sequence[Incident]) -> str:
    counts: Counter[str] = Counter(str(incident.last["fingerprint"]) for incident in incidents)
    described = {str(incident.last["fingerprint"]): f"{incident.last['service']} {incident.last['failure_class']}: {incident.last['error_text']}"
                 for incident in incidents}
    rows = [(f"{described[fingerprint]} [{fingerprint[:8]}]", count) for fingerprint, count in counts.most_common(TOP)]
    return "<h2>failures seen most</h2>" + hbars(rows, title="incidents per failure fingerprint")


def _failed_plans(episodes: Sequence[Mapping[str, Any]]) -> str:
    counts: Counter[str] = Counter()
    for episode in episodes:
        plan = episode.get("plan") or {}
        if episode["outcome"] == "failed" and plan.get("steps"):
            counts[f"{episode['service']}: " + "; ".join(shlex.join(step["argv"]) for step in plan["steps"])] += 1
    return "<h2>plans that failed most</h2>" + hbars(counts.most_common(TOP), title="attempts whose plan ran and did not heal")


def _relapse_note(incident: Incident) -> str:
    after = incident.relapsed_after
    return "" if after is None else f" <span class='relapsed'>relapsed after {esc(span(after))}</span>"


def _table(incidents: Sequence[Incident]) -> str:
    rows = "".join(
        f"<tr class='{esc(incident.status)}'><td>{esc(utc(incident.started_at))}</td><td>{esc(incident.last['host'])}</td>"
        f"<td>{esc(incident.last['service'])}</td><td>{status_badge(incident.status)}{_relapse_note(incident)}</td><td>{len(incident.episodes)}</td>"
        f"<td>{incident.took:.1f} s</td><td>{esc(incident.last['error_text'])[:200]}</td></tr>"
        for incident in incidents
    )
    return (f"<h2>every incident</h2><table><tr><th>started (UTC)</th><th>host</th><th>service</th><th>outcome</th><th>attempts</th>"
            f"<th>took</th><th>failure</th></tr>{rows}</table>")


def history_html(episodes: Sequence[Mapping[str, Any]], *, since: float, until: float, title: str) -> str:
    """The report of the window [since, until) from its episodes (store.memory.Memory.episodes_between)."""
    incidents = sorted(incidents_of(episodes), key=lambda incident: (attention_rank(incident.status), -incident.started_at))
    statuses = Counter(incident.status for incident in incidents)
    summary = ", ".join(f"{count} {status.replace('_', ' ')}" for status, count in sorted(statuses.items(), key=lambda item: attention_rank(item[0])))
    human = [incident for incident in incidents if incident.status in NEEDS_A_HUMAN]
    detailed = "".join(incident_html(incident.view()) for incident in human[:MAX_DETAILED])
    more = f"<p class='muted'>{len(human) - MAX_DETAILED} more in the table below</p>" if len(human) > MAX_DETAILED else ""
    body = (f"<p>{esc(utc(since))} to {esc(utc(until))}: {len(incidents)} incident(s), {len(episodes)} attempt(s): "
            f"{esc(summary) or 'nothing happened'}</p>"
            + _per_service_per_day(incidents, since, until) + _time_to_heal(incidents) + _top_fingerprints(incidents) + _failed_plans(episodes)
            + (f"<h2>what needs a person</h2>{detailed}{more}" if human else "") + _table(incidents))
    return page(title, body)

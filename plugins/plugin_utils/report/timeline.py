"""The timeline of a whole run for humans, as text and as HTML: per host and service, the path through the heal loop and
every step of it."""

from __future__ import annotations

import html
import shlex
import time
from typing import Any, Mapping


def timeline_text(hosts: Mapping[str, Mapping[str, Any]]) -> str:
    """The incidents of a run for a terminal: per host and service, the path and every step of the loop."""
    lines = []
    for host, result in sorted(hosts.items()):
        for incident in result.get("incidents") or []:
            lines.append(f"{host} {incident['service']}: {incident['status']} after {incident['attempts']} attempt(s) "
                         f"[{' > '.join(incident['path'])}]")
            for event in result.get("timeline") or []:
                if event["service"] == incident["service"]:
                    clock = time.strftime("%H:%M:%S", time.localtime(event["at"]))
                    lines.append(f"  {clock} {event['node']:<14} {event['message']}")
    return "\n".join(lines)


def _reads_html(incident: Mapping[str, Any]) -> str:
    """The think loop's rounds of an incident: what was asked and why, the guard's verdict, and what each read printed."""
    rounds = []
    for round_ in incident.get("reads") or []:
        reads = "".join(
            f"<li><code>{html.escape(read['command'])}</code> {html.escape(read['why'])} - {html.escape(read['decision'])} "
            f"({html.escape(read['rule'])}): {html.escape(read['outcome'])}"
            + (f", rc={read['rc']}<pre>{html.escape(read['output'])}</pre>" if read["outcome"] == "ran" else f" - {html.escape(read['reason'])}")
            + "</li>"
            for read in round_["reads"]
        )
        rounds.append(f"<p>attempt {round_['attempt']}, round {round_['round']}: {html.escape(round_['source'])} "
                      f"{html.escape(round_['reference'])} looked first</p><ul>{reads}</ul>")
    return "".join(rounds)


def timeline_html(hosts: Mapping[str, Mapping[str, Any]], *, title: str) -> str:
    """The same as a self-contained HTML page (every value escaped: it carries host output)."""
    rows = []
    for host, result in sorted(hosts.items()):
        for incident in result.get("incidents") or []:
            events = "".join(
                f"<tr><td>{html.escape(time.strftime('%H:%M:%S', time.localtime(e['at'])))}</td><td>{html.escape(e['node'])}</td>"
                f"<td>{html.escape(e['message'])}</td></tr>"
                for e in result.get("timeline") or [] if e["service"] == incident["service"]
            )
            verdicts = "".join(
                f"<li><code>{html.escape(shlex.join(v['argv']))}</code> {html.escape(v['decision'])} - {html.escape(v['reason'])}</li>"
                for v in incident.get("verdicts") or []
            )
            rows.append(
                f"<section class='{html.escape(incident['status'])}'><h2>{html.escape(host)} {html.escape(incident['service'])}: "
                f"{html.escape(incident['status'])}</h2><p>{html.escape(incident['summary'])}</p>"
                f"<p>path: {html.escape(' > '.join(incident['path']))}</p><ul>{verdicts}</ul>{_reads_html(incident)}"
                f"<table><tr><th>time</th><th>node</th><th>what happened</th></tr>{events}</table></section>"
            )
    body = "".join(rows) or "<p>every declared service was healthy</p>"
    style = ("body{font-family:sans-serif;margin:2em}section{border-left:6px solid #999;padding:0 1em;margin:1em 0}"
             ".healed{border-color:#2a2}.escalated,.unreachable{border-color:#c22}.awaiting_approval,.planned{border-color:#d90}"
             "td{padding:2px 8px;vertical-align:top}code{background:#eee}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{style}</style></head>"
            f"<body><h1>{html.escape(title)}</h1>{body}</body></html>\n")

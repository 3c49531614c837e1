# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The approval page's HTML: a waiting plan with its Approve and Deny form, and the page that says what became of a
request. Every text from the memory - what a host or a model wrote, the plan's own words, a path, an argv - is
escaped (html.escape, quotes too) and shown as data; the page has no script, and its headers forbid any (HEADERS)."""

from __future__ import annotations

import time
from html import escape
from typing import Any, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._text import relative

# no script, no frame, no form posted elsewhere, nothing cached, no link token handed on in a Referer
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
}
_STYLE = """body{font:15px/1.45 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2125}
main{max-width:56rem;margin:2rem auto;padding:1.5rem 2rem;background:#fff;border-radius:8px;box-shadow:0 1px 3px #0002}
h1{font-size:1.4rem;margin-top:0}h2{font-size:1.1rem;margin-top:1.6rem}dt{font-weight:600}dd{margin:0 0 .5rem 0}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:.35rem .5rem;text-align:left;vertical-align:top}
code,pre{font:13px/1.4 ui-monospace,monospace}pre{background:#f1f3f5;padding:.6rem;overflow-x:auto;white-space:pre-wrap}
.approve{background:#2f9e44;color:#fff}.deny{background:#c92a2a;color:#fff}button{font-size:1rem;padding:.5rem 1.2rem;border:0;
border-radius:5px;margin-right:.6rem;cursor:pointer}input{font-size:1rem;padding:.4rem;width:22rem;max-width:100%}
.note{color:#555;font-size:.9rem}.allow{color:#2f9e44}.approve-verdict{color:#d9480f;font-weight:600}.block{color:#c92a2a}"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _page(title: str, body: str) -> str:
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="robots" content="noindex, nofollow"><meta name="referrer" content="no-referrer"><title>{_e(title)}</title>'
            f"<style>{_STYLE}</style></head><body><main>\n{body}\n</main></body></html>\n")


def when(at: float, now: float) -> str:
    """A time in UTC and how far it is from now: what a person in any zone reads alike."""
    return f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(at))} ({relative(at - now)})"


def plan_page(summary: Mapping[str, Any], verdicts: Sequence[Mapping[str, Any]], *, link_token: str, page_token: str, now: float) -> str:
    """The waiting plan (``summary``: guard/approvals.py StoredPlan.summary; ``verdicts``: those it was stored with) and
    the form that decides it: the link's token, the page's anti-forgery token, the approver's personal token."""
    rows = []
    for number, step in enumerate(summary["steps"], start=1):
        verdict = verdicts[number - 1] if number <= len(verdicts) else {}
        decision = str(verdict.get("decision") or "unknown")
        rows.append(f'<tr><td>{number}</td><td><code>{_e(step["command"])}</code></td>'
                    f'<td class="{_e(decision if decision != "approve" else "approve-verdict")}">{_e(decision)}</td>'
                    f'<td><code>{_e(verdict.get("rule", ""))}</code></td><td>{_e(verdict.get("reason", ""))}</td></tr>')
    restores = "".join(f'<h2>Puts back <code>{_e(restore.get("path", ""))}</code></h2><pre>{_e(restore.get("diff") or "(the same content)")}</pre>'
                       for restore in summary.get("puts_back") or [])
    facts = [("Host", summary["host"]), ("Service", summary["service"]), ("Failure", summary.get("failure") or ""),
             ("Plan from", summary.get("source") or ""), ("Why this plan", summary.get("rationale") or ""),
             ("Waiting since", when(float(summary["created_at"]), now)), ("Expires", when(float(summary["expires_at"]), now))]
    body = f"""<h1>Plan <code>{_e(summary["plan_id"])}</code></h1>
<p>{_e(summary["service"])} on {_e(summary["host"])} waits for a person to approve or deny this plan.</p>
<dl>{"".join(f"<dt>{_e(label)}</dt><dd>{_e(text)}</dd>" for label, text in facts if text)}</dl>
<h2>Steps, each as it runs (an argv, no shell), with the policy's verdict</h2>
<table><tr><th>#</th><th>Command</th><th>Verdict</th><th>Rule</th><th>Why</th></tr>
{"".join(rows)}</table>
{restores}
<h2>Decide</h2>
<form method="post" autocomplete="off">
<input type="hidden" name="t" value="{_e(link_token)}"><input type="hidden" name="page" value="{_e(page_token)}">
<p><label for="token">Your personal approval token</label><br><input id="token" name="token" type="password" required></p>
<p><button class="approve" name="decision" value="approved">Approve</button><button class="deny" name="decision" value="denied">Deny</button></p>
</form>
<p class="note">Opening this page decides nothing. Approve runs exactly these steps on {_e(summary["host"])}, once, through
sentinel.heal.approve (which checks the plan again first); Deny keeps them from ever running. Either is recorded with your name.</p>"""
    return _page(f"Plan {summary['plan_id']}: {summary['service']} on {summary['host']}", body)


def status_page(title: str, said: str, *, status: int) -> str:
    """What became of a request: decided, or refused and why."""
    return _page(title, f'<h1>{_e(title)}</h1>\n<p>{_e(said)}</p>\n<p class="note">HTTP {int(status)}</p>')

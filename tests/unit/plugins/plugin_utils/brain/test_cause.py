"""The cause of a failure as facts of trouble, and which of them the present evidence no longer shows."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.cause import cause_of, gone

TYPO = {"argv": ["nginx", "-t"], "rc": 1, "output": "nginx: [emerg] unknown directive"}
SQUATTER = {"port": 80, "pid": 4242, "process": "python3", "own": False}
OWN = {"port": 80, "pid": 10, "process": "nginx", "own": True}
EDITED = {"files": [{"path": "/etc/nginx/nginx.conf", "change": "modified", "changed_at": 950.0}],
          "packages": [{"package": "nginx", "action": "upgrade", "after": "1.22.1-10"}]}


def test_the_facts_of_trouble_are_the_failing_configuration_test_a_strangers_port_and_what_changed() -> None:
    evidence = {"commands": [TYPO], "port_owners": [SQUATTER, OWN], "changes": EDITED}
    assert cause_of(evidence, {}) == {
        "configuration test nginx -t": "fails", "port 80": "held by python3",
        "file /etc/nginx/nginx.conf": "modified (mtime 950.0)", "package nginx": "upgrade to 1.22.1-10"}
    # an evidence command's answer counts as the check's own does; a passing test and the service's own port are no trouble
    assert cause_of({"port_owners": [OWN]}, {"nginx -t": {"rc": 0}}) == {}
    assert cause_of({}, {"nginx -t": {"rc": 1}, "ss -ltnp": {"rc": 0}}) == {"configuration test nginx -t": "fails"}


def test_a_fact_is_gone_only_once_the_present_evidence_observed_it_otherwise() -> None:
    cause = cause_of({"commands": [TYPO], "port_owners": [SQUATTER], "changes": EDITED}, {})
    # nothing observed now (no test read, no port read, no known good): the cause holds
    assert gone(cause, {}, {}) == {}
    assert gone(cause, {"commands": [TYPO], "port_owners": [SQUATTER], "changes": EDITED}, {}) == {}
    assert gone(cause, {}, {"nginx -t": {"rc": 0}}) == {"configuration test nginx -t": "passes"}
    assert gone(cause, {"port_owners": [OWN]}, {}) == {"port 80": "free of other programs"}
    assert gone(cause, {"changes": {"files": [], "packages": []}}, {}) == {
        "file /etc/nginx/nginx.conf": "as last known good", "package nginx": "as last known good"}
    # edited again since: what it says now differs from what the plan failed on
    again = {"files": [{"path": "/etc/nginx/nginx.conf", "change": "modified", "changed_at": 990.0}], "packages": EDITED["packages"]}
    assert gone(cause, {"changes": again}, {}) == {"file /etc/nginx/nginx.conf": "modified (mtime 990.0)"}
    # a cause of no facts never goes: a plan that failed on nothing known stays excluded for failed_ttl
    assert gone({}, {"changes": {"files": []}, "port_owners": []}, {"nginx -t": {"rc": 0}}) == {}

"""The cause of a failure as present facts: what its configuration test says, who else holds its port, what changed in its
configuration since it last worked.

A plan that failed, and a fix that was verified, are remembered for a fingerprint; the fingerprint stays the same when a
person fixes the cause between two runs (the check's error text quotes the same old log lines). These facts, read from
the episode's evidence and from the evidence as it is now, tell whether the cause a plan failed on still holds (it is
excluded only while it does) and whether a remembered fix was verified on the failure there is now (it is replayed only
then). Only facts that point at trouble are kept: a fact that no longer holds is gone once the present evidence
observed it (the test ran and passed, the port's holders were read, the configuration was compared with its last known
good); a fact the present evidence did not observe still holds.
"""

from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import CONFIG_TEST

CONFIG_TEST_FACT = "configuration test "
PORT_FACT = "port "
FILE_FACT = "file "
PACKAGE_FACT = "package "


def cause_of(evidence: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The facts of trouble in a failure's ``evidence`` (service_check's) and the evidence commands' ``results``
    (command -> a StepResult's dict), each a fact's name and what it says."""
    facts = {f"{CONFIG_TEST_FACT}{command}": "fails" for command, rc in _config_tests(evidence, results).items() if rc != 0}
    for owner in evidence.get("port_owners") or ():
        if isinstance(owner, Mapping) and not owner.get("own"):
            facts[f"{PORT_FACT}{owner.get('port')}"] = f"held by {owner.get('process')}"
    changes = evidence.get("changes")
    if isinstance(changes, Mapping):
        for change in changes.get("files") or ():
            facts[f"{FILE_FACT}{change.get('path')}"] = f"{change.get('change')} (mtime {change.get('changed_at')})"
        for change in changes.get("packages") or ():
            facts[f"{PACKAGE_FACT}{change.get('package')}"] = f"{change.get('action')} to {change.get('after')}"
    return facts


def gone(cause: Mapping[str, str], evidence: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The facts of ``cause`` that the present ``evidence`` and ``results`` observed no longer to hold, each with what
    it says now; empty while the cause holds (and always for a cause of no facts: nothing tells it went)."""
    now = cause_of(evidence, results)
    went: dict[str, str] = {}
    for name, said in cause.items():
        present = now.get(name) or _observed_fine(name, evidence, results)
        if present is not None and present != said:
            went[name] = present
    return went


def _observed_fine(name: str, evidence: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]) -> str | None:
    """What a fact of trouble that is not among the present ones says now, when the present evidence observed it."""
    if name.startswith(CONFIG_TEST_FACT):
        return "passes" if _config_tests(evidence, results).get(name.removeprefix(CONFIG_TEST_FACT)) == 0 else None
    if name.startswith(PORT_FACT):
        return "free of other programs" if "port_owners" in evidence else None
    return "as last known good" if isinstance(evidence.get("changes"), Mapping) else None


def describe(facts: Mapping[str, str]) -> str:
    return "; ".join(f"{name} {said}" for name, said in facts.items()) or "no fact of trouble"


def _config_tests(evidence: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]) -> dict[str, int | None]:
    """The configuration tests read for the failure and their exit codes: service_check's own (read on the host) and the
    evidence commands'."""
    tests: dict[str, int | None] = {}
    for answer in evidence.get("commands") or ():
        if isinstance(answer, Mapping):
            command = " ".join(map(str, answer.get("argv") or ()))
            if CONFIG_TEST.search(command):
                tests[command] = answer.get("rc")
    tests.update((command, result.get("rc")) for command, result in results.items() if CONFIG_TEST.search(command))
    return tests

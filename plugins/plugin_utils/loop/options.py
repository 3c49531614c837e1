"""The options of the tasks that run the heal loop (heal; plan and diagnose, which stop before anything runs; execute,
which runs the plans a person approved), their ranges, and the LLM settings they name. Each option is written once: a
task's spec is made of the groups below."""

from __future__ import annotations

import os
from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._entries import list_option_errors
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import SERVICE_OPTIONS
from ansible_collections.sentinel.heal.plugins.module_utils._host.settle import DEFAULT_SETTLE_S, MAX_SETTLE_S
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.answer_schema import READ_FORMS, SCHEMA_FORMS
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import EMBEDDINGS_OPTION
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import MAX_ROUNDS
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import LLMSettings
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import TASK_STEP_PRIVILEGES
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.approvals import DEFAULT_TTL_S
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.relapse import DEFAULT_RELAPSE_WINDOW_S
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import LIMIT_OPTION_RANGES, MODES
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import NOTIFY_OPTION
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import LINK_OPTIONS
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_OPTIONS

# Where the memory is: every task that opens it (the memory's own modules too, plugin_utils/tasks/memory.py).
STATE_DIR_OPTION: dict[str, Any] = dict(type="path", default="~/.local/state/sentinel-heal")
MEMORY_PLACE_SPEC: dict[str, Any] = dict(state_dir=STATE_DIR_OPTION, **MEMORY_OPTIONS)

# What the guard judges with, what is masked, and how the steps (and, with the executor, the reads) run as root.
GUARD_SPEC: dict[str, Any] = dict(
    policy=dict(type="path"),
    redact_values=dict(type="list", elements="str", default=[], no_log=True),
    # how the evidence is read as root, and the steps run (heal): the executor on the host, where there is one
    step_privilege=dict(type="str", default="become", choices=list(TASK_STEP_PRIVILEGES)),
)

# How steps run and a repair is verified, and the limits every path that runs steps honours: heal and execute.
REMEDIATION_SPEC: dict[str, Any] = dict(
    verify_retries=dict(type="int", default=3),
    verify_delay=dict(type="float", default=2.0),
    settle_seconds=dict(type="float", default=DEFAULT_SETTLE_S),
    step_timeout=dict(type="int", default=120),
    approval_key=dict(type="path", default=""),
    flap_limit=dict(type="int", default=3),
    flap_window=dict(type="int", default=3600),
    max_running=dict(type="int", default=0),
    max_hosts_per_run=dict(type="int", default=0),
    max_attempts_per_run=dict(type="int", default=0),
    max_fail_percentage=dict(type="int"),
    incident_timeout=dict(type="int", default=600),
    maintenance_windows=dict(type="list", elements="dict", default=[]),
)

# What planning needs: shared by heal, plan and diagnose.
PLANNING_SPEC: dict[str, Any] = dict(
    services=dict(type="list", elements="dict", required=True, options=SERVICE_OPTIONS),
    failures=dict(type="list", elements="dict"),
    facts=dict(type="dict", default={}),
    **MEMORY_PLACE_SPEC,
    runbooks=dict(type="list", elements="path", default=[]),
    builtin_runbooks=dict(type="bool", default=True),
    failed_ttl=dict(type="int", default=86400),
    log_lines=dict(type="int", default=20),
    **GUARD_SPEC,
    knowledge=dict(type="bool", default=True),
    embeddings=EMBEDDINGS_OPTION,
    llm=dict(
        type="dict",
        options=dict(
            model=dict(type="str", required=True),
            base_url=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="float", default=30.0),
            max_retries=dict(type="int", default=3),
            token_budget=dict(type="int", default=6000),
            json_mode=dict(type="bool", default=True),
            schema=dict(type="str", default="none", choices=list(SCHEMA_FORMS)),
            reads=dict(type="str", default="auto", choices=list(READ_FORMS)),
        ),
    ),
)

HEAL_SPEC: dict[str, Any] = dict(
    PLANNING_SPEC,
    **REMEDIATION_SPEC,
    max_attempts=dict(type="int", default=3),
    interactive_approval=dict(type="bool", default=True),
    approval_ttl=dict(type="int", default=DEFAULT_TTL_S),
    relapse_window=dict(type="int", default=int(DEFAULT_RELAPSE_WINDOW_S)),
    think_rounds=dict(type="int", default=MAX_ROUNDS),
    mode=dict(type="str", default="autonomous", choices=list(MODES)),
    restore_known_good=dict(type="str", default="approve", choices=["approve", "auto", "off"]),
    target_services=dict(type="list", elements="str", default=[]),
    fleet_min_hosts=dict(type="int", default=5),
    fleet_min_percent=dict(type="int", default=50),
    fleet_window=dict(type="int", default=600),
    notify=NOTIFY_OPTION,
    # a waiting plan's message links to the approval page (notify/links.py)
    **LINK_OPTIONS,
)

# The plans a person approved, run on their own host (sentinel.heal.execute, approve.yml).
EXECUTE_SPEC: dict[str, Any] = dict(
    plan_ids=dict(type="list", elements="str", required=True),
    approved_by=dict(type="str", required=True),
    **MEMORY_PLACE_SPEC,
    **GUARD_SPEC,
    **REMEDIATION_SPEC,
    notify=NOTIFY_OPTION,
)

LIMITS = {"max_attempts": (1, 10), "verify_retries": (1, 30), "settle_seconds": (0, int(MAX_SETTLE_S)), "step_timeout": (1, 3600),
          "approval_ttl": (60, 30 * 86400),
          "failed_ttl": (0, 365 * 86400), "relapse_window": (0, 7 * 86400), **LIMIT_OPTION_RANGES}


def llm_settings_from(options: Mapping[str, Any] | None) -> LLMSettings | None:
    """The task's llm options (None: the offline planner); the key comes from them or from OPENAI_API_KEY on the
    controller. An llm option without a model is an error, not a quiet offline run."""
    if not options:
        return None
    return LLMSettings(
        model=options["model"], base_url=options.get("base_url") or None,
        api_key=options.get("api_key") or os.environ.get("OPENAI_API_KEY") or None,
        timeout=options["timeout"], max_retries=options["max_retries"], token_budget=options["token_budget"],
        json_mode=options["json_mode"], schema=options["schema"], reads=options.get("reads") or "auto",
    )


# the role that runs the heal: each of its variables autoheal_X is the task's option X
ROLE = "sentinel.heal.autoheal"
ROLE_VARIABLE_PREFIX = "autoheal_"


def list_option_errors_of_task(argument_spec: Mapping[str, Any], args: Mapping[str, Any], role: str | None) -> list[str]:
    """What is wrong in the task's list options, each error where a person wrote it: the option, or in the role the
    variable that gave it (``autoheal_services[3] (redis): ports: ...``)."""
    in_role = role in (ROLE, ROLE.rsplit(".", 1)[-1])
    return list_option_errors(argument_spec, args, label=(lambda option: ROLE_VARIABLE_PREFIX + option) if in_role else None)

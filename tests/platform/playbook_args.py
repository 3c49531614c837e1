"""What each task of a playbook would hand its module, and what those modules accept, as JSON on stdout.

    ANSIBLE_COLLECTIONS_PATH=... python tests/platform/playbook_args.py PLAYBOOK [EXTRA_VARS_JSON]

For every task of every play: its name, its action (resolved as ansible-playbook resolves it) and its arguments
templated with the play's ``vars`` and the extra vars, as ansible-playbook would template them (omitted ones
dropped). For every module of a collection the tasks use (``awx.awx.*`` here): the argument spec its code builds
(captured where it constructs its AnsibleModule, without running it) and its documented options (doc fragments
merged). tests/platform/test_awx_configure.py validates the one against the other with Ansible's own
ArgumentSpecValidator, since no AWX server runs here.

It runs in an interpreter of its own: Ansible's plugin loader and collection finder are global to a process.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

from ansible.module_utils import basic
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.mod_args import ModuleArgsParser
from ansible.plugins.loader import fragment_loader, init_plugin_loader, module_loader
from ansible.template import Templar
from ansible.utils.plugin_docs import get_docstring

try:  # ansible-core 2.19: only templates trusted as such are rendered (a playbook's are, when Ansible loads it)
    from ansible.template import trust_as_template
except ImportError:  # ansible-core 2.18
    def trust_as_template(value: str) -> str:  # type: ignore[misc]
        return value

OMIT = "__omit_place_holder__playbook_args"
# the keywords of a task that are not its action (ansible-playbook knows them from the Task class)
KEYWORDS = {"name", "when", "register", "become", "become_user", "tags", "loop", "loop_control", "vars", "notify",
            "changed_when", "failed_when", "ignore_errors", "no_log", "run_once", "delegate_to", "check_mode", "environment"}


class _Captured(Exception):
    def __init__(self, kwargs: dict[str, Any]) -> None:
        super().__init__("captured")
        self.kwargs = kwargs


def trusted(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def without_omitted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: without_omitted(item) for key, item in value.items() if not (isinstance(item, str) and item.startswith(OMIT))}
    if isinstance(value, list):
        return [without_omitted(item) for item in value]
    return value


def rendered_tasks(playbook: str, extra_vars: dict[str, Any]) -> list[dict[str, Any]]:
    loader = DataLoader()
    tasks = []
    for play in trusted(loader.load_from_file(playbook)):
        variables = {**play.get("vars", {}), **extra_vars, "omit": OMIT}
        templar = Templar(loader=loader, variables=variables)
        for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
            for task in play.get(section) or []:
                action, args, _delegate_to = ModuleArgsParser({k: v for k, v in task.items() if k not in KEYWORDS or k == "name"}).parse()
                tasks.append({"name": str(task.get("name", "")), "action": action, "args": without_omitted(templar.template(args))})
    return tasks


def captured_spec(action: str) -> dict[str, Any]:
    """The keyword arguments the module's main() passes to AnsibleModule, captured before anything runs."""
    resolved = module_loader.find_plugin_with_context(action)
    module = importlib.import_module(f"ansible_collections.{resolved.plugin_resolved_collection}.plugins.modules.{action.rsplit('.', 1)[1]}")
    original = basic.AnsibleModule.__init__

    def capture(self: Any, *args: Any, **kwargs: Any) -> None:
        raise _Captured(kwargs)

    basic.AnsibleModule.__init__ = capture  # type: ignore[method-assign]
    try:
        module.main()
    except _Captured as captured:
        kwargs = captured.kwargs
    else:
        raise SystemExit(f"{action} never built its AnsibleModule")
    finally:
        basic.AnsibleModule.__init__ = original  # type: ignore[method-assign]
    spec = {name: {key: value for key, value in option.items() if key != "fallback"} for name, option in kwargs["argument_spec"].items()}
    checks = ("mutually_exclusive", "required_together", "required_one_of", "required_if", "required_by")
    return {"argument_spec": spec, **{check: kwargs[check] for check in checks if kwargs.get(check)}}


def documented_options(action: str) -> dict[str, Any]:
    resolved = module_loader.find_plugin_with_context(action)
    doc = get_docstring(resolved.plugin_resolved_path, fragment_loader, collection_name=resolved.plugin_resolved_collection, is_module=True)[0]
    return dict(doc.get("options") or {})


def main() -> None:
    playbook = sys.argv[1]
    extra_vars = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    init_plugin_loader()
    tasks = rendered_tasks(playbook, extra_vars)
    modules = sorted({task["action"] for task in tasks if not task["action"].startswith("ansible.")})
    json.dump({
        "tasks": tasks,
        "specs": {action: captured_spec(action) for action in modules},
        "docs": {action: documented_options(action) for action in modules},
    }, sys.stdout, default=str)


if __name__ == "__main__":
    main()

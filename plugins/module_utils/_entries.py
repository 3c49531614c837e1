# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What is wrong in an option that is a list of dictionaries (``services``, ``maintenance_windows``), said where it is.

Ansible's validator says "Elements value for option 'ports' found in 'services' ..." and names neither the entry nor
its name: with twelve services declared, a person hunts. Each error here names the option, the entry (its index and its
``name``), the field and the value. The modules, the action plugins and the event sources check their list options with
it before Ansible's own validation, which then finds nothing more to say about them.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator


def entry_errors(option: str, entries: Any, options: Mapping[str, Any]) -> list[str]:
    """Each error of ``entries`` (the value of list option ``option``, whose entries take ``options``), one sentence
    each; [] when every entry is valid or ``entries`` is not a list (Ansible's own validation says that)."""
    if not isinstance(entries, list):
        return []
    errors: list[str] = []
    for index, entry in enumerate(entries):
        where = entry_name(option, index, entry)
        if not isinstance(entry, dict):
            errors.append("%s: each entry must be a dictionary, got %r" % (where, entry))
            continue
        unknown = sorted(str(field) for field in entry if field not in options)
        if unknown:
            errors.append("%s: %s %s not an option of %s (its options: %s)" % (
                where, ", ".join(unknown), "is" if len(unknown) == 1 else "are", option, ", ".join(sorted(options))))
        for field, spec in sorted(options.items()):
            if field not in entry or entry[field] is None:
                if spec.get("required"):
                    errors.append("%s: %s is required" % (where, field))
                continue
            result = ArgumentSpecValidator({field: spec}).validate({field: entry[field]})
            errors.extend("%s: %s: %r: %s" % (where, field, entry[field], message) for message in result.error_messages)
    return errors


def entry_name(option: str, index: int, entry: Any) -> str:
    """``services[3] (redis)``: the entry as a person finds it in what they wrote."""
    name = entry.get("name") if isinstance(entry, dict) else None
    return "%s[%d]%s" % (option, index, " (%s)" % name if isinstance(name, str) and name else "")


def list_option_errors(argument_spec: Mapping[str, Any], params: Mapping[str, Any],
                       label: Callable[[str], str] | None = None) -> list[str]:
    """The entry errors of every list-of-dictionaries option of ``argument_spec`` in ``params``; ``label`` gives the
    name a person wrote for an option (a role's variable) where it is not the option's own."""
    errors: list[str] = []
    for option, spec in sorted(argument_spec.items()):
        if spec.get("type") == "list" and spec.get("elements") == "dict" and spec.get("options") and option in params:
            errors.extend(entry_errors(label(option) if label else option, params[option], spec["options"]))
    return errors


def checked_spec(argument_spec: dict[str, Any], params: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """The argument spec a module starts with, and what is wrong in its list options in ``params`` (its task's
    arguments): with errors, the spec without those options' entry specs, so that the module starts and fails saying
    where each error is, not with Ansible's message that names no entry."""
    errors = list_option_errors(argument_spec, params or {})
    if not errors:
        return argument_spec, errors
    lenient = {}
    for option, spec in argument_spec.items():
        lenient[option] = dict((key, value) for key, value in spec.items() if key != "options") if spec.get("elements") == "dict" else spec
    return lenient, errors

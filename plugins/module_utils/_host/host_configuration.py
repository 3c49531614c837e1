"""What the host role wrote for the executor, read as the host's own: the policy and the declared services in root-owned
files only root may write (anything else is not the host's, and refused), and what a declared service leaves unsaid
filled in with the host's setting or the module's default."""

from __future__ import annotations

import json
import os
import stat

from ansible_collections.sentinel.heal.plugins.module_utils._guard.policy_language import policy_from_document
from ansible_collections.sentinel.heal.plugins.module_utils._host.requests import RequestRefused

CONFIG_DIR = "/etc/sentinel-heal"
# where the host role installs the executor: the healing account's one sudo rule
EXECUTOR_PATH = "/usr/libexec/sentinel-heal/exec"
# that rule as sudo -l prints it (the host role writes it)
EXECUTOR_RULE = '(root) NOPASSWD: %s ""' % EXECUTOR_PATH


def enforced_policy(request, config_dir):
    """The host's policy, when it is the one the controller judges with: until the role installs that one, nothing is
    done for the controller (a check included)."""
    policy = load_host_policy(config_dir)
    if request["policy_version"] != policy.version:
        raise RequestRefused(
            "the controller judged with policy %s, this host enforces %s" % (request["policy_version"], policy.version), "policy-version",
            field="policy_version", value=request["policy_version"],
            hint="apply the sentinel.heal.host role to this host again, with the policy the controller uses")
    return policy


def load_host_policy(config_dir=CONFIG_DIR):
    """The policy the host role installed (root-owned, not writable by others: anything else is not the host's)."""
    path = os.path.join(config_dir, "policy.json")
    return policy_from_document(load_json(path))


def load_json(path):
    try:
        return json.loads(read_host_file(path).decode("utf-8"))
    except ValueError as exc:
        raise RequestRefused("%s is not JSON" % path, "host-configuration", field="file", value=path, hint=str(exc)) from None


def read_host_file(path):
    """A file the host role wrote: root-owned, only root may write it, no link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise RequestRefused("cannot read %s: %s" % (path, exc.strerror), "host-configuration", field="file", value=path,
                             hint="apply the sentinel.heal.host role to this host") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or not stat.S_ISREG(info.st_mode):
            raise RequestRefused("%s is not a root-owned file only root may write" % path, "host-configuration", field="file", value=path,
                                 hint="apply the sentinel.heal.host role to this host")
        return handle.read()


def as_the_host_declares(spec, services):
    """A declared service with the host's own setting for what it leaves unsaid (sentinel.heal.host's host_restore_known_good)."""
    return dict(spec, restore_known_good=spec.get("restore_known_good") or services.get("restore_known_good") or "approve")


def with_defaults(spec, options):
    """A declared service as the module's argument spec would give it: every option, defaults filled in (the executor
    runs without Ansible on the host, so not by Ansible's argument spec validator)."""
    filled = {}
    for name, option in options.items():
        value = spec.get(name, option.get("default"))
        if value is not None and option.get("options"):
            value = with_defaults(value, option["options"])
        filled[name] = value
    return filled


def other_services(spec, services):
    return [other for other in services.get("services") or [] if other.get("name") != spec["name"]]


def service_mode(spec, services):
    """How far sentinel.heal acts on the service, as the host declares it: the service's own mode, else the host's."""
    return spec.get("mode") or services.get("mode") or "autonomous"

"""Placeholders (brain/placeholders.py): what an incident fills into a step or a text for people."""

from __future__ import annotations

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.placeholders import NotApplicable, render_step, render_text
from helpers import nginx_failure, on_systemd


def test_unit_and_cause_fill_in_on_systemd_hosts_only() -> None:
    sysv = nginx_failure("not_running")
    with pytest.raises(NotApplicable):
        render_step("systemctl reset-failed {unit}", sysv)
    systemd = on_systemd(sysv, "nginx.service", cause='open() "/etc/nginx/site-prod.conf" failed (2: No such file or directory)')
    assert render_step("systemctl reset-failed {unit}", systemd).argv == ("systemctl", "reset-failed", "nginx")
    assert render_text("{unit}: {cause}", systemd, {}) == 'nginx: "open() "/etc/nginx/site-prod.conf" failed (2: No such file or directory)"'
    assert render_text("{cause}", on_systemd(sysv, "nginx.service"), {}) == "(the journal names no cause)"

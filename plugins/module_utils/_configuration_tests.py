"""The configuration test of a service: the one it declares, or the one its kind is known to have.

One room because both sides ask it: the judge, whether a restore can be checked before the service starts on it, and
the host, which runs the test.
"""

from __future__ import annotations

import shlex

# the configuration tests of services that have one and need no argument to find their configuration
CONFIGURATION_TESTS = {"nginx": ["nginx", "-t"], "apache2": ["apache2ctl", "configtest"], "ssh": ["sshd", "-t"], "sshd": ["sshd", "-t"],
                       "haproxy": ["haproxy", "-c", "-f", "/etc/haproxy/haproxy.cfg"], "named": ["named-checkconf"],
                       "bind9": ["named-checkconf"], "unbound": ["unbound-checkconf"]}


def configuration_test(spec):
    """The argv of the service's configuration test: its declared ``config_test`` (split like a shell would, never run
    by one), or the known one of its service, or none."""
    if spec.get("config_test"):
        return shlex.split(spec["config_test"])
    return CONFIGURATION_TESTS.get(spec.get("service") or spec["name"]) or CONFIGURATION_TESTS.get(spec["name"]) or []

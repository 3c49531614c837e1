"""The task file a host's steps become (exec/steps.py), as ansible-playbook reads it; the runs themselves are in
test_runner.py."""

from __future__ import annotations

from ansible.parsing.yaml.loader import AnsibleLoader

from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import HostRequest, RunStep, host_tasks


def test_without_the_executor_a_restore_runs_as_root_through_the_module_given_the_services_configuration_test() -> None:
    """What ansible-playbook reads: known_good_restore as root, with the step's configuration test, which the module runs
    once the good copy is back and which undoes the restore when it fails."""
    restore = RunStep(argv=("sentinel-heal-restore", "/etc/nginx/sites-available/default", "a" * 64), become=True,
                      on_host=HostRequest("nginx", "v1", (), 0), restore_test=("/usr/sbin/nginx", "-t", "-c", "/etc/nginx/prod.conf"))
    [task] = AnsibleLoader(host_tasks("web1", [restore], 120, "become")).get_single_data()
    assert task["become"] is True and task["sentinel.heal.known_good_restore"] == {
        "service": "nginx", "path": "/etc/nginx/sites-available/default", "sha256": "a" * 64,
        "config_test": ["/usr/sbin/nginx", "-t", "-c", "/etc/nginx/prod.conf"]}

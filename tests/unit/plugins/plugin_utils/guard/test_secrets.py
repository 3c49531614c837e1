"""The play's own secrets: which of a host's variables, the controller's environment and the task's options are masked
wherever sentinel.heal keeps or shows host output. A vault-encrypted variable is held by a real play in
tests/integration/test_secrets_play.py (decrypting one needs the vault secrets ansible-playbook loads)."""

from __future__ import annotations

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._guard import redact as _redact
from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import MASK
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import known_secrets, redact


@pytest.mark.parametrize("name", [
    "deploy_token", "GITLAB_TOKEN", "db_password", "smtp_passwd", "key_passphrase", "client_secret", "app_api_key", "openai_apikey",
    "tls_private_key", "registry_credentials",
    # the inventory's own names for connection and privilege escalation passwords
    "ansible_password", "ansible_ssh_pass", "ansible_become_password", "ansible_become_pass", "ansible_sudo_pass",
])
def test_a_variable_named_like_a_secret_is_collected(name: str) -> None:
    assert known_secrets({name: "Xv9-value-of-the-variable"}) == ["Xv9-value-of-the-variable"]


@pytest.mark.parametrize("name", ["ledger_url", "bypass_cache", "compass_heading", "autoheal_services", "passenger_count"])
def test_a_variable_with_an_ordinary_name_is_not(name: str) -> None:
    assert known_secrets({name: "Xv9-value-of-the-variable"}) == []


def test_secrets_inside_dictionaries_and_lists_are_collected_by_their_own_key() -> None:
    task_vars = {
        "app": {"name": "ledger", "database": {"host": "db1", "password": "nested-db-pass"}},
        "registries": [{"url": "https://registry.example", "token": "listed-registry-token"}],
        "mirror_tokens": ["first-mirror-token", "second-mirror-token"],
    }
    assert sorted(known_secrets(task_vars)) == ["first-mirror-token", "listed-registry-token", "nested-db-pass", "second-mirror-token"]


def test_the_llm_key_in_the_environment_and_the_values_the_task_names_are_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azure-from-the-environment")
    expected = ["azure-from-the-environment", "listed-by-the-user", "sk-from-the-environment"]
    assert sorted(known_secrets({}, ["listed-by-the-user", ""])) == expected


def test_short_values_templates_and_other_hosts_variables_are_not_collected() -> None:
    """Masking every 'abc' would hide ordinary output; a template is not the value it renders to; hostvars holds every
    host's variables, and this host's are already among its own."""
    task_vars = {"db_password": "abc", "api_token": "{{ lookup('env', 'TOKEN') }}", "hostvars": {"web2": {"db_password": "of-web2"}}}
    assert known_secrets(task_vars) == []


def test_the_longest_secret_is_masked_first_so_no_part_of_it_is_left() -> None:
    secrets = known_secrets({"db_password": "hunter2", "admin_password": "hunter2-admin"})
    assert secrets == ["hunter2-admin", "hunter2"]
    assert redact("login hunter2-admin refused", secrets) == f"login {MASK} refused"


def test_redact_masks_known_secrets_everywhere_in_a_result() -> None:
    secrets = known_secrets({"deploy_token": "Qv3-plain"})
    result = {"summary": "retrying with Qv3-plain", "logs": {"/var/log/Qv3-plain.log": ["a", ("b Qv3-plain",)]}, "rc": 1, "healthy": False}
    assert redact(result, secrets) == {"summary": f"retrying with {MASK}", "logs": {f"/var/log/{MASK}.log": ["a", [f"b {MASK}"]]},
                                       "rc": 1, "healthy": False}


def test_the_controller_redacts_a_redis_configuration_and_acl_file_as_the_host_does() -> None:
    """One redaction: what the controller masks in host output is what the executor masks on the host."""
    text = ('requirepass "correct horse battery"\nmasterauth replica-secret-1\nuser admin on >admin-pass-1 >admin-pass-2 ~* +@all\n'
            "user default on #5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8 ~* &* +@all\n"
            "ALTER ROLE app PASSWORD 'sql-pass-5';\n")
    masked = redact({"stdout": text}, [])
    assert masked == {"stdout": _redact.redact(text)}
    for leak in ("correct horse", "replica-secret-1", "admin-pass-1", "admin-pass-2", "5e884898da", "sql-pass-5"):
        assert leak not in masked["stdout"]
    assert masked["stdout"].startswith("requirepass ********\nmasterauth ********\nuser admin on ******** ******** ~* +@all\n")


def test_a_sudo_rules_tag_is_no_password_and_a_password_key_still_is() -> None:
    """What the host role and the executor say of a rule (`(ALL) NOPASSWD: ALL`) reaches the person as sudo wrote it."""
    assert _redact.redact("other sudo rules beside it ((ALL) NOPASSWD: ALL; (root) PASSWD: /usr/bin/ls)") == \
        "other sudo rules beside it ((ALL) NOPASSWD: ALL; (root) PASSWD: /usr/bin/ls)"
    for written in ("passwd: hunter2", "PASSWD=hunter2", "db_passwd: hunter2", "nopasswd=hunter2"):
        assert _redact.redact(written).endswith(MASK), written

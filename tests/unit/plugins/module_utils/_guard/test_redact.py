"""What redaction masks before evidence leaves the host (module_utils/_guard/redact.py), and what it leaves as it is."""

from __future__ import annotations

import os

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjE"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload", "eyJhbGciOiJIUzI1NiJ9"),
        ("Authorization: Basic bGVkZ2VyOmh1bnRlcjI=", "bGVkZ2VyOmh1bnRlcjI="),
        # each of these only by its shape: no Authorization header, no name of a secret before it
        ("upstream said: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJsZWRnZXIifQ.c2lnbmF0dXJl", "eyJhbGciOiJSUzI1NiJ9"),
        ("aws s3 cp s3://ledger/backup.tar . failed for AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("slack: posting with xoxb-123456789012-abcdefghijKL refused", "xoxb-123456789012-abcdefghijKL"),
        ("git clone https://gitlab.example/ops/ledger.git with glpat-abcdefghij0123456789 failed", "glpat-abcdefghij0123456789"),
        ("client built with sk-proj-abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwx"),
        ('{"password": "s3cr3t-value"}', "s3cr3t-value"),
        ("export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwx"),
        ("redis://:topsecret@127.0.0.1:6379/0", "topsecret"),
        ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
        ("DB_PASSWORD: 'hunter2'", "hunter2"),
        # what a shadow file, an htpasswd file, pg_authid and a redis configuration hold
        ("root:$y$j9T$yK2Rgpv1rXxq6gH2H4i2E/$QtoLmQ0mI7V0m3F8jIc4fQ5tSg3yEBqqgS2k8cH7Q.6:19700:0:99999:7:::", "QtoLmQ0mI7V0m3F8"),
        ("sentinel:$6$rounds=5000$saltsalt$Yq3Vh0B5x8kT1mN2pQ4rS6tU8vW0xY2zA4bC6dE8fG0hI2jK4lM6nO8pQ0rS2tU4vW6xY8z:19700::::::", "Yq3Vh0B5x8kT"),
        ("admin:$apr1$abc12345$Mh4Lb6qXyZ0123456789ab", "Mh4Lb6qXyZ"),
        ("admin:$2y$10$abcdefghijklmnopqrstuuJ9x8Yz7Wv6Ut5Sr4Qp3On2Ml1Kj0Ih", "abcdefghijklmnopqrstuu"),
        (" postgres | SCRAM-SHA-256$4096:c2FsdHNhbHQ=$c3RvcmVka2V5:c2VydmVya2V5", "c3RvcmVka2V5"),
        ("app | md5a3dcb4d229de6fde0db5686dee47145d", "a3dcb4d229de6fde0db5686dee47145d"),
        ("requirepass hunter2secret", "hunter2secret"),
        ('requirepass "two words"', "two words"),
        ("masterauth Repl1cat10n", "Repl1cat10n"),
        ("sentinel auth-pass mymaster S3ntinel", "S3ntinel"),
        ("user default on >pa55word ~* +@all", "pa55word"),
        ("redis     700  0.1 /usr/bin/redis-server 127.0.0.1:6379 --requirepass topsecret", "topsecret"),
        ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGX\n-----END PGP PRIVATE KEY BLOCK-----", "lQOYBGX"),
        # a unit as systemctl cat prints it: every value of its environment, whatever the variable's name
        ("[Service]\nEnvironment=\"GF_DATABASE_URL=mysql://grafana@db/grafana\" GF_SERVER_ROOT=/\n", "GF_DATABASE_URL"),
        ("[Service]\n  Environment=APP_SIGNING_SEED=9f8e7d6c5b4a\nExecStart=/usr/bin/app\n", "9f8e7d6c5b4a"),
        ("EnvironmentFile=-/etc/app/production.env\n", "/etc/app/production.env"),
    ],
)
def test_redaction_masks_obvious_secrets(text: str, secret: str) -> None:
    assert secret not in redact(text)


@pytest.mark.parametrize("line", [
    "user www-data;",
    "worker_processes auto; # costs $5$ per month",
    "maxmemory 256mb",
    "2026-11-23 10:00:01.123 UTC [812] LOG:  database system is ready to accept connections",
    "sentinel:x:1000:1000::/home/sentinel:/bin/bash",
])
def test_redaction_keeps_configuration_and_account_lines_without_secrets(line: str) -> None:
    assert redact(line) == line


def test_redaction_keeps_ordinary_log_lines() -> None:
    line = "2026/11/22 10:00:01 [emerg] 812#812: bind() to 0.0.0.0:80 failed (98: Address already in use)"
    assert redact(line) == line
    assert os.environ.get("SENTINEL_NEVER_SET") is None

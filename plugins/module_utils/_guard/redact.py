# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Redaction of obvious secrets in text that leaves a host (standard library only).

Used on the target by service_check before evidence leaves the host, and on the controller
before command output is stored or shown.
"""

from __future__ import annotations

import re

MASK = "********"

_PATTERNS = (
    # -----BEGIN ... PRIVATE KEY----- blocks (PEM, OpenSSH, PGP), also when cut off at the end of a log tail
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.DOTALL),
     "[private key redacted]"),
    # password hashes in crypt(3) form, as shadow files and htpasswd hold them: $y$ (yescrypt), $6$, $5$, $2b$, $1$,
    # $argon2id$, ... and Apache's $apr1$
    (re.compile(r"\$(?:1|2[abxy]?|5|6|7|y|gy|sha1|md5|apr1|argon2(?:id|i|d)|scrypt|pbkdf2(?:-sha\d+)?)\$[./A-Za-z0-9$=,+-]{6,}"), MASK),
    # PostgreSQL's stored passwords (pg_authid): SCRAM verifiers and md5 hashes
    (re.compile(r"SCRAM-SHA-256\$\d+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+"), MASK),
    (re.compile(r"\bmd5[0-9a-f]{32}\b"), MASK),
    # redis and its sentinel: requirepass / masterauth / auth-pass / sentinel-pass lines and options, the passwords of
    # TLS keys
    (re.compile(r"(?i)(\b(?:requirepass|masterauth|masteruser|primaryauth|sentinel-pass|tls-(?:client-)?key-file-pass"
                r"|auth-pass(?:\s+\S+)?)[\s=]+)(\"[^\"]*\"|'[^']*'|\S+)"),
     r"\1" + MASK),
    # an ACL rule (users.acl, a user line of redis.conf, ACL LIST): every password it adds or removes (>pw, <pw) and
    # every hash (#sha256, !sha256), however many the line has
    (re.compile(r"(?im)^([\s\"']*(?:\d+\)\s*\"?)?user\s+\S+)(.*)$"),
     lambda match: match.group(1) + re.sub(r"(\s)[><#!]\S+", r"\1" + MASK, match.group(2))),
    # SQL that sets a role's password (ALTER ROLE ... PASSWORD 'x', CREATE USER ... PASSWORD 'x')
    (re.compile(r"(?i)(\bpassword\s+)('[^']*'|\"[^\"]*\")"), r"\1" + MASK),
    # a unit's environment as systemctl cat prints it: every Environment= and EnvironmentFile= value
    (re.compile(r"(?im)^(\s*Environment(?:File)?\s*=\s*)\S.*$"), r"\1" + MASK),
    # scheme://user:password@host
    (re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)[^\s@/]+(@)"), r"\1" + MASK + r"\2"),
    # Authorization: Bearer/Basic <token>
    (re.compile(r"(?i)\b(authorization\s*[:=]\s*(?:bearer|basic|token)\s+)\S+"), r"\1" + MASK),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{12,}"), r"\1" + MASK),
    # PASSWORD=..., api_key: ..., "token": "..." (never sudo's tags: NOPASSWD: ALL names a rule, not a password)
    (re.compile(
        r"(?i)(\b(?-i:(?!(?:NO)?PASSWD:))[a-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credentials?)"
        r"[a-z0-9_.-]*[\"']?\s*[=:]\s*[\"']?)([^\s\"',;]+)"), r"\1" + MASK),
    # well-known token shapes
    (re.compile(r"\b(?:sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,})"),
     MASK),
)


def redact(text, extra_values=()):
    """Return text with secrets masked; extra_values are literal secrets known to the caller."""
    if not text:
        return text
    for value in sorted(extra_values, key=len, reverse=True):
        if value and len(value) >= 4:
            text = text.replace(value, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_tree(value, extra_values=()):
    """redact() applied to every string inside lists and dicts (keys included)."""
    if isinstance(value, str):
        return redact(value, extra_values)
    if isinstance(value, dict):
        return dict((redact_tree(key, extra_values), redact_tree(item, extra_values)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [redact_tree(item, extra_values) for item in value]
    return value

# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who may decide a plan from chat: the approval page's ``approvers``, each a name and the ways the page knows them - a
Slack user id (Slack vouches for it, with its signature), and a personal token the page asks for, of which only the
SHA-256 is configured (a random token, not a password: ``python3 -c 'import secrets; print(secrets.token_urlsafe(24))'``).

The name is what approve.yml records and, with enforcement on the host, what the host's decision log shows: the same
characters an approval signature may name."""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

APPROVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,20}$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
# a personal token shorter than this is refused before it is hashed: it was no random token
MIN_TOKEN_LENGTH = 16
APPROVER_OPTIONS: dict[str, Any] = dict(
    name=dict(type="str", required=True),
    slack_user=dict(type="str"),
    token_sha256=dict(type="str", no_log=False),
)


@dataclass(frozen=True)
class Approver:
    name: str
    slack_user: str = ""
    token_sha256: str = ""

    def __repr__(self) -> str:
        return f"Approver({self.name})"


def token_sha256(token: str) -> str:
    """What the page compares a personal token by (and what ``token_sha256`` holds): its SHA-256, in hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Approvers:
    """The listed approvers, found by their Slack user id or their personal token."""

    def __init__(self, approvers: Sequence[Approver]) -> None:
        self._approvers = tuple(approvers)

    def __len__(self) -> int:
        return len(self._approvers)

    @classmethod
    def from_option(cls, entries: Sequence[Any] | None, option: str = "approvers") -> Approvers:
        """The checked list; a ConfigError names the entry and the field (never a token's hash)."""
        approvers: list[Approver] = []
        for index, entry in enumerate(entries or []):
            where = f"{option}[{index}]"
            if not isinstance(entry, dict):
                raise ConfigError(f"{where} must be a dict with a name", field=where, value=type(entry).__name__)
            name, slack_user, digest = (str(entry.get(key) or "") for key in ("name", "slack_user", "token_sha256"))
            if not APPROVER_NAME.match(name):
                raise ConfigError(f"{where}.name is an approver's name: letters, digits, - _ . @ (as approve.yml records it)",
                                  field=f"{where}.name", value=name, hint="alice, or alice@example.com")
            if slack_user and not SLACK_USER.match(slack_user):
                raise ConfigError(f"{where}.slack_user is a Slack user id", field=f"{where}.slack_user", value=slack_user,
                                  hint="U024BE7LH: the member id in the person's Slack profile (More > Copy member ID)")
            digest = digest.lower()
            if digest and not SHA256_HEX.match(digest):
                raise ConfigError(f"{where}.token_sha256 is the SHA-256 of the approver's personal token, in hex", field=f"{where}.token_sha256",
                                  value=f"({len(digest)} characters)", hint="printf %s TOKEN | sha256sum")
            if not (slack_user or digest):
                raise ConfigError(f"{where} names no way to know {name}", field=where, value=name, hint="give slack_user, token_sha256 or both")
            for other in approvers:
                shared = next((key for key, mine, theirs in (("name", name, other.name), ("slack_user", slack_user, other.slack_user),
                                                             ("token_sha256", digest, other.token_sha256)) if mine and mine == theirs), None)
                if shared:
                    raise ConfigError(f"{where}.{shared} is {other.name}'s already: each approver is one person", field=f"{where}.{shared}",
                                      value=name)
            approvers.append(Approver(name=name, slack_user=slack_user, token_sha256=digest))
        return cls(approvers)

    def by_token(self, token: str) -> Approver | None:
        """The approver whose personal token this is; every listed hash is compared, in constant time."""
        if len(token) < MIN_TOKEN_LENGTH:
            return None
        digest = token_sha256(token)
        found = None
        for approver in self._approvers:
            if approver.token_sha256 and hmac.compare_digest(approver.token_sha256, digest):
                found = approver
        return found

    def by_slack_user(self, user_id: str) -> Approver | None:
        return next((approver for approver in self._approvers if approver.slack_user and approver.slack_user == user_id), None)

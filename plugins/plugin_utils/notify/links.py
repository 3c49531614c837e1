"""Approval links: a waiting plan's message carries a link to the approval page (the ``sentinel.heal.approval_page``
event source), signed so that the page can trust what the link names without trusting who sent it.

A link's token is its claim - the plan's id, the hash its approval is bound to (guard/approvals.py ``binding_hash``),
its host and when it expires, the plan's own expiry - and an HMAC-SHA256 of that claim under the key the heal task and
the page share (``approval_link_secret``, from a vault or the environment). Each kind of token is signed for its own
purpose (a link, a page's form), so one is never taken for the other. The link only names a plan: the page still reads
the plan from the memory, checks that it still waits with that very hash, and asks who approves.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError, SentinelError

# where the heal task and the page find the key when no option gives it
SECRET_ENVIRONMENT = "SENTINEL_HEAL_APPROVAL_LINK_SECRET"
# a key a person could guess is no key: 32 characters at least (``openssl rand -base64 32`` gives 44)
MIN_SECRET_LENGTH = 32
LINK_PURPOSE = "approval link"
APPROVE_PATH = "/approve"
# the action ids of a waiting plan's Slack buttons (notify/formats.py), as the approval page reads them (eda/slack.py)
SLACK_APPROVE, SLACK_DENY, SLACK_OPEN = "sentinel_heal_approve", "sentinel_heal_deny", "sentinel_heal_open"
# the options of the heal task (the role's autoheal_approval_page_url and autoheal_approval_link_secret)
LINK_OPTIONS: dict[str, Any] = dict(
    approval_page_url=dict(type="str", default=""),
    approval_link_secret=dict(type="str", default="", no_log=True),
)


class LinkRefused(SentinelError):
    """A token that does not hold: ``kind`` says how (``forged``: not signed by the key, or not a token at all;
    ``expired``)."""

    def __init__(self, message: str, *, kind: str, value: Any = None, hint: str | None = None) -> None:
        self.kind = kind
        super().__init__(message, field="t", value=value, hint=hint)


@dataclass(frozen=True)
class LinkClaim:
    """What a link names: the plan, the hash its approval is bound to, its host, and when the link expires."""

    plan_id: str
    plan_hash: str
    host: str
    expires_at: int


@dataclass(frozen=True)
class ApprovalLink:
    url: str
    token: str


class TokenKey:
    """Seals small JSON documents for a purpose, and opens only what it sealed for that purpose."""

    def __init__(self, secret: str) -> None:
        self._key = secret.encode("utf-8")

    def __repr__(self) -> str:  # a traceback never shows the key
        return "TokenKey(...)"

    def seal(self, purpose: str, document: Mapping[str, Any]) -> str:
        body = _b64(json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8"))
        return f"{body}.{_b64(self._mac(purpose, body))}"

    def open(self, purpose: str, token: str) -> dict[str, Any]:
        """The document ``token`` holds, when this key sealed it for ``purpose``; else LinkRefused (kind ``forged``)."""
        body, dot, mac = token.partition(".") if isinstance(token, str) else ("", "", "")
        try:
            given = _unb64(mac)
        except (binascii.Error, ValueError):
            given = b""
        # compared in constant time, before anything of the body is read
        if not dot or not hmac.compare_digest(given, self._mac(purpose, body)):
            raise LinkRefused(f"this {purpose} was not signed by this service (forged, or cut)", kind="forged", value=_shown(token),
                              hint="use the link of the message as it came")
        document = json.loads(_unb64(body))
        if not isinstance(document, dict):
            raise LinkRefused(f"this {purpose} holds no claim", kind="forged", value=_shown(token))
        return document

    def _mac(self, purpose: str, body: str) -> bytes:
        return hmac.new(self._key, f"sentinel.heal {purpose} v1\x00{body}".encode(), hashlib.sha256).digest()


def link_token(key: TokenKey, claim: LinkClaim) -> str:
    return key.seal(LINK_PURPOSE, {"p": claim.plan_id, "h": claim.plan_hash, "host": claim.host, "e": int(claim.expires_at)})


def read_link(key: TokenKey, token: str, *, now: float | None = None) -> LinkClaim:
    """The claim of a link this key signed and that has not expired; else LinkRefused (``forged``, ``expired``)."""
    document = key.open(LINK_PURPOSE, token)
    try:
        claim = LinkClaim(plan_id=str(document["p"]), plan_hash=str(document["h"]), host=str(document["host"]), expires_at=int(document["e"]))
    except (KeyError, TypeError, ValueError):
        raise LinkRefused("this approval link holds no plan", kind="forged", value=_shown(token)) from None
    now = time.time() if now is None else now
    if now > claim.expires_at:
        raise LinkRefused(f"the link expired at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(claim.expires_at))}, with its plan",
                          kind="expired", value=claim.plan_id, hint="run heal again for a new plan, or approve.yml while it waits")
    return claim


@dataclass(frozen=True)
class LinkSigner:
    """Makes the links of waiting plans: ``base_url`` is the approval page as people reach it."""

    base_url: str
    key: TokenKey

    def link(self, claim: LinkClaim) -> ApprovalLink:
        token = link_token(self.key, claim)
        return ApprovalLink(url=f"{self.base_url}{APPROVE_PATH}?t={token}", token=token)


def link_secret(given: str | None, environ: Mapping[str, str] | None = None, field: str = "approval_link_secret") -> str:
    """The key from the option, else the environment (the process's by default); a short one is refused (empty: none
    given)."""
    secret = given or (os.environ if environ is None else environ).get(SECRET_ENVIRONMENT, "")
    if secret and len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(f"the approval link secret is shorter than {MIN_SECRET_LENGTH} characters", field=field,
                          value=f"({len(secret)} characters)", hint="openssl rand -base64 32, kept in a vault or the environment")
    return secret


def signer_from(options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> LinkSigner | None:
    """The heal task's link signer, or None when no approval page is configured (messages then say approve.yml only)."""
    url = str(options.get("approval_page_url") or "").rstrip("/")
    secret = link_secret(options.get("approval_link_secret"), environ)
    if not url:
        if options.get("approval_link_secret"):
            raise ConfigError("an approval link secret without approval_page_url makes no link", field="approval_page_url", value="",
                              hint="the approval page's URL as people reach it, https://approvals.example.com")
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError("approval_page_url must be an http(s) URL with a host and no query", field="approval_page_url", value=url,
                          hint="https://approvals.example.com, or with the path a proxy serves the page under")
    if not secret:
        raise ConfigError("an approval page needs the secret its links are signed with", field="approval_link_secret", value="(empty)",
                          hint=f"the page's link_secret, from a vault or {SECRET_ENVIRONMENT} on the controller")
    return LinkSigner(base_url=url, key=TokenKey(secret))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _shown(token: Any) -> str:
    """A token as a log line or an error may show it: its start."""
    text = str(token)
    return text if len(text) <= 16 else text[:16] + "..."

"""Approval links: signed over the plan's id, hash, host and expiry; anything else than what the key signed is refused,
and so is a link past its plan's expiry."""

from __future__ import annotations

import base64
import json

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import (
    SECRET_ENVIRONMENT,
    LinkClaim,
    LinkRefused,
    TokenKey,
    link_token,
    read_link,
    signer_from,
)

SECRET = "s" * 40
CLAIM = LinkClaim(plan_id="3f2a", plan_hash="ab" * 32, host="web1", expires_at=2000)


def test_a_link_reads_back_as_the_claim_it_was_signed_for_until_its_plan_expires() -> None:
    token = link_token(TokenKey(SECRET), CLAIM)
    assert read_link(TokenKey(SECRET), token, now=1999.5) == CLAIM
    with pytest.raises(LinkRefused, match="expired") as caught:
        read_link(TokenKey(SECRET), token, now=2000.5)
    assert caught.value.kind == "expired"


def _forged_claim(token: str, **changed: object) -> str:
    """The token with its claim changed and its signature kept: what someone without the key can make."""
    body, _dot, mac = token.partition(".")
    claim = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claim.update(changed)
    return base64.urlsafe_b64encode(json.dumps(claim).encode()).rstrip(b"=").decode() + "." + mac


@pytest.mark.parametrize("forge", [
    lambda token: link_token(TokenKey("another secret of forty characters......"), CLAIM),
    lambda token: _forged_claim(token, p="another-plan"),
    lambda token: _forged_claim(token, host="db1"),
    lambda token: _forged_claim(token, e=9_999_999_999),
    lambda token: token[:-2],
    lambda token: token.partition(".")[0],
    lambda token: "",
    lambda token: "not a token at all",
])
def test_a_link_not_signed_by_the_key_for_exactly_its_claim_is_forged(forge) -> None:
    token = link_token(TokenKey(SECRET), CLAIM)
    with pytest.raises(LinkRefused, match="not signed by this service") as caught:
        read_link(TokenKey(SECRET), forge(token), now=1000)
    assert caught.value.kind == "forged"


def test_a_token_signed_for_another_purpose_is_no_link() -> None:
    key = TokenKey(SECRET)
    page = key.seal("approval page", {"p": "3f2a", "h": "ab" * 32, "host": "web1", "e": 2000})
    with pytest.raises(LinkRefused, match="not signed by this service") as caught:
        read_link(key, page, now=1000)
    assert caught.value.kind == "forged"


def test_the_signer_needs_both_the_page_and_a_long_secret_from_the_option_or_the_environment() -> None:
    assert signer_from({"approval_page_url": "", "approval_link_secret": ""}, environ={}) is None
    signer = signer_from({"approval_page_url": "https://approvals.example.com/", "approval_link_secret": ""}, environ={SECRET_ENVIRONMENT: SECRET})
    assert signer is not None
    link = signer.link(CLAIM)
    assert link.url == f"https://approvals.example.com/approve?t={link.token}" and read_link(TokenKey(SECRET), link.token, now=0) == CLAIM
    assert SECRET not in repr(signer)
    for options, field in (({"approval_page_url": "https://a.example"}, "approval_link_secret"),
                           ({"approval_page_url": "", "approval_link_secret": SECRET}, "approval_page_url"),
                           ({"approval_page_url": "https://a.example?x=1", "approval_link_secret": SECRET}, "approval_page_url"),
                           ({"approval_page_url": "ftp://a.example", "approval_link_secret": SECRET}, "approval_page_url"),
                           ({"approval_page_url": "https://a.example", "approval_link_secret": "short"}, "approval_link_secret")):
        with pytest.raises(ConfigError) as caught:
            signer_from(options, environ={})
        assert caught.value.field == field and SECRET not in str(caught.value)

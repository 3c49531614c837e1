"""Who may decide from chat: each listed approver found by their Slack user id or their personal token (by its hash),
nobody else; a list that could not tell two people apart is refused."""

from __future__ import annotations

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.approvers import Approvers, token_sha256
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

ALICE_TOKEN = "alice-personal-token-0123456789"


def test_an_approver_is_found_by_a_slack_user_id_or_a_personal_token_and_nobody_else() -> None:
    approvers = Approvers.from_option([{"name": "alice", "slack_user": "U024BE7LH", "token_sha256": token_sha256(ALICE_TOKEN).upper()},
                                       {"name": "bob@example.com", "slack_user": "W0BOB1"}])
    alice = approvers.by_token(ALICE_TOKEN)
    assert alice is not None and alice.name == "alice" and approvers.by_slack_user("U024BE7LH") == alice
    assert approvers.by_slack_user("W0BOB1") is not None and approvers.by_slack_user("U0NOBODY") is None
    # the token itself is never configured: its hash is, and a near miss, a prefix or the hash itself are nobody's
    for wrong in (ALICE_TOKEN + "x", ALICE_TOKEN[:-1], token_sha256(ALICE_TOKEN), "", "short"):
        assert approvers.by_token(wrong) is None
    assert ALICE_TOKEN not in repr(alice)


@pytest.mark.parametrize(("entries", "field"), [
    ([{"name": "alice smith", "slack_user": "U1234"}], "approvers[0].name"),
    ([{"name": "alice", "slack_user": "alice"}], "approvers[0].slack_user"),
    ([{"name": "alice", "token_sha256": "abc"}], "approvers[0].token_sha256"),
    ([{"name": "alice"}], "approvers[0]"),
    ([{"name": "alice", "slack_user": "U1234"}, {"name": "alice", "slack_user": "U5678"}], "approvers[1].name"),
    ([{"name": "alice", "slack_user": "U1234"}, {"name": "bob", "slack_user": "U1234"}], "approvers[1].slack_user"),
    ([{"name": "alice", "token_sha256": "0" * 64}, {"name": "bob", "token_sha256": "0" * 64}], "approvers[1].token_sha256"),
])
def test_a_list_that_cannot_tell_who_decides_is_refused_naming_the_entry(entries: list[dict[str, str]], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Approvers.from_option(entries)
    assert caught.value.field == field

"""The play's own secrets through heal.yml on this machine (no lab needed): a vault-encrypted variable and a variable
named like a token, both written into the log of a service on localhost (the token in its check command too), reach
neither the memory, the ansible-runner artifacts, the run's report, its audit trail nor the job's output, while the
lines that held them do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterable

from conftest import run_playbook
from ledger import GROUP, ledger

VAULT_VALUE = "Lg-7rq-from-vault"
TOKEN_VALUE = "Qv3-plain-in-inventory-81"
# neither value has a shape or a name before it that the redaction patterns know: only the play says they are secrets
LOG = (f"2026-11-27 10:00:01 upstream refused login {VAULT_VALUE} for ledger\n"
       f"2026-11-27 10:00:02 retrying with {TOKEN_VALUE}\n")


def test_the_plays_vault_values_and_token_variables_reach_no_memory_report_audit_or_output(tmp_path: Path) -> None:
    # the check command carries the token too, as `redis-cli -a PASSWORD ping` does
    service = ledger(tmp_path, log=LOG, check_with=" -a -n {{ ledger_api_token }}")
    vault_password = tmp_path / "vault-password"
    vault_password.write_text("ledger-vault-password\n")
    # a name that says nothing: only the vault says it is a secret
    (service.group_vars / "vault.yml").write_text(subprocess.run(
        [str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string", "--vault-password-file", str(vault_password), VAULT_VALUE,
         "--name", "ledger_login"],
        capture_output=True, text=True, check=True,
    ).stdout)
    (service.group_vars / "api.yml").write_text(f"ledger_api_token: {TOKEN_VALUE}\n")
    state, reports = tmp_path / "state", tmp_path / "reports"
    run = run_playbook("playbooks/heal.yml", "-i", str(service.inventory), "-e", f"autoheal_target={GROUP}", "--vault-password-file",
                       str(vault_password), "-v", state_dir=state,
                       env={"SENTINEL_HEAL_REPORT_DIR": str(reports), "SENTINEL_HEAL_AUDIT_FILE": str(reports / "audit.jsonl")})
    assert run.rc == 0 and "localhost ledger: healed after 1 attempt(s)" in run.output, run.output
    [report] = reports.glob("sentinel-heal-*.html")
    kept = {"output": run.output, "memory": _text_of(state.glob("memory.sqlite3*")), "runs": _text_of((state / "runs").rglob("*")),
            "report": report.read_text(), "audit": (reports / "audit.jsonl").read_text()}
    for secret in (VAULT_VALUE, TOKEN_VALUE):
        assert [place for place, text in kept.items() if secret in text] == [], secret
    # the lines that held them made it, masked: as evidence (the log's tail) and as the output of the step that printed it
    for place, text in kept.items():
        assert "upstream refused login ******** for ledger" in text and "retrying with ********" in text, place


def _text_of(paths: Iterable[Path]) -> str:
    return "".join(path.read_bytes().decode("utf-8", "replace") for path in paths if path.is_file())

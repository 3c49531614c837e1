"""A person's approval the host can check itself: an SSH signature over the plan, by a key the host role listed.

With enforcement on the host, a plan the policy sends to a person (APPROVE) runs only with that person's signature:
the controller's word that someone approved is not enough, since whoever holds the controller could say it. The
approver signs one message (this host, the service, the plan's steps, a nonce naming this approval, and when it
expires) with their SSH key (``ssh-keygen -Y sign``, namespace ``sentinel-heal-approval``); the executor checks it
with ``ssh-keygen -Y verify`` against the approvers the role wrote (``/etc/sentinel-heal/approvers``, OpenSSH's
allowed signers format), refuses one that expired, names another host or plan, or was used before for the same step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time

from ansible_collections.sentinel.heal.plugins.module_utils._errors import SentinelError

NAMESPACE = "sentinel-heal-approval"
APPROVERS_FILE = "approvers"
USED_DIR = "/var/lib/sentinel-heal/approvals"
# an approval is for now, not for later: signed for at most a day
MAX_VALIDITY_S = 86400
_SAFE_NAME = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@"


class ApprovalRefused(SentinelError):
    """The approval a request carries does not hold on this host."""


def approval_message(host, service, plan, nonce, expires):
    """The bytes an approver signs: the same on the controller and the host, whatever either's JSON defaults."""
    document = dict(host=host, service=service, plan=[list(argv) for argv in plan], nonce=nonce, expires=int(expires))
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


def verify_approval(approval, request, host_name, approvers, used_dir=USED_DIR, now=None):
    """The approver's name, when ``approval`` is a signature by one of ``approvers`` (the allowed signers text the
    host role wrote) over this request's plan on this host, unexpired and not used before for this step; else
    ApprovalRefused."""
    now = time.time() if now is None else now
    if not isinstance(approval, dict):
        raise ApprovalRefused("approval must be an object", field="approval", value=type(approval).__name__)
    for key, kind in (("by", str), ("nonce", str), ("expires", int), ("signature", str)):
        if not isinstance(approval.get(key), kind) or isinstance(approval.get(key), bool):
            raise ApprovalRefused("the approval lacks %s (%s)" % (key, kind.__name__), field="approval." + key, value=approval.get(key))
    if not approval["by"] or not approval["nonce"] or any(c not in _SAFE_NAME for c in approval["by"] + approval["nonce"]):
        raise ApprovalRefused("approver and nonce are names: letters, digits, - _ . @", field="approval.by", value=approval["by"])
    if approval["expires"] < now:
        raise ApprovalRefused("the approval expired at %s" % _when(approval["expires"]), field="approval.expires", value=approval["expires"],
                              hint="approve the plan again")
    if approval["expires"] > now + MAX_VALIDITY_S:
        raise ApprovalRefused("an approval is valid for at most %d seconds" % MAX_VALIDITY_S, field="approval.expires",
                              value=approval["expires"])
    if request["host"] != host_name:
        raise ApprovalRefused("this host is %s, the request names %s" % (host_name, request["host"]), field="host", value=request["host"])
    if not [line for line in approvers.splitlines() if line.strip() and not line.lstrip().startswith("#")]:
        raise ApprovalRefused("this host accepts no approvals", field="approvers", value=APPROVERS_FILE,
                              hint="list the approvers' SSH keys in host_approvers and apply the sentinel.heal.host role")
    message = approval_message(host_name, request["service"], request["plan"], approval["nonce"], approval["expires"])
    _check_signature(approval["by"], approval["signature"], message, approvers)
    _mark_used(used_dir, approval["nonce"], request["step"], now)
    return approval["by"]


def _check_signature(by, signature, message, approvers):
    keygen = shutil.which("ssh-keygen", path="/usr/bin:/bin")
    if keygen is None:
        raise ApprovalRefused("ssh-keygen is not installed on this host", field="approval", value=by, hint="install openssh-client")
    scratch = tempfile.mkdtemp(prefix="sentinel-heal-approval-")
    try:
        for name, text in (("signers", approvers), ("signature", signature)):
            with open(os.path.join(scratch, name), "w") as handle:
                handle.write(text if text.endswith("\n") else text + "\n")
        completed = subprocess.run(
            [keygen, "-Y", "verify", "-f", os.path.join(scratch, "signers"), "-I", by, "-n", NAMESPACE, "-s", os.path.join(scratch, "signature")],
            input=message, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, timeout=30, env=dict(PATH="/usr/bin:/bin"))
    except subprocess.TimeoutExpired:
        raise ApprovalRefused("ssh-keygen did not verify the signature within 30 seconds", field="approval.signature", value=by) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if completed.returncode != 0:
        said = completed.stdout.decode("utf-8", "replace").strip().splitlines()
        raise ApprovalRefused("the signature is not %s's over this plan on this host" % by, field="approval.signature", value=by,
                              hint=(said[-1] if said else "ssh-keygen -Y verify failed") + "; approve the plan again with a listed key")


def _mark_used(used_dir, nonce, step, now):
    """Record that this approval ran this step: the same signature sent again for it is refused."""
    os.makedirs(used_dir, mode=0o700, exist_ok=True)
    for name in os.listdir(used_dir):
        path = os.path.join(used_dir, name)
        if os.lstat(path).st_mtime < now - 2 * MAX_VALIDITY_S:
            os.unlink(path)  # past any approval's validity: it cannot be sent again anyway
    try:
        os.close(os.open(os.path.join(used_dir, "%s.%d" % (nonce, step)), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        raise ApprovalRefused("approval %s was used for step %d already" % (nonce, step + 1), field="approval.nonce", value=nonce,
                              hint="approve the plan again") from None


def _when(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))

"""The progress of the plans the executor ran steps of, kept on the host (root only) under each request's run: one
file per run, locked while a request works on it, naming one plan and one service; the runs that stopped halfway,
for the next check to report; and the smallest piece of a plan its own rules allow to run as a plan of its own."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time

from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import judge_plan
from ansible_collections.sentinel.heal.plugins.module_utils._host.requests import MAX_TIMEOUT, RequestRefused

# one root-only file per run, kept a day
PLAN_RUN_TTL_S = 86400


def plan_runs_dir(approvals_dir):
    return os.path.join(os.path.dirname(approvals_dir), "runs")


class PlanRun(object):
    """One run of a plan on this host, locked while a request works on it: the plan, the service, each step's answer.
    A run names one plan: the same run with another plan or service is refused, so a run cannot be stitched together."""

    def __init__(self, runs_dir, run_id, service, plan):
        self.runs_dir, self.run_id, self.service, self.plan = runs_dir, run_id, service, plan
        self.answers = {}
        self._handle = None

    def __enter__(self):
        with contextlib.suppress(FileExistsError):
            os.makedirs(self.runs_dir, mode=0o700)
        _prune_runs(self.runs_dir, time.time())
        fd = os.open(os.path.join(self.runs_dir, self.run_id), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._handle = os.fdopen(fd, "r+")
        fcntl.flock(self._handle, fcntl.LOCK_EX)
        kept = self._handle.read()
        if kept:
            record = json.loads(kept)
            if record.get("plan") != self.plan or record.get("service") != self.service:
                self._handle.close()
                raise RequestRefused("run %s is a run of another plan: a run's steps all come from one plan" % self.run_id, "plan-run",
                                     field="run", value=self.run_id, hint="send each plan's steps under a run of its own")
            self.answers = dict((int(step), answer) for step, answer in record.get("answers", {}).items())
        return self

    def record(self, step, answer):
        self.answers[step] = answer
        self._handle.seek(0)
        self._handle.truncate()
        self._handle.write(json.dumps(dict(service=self.service, plan=self.plan, at=time.time(),
                                           answers=dict((str(k), v) for k, v in self.answers.items()))))
        self._handle.flush()

    def __exit__(self, *_exc):
        if self._handle is not None and not self._handle.closed:
            self._handle.close()


def unfinished_runs(approvals_dir, services, now, idle_s=MAX_TIMEOUT):
    """The runs of the services' plans that stopped halfway (a step not sent for longer than a step may take, and no
    step failed): a plan abandoned on this host, for the next check to report."""
    found = []
    runs_dir = plan_runs_dir(approvals_dir)
    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(os.path.join(runs_dir, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd) as handle:
                record = json.loads(handle.read() or "{}")
            answers = record.get("answers") or {}
            ended = any(answer.get("refused") or answer.get("rc") for answer in answers.values())
            if (record.get("service") in services and answers and not ended and len(answers) < len(record.get("plan") or ())
                    and now - record.get("at", now) > idle_s):
                found.append(dict(run=name, service=record["service"], plan=record["plan"], ran=sorted(int(step) for step in answers),
                                  at=record["at"]))
    return found


def _prune_runs(runs_dir, now):
    for name in os.listdir(runs_dir):
        path = os.path.join(runs_dir, name)
        with contextlib.suppress(OSError):
            if now - os.lstat(path).st_mtime > PLAN_RUN_TTL_S:
                os.unlink(path)


def safe_piece_end(judged, index, verdicts, context):
    """The last step of the smallest piece from ``index`` on that the plan's own rules allow as a plan of its own (its
    prefix judged as the whole plan: nothing stricter than the whole plan's verdicts)."""
    for last in range(index, len(judged)):
        piece, _decision = judge_plan(judged[:last + 1], context)
        if all(piece[step].decision is verdicts[step].decision for step in range(last + 1)):
            return last
    return len(judged) - 1

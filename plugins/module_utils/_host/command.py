# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running a read-only command on the target host, bounded in time and output (standard library only)."""

from __future__ import annotations

import os
import subprocess

from ansible_collections.sentinel.heal.plugins.module_utils._text import clip

OUTPUT_LIMIT = 2000


def run(argv, timeout, limit=OUTPUT_LIMIT, keep="start", demote=None):
    """Run argv without a shell (as another user when ``demote`` is given: it runs in the child before the command);
    returns (rc, combined output, at most ``limit`` characters with its start or its end kept) with rc None when it
    could not run."""
    env = dict(os.environ, LANG="C", LC_ALL="C", SYSTEMD_PAGER="", PAGER="cat", SYSTEMD_COLORS="0")
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL, check=False, preexec_fn=demote)
    except subprocess.TimeoutExpired:
        return None, "timed out after %ss" % timeout
    except OSError as exc:
        return None, "cannot run %s: %s" % (argv[0], exc.strerror)
    return proc.returncode, clip(proc.stdout.decode("utf-8", "replace"), limit, keep=keep)

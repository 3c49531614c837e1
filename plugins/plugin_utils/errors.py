"""The one exception hierarchy of sentinel.heal.

Every error names the field it is about, the value that was wrong and what to do, so an
operator reading a failed task knows where to look without reading code.
"""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.module_utils._errors import ConfigError, PolicyFileError, SentinelError

__all__ = ["ConfigError", "ExecutorError", "FlowError", "HostUnreachable", "JobGone", "KnowledgeError", "MemoryStoreError",
           "PolicyEngineUnavailable", "PolicyFileError", "RunbookError", "SentinelError"]


class RunbookError(ConfigError):
    """A runbook file cannot be loaded."""


class PolicyEngineUnavailable(SentinelError):
    """A parser the guard needs is not installed: nothing can be judged safe until it is."""


class MemoryStoreError(SentinelError):
    """The SQLite memory cannot be opened, migrated or written."""


class ExecutorError(SentinelError):
    """ansible-runner could not run the steps at all (not: a step failed)."""


class HostUnreachable(ExecutorError):
    """The target host did not answer while running steps."""


class JobGone(SentinelError):
    """The job this process works for has died (an Ansible worker whose ansible-playbook was killed): its run was
    killed, nothing more is done or recorded, and the remediation's lease is left for the next run to find."""


class FlowError(SentinelError):
    """The heal graph reached a node/action pair it has no transition for."""


class KnowledgeError(SentinelError):
    """The knowledge base or its embedding model cannot be opened, built, written or asked."""

# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """What the sentinel.heal actions that run on the controller share."""

    # The controller's state (sentinel.heal.controller).
    DOCUMENTATION = r"""
options:
  state_dir:
    description:
      - Directory on the controller of the memory (C(memory.sqlite3), unless the memory is on PostgreSQL with
        C(memory_url)), the run artifacts and the knowledge base.
      - SQLite's locking is unsafe on a network filesystem - a memory in a state dir on NFS, CIFS/SMB, sshfs or another
        network or FUSE-remote filesystem is refused, naming the filesystem. Keep it on a local disk, or the memory on
        PostgreSQL.
    type: path
    default: ~/.local/state/sentinel-heal
"""

    # Where the memory is when it is not the SQLite file in state_dir (sentinel.heal.controller.memory).
    MEMORY = r"""
options:
  memory_url:
    description:
      - The memory on a PostgreSQL server instead of SQLite in O(state_dir) - C(postgresql://USER@HOST:PORT/DATABASE)
        (libpq's URL; parameters such as C(?sslmode=require) or C(?options=-csearch_path%3Dheal) are passed on). Set it
        when several controllers or AWX execution nodes share one memory - episodes, plans awaiting approval, leases,
        the kill switch, silences, flapping resets and canaries; every job that names the same database sees the same
        memory. The role's C(autoheal_memory_url).
      - The tables are made, and migrated, when the memory is opened; the role needs the right to create tables in the
        database (its owner, say). Give the memory a database of its own.
      - Empty (the default) is the SQLite memory in O(state_dir).
      - Errors name this option with the password masked, and say what to do (the server does not answer, the login
        was refused, the database does not exist).
    type: str
    default: ""
  memory_password:
    description:
      - The password of the role O(memory_url) logs in as. Never shown, stored or logged.
      - When omitted, the password written in O(memory_url), else libpq's own - C(PGPASSWORD) in the controller's
        environment (what an AWX credential of a custom type can inject) or C(~/.pgpass).
    type: str
"""

    # The limits every remediation obeys, unattended or approved (sentinel.heal.controller.limits).
    LIMITS = r"""
options:
  flap_limit:
    description:
      - The flapping limit - at most this many remediations (attempts that ran a plan, healed or not) of a service on a
        host within O(flap_window), counted in memory, so across jobs. Past it the service ends C(escalated) with the
        reason C(flapping) and its recent episodes, nothing runs (an approved plan neither) until the window has passed
        or a person resets the count (M(sentinel.heal.flapping_reset)).
      - What counts is a choice. As Monit counts restarts, a separate heal that worked counts - a service healed again
        and again keeps breaking, and a person should look at why - and so does an interrupted remediation. The
        incident's own attempts do not count (O(sentinel.heal.heal#module:max_attempts) bounds its retries), so a first
        incident is never refused, whatever the limit. Nor do a plan that only waited for a person and a limit's refusal,
        which is recorded as an episode (outcome C(flapping), C(silenced), C(suspended) or C(deferred)) and an audit
        record that name the limit, until when and the command that lifts it.
      - C(0) turns the limit off (0-100).
    type: int
    default: 3
  flap_window:
    description: Seconds over which O(flap_limit) counts remediations (60 to 604800).
    type: int
    default: 3600
  max_running:
    description:
      - The blast radius - at most this many remediations running at the same time across every fork of the play and
        every job that shares O(state_dir), coordinated through leases in memory. A lease whose job died (or whose steps
        could all have run) is freed, and its remediation recorded C(interrupted), by the next remediation or run. A
        remediation over the cap does not start, and its incident ends C(deferred) with the reason; the next run takes
        it up.
      - C(0), the default, is no cap (0-1000).
    type: int
    default: 0
  max_hosts_per_run:
    description:
      - The blast radius - at most this many hosts remediated by one run (one ansible-playbook, all its forks; one AWX job).
        The other hosts' incidents end C(deferred), never silently skipped.
      - C(0), the default, is no cap (0-100000).
    type: int
    default: 0
  max_attempts_per_run:
    description:
      - The budget of one run - at most this many remediation attempts by one run (all its forks; one AWX job),
        counted in memory. Past it, incidents end C(deferred) with the reason; the next run takes them up.
      - C(0), the default, is no budget (0-1000000).
    type: int
    default: 0
  max_fail_percentage:
    description:
      - The run's error threshold, in the spirit of Ansible's own C(max_fail_percentage) - once remediations failed
        verification on more than this percentage of the run's hosts (the play's hosts, every C(serial) batch
        included; one AWX job), nothing more is attempted in the run - not a host's next attempt, not an approved plan -
        and the remaining incidents end C(halted) with the reason (0-100; C(0) halts after the first failure).
      - Unset, the default, is no threshold.
    type: int
  maintenance_windows:
    description:
      - Declared maintenance windows (the role's C(autoheal_maintenance_windows), per host or group as any inventory
        variable). While one covers a service, it is checked and ends C(silenced); nothing is planned, run or approved.
      - A recurring window has C(start) and C(end) (C(HH:MM); an C(end) before C(start) runs past midnight), optional
        C(days) (C(mon) ... C(sun); every day when omitted) and C(timezone) (an IANA name; C(UTC) when omitted). A
        one-off window has C(from) and C(until) (ISO 8601 with a UTC offset). Either may have a C(name) and
        C(services) (all when omitted). A window that cannot be read fails the task, naming the window, the key and the
        value.
    type: list
    elements: dict
    default: []
  incident_timeout:
    description:
      - Seconds an incident may take from its first diagnosis (30 to 86400). No attempt starts after it, a run that
        starts gets only what is left of it as its timeout, and the incident ends C(escalated) with the reason, so a
        stuck incident never holds the job.
    type: int
    default: 600
"""

    # How a repair is verified, by the heal and the run of an approved plan (sentinel.heal.controller.verification).
    VERIFICATION = r"""
options:
  verify_delay:
    description: Seconds between two verification checks.
    type: float
    default: 2.0
  settle_seconds:
    description:
      - Seconds a repaired service must stay as it is before it counts as healed (0 to 300); each verification
        check watches it this long (M(sentinel.heal.service_check)'s O(sentinel.heal.service_check#module:settle_seconds)), and one
        that systemd restarted meanwhile, or whose process changed, is still failing. A service's own
        C(settle_seconds) takes its place. V(0) trusts one passing check.
      - It costs this long per verification check of each repaired service, about the time of one check
        more than without it.
    type: float
    default: 3.0
"""

    # How the actions that run steps on a host run them (sentinel.heal.controller.steps).
    STEPS = r"""
options:
  step_timeout:
    description: Seconds each step may run on the host (1-3600).
    type: int
    default: 120
"""

    # Where the actions that read or run as root on a host do it (sentinel.heal.controller.privilege).
    PRIVILEGE = r"""
options:
  step_privilege:
    description:
      - How a step the policy runs as root gets there.
      - C(become) uses the play's privilege escalation (Ansible runs a shell and Python as root, so the
        host's sudo rule must allow any command).
      - C(sudo) runs the step as C(sudo -n -- ARGV) without Ansible's become, so a sudo rule on the host
        can allow exactly the commands the policy can allow, a second line behind the guard (see
        C(policies/sudoers.example)). A command the host's rule does not allow fails there.
      - C(executor) sends every step and every read of the loop, root or not, to the executor on the host that the
        role C(sentinel.heal.host) installs, which judges the step again with the host's policy, in the context it
        gathers there and runs it only when that policy allows it. A step it refuses ends the incident escalated,
        like a plan the guard blocked. Plans a person approved run only where the host's policy allows them too.
      - C(auto) is C(executor) on a host that has the executor installed (one C(test -x) over the task's connection
        first, as its account), and C(become) elsewhere. With the executor, nothing of the task uses the play's become.
        The result then says where the policy was enforced (C(enforcement), and a line of C(summary)), naming a host
        that ran without the executor, or whose healing account keeps other sudo rules beside it.
    type: str
    choices: [become, sudo, executor, auto]
    default: become
"""

    # How such an action behaves (sentinel.heal.controller.attributes).
    ATTRIBUTES = r"""
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
"""

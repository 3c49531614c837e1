#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# One file over 400 lines because an Ansible module is one file: its documentation (DOCUMENTATION, EXAMPLES, RETURN),
# then main(), which checks the arguments against the spec and makes one call into module_utils, where the check lives.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: service_check
short_description: Check services on a host and gather evidence about the ones that fail
version_added: 0.1.0
description:
  - Checks a list of services in one call. Each service may combine several checks, and it is
    healthy only when all of them pass.
  - Check kinds are the init system's status of the service (systemd or sysv init scripts, detected
    on the host), TCP ports that must accept connections, an HTTP request with an expected status
    and optional body match, a running process, and a command whose output must contain a
    running indicator.
  - For each failing service the module gathers bounded evidence (status output, the tail of the
    service's log files, the processes that hold its ports, what its pid file says, the owner of its
    declared paths, how full the filesystems of its paths and logs are), classifies the failure and
    redacts obvious secrets (passwords in URLs, tokens, private keys, C(PASSWORD=) lines) before
    anything leaves the host.
  - Changes nothing the service reads. Outside check mode it keeps a healthy service's configuration as its last
    known good in a root-only directory of its own (see O(services[].configs)), and reports C(changed) when that
    copy changed; for a failing service the evidence says what changed since (C(changes)). Beside it, it keeps the
    owner, group and mode of each of the service's directories (C(owned_dirs)). In check mode it keeps nothing.
  - Runs with the standard library of the target's Python only. Reading other users' logs and
    sockets needs privilege escalation (C(become)).
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - With O(through_executor), the host keeps a healthy service's last known good configuration at every check,
        check mode included - what counts as good is the host's to decide, never its caller's.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
options:
  services:
    description: The services to check.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - Name of the service for memory, runbooks and reports.
          - Letters, digits and C(@._+-) only; unique within O(services).
        type: str
        required: true
      service:
        description: Init script or systemd unit of the service. Defaults to O(services[].name).
        type: str
      status_check:
        description: Ask the init system (systemd or the sysv init script) whether the service runs.
        type: bool
        default: true
      ports:
        description: TCP ports that must accept a connection on O(services[].address).
        type: list
        elements: int
        default: []
      address:
        description: Address the port checks connect to.
        type: str
        default: 127.0.0.1
      http:
        description: An HTTP request the service must answer.
        type: dict
        suboptions:
          url:
            description: URL to request (C(http://) or C(https://)); proxies are not used.
            type: str
            required: true
          status:
            description: Expected HTTP status.
            type: int
            default: 200
          body:
            description: Regular expression the response body must match.
            type: str
      process:
        description:
          - Name of a process (as in C(/proc/PID/comm)) that must be running in the host's own pid namespace (a
            container's process of that name, seen from the host, does not count).
          - Also names the service's program (found in C(PATH) and the sbin directories). A process running that
            program on the service's port outside every service's unit is the service's own, a server its init script
            lost; a process that only carries the name never is. Defaults to the init service name for that purpose.
        type: str
      check_command:
        description:
          - A command (split like a shell would, but never run through one) that must exit 0.
        type: str
      running_indicator:
        description: Text that the output of O(services[].check_command) must contain.
        type: str
      pidfile:
        description: Pid file of the service, read to tell a crashed service from a stopped one.
        type: path
      logs:
        description: Log files whose tail is gathered as evidence when the service fails.
        type: list
        elements: path
        default: []
      user:
        description:
          - The account the service runs as. The command policy lets remediation give ownership of the
            service's own directories back to this account (for example after a wrong C(chown)).
          - When the service fails, each of O(services[].paths) not owned by this account is named in the
            summary (C(/var/lib/redis is owned by root:root, not redis)).
        type: str
      paths:
        description:
          - Directories that belong to the service (data, runtime, logs). Remediation may write only below the
            service's directories - these, its log directories and C(/var/log), C(/run), C(/var/lib),
            C(/var/cache) followed by its name.
          - When the service fails, the summary names those that do not exist (C(/run/redis does not exist))
            or are not owned by O(services[].user), and the filesystems of these paths and of the log files
            that are full (C(disk full) followed by the path, 99% or more used or nothing left) or out of
            inodes (C(inodes exhausted) followed by the path). At most 8 are looked at.
        type: list
        elements: path
        default: []
      sockets:
        description:
          - Unix sockets the service listens on (for example C(/run/postgresql/.s.PGSQL.5432)). When the service
            fails, each (at most 8) is looked at - a socket file no process of the host's network namespace has
            bound is left over from a killed daemon, and so is its lock file (C(PATH.lock), as PostgreSQL writes
            one) when the pid it names is dead or belongs to another program (the pid was reused). Both are named
            in the summary, and the command policy lets remediation remove exactly those files.
          - The failure is C(stale_socket) when they keep the service from starting - a lock file naming no pid or
            a live program of another name, or a left-over socket without a lock file. A lock naming a dead pid is
            its owner's to clean up at its next start (PostgreSQL does), so it alone does not make the class.
        type: list
        elements: path
        default: []
      timeout:
        description: Seconds each check of this service may take.
        type: float
        default: 5.0
      configs:
        description:
          - Configuration files of the service beyond its Debian packages' own (paths or shell globs, for example
            C(/etc/postgresql/15/main/*.conf)). While every check of the service passes (outside check mode), its
            configuration is kept on the host as its last known good - its packages' conffiles, the files in the
            C(*-enabled) and C(*.d) directories of its own configuration directory, its local unit file and
            drop-ins in C(/etc/systemd/system), C(/etc/NAME.conf) of its names, and these - in
            C(/var/lib/sentinel-heal/known-good) (root only, 0700; up to 2048 files, one over 256 KiB by its hash only).
            Contents never leave the host. A service runs on the configuration it started with, so a changed
            configuration is kept as good only when its configuration test (O(services[].config_test)) passes on it.
        type: list
        elements: str
        default: []
      known_good:
        description:
          - Keep the service's last known good configuration on the host (see O(services[].configs)) and say what
            changed since when it fails. V(false) keeps nothing and reads nothing of it.
        type: bool
        default: true
      restore_known_good:
        description:
          - How M(sentinel.heal.heal) may put back the last known good version of a configuration file that changed
            since the service last worked, when its failure is a configuration error that file explains - V(approve)
            (a person sees the diff of what is put back and approves it), V(auto) (unattended where a configuration
            test checks the restored file - built in, or O(services[].config_test) - else with a person) or V(off)
            (never, and the escalation says what changed). The current version is kept aside on the host, never lost.
          - Unset, the heal's O(sentinel.heal.heal#module:restore_known_good) on the controller and the host role's
            O(sentinel.heal.host#role:main:host_restore_known_good) on the host.
        type: str
        choices: [approve, auto, "off"]
      config_test:
        description:
          - The service's configuration test, run after a restore of its last known good configuration (a command
            and its arguments, split as a shell would but never run by one); a failing test undoes the restore.
          - Unset, C(nginx -t) for nginx, C(apache2ctl configtest) for apache2, C(sshd -t) for ssh,
            C(haproxy -c -f /etc/haproxy/haproxy.cfg) for haproxy, C(named-checkconf) for named and bind9,
            C(unbound-checkconf) for unbound, none otherwise.
        type: str
      settle_seconds:
        description:
          - How long this service must stay as it is, once it passes its checks, before it counts as healthy, in
            place of O(settle_seconds) (0 to 300; 0 checks it once, always). A check with O(settle_seconds) above 0
            watches every service, as the heal's verification does after a repair; a check with V(0) only a unit
            systemd restarted lately, for this window or the default 3 s.
          - A service that takes long to fail after its start (a worker that dies on its first job) needs a longer
            window; every verification of it waits that long.
        type: float
      depends_on:
        description:
          - Other declared services of the host this one needs, where systemd does not know it (an HTTP upstream, a
            database reached over TCP). When this service and one it depends on both fail, M(sentinel.heal.heal)
            heals the dependency first, then checks this one again before it plans anything for it; systemd's own
            C(Requires=), C(BindsTo=) and C(After=) between declared units count the same way, and so does a backend
            its configuration names (a port on the host's loopback another declared service listens on, as with haproxy's
            C(server web 127.0.0.1:8081) in front of apache2 on 8081; RV(failures[].evidence.backends)).
          - The check itself ignores it.
        type: list
        elements: str
        default: []
      mode:
        description:
          - How far M(sentinel.heal.heal) acts on this service, over the host's O(sentinel.heal.heal#module:mode) -
            C(observe) (check, diagnose and plan; nothing runs and nothing waits), C(review) (every plan waits for a
            person, even one the policy allows) or C(autonomous). The check itself ignores it.
        type: str
        choices: [observe, review, autonomous]
  log_lines:
    description: How many lines of each log file to gather (1-500).
    type: int
    default: 20
  settle_seconds:
    description:
      - Watch each service that passes its checks this many seconds (its own O(services[].settle_seconds) in its
        place), then check it again (0 to 300). It is failing when it fails then, or when the service manager restarted
        it meanwhile - on systemd any unit that runs it changed its C(NRestarts), main PID or activation time, on sysv
        its pid file names another process (the processes of its name are never compared) -, whatever one check said; a unit systemd's C(Restart=)
        restarted is C(restart_loop). RV(services[].settled) says what the window saw.
      - The windows run at once; the check takes as long as the longest. V(0) checks once (a sweep), but for a unit
        that systemd's C(Restart=) restarted under a minute ago, which is watched for its own window or 3 s - a unit
        in a restart loop looks active in most snapshots.
      - Whatever the window, a unit that systemd's C(Restart=) restarted three times or more in the last minute, or
        since a check found the service healthy in the last hour, is C(restart_loop) at once - unless it has been up
        more than twice its longest run since. Outside check mode each check that finds a service healthy keeps how
        many times systemd had restarted its units beside its last known good configuration, for the next check to
        count from.
    type: float
    default: 0.0
  redact_values:
    description: Literal secrets to mask in the evidence, in addition to the built-in patterns.
    type: list
    elements: str
    default: []
  evidence_commands:
    description:
      - Read-only commands to run for a service only when it fails, in the same call (never through a shell), their
        output gathered as evidence (C(evidence.commands)). M(sentinel.heal.heal) passes the ones its command policy
        allows for each service (its runbooks' C(evidence)), so a failing service's evidence needs no second call.
      - None runs while a maintenance marker is on the host, nor for a unit that is masked or that systemd restarts
        by itself (failure classes C(masked), C(auto_restart)).
      - The policy is the guard - this module runs what it is given. Give only commands that read.
    type: list
    elements: dict
    default: []
    suboptions:
      service:
        description: The O(services[].name) the command is for.
        type: str
        required: true
      argv:
        description: The command, one argument per element.
        type: list
        elements: str
        required: true
      become:
        description:
          - Run it as root (the policy's rule says so); otherwise as the user who logged in, even when the task
            runs with C(become).
        type: bool
        default: false
  evidence_privilege:
    description:
      - How a command with O(evidence_commands[].become) gets root - the task's C(become), or C(sudo -n --) for a
        host whose sudo rule allows exactly what the policy can allow.
    type: str
    default: become
    choices: [become, sudo]
  evidence_timeout:
    description: Seconds each of O(evidence_commands) may take (1-3600).
    type: int
    default: 120
  through_executor:
    description:
      - Ask the executor on the host (installed by the role C(sentinel.heal.host)) to check the services, as root, through
        its one sudo rule, instead of checking them in this module. Run the module without become then.
      - The executor checks the services as the host declares them (C(/etc/sentinel-heal/services.json)), by the names
        in O(services); a name the host does not declare fails the module.
      - O(evidence_commands) go to the executor with the check; it judges each with the host's policy, for a service
        it finds failing, as a read of its own would be judged, and runs it as the host's policy says (not as
        O(evidence_commands[].become) says); a command the host refuses answers with C(rc) null and the refusal.
    type: bool
    default: false
  policy_version:
    description:
      - With O(through_executor), the version of the command policy the controller judges with. The executor refuses
        the check while it enforces another (apply the role C(sentinel.heal.host) again); required with
        O(through_executor).
    type: str
  enforcement:
    description:
      - Where the check runs as root, resolved on the controller before the module reaches the host, as the heal's
        C(autoheal_enforcement) is.
      - V(auto) asks the executor where the host has it installed (as O(through_executor), under the version of
        O(policy_file), and without become for this task) and checks in this module elsewhere; V(host) asks the
        executor and fails where the host has none; V(controller) checks in this module, as O(through_executor) says.
      - The watchdog (C(sentinel.heal.watchdog)) checks with the inventory's C(autoheal_enforcement), V(auto) by default.
    type: str
    choices: [auto, host, controller]
    default: controller
  policy_file:
    description:
      - With O(enforcement=auto) or O(enforcement=host), the command policy the controller judges with, whose version the
        executor checks under (as the heal's C(autoheal_policy_file)); empty, the policy shipped with the collection.
    type: path
seealso:
  - module: sentinel.heal.heal
"""

EXAMPLES = r"""
- name: Check nginx and postgresql
  sentinel.heal.service_check:
    services:
      - name: nginx
        ports: [80]
        http:
          url: http://127.0.0.1/
        pidfile: /run/nginx.pid
        logs: [/var/log/nginx/error.log]
      - name: postgresql
        check_command: pg_isready
        running_indicator: accepting connections
        process: postgres
  become: true
  register: health

- name: Show what failed
  ansible.builtin.debug:
    msg: "{{ health.failures | map(attribute='summary') }}"
"""

RETURN = r"""
healthy:
  description: Whether every service passed every check.
  returned: always
  type: bool
  sample: false
services:
  description: One result per declared service, in the declared order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The service's name.
      type: str
    healthy:
      description: Whether all its checks passed.
      type: bool
    checks:
      description: Each check with C(kind), C(target), C(ok) and a one-line C(detail).
      type: list
      elements: dict
    spec:
      description: The service declaration as checked (with defaults filled in).
      type: dict
    known_good:
      description:
        - For a healthy service, outside check mode (or through the executor) - its configuration as it was kept as the last known good, by
          C(at) (when), C(changed) (a file or its packages differ from the copy kept before) and C(files) (C(path),
          C(size), C(sha256) and C(kept), false for a file known by its hash only); or C(error), why nothing could be
          kept (the check does not fail for it). No file's content.
      type: dict
      returned: for a healthy service outside check mode
    settled:
      description:
        - What its settle window saw (O(settle_seconds)) - C(window_s), C(held) (it passed again at the end and
          nothing restarted it) and C(changes) (each thing that changed meanwhile, in a sentence such as C(unit
          memcached.service was restarted 4 times by systemd's Restart=always within its 3 s settle window (main PID
          812 -> 833))).
      type: dict
      returned: for a service that passed its checks, when O(settle_seconds) is above 0 or systemd restarted it lately
failures:
  description: The results of the services that failed, each with the keys of O(services) results plus the ones below.
  returned: always
  type: list
  elements: dict
  contains:
    failure_class:
      description:
        - C(not_installed) (no unit or init script of the service's name, no program of its process's name on
          the host, and none running; only for services with a status check), C(masked) (on a systemd host, a
          person masked the unit), C(port_conflict), C(auto_restart) (systemd
          restarts the unit by itself, its C(Restart=)), C(start_limit_hit) (the unit was started too often and
          its last run ended cleanly), C(restart_loop) (the unit kept failing until its start limit stopped
          it), C(stale_pidfile), C(stale_socket) (a declared Unix socket or its lock file, left over by a
          daemon that died, keeps it from starting; see O(services[].sockets)), C(not_running) or C(unhealthy).
        - On a systemd host the summary also says what systemd reports - the unit that failed, its result,
          the step that failed and how, its drop-ins, failed requirements, and the journal's line that
          names the cause.
      type: str
    summary:
      description: One line saying what failed, redacted.
      type: str
    evidence:
      description: What service_check saw about the failed service, redacted.
      type: dict
      contains:
        status:
          description: The status command (C(command)), its C(rc) and its C(output).
          type: dict
        logs:
          description: The tail of each declared log file, by path.
          type: dict
        port_owners:
          description:
            - The processes holding the declared ports (C(port), C(pid), C(process), C(cmdline), and C(unit), the
              systemd unit whose cgroup holds the process, or null). On a systemd host also C(own), true for a process
              of the service's own units (its unit, the unit it fronts or that fronts it), or systemd itself (pid 1)
              when a socket unit starts the service (C(TriggeredBy=), bookworm's C(mariadb.socket)) and never a stranger
              on the port.
            - C(service), the other declared service the process is (its pid file names the pid, or it carries that
              service's process name), or null. A process of another systemd service or of another declared service
              is that service, not a squatter the policy lets a plan stop unattended.
            - C(root), true when any of its user ids is 0 (null when C(/proc) no longer tells). Outside the service's
              own processes (C(service_pids)) the policy never lets a plan signal it.
            - C(service_program), true when it runs the service's program (its C(/proc/PID/exe)). Outside every
              service's unit, such a process on the service's port is the service's, a server its init script lost.
          type: list
          elements: dict
        pidfile:
          description: The declared pid file (C(path), C(exists), C(pid), C(alive), C(process)), or null.
          type: dict
        processes:
          description:
            - The pids of the processes carrying the service's process name anywhere on the host (at most 20), for
              the diagnosis; a process of that name started outside the service is among them. The guard never binds
              a pid to the service by its name (C(service_pids)).
          type: list
          elements: int
        service_pids:
          description:
            - The pids of the service's own processes (at most 20, lowest first). On a systemd host those in the
              cgroups of its units, elsewhere the process its pid file names (when it is alive and the service's)
              and every process descended from it.
          type: list
          elements: int
        paths:
          description:
            - Each declared path (at most 8) with C(path) and C(exists) (null when it cannot be looked at, with
              C(error)); existing ones also with C(type) (C(directory), C(file) or C(other)), C(owner),
              C(group) and C(mode) (octal).
          type: list
          elements: dict
        sockets:
          description:
            - Each declared Unix socket (at most 8) - C(path), C(exists), C(socket) (the file is a socket),
              C(bound) (a process of the host's network namespace has it bound), C(stale) (a socket file nothing
              has bound) and C(lock), its lock file C(PATH.lock) as for O(services[].pidfile) plus C(stale).
          type: list
          elements: dict
        commands:
          description:
            - What O(evidence_commands) for the service printed, when any were given - C(argv), C(rc) (null when it
              could not run), C(output) (stdout and stderr, capped, redacted) and C(duration).
          type: list
          elements: dict
          returned: when O(evidence_commands) names the service
        installed:
          description:
            - Whether the service is installed - C(unit) (systemd knows a unit of its name), C(init_script)
              (C(/etc/init.d/NAME) exists) and C(program) (where the program of the process's name is, or null).
          type: dict
        disk:
          description:
            - The filesystem of each declared path and log directory (at most 8), as df counts it - C(path),
              C(size_kb), C(free_kb) (what non-root processes may still use), C(used_percent), C(inodes),
              C(inodes_free), C(inodes_percent), and C(full) / C(inodes_exhausted) (99% or more used, or
              nothing left).
          type: list
          elements: dict
        path_owners:
          description:
            - Who owns each component on the way to each declared path, log, socket (and its lock file) and pid file,
              the path itself included (a dict from path to account name, C((link)) for a symbolic link, below which
              nothing is looked at; at most 64). The guard allows an ownership or mode repair only where every
              directory on the way is root's, since any other account could put a link in place of what it holds, and
              a read in a directory the service's account owns only of a file seen there that is no link.
          type: dict
        packages:
          description:
            - The Debian packages that installed the service's unit file, init script or program (C(names)) and the
              files they put under C(/etc) (C(etc), at most 200), from dpkg's own lists; null on a host without dpkg.
              A read of the incident may print them (the guard binds reads to the incident's own files).
          type: dict
        backends:
          description:
            - The ports on the host's loopback that the service's configuration files name, outside comments
              (C(127.0.0.1:PORT), C(localhost:PORT), C([::1]:PORT)), but its own ports; at most 16. A declared service
              listening on one is a dependency of this one, as O(services[].depends_on) says.
          type: list
          elements: int
        mounts:
          description:
            - The host's mount points but the kernel's own (C(/proc), C(/sys), C(/dev)), or null when there are more
              than 256; a recursive repair never walks into another filesystem.
          type: list
          elements: str
        owned_dirs:
          description:
            - The owner, group and mode each of the service's directories should have, as the host says it (at most
              16) - C(path), C(owner), C(group), C(mode) (octal text, C("0755")), C(tree) (everything below has the same
              owner and group) and C(source), where it comes from. The service's directories are its declared
              O(services[].paths), the directories of its O(services[].logs), its unit's directories and
              C(/var/lib/NAME), C(/var/log/NAME), C(/run/NAME) and C(/var/cache/NAME) of its names; never one many
              services share (C(/var/log), C(/run)).
            - The first source that names a directory decides. C(unit RuntimeDirectory=) (or C(StateDirectory=),
              C(CacheDirectory=), C(LogsDirectory=)) - what systemd makes at the unit's start with its C(User=) (root
              when unset), C(Group=) (the user's primary group when unset) and the setting's mode (0755 when unset),
              the account's down the whole tree for all but C(RuntimeDirectory=); C(dpkg-statoverride); then
              C(seen while healthy at TIME) - what the directory was, kept beside the last known good configuration
              while every check of the service passed (so only with O(services[].known_good)), and good only once the
              service started with it (a C(chmod -R) that went too far under a running service is never reported; a
              walk of at most 2048 entries below tells a tree, unknown is none).
            - The guard gives back these owners and modes before the policy's C(package_paths), which speak for the
              paths the host says nothing of.
          type: list
          elements: dict
        unit:
          description:
            - On a systemd host, the unit that really runs the service (aliases resolved; for a wrapper unit
              such as Debian's C(postgresql) - one that runs nothing itself, a target or a C(oneshot) that remains
              active, and fronts the services C(PartOf=) it - the member unit that is not active, with the wrapper's
              state and the units it fronts under C(Wrapper); a timer or a helper C(PartOf=) a unit that runs a
              process of its own is that service's, never its runner) as C(systemctl show) reports it - C(Id),
              C(LoadState), C(ActiveState), C(SubState), C(Type), C(RemainAfterExit),
              C(Result), C(UnitFileState), C(NRestarts), C(ExecMainCode), C(ExecMainStatus), C(Restart),
              C(RestartUSec), C(FragmentPath), C(DropInPaths), C(ConsistsOf), C(Requires), C(BindsTo),
              C(Requisite), C(RuntimeDirectory), C(StateDirectory), C(CacheDirectory), C(LogsDirectory) and their
              modes (C(RuntimeDirectoryMode), ...), C(User), C(Group), C(DynamicUser), C(TriggeredBy), C(Names)
              (every name systemd knows the unit by, so Debian's C(redis-server.service) is C(redis.service) too) and the
              timestamps of its last start; null elsewhere.
            - Also C(failed_step) (the first C(ExecStartPre=), C(ExecStart=), ... of its last run that failed -
              C(step), C(path), C(code), C(status), such as 203 for EXEC or 217 for USER), C(failed_requirements),
              C(restart_delay_s) (its C(RestartSec)), C(restart_in_s) (for a unit in C(auto-restart), the
              seconds until systemd restarts it), C(journal) (its journal lines since its last start, at most O(log_lines),
              redacted) and C(cause) (the journal's line that names what went wrong, or null).
          type: dict
        changes:
          description:
            - What changed since the service was last seen good (null when it never was, or nothing could be read) -
              C(good_at), C(files) (each C(path), C(change) - C(modified), C(added) or C(removed) - C(changed_at),
              C(before_failure_s) and, for a modified text file kept in full, C(diff), a unified diff of the last known
              good version against the current one, redacted, at most 4000 characters) and C(packages) (installs,
              upgrades and removals of its packages in dpkg's log since, each C(action), C(package), C(before),
              C(after) and C(at)); on a systemd host also C(units), the other services systemd started since (a
              timer's, a configuration-management run), each C(unit) and C(at) (its latest starts, at most 3), the
              unit started last at the end, at most 10.
          type: dict
        collected_at:
          description: When the evidence was gathered (seconds since the epoch).
          type: float
  sample:
    - name: nginx
      failure_class: stale_pidfile
      summary: "/etc/init.d/nginx status: rc=3: nginx is not running; pid file /run/nginx.pid names pid 812, which is not running"
facts:
  description:
    - The host's service manager, C(/etc/os-release) identity and C(maintenance) - the maintenance marker a person
      left in C(/etc/sentinel-heal/maintenance) (root-owned; optional C(reason), C(services), C(until) and C(by)
      lines; empty means the whole host until removed), with its C(problem) when it cannot be read as written,
      or null when there is none. M(sentinel.heal.heal) keeps its hands off what a marker covers.
    - With O(through_executor), also C(unfinished_plans) (the runs of a plan the executor began and nobody finished)
      and C(enforcement) - C(enforced), whether the executor is all the healing account may run as root, and
      C(other_rules), its other sudo rules (C(sudo -l)) when it is not.
  returned: always
  type: dict
  sample: {service_manager: sysv, os: {id: debian, version_id: "12"}, maintenance: null}
"""

from ansible.module_utils import basic
from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sentinel.heal.plugins.module_utils._entries import checked_spec
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import ARGUMENT_SPEC, ProbeConfigError, check_services


def main():
    spec, entry_errors = checked_spec(ARGUMENT_SPEC, basic._load_params())
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_if=[("through_executor", True, ("policy_version",))])
    if entry_errors:
        module.fail_json(msg="; ".join(entry_errors))
    try:
        if module.params["through_executor"]:
            # imported only when asked: a host compiles the judge and its policy language from the module's zip at every
            # start (about 35 ms), and only the executor needs them
            from ansible_collections.sentinel.heal.plugins.module_utils._host.asking import check_through_executor
            result = check_through_executor(module.params)
        else:
            # outside check mode a healthy service's configuration is kept on the host as its last known good
            result = check_services(module.params, keep_known_good=not module.check_mode)
    except ProbeConfigError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=any((service.get("known_good") or {}).get("changed") for service in result["services"]), **result)


if __name__ == "__main__":
    main()

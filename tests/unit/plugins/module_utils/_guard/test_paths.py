"""Paths as the kernel opens them: the guard's resolver against a model filesystem walked the kernel's way."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.sentinel.heal.plugins.module_utils._guard.paths import PathResolver, compile_patterns, validate_symlinks
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import Policy, PolicyContext, Rule, evaluate, load_policy, parse_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision

POLICY = load_policy()
RESOLVER = POLICY.paths

# A Debian bookworm host as the kernel sees it: merged /usr, /var/run, and /proc's magic links, which
# lead back to the root (every process of the lab runs in /).
HOST_SYMLINKS = {
    "/bin": "/usr/bin", "/sbin": "/usr/sbin", "/lib": "/usr/lib", "/lib64": "/usr/lib64", "/var/run": "/run",
    "/var/lock": "/run/lock", "/dev/fd": "/proc/self/fd", "/proc/self": "/proc/4242", "/proc/thread-self": "/proc/4242/task/4242",
    "/proc/1/root": "/", "/proc/4242/root": "/", "/proc/4242/cwd": "/root", "/proc/4242/task/4242/root": "/",
}


def kernel_open(path: str) -> str:
    """The path the kernel reaches for an absolute path on the model host: one component at a time,
    each symlink replaced by its target (absolute targets from the root), '..' at the root staying there."""
    stack: list[str] = []
    pending = path.split("/")[::-1]
    for _hop in range(1000):
        if not pending:
            return "/" + "/".join(stack)
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            stack = stack[:-1]
            continue
        here = "/" + "/".join([*stack, part])
        if here in HOST_SYMLINKS:
            stack = []
            pending.extend(HOST_SYMLINKS[here].split("/")[::-1])
        else:
            stack.append(part)
    raise AssertionError(f"symlink loop in {path}")


TARGETS = ["/etc/shadow", "/etc/ssh/ssh_host_ed25519_key", "/root/.ssh/id_ed25519", "/usr/lib/postgresql/15/bin/postgres",
           "/var/lib/postgresql/15/main", "/run/postgresql", "/run/nginx.pid", "/var/log/nginx/error.log", "/etc/nginx/nginx.conf",
           "/var/lib/dpkg/status", "/etc/passwd", "/run/sshd"]
_SWAPS = [("/usr/lib/", "/lib/"), ("/usr/bin/", "/bin/"), ("/usr/sbin/", "/sbin/"), ("/run/", "/var/run/"), ("/", "/proc/1/root/"),
          ("/", "/proc/self/root/"), ("/", "/proc/thread-self/root/"), ("/", "/proc/4242/task/4242/root/"), ("/", "//"),
          ("/root/", "/proc/self/cwd/"), ("/etc/", "/var/run/../etc/"), ("/etc/", "/var/run/../../etc/")]


@st.composite
def aliases(draw: st.DrawFn) -> str:
    """A path, dressed as an attacker would: doubled slashes, /./, climbs out of other directories,
    symlinked prefixes, /proc roots; each edit keeps the path the kernel opens the same, or changes it."""
    path = draw(st.sampled_from(TARGETS))
    for _edit in range(draw(st.integers(min_value=1, max_value=4))):
        kind = draw(st.sampled_from(["slash", "dot", "climb", "swap", "trailing"]))
        cuts = [i for i, char in enumerate(path) if char == "/"]
        cut = draw(st.sampled_from(cuts))
        if kind == "slash":
            path = path[:cut] + "/" + path[cut:]
        elif kind == "dot":
            path = path[:cut] + "/." + path[cut:]
        elif kind == "climb":
            name = draw(st.sampled_from(["run", "var", "lib", "nginx", "postgresql", "log", "x", "..", "var/run", "bin"]))
            path = path[:cut] + f"/{name}/.." + path[cut:]
        elif kind == "swap":
            old, new = draw(st.sampled_from(_SWAPS))
            path = path.replace(old, new, 1) if old in path else path
        else:
            path += draw(st.sampled_from(["/", "/.", "/./"]))
    return path


def test_the_model_agrees_with_itself_on_plain_paths() -> None:
    assert kernel_open("/var/run/../lib/postgresql") == "/usr/lib/postgresql"
    assert kernel_open("/proc/self/root/etc/shadow") == "/etc/shadow"
    assert kernel_open("/../../etc") == "/etc"


@pytest.mark.parametrize(("arg", "canonical"), [
    ("/run/nginx.pid", "/run/nginx.pid"),
    ("//run//nginx.pid", "/run/nginx.pid"),
    ("/var/run/nginx.pid", "/run/nginx.pid"),
    ("/run/../run/nginx.pid", "/run/nginx.pid"),
    ("/var/run/../lib/postgresql", "/usr/lib/postgresql"),   # what the kernel opens, not /var/lib/postgresql
    ("/bin/../etc/shadow", "/usr/etc/shadow"),
    ("/lib/x", "/usr/lib/x"),
    ("/./etc/./nginx/", "/etc/nginx"),
    ("/var/log/nginx/../../../etc/shadow", None),            # nginx/.. : /var/log/nginx could be a symlink
    ("/var/lib/postgresql/15/main/../../../../etc", None),
    ("relative/path", None),
    ("../../etc/shadow", None),
    ("/run/*.pid", None),
])
def test_canonical_paths_are_what_the_kernel_opens_or_none(arg: str, canonical: str | None) -> None:
    assert RESOLVER.canonical(arg) == canonical


@pytest.mark.parametrize(("arg", "reading"), [
    ("//etc/shadow", "/etc/shadow"),
    ("../../../../etc/shadow", "/etc/shadow"),                # relative to the login user's home, climbing to /
    (".ssh/id_rsa", "/.ssh/id_rsa"),
    ("@.pgpass", "/.pgpass"),                                # curl's @FILE
    ("/var/log/nginx/../../../etc/shadow", "/etc/shadow"),   # lexically, and through a real directory
    ("/var/run/../lib/postgresql", "/usr/lib/postgresql"),
    ("/var/run/../lib/postgresql", "/var/lib/postgresql"),
    ("/dev/fd/3", "/proc/self"),                              # a magic link stands for wherever it leads
    ("/proc/1/root//../../etc/shadow", "/proc/1/root"),
    ("/bin/../proc/1/task/1/root/../../etc/shadow", "/proc/1/task/1/root"),  # walked without the symlink /bin
])
def test_hard_denies_see_every_reading(arg: str, reading: str) -> None:
    assert reading in RESOLVER.readings(arg)


def test_words_that_are_not_paths_have_no_reading() -> None:
    assert RESOLVER.readings("nginx") == () and RESOLVER.readings("restart") == () and RESOLVER.readings("-n") == ()


@settings(max_examples=3000, deadline=None)
@given(aliases())
def test_a_canonical_path_is_exactly_what_the_kernel_opens(alias: str) -> None:
    canonical = RESOLVER.canonical(alias)
    if canonical is not None:
        assert canonical == kernel_open(alias), alias


@settings(max_examples=3000, deadline=None)
@given(aliases())
@example("/bin/..//proc/4242/task/4242/root/../../usr/lib/postgresql/15/bin/postgres")  # found: a symlink's ".." hid a /proc root
@example("//proc/4242/task/4242/proc/self/cwd/../../usr/lib/postgresql/15/bin/postgres")  # found: a climb inside /proc
def test_the_path_the_kernel_opens_is_always_among_the_readings(alias: str) -> None:
    """A reading through /proc's magic links needs no resolving: the secret list refuses /proc roots whole."""
    readings = RESOLVER.readings(alias)
    if all(not reading.startswith("/proc/") for reading in readings):
        assert kernel_open(alias) in readings, alias
    else:
        assert POLICY.is_secret(alias), alias


@settings(max_examples=2000, deadline=None)
@given(aliases())
def test_an_alias_of_a_secret_is_a_secret(alias: str) -> None:
    if POLICY.is_secret(kernel_open(alias)):
        assert POLICY.is_secret(alias), alias


def test_patterns_cover_what_is_below_them_only_when_asked() -> None:
    below, exact = compile_patterns(["/etc/ssl/private"], below=True), compile_patterns(["/var/log"], below=False)
    assert below.match("/etc/ssl/private/x.key") and not below.match("/etc/ssl/privates")
    assert exact.match("/var/log") and not exact.match("/var/log/nginx")


def test_a_symlink_table_must_hold_absolute_normal_paths() -> None:
    assert validate_symlinks({"/var/run": "/run"}) is None
    assert "not an absolute" in (validate_symlinks({"var/run": "/run"}) or "")
    assert "not an absolute" in (validate_symlinks({"/a": "/b/../c"}) or "")


def test_a_symlink_loop_has_no_canonical_form() -> None:
    looping = PathResolver(symlinks={"/a": "/b", "/b": "/a"}, real_directories=frozenset())
    assert looping.canonical("/a/x") is None


# ---- every rule that takes a path, fed aliases ------------------------------------------------------------

_NGINX = PolicyContext(service="nginx", init_service="nginx", process="nginx", stale_pidfile="/run/nginx.pid",
                       log_files=("/var/log/nginx/error.log",), service_dirs=("/var/log/nginx", "/run/nginx", "/var/lib/nginx"),
                       log_dirs=("/var/log/nginx",))
_POSTGRES = PolicyContext(service="postgresql", init_service="postgresql", process="postgres",
                          service_dirs=("/var/lib/postgresql", "/run/postgresql", "/var/log/postgresql"), log_dirs=("/var/log/postgresql",))
_SSH = PolicyContext(service="ssh", init_service="ssh", process="sshd", service_dirs=("/run/sshd",))
_REDIS = PolicyContext(service="redis", init_service="redis-server", process="redis-server", ports=frozenset({6379}),
                       service_dirs=("/var/lib/redis", "/run/redis", "/var/log/redis"), log_dirs=("/var/log/redis",))
# One command per rule whose arguments include a path placeholder; PATH is where the alias goes.
PATH_RULES = {
    "find-files": (_NGINX, "find PATH -maxdepth 1"),
    "certificate-dates": (_NGINX, "openssl x509 -noout -enddate -in PATH"),
    "tail-or-head-of-files": (_NGINX, "tail -n 5 PATH"),
    "read-files": (_NGINX, "cat PATH"),
    "describe-files": (_NGINX, "stat PATH"),
    "list-directories": (_NGINX, "ls -la PATH"),
    "disk-usage": (_NGINX, "du -sh PATH"),
    "disk-usage-of-the-incidents-data": (_POSTGRES, "du -s PATH"),
    "describe-files-in-a-format": (_NGINX, "stat -c %a PATH"),
    "dpkg-search-paths": (_NGINX, "dpkg -S PATH"),
    "filesystem-usage": (_NGINX, "df -h PATH"),
    "mounted-filesystems": (_NGINX, "findmnt PATH"),
    "list-scheduled-scripts": (_NGINX, "run-parts --test PATH"),
    "search-files": (_NGINX, "grep -n x PATH"),
    "search-files-pattern-option": (_NGINX, "grep -e x PATH"),
    "search-files-pattern-file": (_NGINX, "grep -f PATH /etc/hostname"),
    "checksums-of-files": (_NGINX, "sha256sum PATH"),
    "file-types": (_NGINX, "file PATH"),
    "print-lines": (_NGINX, "sed -n 1,5p PATH"),
    "sort-lines": (_NGINX, "sort PATH"),
    "file-users": (_NGINX, "fuser -v PATH"),
    "open-files": (_NGINX, "lsof -nP PATH"),
    "date-now": (_NGINX, "date -u -r PATH"),
    "redis-config-get": (_REDIS, "redis-cli -s PATH config get maxmemory"),
    "redis-probe": (_REDIS, "redis-cli -s PATH ping"),
    "redis-read-only-commands": (_REDIS, "redis-cli -s PATH dbsize"),
    "redis-reports": (_REDIS, "redis-cli -s PATH memory stats"),
    "remove-stale-pidfile": (_NGINX, "rm -f PATH"),
    "remove-rotated-logs": (_NGINX, "rm -v PATH"),
    "truncate-service-log": (_NGINX, "truncate -s 0 PATH"),
    "give-back-ownership": (_POSTGRES, "chown -R postgres:postgres PATH"),
    "give-back-mode": (_POSTGRES, "chmod 2775 PATH"),
    "create-runtime-directory": (_POSTGRES, "install -d -o postgres -g postgres -m 2775 PATH"),
    "ownership-repair-needs-a-person": (_POSTGRES, "chown -R postgres:postgres PATH"),
    "mode-repair-needs-a-person": (_POSTGRES, "chmod 2775 PATH"),
    "directory-repair-needs-a-person": (_POSTGRES, "install -d -o postgres -g postgres -m 2775 PATH"),
    "make-runtime-directory": (_SSH, "mkdir -p PATH"),
    "make-package-directory-the-plan-finishes": (_POSTGRES, "mkdir -p PATH"),
}
# The path placeholders the shipped policy does not use, in rules an operator could write.
CUSTOM = parse_policy({"version": 1, "include_default": True, "rules": [
    {"id": "my-list", "executable": "ls", "argv": ["{service_dir}"], "decision": "allow"},
    {"id": "my-touch", "executable": "touch", "argv": ["{service_file}"], "decision": "allow"},
    {"id": "my-rmdir", "executable": "rmdir", "argv": ["{runtime_dir}"], "decision": "allow"},
    {"id": "my-tail", "executable": "tail", "argv": ["{log_file}"], "decision": "allow"},
]}, source="custom.yml", version="custom", base=POLICY)
CUSTOM_PATH_RULES = {"my-list": (_NGINX, "ls PATH"), "my-touch": (_NGINX, "touch PATH"), "my-rmdir": (_NGINX, "rmdir PATH"),
                     "my-tail": (_NGINX, "tail PATH")}
_PATH_PLACEHOLDERS = ("{stale_pidfile}", "{log_file}", "{service_dir}", "{service_file}", "{service_log_file}", "{rotated_log}",
                      "{runtime_dir}", "{package_path}", "{readable_file}", "{incident_file}", "{service_data}")
TARGETS += ["/run/nginx/nginx.sock", "/run/redis/redis-server.sock", "/var/log/nginx", "/var/log/nginx/../../log", "/run/nginx/../sshd",
            "/var/log/nginx/error.log.1", "/var/log/nginx/access.log", "/var/lib/postgresql/15/main/global/pg_control",
            "/etc/ssl/certs/ssl-cert-snakeoil.pem", "/etc/haproxy/haproxy.cfg", "/var/log/nginx/../../lib/dpkg/status"]


def _takes_a_path(rule: Rule) -> bool:
    """Whether a pattern of the rule, or one of a pattern's alternatives ([+L, "{readable_file}"]), is a path placeholder."""
    patterns = [*(rule.argv or ()), *rule.operands, *(p for p in (rule.options or {}).values() if p is not None)]
    placeholders = {p.placeholder for pattern in patterns for p in (pattern, *pattern.alternatives) if p.placeholder}
    return any(f"{{{placeholder}}}" in _PATH_PLACEHOLDERS for placeholder in placeholders)


def test_every_rule_that_takes_a_path_is_fed_aliases_below() -> None:
    assert {rule.id for rule in POLICY.rules if _takes_a_path(rule)} == set(PATH_RULES)
    assert {rule.id for rule in CUSTOM.rules if _takes_a_path(rule)} == set(PATH_RULES) | set(CUSTOM_PATH_RULES)
    assert {p[1:-1] for p in _PATH_PLACEHOLDERS} <= {p.placeholder for rule in CUSTOM.rules for p in rule.argv or rule.operands}


SUFFIXES = ["/", "/.", "//", "/./", "/.//."]


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from(sorted(PATH_RULES)), st.sampled_from(TARGETS), st.sampled_from(SUFFIXES))
def test_no_suffix_makes_a_rule_decide_more_leniently(rule_id: str, target: str, suffix: str) -> None:
    """x/, x/. and x// make the kernel resolve x as a directory (following a link there, whatever -h says): the guard
    decides them as x - or, where only chown -h's not following the last component made x safe (x in a directory a
    service account owns), more strictly - so that no rule trusts a spelling the kernel reads otherwise."""
    context, template = PATH_RULES[rule_id]
    plain, suffixed = (evaluate(template.replace("PATH", path), context, POLICY) for path in (target, target + suffix))
    assert Decision.strictest([plain.decision, suffixed.decision]) is suffixed.decision, (template, target, suffix)
    if "chown" not in template:
        assert (suffixed.decision, suffixed.rule) == (plain.decision, plain.rule), (template, target, suffix)


_ALL_PATH_RULES: dict[str, tuple[Policy, PolicyContext, str]] = {
    **{rule_id: (POLICY, *how) for rule_id, how in PATH_RULES.items()},
    **{rule_id: (CUSTOM, *how) for rule_id, how in CUSTOM_PATH_RULES.items()},
}


@settings(max_examples=4000, deadline=None)
@given(st.sampled_from(sorted(_ALL_PATH_RULES)), aliases())
def test_a_rule_allows_an_alias_only_when_it_allows_what_the_kernel_opens(rule_id: str, alias: str) -> None:
    """The oracle is the model filesystem: whatever an alias dresses up, the guard judges the file the kernel opens."""
    policy, context, template = _ALL_PATH_RULES[rule_id]
    verdict = evaluate(template.replace("PATH", alias), context, policy)
    if verdict.decision is Decision.ALLOW:
        opened = kernel_open(alias)
        # the one rule that names secrets: the size of the incident's own data, which the opened file must be too (below)
        assert not policy.is_secret(opened) or verdict.rule == "disk-usage-of-the-incidents-data", (alias, opened)
        assert evaluate(template.replace("PATH", opened), context, policy).decision is Decision.ALLOW, (alias, opened)

"""The lab's golden images: one debootstrap root per Debian release, built once into a cache and shared by every host
as the lower layer of its overlay. Part of tests/lab/fleet.py (import that); needs root."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from lab_machine import SYSTEM_ENV, LabError, kill_and_wait, processes_rooted_under, unmount_under

# Debian releases a host can boot: the lab's default, and the stable release after it
SUITES = ("bookworm", "trixie")


DEFAULT_SUITE = "bookworm"


DEFAULT_MIRROR = "http://deb.debian.org/debian"


DEFAULT_CACHE = "/var/cache/sentinel-heal-lab"


PACKAGES = (
    "openssh-server",
    "sudo",
    "python3",
    "python3-apt",
    # a virtualenv on a host (ensurepip), for the collection installed on the host it heals over the local connection
    "python3-venv",
    "tini",
    "iproute2",
    "procps",
    "curl",
    "nginx-light",
    "postgresql",
    "redis-server",
    # kinds of services no runbook names, off at boot (a test starts them): a second web server, a second SQL database,
    # a cache, and a proxy in front of a backend (haproxy on :8080 to apache2 on :8081)
    "apache2",
    "mariadb-server",
    "memcached",
    "haproxy",
    # systemd as PID 1 of a systemd host; a sysv host keeps it installed and never starts it
    "systemd",
    "systemd-sysv",
    "dbus",
    "libpam-systemd",
)


# Runs inside the image (chroot, private mount+pid namespaces) after debootstrap.
# Part of the image hash: editing it rebuilds the image.
CONFIGURE_IMAGE = r"""
set -eu
mount -t proc proc /proc
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
trap 'umount /dev/shm /proc' EXIT

# the release's PostgreSQL (15 on bookworm, 17 on trixie)
postgresql_version=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
if [ ! -e "/var/lib/postgresql/$postgresql_version/main/PG_VERSION" ]; then
    # A failed creation can leave the config behind, which blocks pg_createcluster.
    pg_dropcluster "$postgresql_version" main 2>/dev/null || true
    pg_createcluster "$postgresql_version" main
fi

if ! id sentinel >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash sentinel
fi
# sshd refuses locked ("!") accounts when PAM is off; "*" only means "no password".
usermod --password '*' sentinel
echo 'sentinel ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/sentinel
chmod 0440 /etc/sudoers.d/sentinel
# The lab's operator: applies the host role and acts as root where a test does it the controller's way. On the hosts
# with the executor the healing account's broad rule goes (fleet.py up), so the executor is its only rule there.
if ! id admin >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash admin
fi
usermod --password '*' admin
echo 'admin ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/admin
chmod 0440 /etc/sudoers.d/admin

cat > /etc/ssh/sshd_config.d/lab.conf <<'EOF'
PermitRootLogin no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
EOF
ssh-keygen -A

# Hosts have no network out: with no nameserver lookups fail at once instead of timing out.
: > /etc/resolv.conf

cat > /usr/local/sbin/lab-init <<'EOF'
#!/bin/sh
# Boot script of a lab host; tini (PID 1) runs it. /run is a fresh tmpfs.
install -d -m 0755 /run/sshd
install -d -m 1777 /run/lock
for service in nginx postgresql redis-server; do
    service "$service" start || echo "lab-init: $service did not start" >&2
done
exec /usr/sbin/sshd -D -e
EOF
chmod 0755 /usr/local/sbin/lab-init

# The services off at boot: apache2 behind haproxy, off nginx's port 80 and its page (apache2 installs an index.html
# where nginx's default site looks first).
sed -i 's/^Listen 80$/Listen 8081/' /etc/apache2/ports.conf
sed -i -e 's/<VirtualHost \*:80>/<VirtualHost *:8081>/' -e 's#DocumentRoot /var/www/html#DocumentRoot /var/www/apache2#' \
    /etc/apache2/sites-available/000-default.conf
if [ -e /var/www/html/index.html ]; then
    install -d /var/www/apache2
    mv /var/www/html/index.html /var/www/apache2/index.html
fi
if ! grep -q '^frontend storefront' /etc/haproxy/haproxy.cfg; then
    cat >> /etc/haproxy/haproxy.cfg <<'EOF'

frontend storefront
    bind :8080
    default_backend web

backend web
    server apache2 127.0.0.1:8081
EOF
fi
systemctl disable apache2.service mariadb.service memcached.service haproxy.service

# systemd hosts: no timers that rotate, clean or upgrade behind a test's back, no consoles to log in on
systemctl mask apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer fstrim.timer dpkg-db-backup.timer \
    logrotate.timer console-getty.service getty@tty1.service systemd-timesyncd.service

rm -f /usr/sbin/policy-rc.d
apt-get clean
"""


def cache_dir() -> Path:
    return Path(os.environ.get("SENTINEL_LAB_CACHE", DEFAULT_CACHE))


def image_dir(suite: str = DEFAULT_SUITE) -> Path:
    recipe = json.dumps([suite, "minbase", PACKAGES, CONFIGURE_IMAGE])
    return cache_dir() / f"image-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


@contextlib.contextmanager
def lab_lock() -> Iterator[None]:
    """One image build / up / down at a time on this machine: they share the bridge and IPs."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "lab.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        yield


def ensure_image(suite: str) -> Path:
    final = image_dir(suite)
    if (final / "complete").exists():
        return final / "rootfs"
    remove_abandoned_builds()
    mirror = os.environ.get("SENTINEL_LAB_MIRROR", DEFAULT_MIRROR)
    build = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache_dir()))
    rootfs = build / "rootfs"
    log_path = build / "build.log"
    print(f"building lab image {final.name} of {suite} from {mirror} (about two minutes)...", file=sys.stderr)
    started = time.monotonic()
    try:
        with log_path.open("w") as log:
            build_step(log, ["debootstrap", "--foreign", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(rootfs), mirror])
            policy = rootfs / "usr/sbin/policy-rc.d"
            policy.write_text("#!/bin/sh\n# The image build must not start services.\nexit 101\n")
            policy.chmod(0o755)
            build_step(log, in_build_namespace(rootfs, ["/debootstrap/debootstrap", "--second-stage"]))
            build_step(log, in_build_namespace(rootfs, ["/bin/sh", "-c", CONFIGURE_IMAGE]))
    except subprocess.CalledProcessError as error:
        raise LabError(f"image build failed ({error.cmd[0]}); see {log_path}") from error
    finally:
        kill_and_wait(processes_rooted_under(rootfs))
        unmount_under(build)
    elapsed = time.monotonic() - started
    (build / "complete").write_text(json.dumps({"suite": suite, "packages": PACKAGES, "seconds": round(elapsed, 1)}) + "\n")
    build.chmod(0o755)
    os.rename(build, final)
    print(f"lab image of {suite} built in {elapsed:.0f} s: {final}", file=sys.stderr)
    return final / "rootfs"


def remove_abandoned_builds() -> None:
    for leftover in cache_dir().glob(".image-*"):
        kill_and_wait(processes_rooted_under(leftover))
        unmount_under(leftover)
        shutil.rmtree(leftover)


def in_build_namespace(rootfs: Path, argv: list[str]) -> list[str]:
    """Command that runs argv chrooted in rootfs; its mounts and processes die with it."""
    return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "--", "chroot", str(rootfs), *argv]


def build_step(log: TextIO, argv: list[str]) -> None:
    env = SYSTEM_ENV | {"DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, check=True)

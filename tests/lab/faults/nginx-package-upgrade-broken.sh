#!/bin/sh
# An upgrade of nginx-common breaks nginx (systemd hosts): the new version's unit starts nginx with an option it does
# not know, so every start fails. apt still keeps the version before in its archive, as it does after an upgrade it
# downloaded. Both packages are rebuilt here from the installed one (the lab has no package mirror): the version
# before as it is installed, the upgrade the same files with the broken unit and a "+lab1" version.
set -eu

pkg=nginx-common
unit=/lib/systemd/system/nginx.service
marker=/var/backups/lab-nginx-package-upgrade
archives=/var/cache/apt/archives

# The installed package as a directory dpkg-deb builds: its files, its conffiles and maintainer scripts, its control.
rebuild() {
    dir=$1
    mkdir -p "$dir/DEBIAN"
    dpkg-query -W -f='Package: ${Package}\nVersion: ${Version}\nArchitecture: ${Architecture}\nMaintainer: ${Maintainer}\nDepends: ${Depends}\nBreaks: ${Breaks}\nReplaces: ${Replaces}\nDescription: ${Description}\n' "$pkg" \
        | grep -v '^[A-Za-z-]*: $' > "$dir/DEBIAN/control"
    dpkg -L "$pkg" | while read -r path; do
        # a directory (even one the system links, such as /lib on a merged /usr) as a directory of the package
        if [ -d "$path" ]; then
            mkdir -p "$dir$path"
        elif [ -f "$path" ] || [ -L "$path" ]; then
            cp -a --parents "$path" "$dir"
        fi
    done
    dpkg-query -W -f='${Conffiles}\n' "$pkg" | awk 'NF >= 2 && $NF != "obsolete" {print $1}' > "$dir/DEBIAN/conffiles"
    for script in preinst postinst prerm postrm; do
        if [ -e "/var/lib/dpkg/info/$pkg.$script" ]; then
            cp "/var/lib/dpkg/info/$pkg.$script" "$dir/DEBIAN/$script"
            chmod 0755 "$dir/DEBIAN/$script"
        fi
    done
}

case "${1:-}" in
break)
    version=$(dpkg-query -W -f='${Version}' "$pkg")
    arch=$(dpkg-query -W -f='${Architecture}' "$pkg")
    cached="$archives/${pkg}_$(echo "$version" | sed 's/:/%3a/')_${arch}.deb"
    build=$(mktemp -d)
    rebuild "$build/before"
    dpkg-deb -b -Zgzip "$build/before" "$cached" >/dev/null
    cp -a "$build/before" "$build/upgrade"
    sed -i "s/^Version: .*/Version: ${version}+lab1/" "$build/upgrade/DEBIAN/control"
    sed -i "s#^ExecStart=/usr/sbin/nginx #ExecStart=/usr/sbin/nginx -Z #" "$build/upgrade$unit"
    dpkg-deb -b -Zgzip "$build/upgrade" "$build/upgrade.deb" >/dev/null
    echo "$cached" > "$marker"
    DEBIAN_FRONTEND=noninteractive dpkg -i --force-confold "$build/upgrade.deb" >/dev/null 2>&1 || true
    rm -rf "$build"
    reload_and_fail_to_restart nginx "after the broken upgrade"
    echo "upgraded $pkg $version -> ${version}+lab1 (its unit runs nginx -Z); $cached is the version before; nginx will not start"
    ;;
undo)
    if [ -e "$marker" ]; then
        cached=$(cat "$marker")
        if [ "$(dpkg-query -W -f='${Version}' "$pkg")" != "$(dpkg-deb -f "$cached" Version)" ]; then
            DEBIAN_FRONTEND=noninteractive dpkg -i --force-confold "$cached" >/dev/null
        fi
        rm -f "$cached" "$marker"
        systemctl daemon-reload
        systemctl reset-failed nginx
    fi
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac

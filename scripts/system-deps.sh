#!/bin/sh
# System packages netmon uses beyond Python and the JVM. Run by `make setup`; idempotent and
# silent when everything is present.
#
# - libpcap: `netmon capture --bpf` compiles its tcpdump-syntax filter with Scapy, which loads
#   libpcap's shared library (package libpcap0.8, named libpcap0.8t64 since Debian 13).
# - chromium: the browser the dashboard's render-time test and `netmon bench dashboard` drive
#   (Playwright, tests/dashboard/test_browser_render.py), and kaleido's PNG figures.
# - tshark: the baseline `netmon bench topk-offline` is measured against.
# - nmap: the real SYN scan of tests/alerts/test_nmap_scan.py.
#
# When one is missing and we are root on a Debian-like system, install it (no recommends, apt's
# output in a log, `apt-get update` once, only when a package has no candidate or an install
# failed: fresh machines often have no package lists yet); otherwise print a one-line hint and
# carry on: everything else works, and what needs the package says so or is skipped.
set -u

NEEDS="libpcap chromium tshark nmap"

have_libpcap() {
    for ldconfig in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
        if command -v "$ldconfig" >/dev/null 2>&1; then
            "$ldconfig" -p 2>/dev/null | grep -q 'libpcap\.so' && return 0
            return 1
        fi
    done
    ls /usr/lib/libpcap.so* /usr/lib/*/libpcap.so* /lib/*/libpcap.so* >/dev/null 2>&1
}

present() {
    case $1 in
        libpcap) have_libpcap ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

# The Debian package names that provide a need, preferred first.
names() {
    case $1 in
        libpcap) echo "libpcap0.8t64 libpcap0.8" ;;
        *) echo "$1" ;;
    esac
}

# What goes without a need (the hint's second half).
without() {
    case $1 in
        libpcap) echo "capture --bpf will not work" ;;
        chromium) echo "the browser tests are skipped" ;;
        tshark) echo "bench topk-offline has no tshark baseline" ;;
        nmap) echo "the nmap scan test is skipped" ;;
    esac
}

hint() {
    set -- "$1" "$2" "$(names "$1")"
    echo "netmon: $1 not found ($2); $(without "$1") until it is installed (apt-get install ${3##* })" >&2
}

# The first of a need's package names apt has a candidate version for.
candidate() {
    for name in $(names "$1"); do
        if apt-cache policy "$name" 2>/dev/null | grep -q 'Candidate: [^(]'; then
            echo "$name"
            return 0
        fi
    done
    return 1
}

updated=no
update_once() {
    [ "$updated" = no ] || return 1
    updated=yes
    apt-get update -q >>"$log" 2>&1
}

install_need() {
    name=$(candidate "$1") || { update_once && name=$(candidate "$1"); } || {
        hint "$1" "apt has no package $(names "$1" | sed 's/ / or /')"
        return 0
    }
    # A stale package list can name files the mirror no longer has: update once and try again.
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$name" >>"$log" 2>&1; then
        if ! update_once || ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "$name" >>"$log" 2>&1; then
            hint "$1" "apt-get install failed: $(grep -E '^(E|W):' "$log" | tail -n 1)"
            return 0
        fi
    fi
    if present "$1"; then
        echo "netmon: installed $name ($1)"
    else
        hint "$1" "installed $name, but it is not found"
    fi
}

missing=""
for need in $NEEDS; do
    present "$need" || missing="$missing $need"
done
[ -n "$missing" ] || exit 0
for need in $missing; do
    if [ "$(id -u)" != 0 ]; then
        hint "$need" "not root"
    elif ! command -v apt-get >/dev/null 2>&1; then
        hint "$need" "no apt-get"
    else
        if [ -z "${log:-}" ]; then
            log=$(mktemp)
            trap 'rm -f "$log"' EXIT
        fi
        install_need "$need"
    fi
done
exit 0

#!/bin/sh
# System libraries netmon uses beyond Python and the JVM. Run by `make setup`; idempotent and
# silent when everything is present.
#
# libpcap: `netmon capture --bpf` compiles its tcpdump-syntax filter with Scapy, which loads
# libpcap's shared library. When it is missing and we are root on a Debian-like system, install it
# (libpcap0.8, named libpcap0.8t64 since Debian 13); otherwise print a one-line hint and carry on:
# everything else works, and `capture --bpf` then says clearly that it needs libpcap.
set -u

have_libpcap() {
    for ldconfig in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
        if command -v "$ldconfig" >/dev/null 2>&1; then
            "$ldconfig" -p 2>/dev/null | grep -q 'libpcap\.so' && return 0
            return 1
        fi
    done
    ls /usr/lib/libpcap.so* /usr/lib/*/libpcap.so* /lib/*/libpcap.so* >/dev/null 2>&1
}

hint() {
    echo "netmon: libpcap not found ($1); capture --bpf will not work until it is installed (apt-get install libpcap0.8)" >&2
}

# The first of the package names apt has a candidate version for.
package() {
    for name in libpcap0.8t64 libpcap0.8; do
        if apt-cache policy "$name" 2>/dev/null | grep -q 'Candidate: [^(]'; then
            echo "$name"
            return 0
        fi
    done
    return 1
}

install_libpcap() {
    name=$(package) || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$name" >"$log" 2>&1 \
        && echo "netmon: installed $name (libpcap, for capture --bpf)"
}

have_libpcap && exit 0
if [ "$(id -u)" != 0 ]; then
    hint "not root"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    hint "no apt-get"
    exit 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! install_libpcap; then
    # Fresh machines often have no package lists yet.
    apt-get update -q >"$log" 2>&1
    install_libpcap || { hint "apt-get install failed: $(grep -E '^(E|W):' "$log" | head -n 1)"; exit 0; }
fi
have_libpcap || hint "installed, but ldconfig does not list it"
exit 0

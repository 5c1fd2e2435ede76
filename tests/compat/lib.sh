# Shared by the tests/compat scripts (sourced, not run).

# compat_build TAG: build the drop-in libraries (scripts/build-compat.sh) unless the
# script was given --no-build ($build = 0); a failed build ends the script as a failure.
compat_build() {
    if [ "${build:-1}" = 1 ]; then
        scripts/build-compat.sh || { echo "FAIL build"; echo "$1: 0 passed, 1 failed"; exit 1; }
    fi
}

# compat_free_addrs TAG HINT ADDR...: each embedded device binds UDP 4791 on its address;
# another process holding one would make every run fail with "Couldn't get context", so say
# so up front (HINT names the variables that choose other addresses).
compat_free_addrs() {
    local tag=$1 hint=$2 addr
    shift 2
    for addr in "$@"; do
        if ss -uln "sport = :4791" 2>/dev/null | grep -qE "(^|[[:space:]])$addr:4791"; then
            echo "FAIL: UDP $addr:4791 is already bound by another process" \
                "(set $hint to free loopback addresses)"
            echo "$tag: 0 passed, 1 failed"
            exit 1
        fi
    done
}

# compat_need_tools "PACKAGE..." TOOL...: every TOOL must be on PATH; if some are missing,
# install the Debian PACKAGEs as root, else (or if that fails) say SKIPPED and end the
# script successfully: a machine without them cannot run the test, which is not a failure.
compat_need_tools() {
    local pkgs=$1 t missing=()
    shift
    for t in "$@"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
    [ ${#missing[@]} = 0 ] && return 0
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null 2>&1 || true
        # shellcheck disable=SC2086 # a list of package names
        apt-get install -y -qq $pkgs >/dev/null 2>&1 \
            || { echo "SKIPPED: could not install $pkgs"; exit 0; }
    else
        echo "SKIPPED: $pkgs not installed (missing: ${missing[*]}) and not root"
        exit 0
    fi
}

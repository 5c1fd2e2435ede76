#!/usr/bin/env bash
# Runs a command where /dev/infiniband/uverbsN exist, without root:
#
#   UROCE_DEVICES=uroce0=127.0.0.1 LD_LIBRARY_PATH=$PWD/target/compat \
#       scripts/uverbs-ns.sh ucx_info -d
#
# Some programs decide whether an RDMA device is usable by looking at its kernel character
# device themselves rather than asking libibverbs: UCX 1.13 lists an IB device only if
# "/dev/infiniband/" + ibv_device.dev_name is a character device the process may read and
# write (uct_ib_device_is_accessible, src/uct/ib/base/ib_md.c). uroce's devices have no
# kernel node, and without root neither /dev/infiniband nor a character device can be
# created. So this script starts the command in a new user and mount namespace (an
# unprivileged user may create one on Linux unless user.max_user_namespaces is 0) in which
# /dev is a copy of the real one — every entry bind-mounted, so /dev/shm, /dev/pts and the
# device nodes are the real ones, shared with other processes — plus /dev/infiniband/uverbsN
# for each device of UROCE_DEVICES (at least uverbs0), each a bind mount of /dev/null: a
# character device anyone may read and write, which is all such checks look at. uroce's
# libibverbs never opens it. Nothing changes outside the namespace; the network is the
# host's, so processes inside and outside talk to each other over loopback as usual.
# Inside, the command runs as the namespace's root (uid 0 mapped to the caller's uid).
# Reference: docs/compat.md §11.
set -euo pipefail

if [ $# -eq 0 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,21p' "$0"
    exit 2
fi

if [ "${UROCE_UVERBS_NS:-}" != inside ]; then
    if ! unshare --user --map-root-user --mount true 2>/dev/null; then
        echo "uverbs-ns: cannot create a user and mount namespace (unshare -Urm);" \
             "is user.max_user_namespaces 0?" >&2
        exit 125
    fi
    exec unshare --user --map-root-user --mount -- env UROCE_UVERBS_NS=inside "$0" "$@"
fi
unset UROCE_UVERBS_NS

# How many devices: the comma-separated entries of UROCE_DEVICES (default one).
n=1
if [ -n "${UROCE_DEVICES:-}" ]; then
    IFS=, read -r -a devs <<<"$UROCE_DEVICES"
    n=${#devs[@]}
    [ "$n" -ge 1 ] || n=1
fi

new=$(mktemp -d "${TMPDIR:-/tmp}/uroce-dev.XXXXXX")
mount -t tmpfs -o mode=0755 uroce-dev "$new"
shopt -s dotglob nullglob
# Binds every entry of directory $1 (but "infiniband") into the new directory $2.
copy_dir() {
    local e name
    for e in "$1"/*; do
        name=${e##*/}
        [ "$name" = infiniband ] && continue
        if [ -L "$e" ]; then
            cp -P "$e" "$2/$name"
        elif [ -d "$e" ]; then
            mkdir "$2/$name"
            mount --rbind "$e" "$2/$name"
        else
            : >"$2/$name"
            mount --bind "$e" "$2/$name"
        fi
    done
}
copy_dir /dev "$new"
# The host's /dev/infiniband, if any, is copied entry by entry too, so that the nodes added
# below never touch the host's directory.
mkdir "$new/infiniband"
if [ -d /dev/infiniband ]; then
    copy_dir /dev/infiniband "$new/infiniband"
fi
for ((i = 0; i < n; i++)); do
    if [ ! -e "$new/infiniband/uverbs$i" ]; then
        : >"$new/infiniband/uverbs$i"
        mount --bind /dev/null "$new/infiniband/uverbs$i"
    fi
done
mount --rbind "$new" /dev
umount -l "$new"
rmdir "$new"

exec "$@"

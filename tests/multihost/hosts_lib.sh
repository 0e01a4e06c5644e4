# tests/multihost/hosts_lib.sh - two hosts on one machine, for real, from
# Linux network namespaces; sourced by the tests/multihost scripts and by
# bench/multihost.sh.
#
#   namespace mtcPIDa (hostname mtc-a)        namespace mtcPIDb (hostname mtc-b)
#   mh0 10.231.N.1/24  <------ veth ------>   mh0 10.231.N.2/24
#   mpirun, ranks 0..k-1                      orted (started by the agent), ranks k..2k-1
#
# Each host has its own network stack (no route anywhere but the veth), its
# own hostname (a UTS namespace made by `unshare --uts` around each process
# tree), its own core (taskset) and an /etc/netns/NAME/hosts naming both
# hosts (ip netns exec bind-mounts it over /etc/hosts). Open MPI sees two
# nodes: it talks TCP between them and shared memory inside each. mpirun's
# remote launch agent (plm_rsh_agent) is a script that runs the daemon in
# the other namespace instead of using ssh.
#
# Use:  . tests/multihost/hosts_lib.sh; mh_require (exits 77 with a notice
# when not root or when `ip netns` is missing); mh_setup; mh_run K CMD...
# (mpirun of CMD with K ranks per host); teardown runs on every exit path
# (an EXIT/INT/TERM trap): the namespaces, the veth (it lives only inside
# them) and /etc/netns/NAME are removed, and any process left in them is
# killed. Nothing outside the two namespaces is touched but
# /etc/netns/mtcPID{a,b}/ and the temporary folder $MH_TMP.
#
# Settings (environment): MH_CPUS="0 1" the cores of host a and host b
# (default: the first two allowed cores, the same core twice on one CPU;
# a list such as "0,1 0,1" gives both hosts both cores);
# MH_RATE (e.g. 10gbit): a tbf qdisc on both veth ends; MH_TIMEOUT seconds
# around each mpirun (default 120).

MH_SKIP=77 # ctest's SKIP_RETURN_CODE in tests/multihost/CMakeLists.txt

mh_require() {
    if [ "$(id -u)" != 0 ]; then
        echo "notice: the two-host tests need root (network namespaces); skipped"
        exit $MH_SKIP
    fi
    if ! command -v ip >/dev/null 2>&1 || ! ip netns list >/dev/null 2>&1; then
        echo "notice: \`ip netns\` is not available (apt-get install iproute2); skipped"
        exit $MH_SKIP
    fi
    if ! command -v unshare >/dev/null 2>&1 || ! command -v taskset >/dev/null 2>&1; then
        echo "notice: unshare/taskset (util-linux) missing; skipped"
        exit $MH_SKIP
    fi
    if [ "${MTC_HAVE_MPI:-OFF}" != "ON" ]; then
        echo "notice: MPI not built (MTC_HAVE_MPI=${MTC_HAVE_MPI:-unset}); skipped"
        exit $MH_SKIP
    fi
    # a container without CAP_SYS_ADMIN (or without /run/netns) cannot make
    # namespaces even as root: probe once
    probe=mtcprobe$$
    if ! ip netns add $probe >/dev/null 2>&1; then
        echo "notice: cannot create a network namespace here (ip netns add failed: a container"
        echo "        without CAP_SYS_ADMIN?); the two-host tests are skipped"
        exit $MH_SKIP
    fi
    if ! ip netns exec $probe unshare --uts true >/dev/null 2>&1; then
        ip netns delete $probe
        echo "notice: cannot enter a network namespace with its own hostname here; skipped"
        exit $MH_SKIP
    fi
    ip netns delete $probe
    MH_MPIRUN=${MPIEXEC:-mpirun}
    [ -n "$MH_MPIRUN" ] || MH_MPIRUN=mpirun
    if ! command -v "$MH_MPIRUN" >/dev/null 2>&1; then
        echo "notice: $MH_MPIRUN not found; skipped"
        exit $MH_SKIP
    fi
}

# Per-run names, so concurrent runs (ctest -j) never meet.
MH_ID=$$
MH_NSA=mtc${MH_ID}a
MH_NSB=mtc${MH_ID}b
MH_HOSTA=mtc-a
MH_HOSTB=mtc-b
MH_NET=10.231.$((MH_ID % 250)).
MH_UP=0

mh_teardown() {
    [ "$MH_UP" = 1 ] || return 0
    MH_UP=0
    for ns in $MH_NSA $MH_NSB; do
        # a process left in a namespace (a rank of a killed job) dies with it
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
        ip netns delete "$ns" 2>/dev/null
        rm -rf "/etc/netns/$ns"
    done
    [ -n "${MH_TMP:-}" ] && rm -rf "$MH_TMP"
}

# Namespaces of an earlier run that was killed outright (SIGKILL skips the
# trap): mtcPIDa/b whose PID is gone. Only names of this harness are touched.
mh_clean_stale() {
    for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(mtc[0-9][0-9]*[ab]\)\( .*\)\{0,1\}$/\1/p'); do
        pid=$(echo "$ns" | sed 's/^mtc\([0-9]*\)[ab]$/\1/')
        kill -0 "$pid" 2>/dev/null && continue
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
        ip netns delete "$ns" 2>/dev/null && rm -rf "/etc/netns/$ns"
    done
}

mh_setup() {
    mh_clean_stale
    MH_TMP=$(mktemp -d)
    trap 'mh_teardown' EXIT
    trap 'mh_teardown; exit 130' INT
    trap 'mh_teardown; exit 143' TERM
    MH_UP=1
    allowed=$(taskset -pc $$ | sed 's/.*: //')
    first=$(echo "$allowed" | cut -d, -f1 | cut -d- -f1)
    second=$(echo "$allowed" | tr ',' '\n' | awk -F- '
        { lo = $1; hi = ($2 == "" ? $1 : $2); for (c = lo; c <= hi; c++) print c }' | sed -n 2p)
    [ -n "$second" ] || second=$first
    set -- ${MH_CPUS:-$first $second}
    MH_CPUA=$1 MH_CPUB=$2
    ip netns add $MH_NSA || { echo "FAIL: ip netns add $MH_NSA"; exit 1; }
    ip netns add $MH_NSB || { echo "FAIL: ip netns add $MH_NSB"; exit 1; }
    # the pair is made inside the namespaces: no interface in the caller's
    ip -n $MH_NSA link add mh0 type veth peer name mh0 netns $MH_NSB ||
        { echo "FAIL: cannot make the veth pair"; exit 1; }
    ip -n $MH_NSA addr add ${MH_NET}1/24 dev mh0
    ip -n $MH_NSB addr add ${MH_NET}2/24 dev mh0
    for ns in $MH_NSA $MH_NSB; do
        ip -n $ns link set lo up
        ip -n $ns link set mh0 up
        mkdir -p /etc/netns/$ns
        printf '127.0.0.1 localhost\n%s1 %s\n%s2 %s\n' "$MH_NET" $MH_HOSTA "$MH_NET" $MH_HOSTB \
            >/etc/netns/$ns/hosts
    done
    if [ -n "${MH_RATE:-}" ]; then mh_rate "$MH_RATE"; fi
    mh_write_agent
}

# The launch agent: `AGENT HOST ORTED-COMMAND...` as ssh would run it, on
# that host's namespace, hostname and cores (MH_CPUA / MH_CPUB: call again
# after changing them).
mh_write_agent() {
    cat >"$MH_TMP/agent" <<EOF
#!/bin/sh
host=\$1
shift
case \$host in
$MH_HOSTA|${MH_NET}1) ns=$MH_NSA cpu=$MH_CPUA ;;
$MH_HOSTB|${MH_NET}2) ns=$MH_NSB cpu=$MH_CPUB ;;
*) echo "mtc multihost agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec \$ns unshare --uts sh -c 'hostname "\$1"; shift; exec taskset -c "\$1" sh -c "\$2"' sh \$host \$cpu "\$*"
EOF
    chmod +x "$MH_TMP/agent"
}

# mh_rate RATE: limit both ends of the link (tbf), or "off" to remove it.
# The bucket (4 MB) holds 3 ms at 10 Gbit/s, far above one 64 KB TSO
# packet, and the queue (latency 50 ms) does not drop a TCP window: neither
# caps TCP below the rate (bench/multihost.sh measures raw TCP beside).
MH_TBF="burst 4mb latency 50ms"
mh_rate() {
    for ns in $MH_NSA $MH_NSB; do
        ip netns exec $ns tc qdisc del dev mh0 root 2>/dev/null
        [ "$1" = off ] && continue
        ip netns exec $ns tc qdisc add dev mh0 root tbf rate "$1" $MH_TBF ||
            { echo "FAIL: tc tbf rate $1"; return 1; }
    done
}

# mh_on HOST CMD...: run CMD on host a or b (in its namespace, hostname, core).
mh_on() {
    h=$1
    shift
    if [ "$h" = a ]; then ns=$MH_NSA hn=$MH_HOSTA cpu=$MH_CPUA; else ns=$MH_NSB hn=$MH_HOSTB cpu=$MH_CPUB; fi
    ip netns exec $ns unshare --uts sh -c 'hostname "$1"; shift; cpu=$1; shift; exec taskset -c "$cpu" "$@"' \
        sh $hn $cpu "$@"
}

# mh_run K [MPIRUN-OPTIONS... --] CMD...: CMD as 2*K MPI ranks, K on each host
# (ranks 0..K-1 on mtc-a), from mpirun on host a. Extra mpirun options
# (e.g. -x VAR) go before a `--`. Bounded by MH_TIMEOUT seconds.
mh_run() {
    k=$1
    shift
    extra=""
    case " $* " in
    *" -- "*)
        while [ "$1" != "--" ]; do extra="$extra $1"; shift; done
        shift
        ;;
    esac
    mh_on a timeout -k 5 "${MH_TIMEOUT:-120}" "$MH_MPIRUN" --allow-run-as-root \
        --host $MH_HOSTA:$k,$MH_HOSTB:$k -np $((2 * k)) --map-by "${MH_MAP:-slot}" --bind-to none \
        --mca plm_rsh_agent "$MH_TMP/agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include mh0 \
        --mca oob_tcp_if_include mh0 $extra "$@" </dev/null
}

#!/usr/bin/env python3
"""bench/multihost_report.py JSONL RANKS "RATES" - the tables of
bench/multihost.sh from its JSON lines (bench_tcp_ceiling rows carry "kind",
collective rows "algo"; every row carries "link").

What crosses the link, per direction, for an all-reduce of S bytes in time t
across N = 2 nodes of L ranks (n = 2L ranks):
  - flat ring: the ring crosses the link once each way and every ring edge
    carries 2(n-1)/n x S, so the link figure is the bus bandwidth itself;
  - hierarchical: only the inter-node step crosses, an all-reduce among the
    N nodes of S (split over L streams): 2(N-1)/N x S per direction, S for
    two nodes, so the link figure is the algorithm bandwidth S/t.
100% of a 10 Gbit/s link is therefore 1.25 GB/s in link terms, which is a
bus bandwidth of 1.25 x (2(n-1)/n) / (2(N-1)/N) = 1.875 GB/s on 4 ranks;
comparing the 4-rank busbw with 1.25 GB/s credits the hierarchical
algorithm 1.5x too much. The TCP ceiling compared against is L streams both
ways at once, what the inter-node step of the hierarchical algorithm does."""
import json
import sys


def rate_gbs(link):
    """GB/s per direction of a tc rate ("10gbit", "500mbit"); None unlimited."""
    if link.endswith("gbit"):
        return float(link[:-4]) / 8
    if link.endswith("mbit"):
        return float(link[:-4]) / 8000
    return None


def median(v):
    v = sorted(v)
    return (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2 if v else None


def size_name(b):
    return "%dM" % (b >> 20) if b >= 1 << 20 else "%dK" % (b >> 10)


def main(path, L, rates):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    n, N = 2 * L, 2
    algos = ["ring", "tree", "hier", "native", "mpi"]
    tcp = {}
    for r in rows:
        if "kind" in r and r.get("ok"):
            tcp.setdefault((r["link"], r["kind"]), []).append(r["gbps"])
    print("## raw TCP mtc-a <-> mtc-b (bench_tcp_ceiling; GB/s one direction, median of %d)"
          % max([len(v) for v in tcp.values()] or [0]))
    print("%-10s %10s %22s" % ("link", "1 stream", "%d streams both ways" % L))
    for link in rates:
        a, b = median(tcp.get((link, "tcp1"), [])), median(tcp.get((link, "tcpL"), []))
        print("%-10s %10s %22s" % (link, "%.3f" % a if a else "-", "%.3f" % b if b else "-"))

    res = {}
    for r in rows:
        if "algo" in r:
            res.setdefault((r["link"], r["bytes"], r["algo"]), []).append(r)

    def get(link, b, a, key):
        return median([r[key] for r in res.get((link, b, a), [])])

    sizes = sorted({r["bytes"] for r in rows if "algo" in r})
    reps = max([len(v) for v in res.values()] or [0])
    print("## all_reduce across 2 hosts x %d ranks (f32; busbw GB/s = 2(n-1)/n x bytes/time, n=%d;"
          " median of %d runs; native = MPI_Iallreduce polled by mtc, mpi = MPI_Allreduce)"
          % (L, n, reps))
    print("%-10s %6s " % ("link", "size") + " ".join("%8s" % a for a in algos) + "  hier/mpi")
    for link in rates:
        for b in sizes:
            v = [get(link, b, a, "busbw_gbps") for a in algos]
            ratio = "%8.2f" % (v[2] / v[4]) if v[2] and v[4] else "%8s" % "-"
            print("%-10s %6s " % (link, size_name(b)) +
                  " ".join("%8.3f" % x if x else "%8s" % "-" for x in v) + ratio)

    def crossing(link, b, a):
        if a == "ring":
            return get(link, b, a, "busbw_gbps")
        x = get(link, b, a, "algbw_gbps")
        return x * 2 * (N - 1) / N if x else None

    def num(x):
        return "%8.3f" % x if x else "%8s" % "-"

    def pct(x, y):
        return "%9s" % ("%.0f%%" % (100 * x / y)) if x and y else "%9s" % "-"

    print("## what crosses the link, GB/s per direction (ring: busbw; hier: 2(N-1)/N x bytes/time,"
          " N=2), against the link's rate and the TCP ceiling (%d streams both ways)" % L)
    print("%-10s %6s %8s %8s %8s %9s %9s" % ("link", "size", "ring", "hier", "tcp", "hier/rate",
                                            "hier/tcp"))
    for link in rates:
        c = median(tcp.get((link, "tcpL"), []))
        for b in sizes:
            h = crossing(link, b, "hier")
            print("%-10s %6s %s %s %s %s %s" % (link, size_name(b), num(crossing(link, b, "ring")),
                                               num(h), num(c), pct(h, rate_gbs(link)), pct(h, c)))

    b = 64 << 20
    h, m = get("10gbit", b, "hier", "busbw_gbps"), get("10gbit", b, "mpi", "busbw_gbps")
    if h and m:
        rate, c, lh = rate_gbs("10gbit"), median(tcp.get(("10gbit", "tcpL"), [])), crossing(
            "10gbit", b, "hier")
        full_bus = rate * (2 * (n - 1) / n) / (2 * (N - 1) / N)
        print("target: hier 64 MiB >= 80%% of the 10 Gbit/s link: %.3f GB/s per direction = %.0f%%"
              " of %.2f (busbw %.3f of the %.3f that a full link gives) [%s]"
              % (lh, 100 * lh / rate, rate, h, full_bus, "met" if lh >= 0.8 * rate else "MISSED"))
        if c:
            print("        the TCP ceiling measured beside it is %.3f GB/s = %.0f%% of the link;"
                  " hier reached %.0f%% of the ceiling" % (c, 100 * c / rate, 100 * lh / c))
        print("target: hier 64 MiB >= 1.2x MPI_Allreduce: %.2fx [%s]"
              % (h / m, "met" if h >= 1.2 * m else "MISSED"))
    # a limit below what TCP moves unlimited: there the link, not the CPU, is the limit
    free = max([median(tcp.get((l, "tcpL"), [])) or 0 for l in rates if rate_gbs(l) is None] or [0])
    for link in rates:
        r, lh = rate_gbs(link), crossing(link, b, "hier")
        if r and lh and free and r < free:
            print("at %s, below the unlimited TCP ceiling (%.3f GB/s: the link is the limit): hier"
                  " 64 MiB %.3f GB/s per direction = %.0f%% of the link" % (link, free, lh, 100 * lh / r))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3].split()))

#!/usr/bin/env python3
"""Megatron's GPTDataset / BlendedDataset sample order in plain Python, for
tests/data/test_gpt_order.c. Written from Megatron-LM core 0.18
(megatron/core/datasets/gpt_dataset.py, blended_dataset.py,
blended_megatron_dataset_builder.py, blended_megatron_dataset_config.py and
the C++ helpers build_sample_idx / build_blending_indices), with numpy's
legacy RandomState (MT19937 init_genrand, shuffle = Fisher-Yates from the
end drawing with random_interval) re-implemented here; when numpy is
importable the shuffles are checked against numpy.random.RandomState itself.

Writes two small Megatron datasets (uint16, one document per sequence)
tests/data/megatron/gpt_a.{bin,idx} and gpt_b.{bin,idx}, and prints the
fixture:
    python3 tests/reference/gpt_dataset_reference.py > tests/data/megatron/gpt_order.txt

Fixture: per case
    case NAME
    data W1 P1 [W2 P2 ...] | data P1       (prefixes relative to tests/data/megatron)
    config SPLIT SEED T TRAIN VALID TEST    (num_samples per split)
    size S0 S1 S2                           (samples per split)
    sample SPLIT K tok tok ... (T+1)        (for K = 0..min(size, 40)-1, and a few far ones)
    end
"""
import math
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "megatron")


class RandomState:
    def __init__(self, seed):
        self.mt = [0] * 624
        self.mt[0] = seed & 0xFFFFFFFF
        for i in range(1, 624):
            self.mt[i] = (1812433253 * (self.mt[i - 1] ^ (self.mt[i - 1] >> 30)) + i) & 0xFFFFFFFF
        self.i = 624

    def u32(self):
        if self.i >= 624:
            mt = self.mt
            for k in range(624):
                y = (mt[k] & 0x80000000) | (mt[(k + 1) % 624] & 0x7FFFFFFF)
                mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            self.i = 0
        y = self.mt[self.i]
        self.i += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)

    def interval(self, mx):
        if mx == 0:
            return 0
        mask = mx
        for s in (1, 2, 4, 8, 16, 32):
            mask |= mask >> s
        while True:
            v = (self.u32() if mx <= 0xFFFFFFFF else (self.u32() << 32) | self.u32()) & mask
            if v <= mx:
                return v

    def shuffle(self, a):
        for i in range(len(a) - 1, 0, -1):
            j = self.interval(i)
            a[i], a[j] = a[j], a[i]


def write_dataset(prefix, seqs):
    """IndexedDatasetBuilder with uint16 ids, add_document per sequence."""
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(struct.pack("<%dH" % len(s), *s))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", len(seqs)) + struct.pack("<Q", len(seqs) + 1))
        f.write(struct.pack("<%di" % len(seqs), *[len(s) for s in seqs]))
        ptr, ptrs = 0, []
        for s in seqs:
            ptrs.append(ptr)
            ptr += 2 * len(s)
        f.write(struct.pack("<%dq" % len(seqs), *ptrs))
        f.write(struct.pack("<%dq" % (len(seqs) + 1), *range(len(seqs) + 1)))


def split_matrix(split):
    w = [float(x) for x in re.findall(r"[.0-9]+", split)]
    w = w + [0.0] * (3 - len(w))
    total = sum(w)
    w = [x / total for x in w]
    ends = [0]
    for x in w:
        ends.append(ends[-1] + x)
    return [(a, b) if b > a else None for a, b in zip(ends[:-1], ends[1:])]


class GPTDataset:
    def __init__(self, lens, bookend, num_samples, T, seed):
        n = len(lens)
        beg, end = int(round(bookend[0] * float(n))), int(round(bookend[1] * float(n)))
        docs = list(range(beg, end))
        self.lens = lens
        E = sum(lens[d] for d in docs)
        self.n = 0
        if E <= 1 or (E - 1) // T == 0:  # no sample (Megatron would not end its epoch count)
            return
        epochs = 1
        if num_samples:
            tokens = E
            while tokens < num_samples * T + 1:
                epochs += 1
                tokens += E
        separate = False
        if epochs > 1:
            sans = ((epochs - 1) * E - 1) // T
            from_final = num_samples - sans
            per_epoch = (E - 1) // T
            assert 0 <= from_final <= per_epoch + 1
            separate = from_final < int(0.80 * per_epoch)
        rs = RandomState(seed)

        def doc_index(n_epochs):
            d = docs * n_epochs
            rs.shuffle(d)
            return d

        self.doc = doc_index(epochs) if not separate else doc_index(epochs - 1) + doc_index(1)
        n_samples = (epochs * E - 1) // T
        sample = [(0, 0)]
        di, off = 0, 0
        while len(sample) <= n_samples:
            remaining = T + 1
            while remaining != 0:
                length = lens[self.doc[di]] - off
                remaining -= length
                if remaining <= 0:
                    off += remaining + length - 1
                    remaining = 0
                else:
                    if di == len(self.doc) - 1:
                        off = lens[self.doc[di]] - 1
                        break
                    di += 1
                    off = 0
            sample.append((di, off))
        self.sample = sample
        if separate:
            first, last = list(range(sans)), list(range(sans, n_samples))
            rs.shuffle(first)
            rs.shuffle(last)
            self.order = first + last
        else:
            self.order = list(range(n_samples))
            rs.shuffle(self.order)
        self.n = n_samples

    def get(self, seqs, k):
        idx = self.order[k]
        (b, bo), (e, eo) = self.sample[idx], self.sample[idx + 1]
        if b == e:
            return seqs[self.doc[b]][bo:eo + 1]
        out = []
        for i in range(b, e + 1):
            s = seqs[self.doc[i]]
            out += s[bo if i == b else 0:(eo + 1) if i == e else len(s)]
        return out


def blend_indices(weights, size):
    cur = [0] * len(weights)
    ds, dsi = [], []
    for k in range(size):
        kd = max(float(k), 1.0)
        errs = [w * kd - c for w, c in zip(weights, cur)]
        best = max(range(len(weights)), key=lambda d: (errs[d], -d))
        ds.append(best)
        dsi.append(cur[best])
        cur[best] += 1
    return ds, dsi


def check_numpy():
    try:
        import numpy
    except ImportError:
        print("note: numpy not importable; shuffles not cross-checked", file=sys.stderr)
        return
    for seed in (0, 7, 1234):
        for n in (1, 5, 97, 5000):
            a = numpy.arange(n, dtype=numpy.int32)
            r = numpy.random.RandomState(seed)
            r.shuffle(a)
            b = list(range(n))
            RandomState(seed).shuffle(b)
            assert list(a) == b, (seed, n)


def main():
    check_numpy()
    A = [[(i * 131 + j * 7) % 1000 for j in range(1 + (i * 7) % 23)] for i in range(60)]
    B = [[1000 + (i * 17 + j) % 500 for j in range(3 + (i * 5) % 11)] for i in range(45)]
    os.makedirs(OUT, exist_ok=True)
    write_dataset(os.path.join(OUT, "gpt_a"), A)
    write_dataset(os.path.join(OUT, "gpt_b"), B)
    seqs = {"gpt_a": A, "gpt_b": B}
    cases = [
        ("one-dataset", [(None, "gpt_a")], "969,30,1", 1234, 16, (50, 40, 8)),
        ("one-epoch", [(None, "gpt_a")], "1", 1234, 8, (0, 0, 0)),
        ("blend", [(0.3, "gpt_a"), (0.7, "gpt_b")], "90,10,0", 7, 8, (300, 30, 0)),
        ("blend-uneven", [(2.0, "gpt_b"), (1.0, "gpt_a")], "80,20", 1234, 12, (120, 24, 0)),
    ]
    for name, data, split, seed, T, want in cases:
        mat = split_matrix(split)
        print("case", name)
        print("data", " ".join((("%r %s" % (w, p)) if w is not None else p) for w, p in data))
        print("config %s %d %d %d %d %d" % (split, seed, T, *want))
        blended = data[0][0] is not None
        if blended:
            total = sum(w for w, _ in data)
            weights = [w / total for w, _ in data]
        sizes, per_split = [], []
        for s in range(3):
            if mat[s] is None:
                sizes.append(0)
                per_split.append(None)
                continue
            if not blended:
                ds = GPTDataset([len(q) for q in seqs[data[0][1]]], mat[s], want[s], T, seed)
                sizes.append(ds.n)
                per_split.append(lambda k, ds=ds, p=data[0][1]: ds.get(seqs[p], k))
            else:
                parts = []
                for (w, p), wn in zip(data, weights):
                    ask = int(math.ceil(math.ceil(want[s] * wn) * 1.005))
                    parts.append((GPTDataset([len(q) for q in seqs[p]], mat[s], ask, T, seed), p))
                dsx, dsi = blend_indices(weights, want[s])
                sizes.append(want[s])
                per_split.append(lambda k, parts=parts, dsx=dsx, dsi=dsi:
                                 parts[dsx[k]][0].get(seqs[parts[dsx[k]][1]], dsi[k]))
        print("size %d %d %d" % tuple(sizes))
        for s in range(3):
            if not sizes[s]:
                continue
            ks = list(range(min(sizes[s], 40))) + [k for k in (sizes[s] // 2, sizes[s] - 1) if k >= 40]
            for k in ks:
                toks = per_split[s](k)
                assert len(toks) == T + 1, (name, s, k, len(toks))
                print("sample %d %d %s" % (s, k, " ".join(map(str, toks))))
        print("end")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reference learning-rate and weight-decay schedules, written from
Megatron-LM core 0.18's OptimizerParamScheduler (optimizer_param_scheduler.py)
and training.py's get_optimizer_param_scheduler / update_train_iters, for
tests/train/test_lr_schedule.c and tests/train/lr_schedule_cli.sh.

Plain Python (no torch, no Megatron): run it to regenerate the fixture,
    python3 tests/reference/lr_schedule_reference.py > tests/reference/lr_schedule.fixture

Fixture format, per case:
    case NAME
    flags --train-iters 40 ...          (the mtc train / Megatron flags)
    sched W D S I INC INIT MAX MIN STYLE WSD_STYLE START_WD END_WD WD_STYLE
        (lr_warmup_steps, lr_decay_steps, wsd_decay_steps (0 = none),
         wd_incr_steps, the increment per iteration, and the rest as given)
    iters N
    K LR WD      for K = 0..N: values after K iterations (scheduler steps K * INC)
    end
"""
import math


class Scheduler:
    """The scheduler's arithmetic: step(increment) then get_lr / get_wd."""

    def __init__(self, init_lr, max_lr, min_lr, warmup, decay, style, start_wd, end_wd,
                 wd_incr, wd_style, wsd_decay, wsd_style):
        assert min_lr >= 0 and max_lr >= min_lr and init_lr <= max_lr
        assert decay > 0 and warmup < decay
        if style == "WSD":
            assert wsd_decay is not None
        self.__dict__.update(locals())
        self.n = 0

    def lr(self):
        n, W, D = self.n, self.warmup, self.decay
        if W > 0 and n <= W:
            return self.init_lr + (self.max_lr - self.init_lr) * float(n) / float(W)
        if self.style == "constant":
            return self.max_lr
        if n > D:
            return self.min_lr
        if self.style == "inverse-square-root":
            return max(self.min_lr, self.max_lr * max(W, 1) ** 0.5 / max(n, 1) ** 0.5)
        r = float(n - W) / float(D - W)
        assert 0.0 <= r <= 1.0
        if self.style == "linear":
            c = 1.0 - r
        elif self.style == "cosine":
            c = 0.5 * (math.cos(math.pi * r) + 1.0)
        elif self.style == "WSD":
            start = D - self.wsd_decay
            if n <= start:
                c = 1.0
            else:
                q = float(n - start) / float(self.wsd_decay)
                c = {"linear": lambda: 1.0 - q,
                     "cosine": lambda: 0.5 * (math.cos(math.pi * q) + 1.0),
                     "exponential": lambda: 2.0 * math.pow(0.5, q) - 1.0,
                     "minus_sqrt": lambda: 1.0 - math.sqrt(q)}[self.wsd_style]()
        else:
            raise ValueError(self.style)
        return self.min_lr + c * (self.max_lr - self.min_lr)

    def wd(self):
        if self.n > self.wd_incr:
            return self.end_wd
        if self.wd_style == "constant":
            assert self.start_wd == self.end_wd
            return self.end_wd
        q = float(self.n) / float(self.wd_incr)
        c = q if self.wd_style == "linear" else 0.5 * (math.cos(math.pi * (1 - q)) + 1.0)
        return self.start_wd + c * (self.end_wd - self.start_wd)


def build(a):
    """training.py's get_optimizer_param_scheduler on a dict of flags."""
    gbs = a["global_batch_size"]
    wsd = None
    if a.get("train_iters"):
        iters = a["train_iters"]
        decay_iters = a.get("lr_decay_iters") or iters
        decay = decay_iters * gbs
        wd_incr = iters * gbs
        if a.get("lr_wsd_decay_iters") is not None:
            wsd = a["lr_wsd_decay_iters"] * gbs
        warm = (a["lr_warmup_fraction"] * decay if a.get("lr_warmup_fraction") is not None
                else a.get("lr_warmup_iters", 0) * gbs)
    else:
        iters = a["train_samples"] // gbs  # update_train_iters
        decay = a.get("lr_decay_samples") or a["train_samples"]
        wd_incr = a["train_samples"]
        wsd = a.get("lr_wsd_decay_samples")
        warm = (a["lr_warmup_fraction"] * decay if a.get("lr_warmup_fraction") is not None
                else a.get("lr_warmup_samples", 0))
    wd_style = a.get("weight_decay_incr_style", "constant")
    if wd_style == "constant":  # arguments.py
        start_wd = end_wd = a["weight_decay"]
    else:
        start_wd, end_wd = a["start_weight_decay"], a["end_weight_decay"]
    s = Scheduler(a.get("lr_warmup_init", 0.0), a["lr"], a.get("min_lr", 0.0), warm, decay,
                  a.get("lr_decay_style", "linear"), start_wd, end_wd, wd_incr, wd_style, wsd,
                  a.get("lr_wsd_decay_style", "exponential"))
    return s, iters, gbs


CASES = [
    ("linear-iters", dict(train_iters=40, global_batch_size=4, lr=1e-3, min_lr=1e-5,
                          lr_warmup_iters=5, lr_decay_style="linear", weight_decay=0.1)),
    ("cosine-fraction", dict(train_iters=40, lr_decay_iters=30, global_batch_size=4, lr=3e-3,
                             min_lr=3e-4, lr_warmup_fraction=0.1, lr_decay_style="cosine",
                             weight_decay=0.01)),
    ("cosine-init", dict(train_iters=30, global_batch_size=2, lr=2e-3, min_lr=0.0,
                         lr_warmup_iters=6, lr_warmup_init=1e-4, lr_decay_style="cosine",
                         weight_decay=0.0)),
    ("inverse-sqrt", dict(train_iters=30, global_batch_size=4, lr=1e-3, min_lr=1e-4,
                          lr_warmup_iters=4, lr_decay_style="inverse-square-root",
                          weight_decay=0.1)),
    ("constant-warmup", dict(train_iters=20, global_batch_size=4, lr=5e-4, lr_warmup_iters=3,
                             lr_decay_style="constant", weight_decay=0.1)),
    ("wsd-exponential", dict(train_iters=40, global_batch_size=4, lr=1e-3, min_lr=1e-5,
                             lr_warmup_iters=4, lr_decay_style="WSD", lr_wsd_decay_iters=12,
                             weight_decay=0.1)),
    ("wsd-linear", dict(train_iters=40, lr_decay_iters=36, global_batch_size=4, lr=1e-3,
                        min_lr=0.0, lr_warmup_fraction=0.05, lr_decay_style="WSD",
                        lr_wsd_decay_iters=10, lr_wsd_decay_style="linear", weight_decay=0.1)),
    ("wsd-cosine", dict(train_iters=40, global_batch_size=4, lr=1e-3, min_lr=1e-4,
                        lr_decay_style="WSD", lr_wsd_decay_iters=20, lr_wsd_decay_style="cosine",
                        weight_decay=0.1)),
    ("wsd-minus-sqrt-samples", dict(train_samples=160, global_batch_size=4, lr=1e-3, min_lr=1e-5,
                                    lr_warmup_samples=10, lr_decay_style="WSD",
                                    lr_wsd_decay_samples=50, lr_wsd_decay_style="minus_sqrt",
                                    weight_decay=0.1)),
    ("samples-cosine", dict(train_samples=150, global_batch_size=4, lr=1e-3, min_lr=1e-4,
                            lr_warmup_samples=13, lr_decay_samples=120, lr_decay_style="cosine",
                            weight_decay=0.1)),
    ("samples-fraction", dict(train_samples=122, global_batch_size=4, lr=1e-3, min_lr=1e-4,
                              lr_warmup_fraction=0.07, lr_decay_style="linear",
                              weight_decay=0.1)),
    ("wd-linear", dict(train_iters=30, global_batch_size=4, lr=1e-3, min_lr=1e-4,
                       lr_decay_style="cosine", weight_decay_incr_style="linear",
                       start_weight_decay=0.01, end_weight_decay=0.1, weight_decay=0.05)),
    ("wd-cosine-samples", dict(train_samples=120, global_batch_size=4, lr=1e-3,
                               lr_warmup_samples=8, lr_decay_style="linear",
                               weight_decay_incr_style="cosine", start_weight_decay=0.0,
                               end_weight_decay=0.2, weight_decay=0.05)),
]


def flags(a):
    out = []
    for k, v in a.items():
        out += ["--" + k.replace("_", "-"), repr(v) if isinstance(v, float) else str(v)]
    return " ".join(out)


def main():
    for name, a in CASES:
        s, iters, gbs = build(a)
        print("case", name)
        print("flags", flags(a))
        print("sched %.17g %d %d %d %d %.17g %.17g %.17g %s %s %.17g %.17g %s" % (
            s.warmup, s.decay, s.wsd_decay or 0, s.wd_incr, gbs, s.init_lr, s.max_lr, s.min_lr,
            s.style, s.wsd_style, s.start_wd, s.end_wd, s.wd_style))
        print("iters", iters)
        for k in range(iters + 1):
            s.n = k * gbs
            print("%d %.17g %.17g" % (k, s.lr(), s.wd()))
        print("end")


if __name__ == "__main__":
    main()

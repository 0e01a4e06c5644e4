#!/bin/sh
# The main job behind `make run`. Until the trainer lands it shows the
# communication benchmark on 4 thread-ranks.
MTC=${1:-build/mtc}
exec "$MTC" bench-comm --world-size 4

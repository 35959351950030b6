# probe_rowwise_wgmma_pp_protocol.py — a randomised model of the barrier protocol of
# probe_rowwise_wgmma_pp.h (one CTA): mbarriers with phase counts and parity waits, one producer, TMA
# fills that land out of order after random delays, 2 consumers x 4 warps drifting independently, the
# same waits, parities and arrivals as the kernel. Checks that every slab a consumer reads holds that
# slab's data from its wait until its release, and that every run ends (no deadlock).
#   python3 probe_rowwise_wgmma_pp_protocol.py [runs]           expect "failures 0"
#   python3 probe_rowwise_wgmma_pp_protocol.py [runs] noturn    without the turn: expect failures
import random, sys

USE_TURN = "noturn" not in sys.argv[2:]

class Bar:
    def __init__(s, count): s.count, s.pend, s.k, s.tx = count, count, 0, 0
    def arrive(s, tx=0):
        s.pend -= 1; s.tx += tx; s._check()
    def complete_tx(s, tx):
        s.tx -= tx; s._check()
    def _check(s):
        if s.pend == 0 and s.tx == 0:
            s.k += 1; s.pend = s.count
    def ok(s, parity): return (s.k & 1) != parity

# try_wait.parity(P) passes once the phase of parity P has completed: while the current phase k has
# the other parity (a fresh barrier, k = 0, passes P = 1)
def run(seed, tiles, kblocks, STAGES):
    rnd = random.Random(seed)
    FULL = [Bar(1) for _ in range(STAGES)]
    EMPTY = [Bar(4) for _ in range(STAGES)]
    TURN = [Bar(4), Bar(4)]
    content = [None] * STAGES
    inflight = []  # (stage, g) TMA pending
    errors = []

    def producer():
        stage, phase = 0, 0
        for i in range(tiles):
            for kb in range(kblocks):
                g = i * kblocks + kb
                while not EMPTY[stage].ok(phase ^ 1): yield
                FULL[stage].arrive(tx=1)
                inflight.append((stage, g))
                stage += 1
                if stage == STAGES: stage, phase = 0, phase ^ 1
                yield

    def consumer(c, warp):
        i, j = c, 0
        while i < tiles:
            if i > 0 and USE_TURN:
                while not TURN[c].ok((j + c + 1) & 1): yield
            g0 = i * kblocks
            stage, phase, prev, prevg = g0 % STAGES, (g0 // STAGES) & 1, 0, -1
            for kb in range(kblocks):
                g = g0 + kb
                while not FULL[stage].ok(phase): yield
                if content[stage] != g: errors.append(("read", c, warp, g, content[stage]))
                yield
                if kb == kblocks - 1: TURN[c ^ 1].arrive()
                if kb > 0:
                    if content[prev] != prevg: errors.append(("release", c, warp, prevg, content[prev]))
                    EMPTY[prev].arrive()
                prev, prevg = stage, g
                stage += 1
                if stage == STAGES: stage, phase = 0, phase ^ 1
                yield
            if content[prev] != prevg: errors.append(("release", c, warp, prevg, content[prev]))
            EMPTY[prev].arrive()
            for _ in range(rnd.randint(0, 3 * kblocks)): yield  # epilogue
            i += 2; j += 1

    agents = [producer()] + [consumer(c, w) for c in range(2) for w in range(4)]
    live = list(agents)
    steps = 0
    while live or inflight:
        steps += 1
        if steps > 2_000_000: return "no progress (deadlock?)"
        if inflight and rnd.random() < 0.3:  # a random pending TMA completes (out of order)
            k = rnd.randrange(len(inflight))
            st, g = inflight.pop(k)
            content[st] = g
            FULL[st].complete_tx(1)
            continue
        if not live:
            continue
        a = rnd.choice(live)
        try: next(a)
        except StopIteration: live.remove(a)
        if errors: return errors[:3]
    return None

bad = 0
n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
for seed in range(n):
    r = random.Random(seed)
    tiles, kblocks, STAGES = r.randint(1, 9), r.randint(1, 9), r.choice([2, 3, 4, 5, 6])
    e = run(seed, tiles, kblocks, STAGES)
    if e:
        bad += 1
        if bad < 5: print(seed, tiles, kblocks, STAGES, e)
print("runs", n, "failures", bad)

"""The replay's state carried from run to run and sync to sync
(:mod:`traceparse.analyses.replay`, "Within one epoch ..."): :func:`_carry` walks the runs
of one process in epoch order; :class:`Carry` is its state, so a trace replayed in
time-ordered pieces continues where the previous piece stopped
(:mod:`traceparse.analyses.replay_pieces`)."""

from __future__ import annotations

from dataclasses import dataclass, field

#: "no value" in the replay's int64 arithmetic (far below any time)
_NEG = -(1 << 62)


def _carry(eps: list[int], keys: list[int], c_all: list[int], cm_all: list[int],
           c_sel: list[int], cm_sel: list[int], any_sel: list[bool], c_last: list[int],
           m_last: list[int], syncs: tuple[list[int], ...], t0: int, carry: Carry
           ) -> tuple[list[int], list[int]]:
    """Per run (in epoch order): the host shift of its epoch and its stream's predicted
    end before it (``_NEG``: none), carried from run to run and sync to sync. A run's
    predicted ends are ``c + max(init, shift + m)``, so their maximum (what the next sync
    waits for) is ``max(init + max c, shift + max(c + m))`` over its rows (``*_sel``: over
    those launched before that sync was entered). The state starts from ``carry`` (epochs
    and syncs counted from its ``cur``) and is left in it."""
    ss, se, w, tail = syncs[:4]
    adv = syncs[4] if len(syncs) > 4 else [0] * len(ss)
    drop = syncs[5] if len(syncs) > 5 else [False] * len(ss)
    shifts: list[int] = []
    inits: list[int] = []
    state = carry.streams
    pending: list[tuple[int, int]] = []
    shift, older, ep_all, ep_sel = carry.shift, carry.older, carry.ep_all, carry.ep_sel
    cur = 0
    get = state.get
    for e, k, ca, cma, csl, cmsl, anys, cl, ml in zip(
            eps, keys, c_all, cm_all, c_sel, cm_sel, any_sel, c_last, m_last, strict=True):
        while cur < e:  # the sync that ends epoch `cur` returns
            state.update(pending)
            pending = []
            w_pred = older
            if ep_sel is not None:
                w_pred = ep_sel if w_pred is None or ep_sel > w_pred else w_pred
            if ep_all is not None:
                older = ep_all if older is None or ep_all > older else older
            wv = w_pred if w_pred is not None else w[cur] - t0
            h = ss[cur] - t0 + shift - adv[cur]
            # a dropped sync no longer waits: the host goes on at its entry
            shift = (h if drop[cur] else (h if h > wv else wv) + tail[cur]) - (se[cur] - t0)
            ep_all = ep_sel = None
            cur += 1
        init = get(k)
        if init is None:
            inits.append(_NEG)
            r_all, r_sel, last = shift + cma, shift + cmsl, cl + shift + ml
        else:
            inits.append(init)
            x, y = init + ca, shift + cma
            r_all = x if x > y else y
            x, y = init + csl, shift + cmsl
            r_sel = x if x > y else y
            y = shift + ml
            last = cl + (init if init > y else y)
        shifts.append(shift)
        pending.append((k, last))
        if ep_all is None or r_all > ep_all:
            ep_all = r_all
        if anys and (ep_sel is None or r_sel > ep_sel):
            ep_sel = r_sel
    # a run's stream end waits for the next sync only because a stream has one run per
    # epoch: the next piece of the same epoch continues from it
    state.update(pending)
    carry.shift, carry.older, carry.ep_all, carry.ep_sel = shift, older, ep_all, ep_sel
    carry.cur += cur
    return shifts, inits


@dataclass
class Carry:
    """A process's replay state at a point of its host time (docs/performance.md,
    "Chunked replay"): the host shift of the current epoch, the latest predicted end of
    the earlier epochs (``older``) and of the current one (``ep_all``; ``ep_sel``: of its
    rows launched before the next sync's entry), the syncs passed (``cur``) and each
    stream's last predicted end (``streams``, by run key). A fresh one is the start of
    the trace."""

    shift: int = 0
    older: int | None = None
    ep_all: int | None = None
    ep_sel: int | None = None
    cur: int = 0
    streams: dict[int, int] = field(default_factory=dict)

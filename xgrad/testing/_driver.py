"""The registry driver: every registered op's gradient checks as cases.

A case is one op, one of its samples, one float dtype, one device and one
order (1: first derivatives, 2: second), and with ``--layouts`` one memory
layout of the inputs. ``run_case`` draws the inputs from the op's declared
domain, checks the analytic gradients against float64 central differences
with the dtype's tolerance, and re-draws the inputs when they land on a
non-differentiable point. With a ``GradSnapshot`` it also records the
float64 gradients that passed (golden gradients) or compares the case's
analytic gradients with them; with ``curves`` a failed comparison also
gets its error against the step (``_step_curve``). ``python -m xgrad
check``, ``xgrad.testing.gradient_cases`` and the test suite all run cases
through here; the ops are xgrad's own or a user's (``_user_ops``).
"""

import dataclasses
import time
from typing import Optional

import numpy

import xgrad
from xgrad._errors import GradientCheckArgumentError
from xgrad._ops.registry import F16, F64, sample_seed
from xgrad.testing import _layouts, _step_curve, _user_ops
from xgrad.testing._checks import check_backward, check_double_backward
from xgrad.testing._numerical import NondifferentiablePointError
from xgrad.testing._tolerances import least_precise

# How often a case re-draws inputs that sit on a kink before giving up.
MAX_DRAWS = 5


CONTIGUOUS = 'contiguous'


@dataclasses.dataclass(frozen=True)
class Case:
    """One gradient check: op x sample x dtype x device x order (x layout,
    where ``--layouts`` adds the inputs' other layouts)."""
    info: object
    sample: object
    dtype: numpy.dtype
    device: str
    order: int
    layout: str = CONTIGUOUS

    @property
    def op(self):
        return self.info.qualified_name

    @property
    def name(self):
        name = '{}[{}]-{}-{}-order{}'.format(self.op, self.sample.name, self.dtype.name,
                                             self.device, self.order)
        return name if self.layout == CONTIGUOUS else '{}-{}'.format(name, self.layout)

    @property
    def snapshot_key(self):
        return '{}/{}'.format(self.op, self.sample.name)


@dataclasses.dataclass
class CaseResult:
    """What one case found. ``status``: 'passed', 'failed' (a gradient is
    wrong) or 'error' (the op or the check raised something else)."""
    case: Case
    seed: int
    status: str
    worst_abs: float = 0.0
    worst_rel: float = 0.0
    message: str = ''
    seconds: float = 0.0
    draws: int = 1
    snapshot: Optional[str] = None  # None, 'recorded', 'matched' or 'mismatch'
    # The error of the central difference against the step (_step_curve),
    # for a failed comparison when asked for; None otherwise.
    curve: Optional[dict] = None

    @property
    def passed(self):
        return self.status == 'passed'

    def as_json(self):
        c = self.case
        out = {'op': c.op, 'sample': c.sample.name, 'dtype': c.dtype.name,
               'device': c.device, 'order': c.order, 'seed': self.seed,
               'status': self.status, 'worst_abs': self.worst_abs,
               'worst_rel': self.worst_rel, 'message': self.message,
               'seconds': round(self.seconds, 6), 'draws': self.draws,
               'snapshot': self.snapshot}
        # Only where there is one: a plain run's records stay as they were.
        if c.layout != CONTIGUOUS:
            out['layout'] = c.layout
        if self.curve is not None:
            out['step_curve'] = self.curve
        return out


def cases(ops=None, dtypes=None, devices=('native:0',), orders=(1, 2), layouts=(),
          infos=None):
    """The cases of the differentiable ops ``ops`` selects (``_user_ops.select``:
    default xgrad's own; ``infos``, when given, instead) for the given
    dtypes (default: each op's float dtypes), devices and orders, and on
    native devices also in each of ``layouts`` (after the contiguous case
    of each sample). Order 2 is left out for ops declared not twice
    differentiable (their claim is tested by the test suite)."""
    if infos is None:
        infos = _user_ops.select(ops)
    out = []
    for info in infos:
        if not info.differentiable:
            continue
        for order in orders:
            if order == 2 and not info.twice_differentiable:
                continue
            for dtype in (info.dtypes if dtypes is None else
                          [numpy.dtype(d) for d in dtypes if numpy.dtype(d) in info.dtypes]):
                for device in devices:
                    native = xgrad.get_device(device).is_native if layouts else True
                    for sample in info.samples:
                        out.append(Case(info, sample, numpy.dtype(dtype), device, order))
                        if native:
                            out.extend(Case(info, sample, numpy.dtype(dtype), device, order,
                                            layout) for layout in layouts)
    return out


# ---------------------------------------------------------------------------
# One case

class _Setup:
    """The arrays of one draw: the differentiable inputs, the constant ones
    (labels, indices), output gradients ``grad_outputs`` and, for order 2,
    ``grad_grad_inputs``; ``func`` maps the differentiable inputs to the
    op's outputs. ``gys``/``ggxs`` (float64 NumPy arrays) are used instead
    of drawing them from ``rs``; ``golden`` rounds drawn ones to float16, so
    that every dtype sees the same values."""

    def __init__(self, case, rs, data, gys=None, ggxs=None, golden=False):
        self.case = case
        device = xgrad.get_device(case.device)
        arrays = [xgrad.array(a, device=device) for a in data]
        diff = case.info.differentiable_inputs(case.sample)
        self.consts = {i: a for i, a in enumerate(arrays) if i not in diff}
        if case.layout != CONTIGUOUS:
            self.consts = {i: _layouts.constant_in_layout(a, case.layout)
                           for i, a in self.consts.items()}
        self.n = len(arrays)
        self.inputs = [arrays[i].require_grad() for i in diff]
        with xgrad.no_backprop_mode():
            ys = self.func(self.inputs)

        def draw(shape):
            a = rs.uniform(-1, 1, shape)
            return a.astype(F16).astype(F64) if golden else a

        if gys is None:
            gys = [draw(y.shape) if y is not None and y.dtype.kind == 'f' else None
                   for y in ys]
        if ggxs is None:  # (only order 2 uses them)
            ggxs = [draw(x.shape) if rs is not None else numpy.zeros(x.shape)
                    for x in self.inputs]
        self.grad_outputs = [None if g is None else xgrad.array(
            g.astype(y.dtype), device=device) for g, y in zip(gys, ys)]
        self.grad_grad_inputs = [xgrad.array(g.astype(x.dtype), device=device)
                                 for g, x in zip(ggxs, self.inputs)]

    def func(self, args):
        it = iter(args)
        full = [self.consts[i] if i in self.consts else next(it) for i in range(self.n)]
        if self.case.layout != CONTIGUOUS:
            full = [x if i in self.consts else _layouts.relayout(x, self.case.layout)
                    for i, x in enumerate(full)]
        ys = self.case.info(full, self.case.sample)
        return tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)

    def seeds_as_float64(self):
        """grad_outputs (then grad_grad_inputs for order 2) as float64 NumPy."""
        seeds = list(self.grad_outputs)
        if self.case.order == 2:
            seeds += self.grad_grad_inputs
        return [None if g is None else g.to_numpy().astype(F64) for g in seeds]


def _work_dtype(case, setup):
    """The least precise float dtype involved (an op may return a less
    precise dtype than its inputs, like astype)."""
    return least_precise([case.dtype] + [g.dtype for g in setup.grad_outputs
                                         if g is not None])


def _tolerance(case, setup):
    return case.info.tolerance(_work_dtype(case, setup))


def _check(case, setup):
    """The numerical check of the case's order. Kinks are looked for only
    where the comparison fails (a passing check costs nothing extra); order
    2 does not repeat the first-order check (its own case does that)."""
    atol, rtol = _tolerance(case, setup)
    eps = case.info.step(_work_dtype(case, setup))
    name = '{} ({})'.format(case.op, case.sample.name)
    if case.order == 1:
        return check_backward(setup.func, setup.inputs, setup.grad_outputs, eps,
                              atol=atol, rtol=rtol, detect_nondifferentiable='on_failure',
                              name=name)
    gys = [g.require_grad() if g is not None else None for g in setup.grad_outputs]
    return check_double_backward(setup.func, setup.inputs, gys, setup.grad_grad_inputs,
                                 eps, atol=atol, rtol=rtol,
                                 detect_nondifferentiable='on_failure',
                                 check_first_order=False, name=name)


def run_case(case, seed=0, snapshot=None, update_snapshot=False, curves=False):
    """Run one case; never raises for a wrong gradient (the result says).
    ``curves``: a comparison that fails (or finds a kink in every draw)
    also measures its error against the step (``_step_curve``), at the
    draw that failed."""
    start = time.perf_counter()
    result = CaseResult(case, seed, 'passed')
    checking = None  # the draw of the numerical comparison under way
    try:
        for draw in range(MAX_DRAWS):
            rs = numpy.random.RandomState(sample_seed(
                seed, case.op, case.sample.name, case.dtype, case.order, draw))
            setup = _Setup(case, rs, case.info.sample_data(case.sample, case.dtype, rs))
            checking = setup
            try:
                found = _check(case, setup)
            except NondifferentiablePointError as e:
                result.draws = draw + 2
                result.message = 'redrawn: {}'.format(e)
                continue
            checking = None
            result.worst_abs, result.worst_rel = found.worst_abs, found.worst_rel
            result.message = ''
            break
        else:
            result.status = 'error'
            result.message = 'inputs sat on a non-differentiable point in {} draws: {}'.format(
                MAX_DRAWS, result.message)
        if snapshot is not None and result.passed:
            _snapshot(case, snapshot, update_snapshot, result)
    except GradientCheckArgumentError as e:  # the case is set up wrong: no verdict
        result.status = 'error'
        result.message = '{}: {}'.format(type(e).__name__, e)
        checking = None
    except xgrad.GradientCheckError as e:
        result.status = 'failed'
        found = getattr(e, 'result', None)
        if found is not None:
            result.worst_abs, result.worst_rel = found.worst_abs, found.worst_rel
        result.message = str(e)
    except Exception as e:  # NOQA: the op itself failed: report, go on
        result.status = 'error'
        result.message = '{}: {}'.format(type(e).__name__, e)
        checking = None
    if curves and checking is not None and not result.passed:
        atol, rtol = _tolerance(case, checking)
        result.curve = _step_curve.measure(case, checking, case.info.step(
            _work_dtype(case, checking)), atol, rtol)
    result.seconds = time.perf_counter() - start
    return result


# ---------------------------------------------------------------------------
# Golden gradients

def _golden_setup(case, golden=None):
    """The draw golden gradients are taken at: one per sample (fixed seed),
    inputs and seeds rounded to float16 so every dtype sees exactly the
    values the float64 golden gradients were computed at. With ``golden``
    (a recorded ``Golden``), its inputs and seeds replace the drawn ones,
    so a later change of the sampling cannot move the comparison point."""
    info = case.info
    rs = numpy.random.RandomState(sample_seed('golden', case.op, case.sample.name,
                                              case.order))
    data = info.sample_data(case.sample, F16 if F16 in info.dtypes else F64, rs)
    if golden is None:
        return _Setup(case, rs, [a.astype(case.dtype) if a.dtype.kind == 'f' else a
                                 for a in data], golden=True)
    diff = info.differentiable_inputs(case.sample)
    if len(golden.inputs) != len(diff):
        raise xgrad.GradientCheckError('golden gradients of {} were recorded for {} inputs, '
                                       'the op now has {}'.format(case.snapshot_key,
                                                                  len(golden.inputs),
                                                                  len(diff)))
    for i, g in zip(diff, golden.inputs):
        data[i] = g
    data = [a.astype(case.dtype) if i in diff else a for i, a in enumerate(data)]
    n_gys = len(golden.grad_outputs) - (len(diff) if case.order == 2 else 0)
    return _Setup(case, None, data, gys=golden.grad_outputs[:n_gys],
                  ggxs=golden.grad_outputs[n_gys:] if case.order == 2 else None)


def _analytic(case, setup):
    """The analytic gradients of the case's order, as float64 NumPy arrays
    (None where there is none)."""
    ys = setup.func(setup.inputs)
    pairs = [(y, g) for y, g in zip(ys, setup.grad_outputs) if g is not None]
    grads = xgrad.grad([y for y, _ in pairs], setup.inputs,
                       grad_outputs=[g for _, g in pairs],
                       enable_double_backprop=case.order == 2)
    if case.order == 2:
        used = [(g, gg) for g, gg in zip(grads, setup.grad_grad_inputs) if g is not None]
        grads = xgrad.grad([g for g, _ in used], setup.inputs,
                           grad_outputs=[gg for _, gg in used])
    return [None if g is None else g.to_numpy().astype(F64) for g in grads]


def _snapshot(case, snapshot, update, result):
    """Record the golden float64 gradients of ``case`` (float64 cases, when
    none are recorded or ``update``) after checking them numerically, or
    compare the case's analytic gradients at the golden inputs with them."""
    key = case.snapshot_key
    if case.dtype == F64 and case.layout == CONTIGUOUS and (
            update or not snapshot.has(key, case.order)):
        setup = _golden_setup(case)
        _check(case, setup)  # golden gradients must pass the numerical check too
        snapshot.record(key, [x.to_numpy().astype(F64) for x in setup.inputs],
                        setup.seeds_as_float64(), _analytic(case, setup),
                        order=case.order,
                        meta={'op': case.op, 'sample': case.sample.name})
        result.snapshot = 'recorded'
        return
    if not snapshot.has(key, case.order):
        return
    setup = _golden_setup(case, snapshot.load(key, case.order))
    atol, rtol = _tolerance(case, setup)
    comparison = snapshot.compare(key, _analytic(case, setup), case.dtype,
                                  order=case.order, atol=atol, rtol=rtol)
    result.snapshot = 'matched' if comparison.ok else 'mismatch'
    if not comparison.ok:
        result.status = 'failed'
        result.worst_abs = max(result.worst_abs, comparison.worst_abs)
        result.worst_rel = max(result.worst_rel, comparison.worst_rel)
        result.message = 'golden gradients: {}'.format(comparison.message)


# ---------------------------------------------------------------------------
# Splitting the cases over machines (--shard) and processes (--jobs)
#
# A shard is a deterministic part of the cases, balanced by what the cases
# cost to run rather than by how many there are: the seconds each case took
# are measured once on one machine and shipped as ``check_costs.json`` next
# to this module (``scripts/check_costs.py`` rewrites it from a report), and
# the units are dealt greedily, the most expensive first, each to the shard
# with the least estimated work so far. Every shard computes the same
# assignment from the same table and case list, so N machines running
# ``--shard 1/N`` ... ``--shard N/N`` run each case exactly once.

COST_TABLE = 'check_costs.json'
# A case the table has no entry for (a new op, sample or dtype, another
# table) and whose op has none either.
DEFAULT_COST_S = 0.02

_cost_table_cache = {}


def cost_key(case):
    """The cost table's key of a case: op, sample, dtype and order. The
    device is not part of it (the table is measured on native:0)."""
    return '{}[{}]-{}-order{}'.format(case.op, case.sample.name, case.dtype.name, case.order)


def load_cost_table(path=None):
    """{cost_key: seconds} from ``path`` (default: the table shipped with
    xgrad); an empty table when the shipped one is missing."""
    import json
    import os
    if path is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), COST_TABLE)
        if not os.path.exists(path):
            return {}
    if path not in _cost_table_cache:
        with open(path, encoding='utf-8') as f:
            _cost_table_cache[path] = {str(k): float(v) for k, v in
                                       json.load(f)['seconds'].items()}
    return _cost_table_cache[path]


def estimate_costs(case_list, table=None):
    """Estimated seconds of each case: the table's measurement; for a case
    missing from it, the median of the table's entries for the same op and
    order (any sample or dtype), else for the same order, else
    ``DEFAULT_COST_S``. Depends only on the table and the cases, so every
    machine estimates the same."""
    table = load_cost_table() if table is None else table
    by_op, by_order = {}, {}
    for key, seconds in table.items():
        op, _, rest = key.partition('[')
        order = rest.rpartition('-order')[2]
        by_op.setdefault((op, order), []).append(seconds)
        by_order.setdefault(order, []).append(seconds)

    def median(values):
        values = sorted(values)
        n = len(values)
        return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2

    out = []
    for case in case_list:
        seconds = table.get(cost_key(case))
        if seconds is None:
            known = by_op.get((case.op, str(case.order))) or by_order.get(str(case.order))
            seconds = median(known) if known else DEFAULT_COST_S
        out.append(seconds)
    return out


def work_units(case_list, indices=None, keep_snapshot_groups=False):
    """The cases (positions in ``case_list``, all or those in ``indices``,
    in that order) grouped into the units a shard or a job runs whole: one
    case each, or with golden gradients (``keep_snapshot_groups``) all the
    dtypes and devices of one op, sample and order together, so that the
    float64 case that records the golden gradients runs where the others
    compare with them."""
    indices = range(len(case_list)) if indices is None else indices
    if not keep_snapshot_groups:
        return [[i] for i in indices]
    groups = {}
    for i in indices:
        c = case_list[i]
        groups.setdefault((c.snapshot_key, c.order), []).append(i)
    return list(groups.values())


def assign(unit_costs, n):
    """Greedy longest-first: deal the units, the most expensive first (ties
    by position), each to the bin with the least cost so far (ties: the
    lowest bin). Returns the units' positions per bin, each in ascending
    order. Deterministic; the largest bin is at most the mean plus the most
    expensive unit."""
    import heapq
    if n < 1:
        raise ValueError('cannot split into {} parts'.format(n))
    bins = [(0.0, k) for k in range(n)]
    out = [[] for _ in range(n)]
    for u in sorted(range(len(unit_costs)), key=lambda u: (-unit_costs[u], u)):
        load, k = heapq.heappop(bins)
        out[k].append(u)
        heapq.heappush(bins, (load + unit_costs[u], k))
    return [sorted(b) for b in out]


def shard(case_list, k, n, keep_snapshot_groups=False, table=None):
    """Positions in ``case_list`` of the cases of shard ``k`` of ``n``
    (1-based), ascending."""
    if not 1 <= k <= n:
        raise ValueError('shard {}/{}: need 1 <= K <= N'.format(k, n))
    costs = estimate_costs(case_list, table)
    units = work_units(case_list, keep_snapshot_groups=keep_snapshot_groups)
    parts = assign([sum(costs[i] for i in u) for u in units], n)
    return sorted(i for u in parts[k - 1] for i in units[u])


def selection_digest(case_list):
    """A short hash of the case names in order: reports of shards of the
    same selection carry the same one."""
    import hashlib
    h = hashlib.sha256()
    for c in case_list:
        h.update(c.name.encode())
        h.update(b'\n')
    return h.hexdigest()[:16]

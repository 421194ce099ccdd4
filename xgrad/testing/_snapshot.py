"""Golden gradients: a directory of float64 gradients that passed a numerical
check, against which later runs compare every dtype and device.

A store is a directory holding ``index.json`` and one compressed ``.npz`` per
(key, order). The index is meant to be read (and diffed) by people: sorted
keys, one entry per (key, order) with the shapes, the xgrad version and the
date of recording and the caller's ``meta``. Each ``.npz`` holds the float64
arrays ``inputs_<i>``, ``grad_outputs_<i>`` and ``grads_<i>``; an entry that is
None (no output gradient, no gradient for an input) is absent from the
``.npz`` and listed as ``null`` in the index. Keys are any strings (pytest node
ids with ``/``, ``::``, brackets and spaces included); their file names are a
readable slug plus a hash of the key, so they are safe, unique and stable.

Writes go to a temporary file that ``os.replace`` puts in place, and the index
is updated under a lock on the directory (where the OS has ``flock``), so an
interrupted run or several pytest workers never leave a half-written store.
The xgrad version is recorded, not enforced: stores written by other versions
are read alike.

What the arrays mean is up to the caller, with one convention for gradients
of order 2 (used by ``python -m xgrad check`` and the pytest fixture): the
inputs are the function's inputs, the grad_outputs are its output gradients
followed by the grad_grad_inputs, and the grads are the gradients of
``sum_i <grad_grad_inputs[i], first-order gradient i>`` with respect to the
inputs. ``GradSnapshot.check`` runs the whole record-or-compare procedure for
a function of xgrad arrays.
"""

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import re
import tempfile
import zipfile
import zlib
from typing import List, NamedTuple, Optional

import numpy

import xgrad
from xgrad.testing._checks import check_backward, check_double_backward
from xgrad.testing._tolerances import default_tolerance

try:
    import fcntl
except ImportError:  # Windows: no lock; one writer at a time is up to the user
    fcntl = None

__all__ = ['GradSnapshot', 'Golden', 'SnapshotComparison', 'SnapshotError',
           'MissingSnapshotError']

F64 = numpy.dtype('float64')
INDEX = 'index.json'
# The layout of index.json and the .npz files; bumped only on incompatible
# changes (a store of a newer format is refused with a clear error).
FORMAT = 1
_SLUG_LENGTH = 60


class SnapshotError(xgrad.XgradError):
    """A golden-gradient store that cannot be used: unreadable or
    inconsistent files, or golden gradients recorded at other inputs."""


class MissingSnapshotError(SnapshotError, KeyError):
    """No golden gradients for a key (also a KeyError)."""

    def __str__(self):  # KeyError would print the repr of the message
        return str(self.args[0])


class Golden(NamedTuple):
    """Golden gradients as loaded: lists of float64 NumPy arrays (None where
    none was recorded) and the caller's ``meta`` dict."""
    inputs: List[numpy.ndarray]
    grad_outputs: List[Optional[numpy.ndarray]]
    grads: List[Optional[numpy.ndarray]]
    meta: dict


@dataclasses.dataclass
class SnapshotComparison:
    """The outcome of comparing analytic gradients with golden ones.

    worst_abs / worst_rel: the largest |analytic - golden| and
    |analytic - golden| / |golden| (over the elements where |golden| > atol,
    as in check_backward) of any input; infinite for a shape mismatch.
    worst_input: the input that fails worst (or, when all pass, has the
    largest error); None when no input had a gradient. message: one line
    when ``ok``, else one line per failing input naming its index, worst
    element, both values and the errors."""
    ok: bool
    worst_abs: float
    worst_rel: float
    worst_input: Optional[int]
    message: str


class GradSnapshot:
    """A directory of golden gradients (created on the first ``record``)."""

    def __init__(self, directory):
        self.directory = os.path.abspath(os.fspath(directory))
        self._index_cache = None  # (file stamp, parsed entries)

    def __repr__(self):
        return 'GradSnapshot({!r})'.format(self.directory)

    # -- reading -----------------------------------------------------------

    def keys(self):
        """The recorded (key, order) pairs, sorted."""
        return sorted(self._read_index())

    def has(self, key, order=1):
        """Whether golden gradients are recorded for ``key`` and ``order``."""
        return (_check_key(key), _check_order(order)) in self._read_index()

    def load(self, key, order=1):
        """The golden gradients of ``key``; MissingSnapshotError if there are
        none, SnapshotError if the files are unreadable or disagree."""
        return self._load(key, order)[0]

    def _load(self, key, order):
        """(Golden, index entry) of ``key``."""
        entry = self._entry(key, order)
        path = os.path.join(self.directory, entry['file'])
        try:
            with numpy.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise SnapshotError('cannot read the golden gradients of {!r} (order {}) '
                                'from {}: {}'.format(key, order, path, e)) from e
        lists = []
        for field in ('inputs', 'grad_outputs', 'grads'):
            shapes = entry[field]
            values = []
            for i, shape in enumerate(shapes):
                a = arrays.pop('{}_{}'.format(field, i), None)
                if (a is None) != (shape is None) or (a is not None
                                                      and list(a.shape) != shape):
                    raise SnapshotError(
                        '{} does not match {}: {}_{} is {} there and {} in the '
                        'index; re-record key {!r}'.format(
                            path, os.path.join(self.directory, INDEX), field, i,
                            _describe(a), 'absent' if shape is None else tuple(shape),
                            key))
                values.append(a)
            lists.append(values)
        if arrays:
            raise SnapshotError('{} holds arrays the index does not list: {}; '
                                're-record key {!r}'.format(path, sorted(arrays), key))
        return Golden(*lists, entry.get('meta') or {}), entry

    # -- writing -----------------------------------------------------------

    def record(self, key, inputs, grad_outputs, grads, *, order=1, meta=None):
        """Store golden gradients for ``key`` and ``order``, replacing any.

        inputs, grad_outputs, grads: lists of arrays (NumPy or xgrad), stored
        as float64; grad_outputs and grads may hold None. There is one grad
        per input, of the input's shape, and all are finite. meta: a dict
        that JSON can write (op name, seed...), kept in the index."""
        key, order = _check_key(key), _check_order(order)
        inputs = _float64_list(inputs, 'inputs', allow_none=False)
        grad_outputs = _float64_list(grad_outputs, 'grad_outputs')
        grads = _float64_list(grads, 'grads')
        if len(grads) != len(inputs):
            raise ValueError('record({!r}): {} grads for {} inputs'.format(
                key, len(grads), len(inputs)))
        for i, (x, g) in enumerate(zip(inputs, grads)):
            if g is not None and g.shape != x.shape:
                raise ValueError('record({!r}): grads[{}] has shape {}, inputs[{}] has '
                                 'shape {}'.format(key, i, g.shape, i, x.shape))
            if g is not None and not numpy.isfinite(g).all():
                raise ValueError('record({!r}): grads[{}] is not finite; golden '
                                 'gradients must be'.format(key, i))
        meta = {} if meta is None else meta
        if not isinstance(meta, dict):
            raise TypeError('record({!r}): meta must be a dict, not {}'.format(
                key, type(meta).__name__))
        try:
            json.dumps(meta)
        except (TypeError, ValueError) as e:
            raise TypeError('record({!r}): meta must be JSON-serialisable: {}'.format(
                key, e)) from None

        arrays, entry = {}, {}
        for field, values in (('inputs', inputs), ('grad_outputs', grad_outputs),
                              ('grads', grads)):
            entry[field] = [None if a is None else list(a.shape) for a in values]
            arrays.update(('{}_{}'.format(field, i), a)
                          for i, a in enumerate(values) if a is not None)
        entry.update(key=key, order=order, file=file_name(key, order), dtype=F64.name,
                     recorded=datetime.datetime.now(datetime.timezone.utc)
                     .isoformat(timespec='seconds'),
                     xgrad_version=xgrad.__version__, meta=meta)

        os.makedirs(self.directory, exist_ok=True)
        with self._locked():
            index = self._read_index()  # a corrupt index stops us before writing
            _atomic_write(os.path.join(self.directory, entry['file']),
                          lambda f: numpy.savez_compressed(f, **arrays))
            index[key, order] = entry
            text = _index_text(index)
            _atomic_write(os.path.join(self.directory, INDEX),
                          lambda f: f.write(text.encode('utf-8')))

    # -- comparing ---------------------------------------------------------

    def compare(self, key, grads, dtype, *, order=1, atol=None, rtol=None):
        """Compare analytic gradients (one per golden input; NumPy or xgrad
        arrays of any float dtype, or None) with the golden float64 ones:
        ``|analytic - golden| <= atol + rtol * |golden|`` elementwise, with
        ``default_tolerance(dtype)`` for what is not given.

        A missing gradient counts as zeros (a failure where the golden one is
        not ~0), so does a golden None against a gradient; a shape mismatch is
        a failure. Returns a SnapshotComparison; raises only for bad use."""
        golden, entry = self._load(key, order)
        dtype = numpy.dtype(dtype)
        default_atol, default_rtol = default_tolerance(dtype)
        atol = default_atol if atol is None else float(atol)
        rtol = default_rtol if rtol is None else float(rtol)
        grads = _float64_list(grads, 'grads')
        if len(grads) != len(golden.grads):
            raise ValueError('compare({!r}): {} gradients given, the golden gradients '
                             'have {} (one per input)'.format(key, len(grads),
                                                              len(golden.grads)))

        reports = [_compare_one(i, a, g, atol, rtol)
                   for i, (a, g) in enumerate(zip(grads, golden.grads))
                   if a is not None or g is not None]
        failed = [r for r in reports if r.problem]
        worst_abs = max([r.abs for r in reports], default=0.0)
        worst_rel = max([r.rel for r in reports], default=0.0)
        worst = max(failed or reports, key=lambda r: (r.excess, r.abs), default=None)
        worst_input = None if worst is None else worst.input
        what = '{!r} (order {}, {})'.format(key, order, dtype.name)
        if not failed:
            message = 'gradients of {} match the golden ones: worst abs error {:.3g}, ' \
                      'worst rel error {:.3g}{}'.format(
                          what, worst_abs, worst_rel,
                          '' if worst is None else ' (input {})'.format(worst_input))
            return SnapshotComparison(True, worst_abs, worst_rel, worst_input, message)
        lines = ['gradients of {} differ from the golden float64 gradients '
                 '(atol={:g}, rtol={:g}):'.format(what, atol, rtol)]
        lines += ['  input {}: {}'.format(r.input, r.problem) for r in failed]
        lines.append('golden: {} (recorded {} with xgrad {})'.format(
            os.path.join(self.directory, entry['file']), entry.get('recorded', '?'),
            entry.get('xgrad_version', '?')))
        return SnapshotComparison(False, worst_abs, worst_rel, worst_input,
                                  '\n'.join(lines))

    # -- record or compare -------------------------------------------------

    def check(self, key, func, inputs, grad_outputs=None, *, order=1,
              grad_grad_inputs=None, update=False, record_missing=True, atol=None,
              rtol=None, meta=None):
        """Record and/or compare the gradients of ``func`` at ``inputs``.

        func: a list of xgrad arrays -> an xgrad array or a tuple/list of
        them. Every float input is differentiated (hold an input constant by
        closing over it); other inputs (indices) are passed through.
        grad_outputs / grad_grad_inputs (order 2): None for fixed
        pseudo-random values drawn from the key (not ones, which cannot tell a
        backward that forgets to multiply by its output gradient).

        Records when ``update``, or when ``record_missing`` and nothing is
        recorded yet: the float64 version of the problem must pass
        ``check_backward`` (order 1) or ``check_double_backward`` (order 2),
        then its float64 gradients are stored. Then, always, compares the
        analytic gradients in the inputs' own dtypes and devices with the
        golden ones, with the least precise input dtype's tolerance (or
        atol/rtol): a float16-only error fails even the recording run.

        Returns the SnapshotComparison; raises GradientCheckError (with
        ``.comparison``) on a mismatch, SnapshotError if the golden gradients
        were taken at other inputs or seeds, MissingSnapshotError if there
        are none and ``record_missing`` is false."""
        order = _check_order(order)
        if order > 2:
            raise ValueError('check({!r}): order must be 1 or 2, not {}'.format(key, order))
        problem = _Problem(func, inputs, grad_outputs, grad_grad_inputs, order, key)
        recording = update or (record_missing and not self.has(key, order))
        if recording:
            xs, gys, ggxs = problem.arrays(F64)
            if order == 1:
                check_backward(func, [_leaf(x) for x in xs], gys, name=key)
            else:
                check_double_backward(func, [_leaf(x) for x in xs],
                                      [_leaf(g) for g in gys], ggxs, name=key)
            self.record(key, problem.inputs, problem.seeds,
                        problem.gradients(xs, gys, ggxs), order=order, meta=meta)
        else:
            problem.check_same_point(self.load(key, order), self.directory)
        xs, gys, ggxs = problem.arrays(None)
        comparison = self.compare(key, problem.gradients(xs, gys, ggxs),
                                  problem.dtype, order=order, atol=atol, rtol=rtol)
        if recording:
            comparison.message = 'recorded golden gradients of {!r} (order {}) in {}; ' \
                                 '{}'.format(key, order, self.directory, comparison.message)
        if not comparison.ok:
            error = xgrad.GradientCheckError(comparison.message)
            error.comparison = comparison
            raise error
        return comparison

    # -- the files -----------------------------------------------------------

    def _entry(self, key, order):
        key, order = _check_key(key), _check_order(order)
        entry = self._read_index().get((key, order))
        if entry is None:
            raise MissingSnapshotError(
                'no golden gradients for key {!r} (order {}) in {}; record them '
                'first (pytest: --xgrad-snapshot-update; python -m xgrad check '
                '--snapshot DIR --update-snapshot)'.format(key, order, self.directory))
        return entry

    def _read_index(self):
        """{(key, order): entry}; empty for a store not written yet. Parsed
        again only when the file changed (a check run asks once per case)."""
        path = os.path.join(self.directory, INDEX)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return {}
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._index_cache
        if cached is not None and cached[0] == stamp:
            return dict(cached[1])
        entries = self._parse_index(path)
        self._index_cache = (stamp, entries)
        return dict(entries)

    def _parse_index(self, path):
        try:
            with open(path, encoding='utf-8') as f:
                index = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise SnapshotError('cannot read the golden-gradient index {}: {}'.format(
                path, e)) from e
        try:
            if index['format'] > FORMAT:
                raise SnapshotError(
                    '{} has format {}, written by a newer xgrad; this xgrad ({}) reads '
                    'format {}'.format(path, index['format'], xgrad.__version__, FORMAT))
            return {(e['key'], e['order']): e for e in index['entries']}
        except (KeyError, TypeError) as e:
            raise SnapshotError('{} is not a golden-gradient index ({}: {})'.format(
                path, type(e).__name__, e)) from e

    @contextlib.contextmanager
    def _locked(self):
        """Hold an exclusive lock on the directory (read-modify-write of the
        index by several processes or threads)."""
        if fcntl is None:
            yield
            return
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock


def _index_text(index):
    """index.json's text: entries sorted by (key, order), fields sorted,
    each shape on one line. (A list of numbers that spans lines cannot be
    inside a JSON string, so keys and meta strings are left alone.)"""
    text = json.dumps({'format': FORMAT, 'entries': [index[k] for k in sorted(index)]},
                      indent=2, sort_keys=True)

    def one_line(match):
        found = match.group()
        return json.dumps(json.loads(found)) if '\n' in found else found
    return re.sub(r'\[[\d,\s]*\]', one_line, text) + '\n'


def file_name(key, order):
    """The .npz file name of ``key``: a slug of the key (for people) and 12
    hex digits of its SHA-256 (for uniqueness), e.g.
    ``tests_test_x.py_test_f_float16-3f1c0b9a2d4e.order1.npz``."""
    slug = re.sub(r'[^A-Za-z0-9._-]+', '_', key).strip('._-')[:_SLUG_LENGTH] or 'key'
    digest = hashlib.sha256(key.encode('utf-8')).hexdigest()[:12]
    return '{}-{}.order{}.npz'.format(slug, digest, order)


def _atomic_write(path, write):
    """Write ``path`` through a temporary file in the same directory that
    ``os.replace`` moves into place: readers see the old or the new file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path),
                               prefix='.' + os.path.basename(path) + '.', suffix='.tmp')
    try:
        with os.fdopen(fd, 'wb') as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------------------
# Arguments

def _check_key(key):
    if not isinstance(key, str) or not key:
        raise TypeError('a golden-gradient key must be a non-empty str, not {!r}'.format(key))
    return key


def _check_order(order):
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError('order must be a positive int, not {!r}'.format(order))
    return order


def _float64_list(values, what, allow_none=True):
    """``values`` (a list or tuple of NumPy/xgrad arrays, None where allowed)
    as float64 NumPy arrays."""
    if not isinstance(values, (list, tuple)):
        raise TypeError('{} must be a list or tuple of arrays, not {}'.format(
            what, type(values).__name__))
    out = []
    for i, a in enumerate(values):
        if a is None and allow_none:
            out.append(None)
            continue
        if isinstance(a, xgrad.ndarray):
            a = a.to_numpy()
        if not isinstance(a, numpy.ndarray) or a.dtype.kind not in 'biuf':
            raise TypeError('{}[{}] must be a real NumPy or xgrad array{}, not {}'.format(
                what, i, ' or None' if allow_none else '', _describe(a)))
        out.append(numpy.array(a, dtype=F64))
    return out


def _describe(a):
    if a is None:
        return 'absent'
    if isinstance(a, numpy.ndarray):
        return 'an array of shape {} and dtype {}'.format(a.shape, a.dtype)
    return 'a {}'.format(type(a).__name__)


# ---------------------------------------------------------------------------
# Comparing one gradient

class _Report(NamedTuple):
    input: int
    abs: float       # worst |analytic - golden|
    rel: float       # worst |analytic - golden| / |golden| where |golden| > atol
    excess: float    # worst |analytic - golden| - tolerance (> 0: failed)
    problem: str     # '' if the gradient passes


def _compare_one(i, analytic, golden, atol, rtol):
    if analytic is not None and golden is not None and analytic.shape != golden.shape:
        return _Report(i, numpy.inf, numpy.inf, numpy.inf,
                       'gradient of shape {}, the golden gradient has shape {}'.format(
                           analytic.shape, golden.shape))
    prefix = ''
    if analytic is None:
        analytic = numpy.zeros_like(golden)
        prefix = 'no gradient (taken as zeros) but the golden gradient is nonzero; '
    elif golden is None:
        golden = numpy.zeros_like(analytic)
        prefix = 'a nonzero gradient where the golden one has none (zeros); '
    if analytic.size == 0:
        return _Report(i, 0.0, 0.0, -numpy.inf, '')
    err = numpy.abs(analytic - golden)
    err = numpy.where(numpy.isnan(err), numpy.inf, err)
    excess = err - (atol + rtol * numpy.abs(golden))
    significant = numpy.abs(golden) > atol
    rel = float(numpy.max(err[significant] / numpy.abs(golden[significant]), initial=0.0))
    worst = numpy.unravel_index(numpy.argmax(excess), excess.shape)
    n_bad = int(numpy.count_nonzero(excess > 0))
    problem = ''
    if n_bad:
        g, a, e = golden[worst], analytic[worst], err[worst]
        problem = ('{}{} of {} elements off; worst element {}: golden {:.6g}, analytic '
                   '{:.6g}, abs error {:.3g}, rel error {:.3g}'.format(
                       prefix, n_bad, err.size, tuple(int(k) for k in worst), g, a, e,
                       e / abs(g) if g else numpy.inf))
    return _Report(i, float(err.max()), rel, float(excess[worst]), problem)


# ---------------------------------------------------------------------------
# A function's gradient problem, for ``GradSnapshot.check``

class _Problem:
    """``func`` at ``inputs`` with its seeds. ``inputs`` / ``seeds`` are the
    float64 NumPy values the golden gradients are taken at (seeds: the output
    gradients, then the grad_grad_inputs for order 2), as the caller gave
    them, before any rounding to the inputs' dtypes."""

    def __init__(self, func, inputs, grad_outputs, grad_grad_inputs, order, key):
        self.func, self.order, self.key = func, order, key
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise TypeError('check({!r}): inputs must be a non-empty list of xgrad '
                            'arrays, not {!r}'.format(key, inputs))
        for i, x in enumerate(inputs):
            if not isinstance(x, xgrad.ndarray):
                raise TypeError('check({!r}): inputs[{}] is a {}.{}, not an xgrad '
                                'array'.format(key, i, type(x).__module__,
                                               type(x).__qualname__))
        self.originals = list(inputs)
        floats = [x.dtype for x in inputs if x.dtype.kind == 'f']
        if not floats:
            raise ValueError('check({!r}): no float input to differentiate'.format(key))
        self.dtype = min(floats, key=lambda d: d.itemsize)  # least precise
        if order == 2 and len(floats) != len(inputs):
            raise ValueError('check({!r}): order 2 needs float inputs only'.format(key))
        self.inputs = [x.to_numpy().astype(F64) for x in inputs]

        with xgrad.no_backprop_mode():
            outputs = _forward(func, [_copy(x) for x in inputs], key)
        rs = numpy.random.RandomState(zlib.crc32(key.encode()))
        if grad_outputs is None:
            gys = [None if y is None or y.dtype.kind != 'f' else _default_seed(rs, y.shape)
                   for y in outputs]
        else:
            gys = _float64_list(grad_outputs, 'grad_outputs')
            _check_like(gys, outputs, 'grad_outputs', 'output', key)
        if order == 2 and any(g is None for g in gys):
            raise ValueError('check({!r}): order 2 needs a float output gradient for '
                             'every output'.format(key))
        ggxs = []
        if order == 2:
            if grad_grad_inputs is None:
                ggxs = [_default_seed(rs, x.shape) for x in inputs]
            else:
                ggxs = _float64_list(grad_grad_inputs, 'grad_grad_inputs', False)
                _check_like(ggxs, inputs, 'grad_grad_inputs', 'input', key)
        self.seeds = gys + ggxs
        self.seed_dtypes = [None if y is None else y.dtype for y in outputs]
        if order == 2:
            self.seed_dtypes += [x.dtype for x in inputs]

    def arrays(self, dtype):
        """Inputs, grad_outputs and grad_grad_inputs as xgrad arrays on the
        inputs' devices, float ones in ``dtype`` (None: their own dtypes)."""
        xs = [_copy(x, dtype) for x in self.originals]
        device = self.originals[0].device
        seeds = [None if s is None else xgrad.array(
            s, dtype=(d if dtype is None else dtype), device=device)
            for s, d in zip(self.seeds, self.seed_dtypes)]
        n_out = len(self.seeds) - (len(xs) if self.order == 2 else 0)
        return xs, seeds[:n_out], seeds[n_out:]

    def gradients(self, xs, gys, ggxs):
        """The analytic gradients of ``self.order`` at ``xs`` as float64
        NumPy arrays (None where an input has none). The engine rejects a
        gradient of the wrong shape or dtype with GradientError; they are
        then taken one input at a time to name the input(s) at fault."""
        floats = [i for i, x in enumerate(xs) if x.dtype.kind == 'f']
        try:
            return self._gradients(xs, gys, ggxs, floats)
        except xgrad.GradientError as error:
            culprits = {}
            for i in floats:
                try:
                    self._gradients(xs, gys, ggxs, [i])
                except xgrad.GradientError as e:
                    culprits[i] = 'input {}: {}'.format(i, e)
            message = 'gradients of {!r} (order {}, {}): the backward pass rejected a ' \
                      'gradient for {}'.format(
                          self.key, self.order,
                          min((xs[i].dtype for i in floats), key=lambda d: d.itemsize),
                          '; '.join(culprits.values()) if culprits else
                          'the inputs together (each alone passes): {}'.format(error))
            failure = xgrad.GradientCheckError(message)
            failure.comparison = SnapshotComparison(
                False, numpy.inf, numpy.inf, min(culprits, default=None), message)
            raise failure from error

    def _gradients(self, xs, gys, ggxs, wrt):
        """The gradients with respect to the inputs ``wrt`` (the other
        inputs are constants meanwhile)."""
        leaves = [_leaf(x) if i in wrt else _copy(x) for i, x in enumerate(xs)]
        with xgrad.force_backprop_mode():
            ys = _forward(self.func, leaves, self.key)
            pairs = [(y, gy) for y, gy in zip(ys, gys)
                     if y is not None and gy is not None and y.is_backprop_required()]
            grads = [None] * len(leaves)
            if pairs:
                grads = xgrad.grad([y for y, _ in pairs], leaves,
                                   grad_outputs=[gy for _, gy in pairs],
                                   enable_double_backprop=self.order == 2)
            if self.order == 2:
                pairs = [(g, gg) for g, gg in zip(grads, ggxs)
                         if g is not None and g.is_backprop_required()]
                grads = [None] * len(leaves)
                if pairs:
                    grads = xgrad.grad([g for g, _ in pairs], leaves,
                                       grad_outputs=[gg for _, gg in pairs])
        return [None if g is None else g.to_numpy().astype(F64) for g in grads]

    def check_same_point(self, golden, directory):
        """SnapshotError unless the golden gradients were taken at these
        inputs and seeds (else comparing them would mean nothing)."""
        for what, mine, theirs in (('input', self.inputs, golden.inputs),
                                   ('grad_output', self.seeds, golden.grad_outputs)):
            if len(mine) != len(theirs):
                raise SnapshotError(
                    'check({!r}): {} {}s given, the golden gradients in {} were recorded '
                    'with {}; re-record them if the test changed'.format(
                        self.key, len(mine), what, directory, len(theirs)))
            for i, (a, b) in enumerate(zip(mine, theirs)):
                difference = _difference(a, b)
                if difference:
                    raise SnapshotError(
                        'check({!r}): {} {} {}; the golden gradients in {} were taken '
                        'at other values: re-record them if the test changed'.format(
                            self.key, what, i, difference, directory))


def _difference(given, golden):
    """How ``given`` differs from ``golden`` ('' if it does not)."""
    if given is None or golden is None:
        if given is None and golden is None:
            return ''
        return 'is {}, the golden one {}'.format(*('None' if a is None else 'an array'
                                                   for a in (given, golden)))
    if given.shape != golden.shape:
        return 'has shape {}, the golden one {}'.format(given.shape, golden.shape)
    differs = numpy.argwhere(given != golden)
    if not len(differs):
        return ''
    index = tuple(int(k) for k in differs[0])
    return 'differs from the golden one at element {}: {!r}, golden {!r}'.format(
        index, float(given[index]), float(golden[index]))


def _check_like(values, arrays, what, of, key):
    if len(values) != len(arrays):
        raise ValueError('check({!r}): {} {} for {} {}s'.format(
            key, len(values), what, len(arrays), of))
    for i, (v, a) in enumerate(zip(values, arrays)):
        if v is not None and (a is None or v.shape != a.shape):
            raise ValueError('check({!r}): {}[{}] has shape {}, {} {} has {}'.format(
                key, what, i, v.shape, of, i, 'none' if a is None else a.shape))


def _forward(func, xs, key):
    """``func(xs)`` as a tuple of arrays (None allowed); TypeError naming
    what func returned otherwise."""
    ys = func(list(xs))
    if isinstance(ys, xgrad.ndarray):
        return (ys,)
    if isinstance(ys, (tuple, list)) and ys and all(
            y is None or isinstance(y, xgrad.ndarray) for y in ys):
        return tuple(ys)
    raise TypeError('check({!r}): func must return an xgrad array or a non-empty '
                    'tuple/list of them, it returned {!r}'.format(key, ys))


def _default_seed(rs, shape):
    """Pseudo-random output gradients in [-1, 1], rounded to float16 so that
    every dtype sees exactly the values the golden gradients were taken at."""
    return rs.uniform(-1, 1, shape).astype(numpy.float16).astype(F64)


def _copy(x, dtype=None):
    """A fresh constant copy of ``x`` (float arrays cast to ``dtype``)."""
    data = x.to_numpy()
    if dtype is not None and data.dtype.kind == 'f':
        data = data.astype(dtype)
    return xgrad.array(data, device=x.device)


def _leaf(x):
    """A fresh copy of ``x`` that requires grad if it is float."""
    leaf = _copy(x)
    return leaf.require_grad() if leaf.dtype.kind == 'f' else leaf

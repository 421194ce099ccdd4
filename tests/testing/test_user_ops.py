"""A user's own ops in ``python -m xgrad check``: declared with
``xgrad.testing.OpInfo``, registered by a module given to ``--import`` or
named by an ``xgrad.ops`` entry point, swept as xgrad's own are (dtypes,
orders, kinks, goldens, ``--jobs``, ``--shard``/``--merge``, JSON, JUnit,
layouts) and never mixed with xgrad's unless asked; bad declarations are
refused before any case runs, naming the op and the field."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy
import pytest

import xgrad
from xgrad.testing import (
    OpDeclarationError, OpInfo, Sample, check_case, domains, gradient_cases, register)
from xgrad.testing import _cli, _driver, _user_ops

from ._user_modules import clean_user_ops, write_package  # NOQA: F401 (fixtures)


def _run(argv, capsys):
    code = _cli.main(argv + ['--no-progress'])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _usage_error(argv, capsys):
    with pytest.raises(SystemExit) as e:
        _cli.main(argv + ['--no-progress'])
    assert e.value.code == 2
    return capsys.readouterr()


def _cube(x):
    return x * x * x


# ---------------------------------------------------------------------------
# Registration and selection

def test_user_ops_live_apart_from_xgrads(clean_user_ops):
    own = [i.name for i in xgrad.registered_ops()]
    info, = register(OpInfo('cube', _cube, samples=[Sample((3,))]), package='mine')
    assert info.qualified_name == 'mine::cube' and info.package == 'mine'
    assert [i.name for i in xgrad.registered_ops()] == own  # the test suite's list
    assert _user_ops.select() == xgrad.registered_ops()  # check's default
    assert _user_ops.select(['mine']) == [info]
    assert _user_ops.select(['mine::c*']) == [info]
    assert _user_ops.select(['*::cube']) == [info]
    assert [i.qualified_name for i in _user_ops.select(['sin', 'mine'])] == ['sin', 'mine::cube']
    assert _user_ops.select(['xgrad']) == xgrad.registered_ops()
    assert [i.name for i in _user_ops.select(['linalg.*'])] == [
        n for n in own if n.startswith('linalg.')]
    with pytest.raises(ValueError, match='no registered op named nosuch'):
        _user_ops.select(['nosuch'])
    with pytest.raises(ValueError, match=r'no registered op matches mine::nosuch'):
        _user_ops.select(['mine::nosuch'])


def test_same_name_in_two_packages_is_two_ops(clean_user_ops):
    register(OpInfo('sin', _cube, samples=[Sample((3,))]), package='a')
    register(OpInfo('sin', _cube, samples=[Sample((3,))]), package='b')
    assert [i.qualified_name for i in _user_ops.select(['*::sin'])] == ['a::sin', 'b::sin']
    # xgrad's own sin stays the plain name
    assert [i.qualified_name for i in _user_ops.select(['sin'])] == ['sin']


def test_package_defaults_to_the_calling_module(write_package, capsys):
    name = write_package()
    code, out, _ = _run(['--import', name + '.gradcheck', '--list'], capsys)
    assert code == 0
    cases = out.split()
    assert cases and all(c.startswith(name + '::') for c in cases)
    assert {c.split('[')[0] for c in cases} == {name + '::square', name + '::softsign'}


# ---------------------------------------------------------------------------
# The sweep

def test_import_runs_the_user_ops_only_and_finds_the_wrong_gradient(write_package, capsys,
                                                                    tmp_path):
    name = write_package(factor=2.3)
    report, junit = tmp_path / 'r.json', tmp_path / 'r.xml'
    code, out, _ = _run(['--import', name + '.gradcheck', '--json', str(report),
                         '--junit', str(junit)], capsys)
    assert code == 1
    assert name + '::square' in out
    data = json.loads(report.read_text())
    ops = {c['op'] for c in data['cases']}
    assert ops == {name + '::square', name + '::softsign'}  # nothing of xgrad's
    failed = [c for c in data['cases'] if c['status'] != 'passed']
    assert {c['op'] for c in failed} == {name + '::square'}
    assert all('input 0' in c['message'] for c in failed)
    # float16/32/64, orders 1 and 2 of 3 samples
    assert data['summary']['cases'] == 3 * 2 * 3
    assert data['packages'] == {name: '1.0'}
    assert data['arguments']['import'] == [name + '.gradcheck']
    suite = ET.parse(junit).getroot().find('testsuite')
    assert {c.get('classname') for c in suite.findall('testcase')} == {
        'xgrad.check.{}::square'.format(name), 'xgrad.check.{}::softsign'.format(name)}
    assert len(suite.findall('.//failure')) == 3  # order 1 in each dtype


def test_ops_mixes_user_and_xgrad_ops_when_asked(write_package, capsys):
    name = write_package()
    code, out, _ = _run(['--import', name + '.gradcheck', '--ops', 'tanh,' + name,
                         '--list'], capsys)
    assert code == 0
    assert {c.split('[')[0] for c in out.split()} == {
        'tanh', name + '::square', name + '::softsign'}


def test_xgrads_own_selection_is_unchanged(capsys):
    """``--ops xgrad`` is the default run; no option lists what it always listed."""
    code, default, _ = _run(['--list'], capsys)
    code2, named, _ = _run(['--ops', 'xgrad', '--list'], capsys)
    assert code == code2 == 0 and default == named
    assert all('::' not in c for c in default.split())
    assert len(default.split()) == len(_driver.cases())


def test_kinks_are_redrawn_for_user_ops(clean_user_ops, capsys, tmp_path):
    """A domain that puts the input within a step of abs's kink in a fifth
    of the draws: those cases re-draw it and pass."""
    register(OpInfo('absolute', lambda x: abs(x) * 1.0, samples=[Sample((1,))],
                    domain=domains.within(-5e-5, 5e-5), dtypes=['float64']), package='k')
    report = tmp_path / 'r.json'
    code, out, _ = _run(['--ops', 'k', '--order', '1', '--repeat', '12', '--json',
                         str(report)], capsys)
    assert code == 0, out
    draws = [c['draws'] for c in json.loads(report.read_text())['cases']]
    assert max(draws) > 1 and 1 in draws


def test_golden_gradients_of_user_ops(write_package, capsys, tmp_path):
    snap = str(tmp_path / 'golden')
    name = write_package()
    module = name + '.gradcheck'
    assert _run(['--import', module, '--snapshot', snap], capsys)[0] == 0
    recorded = json.loads((tmp_path / 'golden' / 'index.json').read_text())
    assert any(k.startswith(name + '::square/') for k in json.dumps(recorded).split('"'))
    code, out, _ = _run(['--import', module, '--snapshot', snap], capsys)
    assert code == 0 and 'golden matched' in out


def test_jobs_workers_import_the_same_modules(write_package, capsys, tmp_path):
    name = write_package(factor=2.3)
    args = ['--import', name + '.gradcheck', '--repeat', '2']
    code1, out1, _ = _run(args + ['--json', str(tmp_path / 'one.json')], capsys)
    code2, out2, err = _run(args + ['--jobs', '2', '--json', str(tmp_path / 'two.json')],
                            capsys)
    assert code1 == code2 == 1, err
    strip = [{k: v for k, v in c.items() if k != 'seconds'}
             for c in json.loads((tmp_path / 'one.json').read_text())['cases']]
    assert strip == [{k: v for k, v in c.items() if k != 'seconds'}
                     for c in json.loads((tmp_path / 'two.json').read_text())['cases']]
    assert out1.rsplit(' in ', 1)[0] == out2.rsplit(' in ', 1)[0]


def test_jobs_still_refuse_ops_registered_by_hand(clean_user_ops, capsys):
    """An op registered in this process only (not by an --import module or
    an entry point) is not found by the workers: a clear error, not a
    different run."""
    register(OpInfo('cube', _cube, samples=[Sample((3,))]), package='byhand')
    err = _usage_error(['--ops', 'byhand', '--jobs', '2'], capsys).err
    assert 'registered at run time' in err and '--import' in err


def test_shards_of_user_ops_merge_into_the_unsharded_run(write_package, capsys, tmp_path):
    name = write_package(factor=2.3)
    whole = ['--import', name + '.gradcheck']
    _run(whole + ['--json', str(tmp_path / 'all.json')], capsys)
    paths = []
    for k in (1, 2):
        paths.append(str(tmp_path / 's{}.json'.format(k)))
        _run(whole + ['--shard', '{}/2'.format(k), '--json', paths[-1]], capsys)
    code, out, _ = _run(['--merge'] + paths + ['--json', str(tmp_path / 'm.json')], capsys)
    assert code == 1 and name + '::square' in out

    def comparable(path):
        data = json.loads(open(path).read())
        return data['summary'], data['packages'], [
            {k: v for k, v in c.items() if k != 'seconds'} for c in data['cases']]

    assert comparable(tmp_path / 'm.json') == comparable(tmp_path / 'all.json')


def test_merge_refuses_shards_of_other_package_versions(write_package, capsys, tmp_path):
    """The same ops from another version of the package in one shard."""
    name = write_package(version='1.0')
    p1, p2 = str(tmp_path / 's1.json'), str(tmp_path / 's2.json')
    _run(['--import', name + '.gradcheck', '--shard', '1/2', '--json', p1], capsys)
    report = json.loads(open(p1).read())
    _run(['--import', name + '.gradcheck', '--shard', '2/2', '--json', p2], capsys)
    other = json.loads(open(p2).read())
    other['packages'] = {name: '1.1'}
    open(p2, 'w').write(json.dumps(other))
    err = _usage_error(['--merge', p1, p2], capsys).err
    assert 'op packages (versions)' in err and '1.1' in err
    # and shards whose op lists differ (an op added in one)
    other['packages'] = report['packages']
    other['selection'] = dict(other['selection'], digest='0' * 16)
    open(p2, 'w').write(json.dumps(other))
    assert 'cases (registered ops)' in _usage_error(['--merge', p1, p2], capsys).err


def test_layouts_reach_the_op_and_catch_stride_assumptions(clean_user_ops, capsys,
                                                           tmp_path):
    """``--layouts``: the op gets non-contiguous and unaligned inputs; an
    op that reads its input's buffer as if it were C-contiguous is right on
    plain inputs and wrong in the other layouts."""
    seen = []

    class RowSums(xgrad.FunctionNode):
        def forward(self, inputs):
            x, = inputs
            seen.append((x.flags.c_contiguous, x.flags.aligned))
            if x.flags.f_contiguous and not x.flags.c_contiguous:
                # The bug: memory read in C order (as a C routine handed the
                # pointer would), whatever the strides say.
                x = numpy.ascontiguousarray(x.T).reshape(x.shape)
            self.retain_inputs((0,))
            return (x.sum(axis=1) ** 2).astype(x.dtype),

        def backward(self, targets, gys):
            x, = self.get_retained_inputs()
            s = xgrad.sum(x, axis=1)
            return xgrad.broadcast_to(xgrad.expand_dims(gys[0] * 2 * s, 1), x.shape),

    register(OpInfo('row_sums', lambda x: RowSums().apply([x])[0], samples=[Sample((3, 4))],
                    dtypes=['float64']), package='lay')
    code, out, _ = _run(['--ops', 'lay', '--order', '1'], capsys)
    assert code == 0, out
    report = tmp_path / 'r.json'
    code, out, _ = _run(['--ops', 'lay', '--order', '1', '--layouts', '--json', str(report)],
                        capsys)
    assert code == 1
    cases = json.loads(report.read_text())['cases']
    assert [c.get('layout', 'contiguous') for c in cases] == [
        'contiguous', 'transposed', 'strided', 'negative', 'unaligned']
    verdicts = {c.get('layout', 'contiguous'): c['status'] for c in cases}
    assert verdicts == {'contiguous': 'passed', 'transposed': 'failed', 'strided': 'passed',
                        'negative': 'passed', 'unaligned': 'passed'}
    assert (False, True) in seen and (True, False) in seen  # non-contiguous; unaligned


def test_layouts_are_opt_in_and_take_known_names(capsys):
    code, plain, _ = _run(['--ops', 'tanh', '--list'], capsys)
    code, laid, _ = _run(['--ops', 'tanh', '--layouts', 'unaligned', '--list'], capsys)
    assert len(laid.split()) == 2 * len(plain.split())
    assert all(c.endswith('-unaligned') for c in laid.split() if c not in plain.split())
    assert 'sideways' in _usage_error(['--layouts', 'sideways'], capsys).err


# ---------------------------------------------------------------------------
# Entry points

ENTRY_POINTS = '''[xgrad.ops]
{name} = {name}.gradcheck
{name}_list = {name}.listed:OPS
'''


def _installed(tmp_path, name):
    """A dist-info for package ``name`` on a path of its own: what pip
    install writes, so that importlib.metadata finds its entry points."""
    site = tmp_path / 'site'
    info = site / '{}-1.0.dist-info'.format(name)
    info.mkdir(parents=True)
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: {}\nVersion: 1.0\n'.format(
        name))
    (info / 'entry_points.txt').write_text(ENTRY_POINTS.format(name=name))
    (tmp_path / name / 'listed.py').write_text(
        'from xgrad.testing import OpInfo, Sample\n'
        'OPS = [OpInfo("cubed", lambda x: x * x * x, samples=[Sample((3,))])]\n')
    return site


def test_entry_points_hand_packages_to_check(write_package, tmp_path):
    """In a fresh process, as CI runs it: ``--ops NAME`` loads the entry
    point NAME (a module that registers, or a list of OpInfo), in the
    workers of --jobs too; a package that is not installed is an error
    that lists the installed ones."""
    name = write_package()
    env = dict(__import__('os').environ)
    env['PYTHONPATH'] = '{}:{}:{}'.format(_installed(tmp_path, name), tmp_path,
                                          env.get('PYTHONPATH', ''))

    def check(*args):
        return subprocess.run([sys.executable, '-m', 'xgrad', 'check', '--no-progress']
                              + list(args), capture_output=True, text=True, env=env,
                              timeout=300, cwd=str(tmp_path))

    proc = check('--ops', name + ',' + name + '_list', '--jobs', '2', '--order', '1',
                  '--json', 'r.json')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ops = {c['op'] for c in json.loads((tmp_path / 'r.json').read_text())['cases']}
    assert ops == {name + '::square', name + '::softsign', name + '_list::cubed'}
    proc = check('--ops', 'notinstalled')
    assert proc.returncode == 2
    assert 'notinstalled' in proc.stderr and name + '_list' in proc.stderr
    # xgrad's own default run loads no entry point at all
    proc = check('--list')
    assert proc.returncode == 0 and '::' not in proc.stdout


# ---------------------------------------------------------------------------
# Bad declarations: refused, naming the op and the field

def _f(x):
    return xgrad.tanh(x)


@pytest.mark.parametrize('kwargs, field, words', [
    (dict(tol=1e-3), 'tol', 'must be a dict'),
    (dict(tol={'float32': 1e-3}), "tol['float32']", 'pair (atol, rtol)'),
    (dict(tol={'float32': (1e-3, -1)}), "tol['float32']", 'non-negative'),
    (dict(tol={'floaty': (1e-3, 1e-3)}), 'tol', "'floaty'"),
    (dict(eps={'float64': 0}), "eps['float64']", 'positive'),
    (dict(dtypes=['int32']), 'dtypes[0]', 'not a float dtype'),
    (dict(dtypes=['float99']), 'dtypes[0]', 'not a dtype'),
    (dict(samples=[]), 'samples', 'no samples'),
    (dict(samples=[(2, 3)]), 'samples[0]', 'must be a Sample'),
    (dict(samples=[Sample((2, 3)), Sample((2, 3))]), 'samples[1]', 'name'),
    (dict(samples=[Sample((2, -1))]), 'samples[0] (2x-1)', 'non-negative ints'),
    (dict(domain=domains.within(2, 1)), 'domain', 'low 2 is above high 1'),
    (dict(domain=domains.away_from(0, margin=3, low=-2, high=2)), 'domain',
     'within 3 of one of'),
    (dict(domain=domains.integers(3, 3)), 'domain', 'no whole number'),
    (dict(samples=[Sample((2,), (2,))], domain=(domains.real,)), 'domain',
     'has 1 entries'),
    (dict(domain='real'), 'domain', 'must be a function'),
    (dict(twice_differentiable='no'), 'twice_differentiable', 'True or False'),
    (dict(func=None), 'func', 'callable'),
    (dict(name='a::b'), 'name', "without '::'"),
])
def test_bad_declarations_are_refused_at_register(kwargs, field, words, clean_user_ops):
    args = dict(name='op1', func=_f, samples=[Sample((2, 3))])
    args.update(kwargs)
    with pytest.raises(OpDeclarationError) as e:
        register(OpInfo(**args), package='bad')
    message = str(e.value)
    assert 'OpInfo.' + field in message and words in message, message
    assert e.value.field.startswith(field.split('[')[0].split(' ')[0])
    # (a dtype numpy does not know is refused by OpInfo itself, before a package)
    assert args['name'] in message or field == 'name'
    assert isinstance(e.value, (TypeError, ValueError)) and isinstance(e.value, xgrad.XgradError)
    assert not _user_ops.user_ops()  # nothing half-registered


def test_two_ops_with_one_name_are_refused(clean_user_ops):
    register(OpInfo('twice', _f, samples=[Sample((2,))]), package='dup')
    with pytest.raises(OpDeclarationError, match=r'dup::twice: OpInfo.name: two ops of '
                                                 r'package dup are named .twice.'):
        register(OpInfo('twice', _cube, samples=[Sample((3,))]), package='dup')
    # in one call too, and then none of the call's ops is registered
    with pytest.raises(OpDeclarationError, match=r'dup::again: OpInfo.name'):
        register(OpInfo('other', _f, samples=[Sample((2,))]),
                 OpInfo('again', _f, samples=[Sample((2,))]),
                 OpInfo('again', _f, samples=[Sample((2,))]), package='dup')
    assert [i.name for i in _user_ops.user_ops()] == ['twice']


def _nan_domain(rs, shape):
    return numpy.full(shape, numpy.nan)


def _bad_shape_domain(rs, shape):
    return numpy.zeros((1,))


def _raising_domain(rs, shape):
    raise RuntimeError('nothing to draw')


@pytest.mark.parametrize('decl, field, words', [
    ("OpInfo('mm', lambda a, b: xgrad.matmul(a, b), samples=[Sample((2, 3), (4, 5))])",
     'samples[0] (2x3-4x5)', 'the op refuses these inputs'),
    ("OpInfo('nan', xgrad.tanh, samples=[Sample((2,))], domain=_nan_domain)", 'domain',
     'NaN'),
    ("OpInfo('shape', xgrad.tanh, samples=[Sample((2,))], domain=_bad_shape_domain)",
     'domain', 'shape (1,)'),
    ("OpInfo('raises', xgrad.tanh, samples=[Sample((2,))], domain=_raising_domain)",
     'domain', 'nothing to draw'),
    ("OpInfo('notarray', lambda x: x.to_numpy(), samples=[Sample((2,))])", 'func',
     'must return an xgrad array'),
])
def test_bad_calls_are_refused_before_any_case_runs(decl, field, words, write_package,
                                                    capsys):
    body = ('import numpy\nimport xgrad\nfrom xgrad.testing import OpInfo, Sample, register\n'
            'def _nan_domain(rs, shape):\n    return numpy.full(shape, numpy.nan)\n'
            'def _bad_shape_domain(rs, shape):\n    return numpy.zeros((1,))\n'
            'def _raising_domain(rs, shape):\n    raise RuntimeError("nothing to draw")\n'
            'register(OpInfo("fine", xgrad.tanh, samples=[Sample((2,))]), ' + decl + ')\n')
    name = write_package(body=body)
    captured = _usage_error(['--import', name + '.gradcheck', '--json', 'never.json'], capsys)
    assert 'bad op declaration' in captured.err
    assert 'OpInfo.' + field in captured.err and words in captured.err, captured.err
    op = decl.split("'")[1]
    assert '{}::{}'.format(name, op) in captured.err
    assert 'cases of' not in captured.out  # nothing ran


def test_bad_fields_in_an_imported_module_stop_the_run(write_package, capsys):
    name = write_package(extra=",\n         OpInfo('loose', xgrad.tanh, samples=[Sample((2,))], "
                               "tol=1e-3)")
    captured = _usage_error(['--import', name + '.gradcheck'], capsys)
    assert '{}::loose: OpInfo.tol: must be a dict'.format(name) in captured.err
    assert 'cases of' not in captured.out


def test_import_errors_are_usage_errors(write_package, capsys):
    assert 'nosuchmodule' in _usage_error(['--import', 'nosuchmodule'], capsys).err
    name = write_package(body='x = 1\n')
    assert 'registered no ops' in _usage_error(['--import', name + '.gradcheck'], capsys).err


# ---------------------------------------------------------------------------
# From pytest

def test_gradient_cases_and_check_case(clean_user_ops):
    class Wrong(xgrad.FunctionNode):
        def forward(self, inputs):
            self.retain_inputs((0,))
            return numpy.sin(inputs[0]),

        def backward(self, targets, gys):
            x, = self.get_retained_inputs()
            return gys[0] * xgrad.cos(x) * 1.1,

    register(OpInfo('sin', lambda x: Wrong().apply([x])[0], samples=[Sample((3,))],
                    twice_differentiable=False),
             OpInfo('cube', _cube, samples=[Sample((3,))]), package='py')
    cases = gradient_cases('py', dtypes=['float64'])
    assert [str(c) for c in cases] == ['py::cube[3]-float64-native:0-order1',
                                       'py::cube[3]-float64-native:0-order2',
                                       'py::sin[3]-float64-native:0-order1']
    assert check_case(cases[0]).passed and check_case(cases[1], seed=3).passed
    with pytest.raises(xgrad.GradientCheckError, match=r'(?s)py::sin\[3\].*failed.*input 0'):
        check_case(cases[2])


def test_gradient_cases_refuse_bad_calls(clean_user_ops):
    register(OpInfo('mm', lambda a, b: xgrad.matmul(a, b), samples=[Sample((2, 3), (4, 5))]),
             package='py')
    with pytest.raises(OpDeclarationError, match=r'py::mm: OpInfo.samples\[0\]'):
        gradient_cases('py')

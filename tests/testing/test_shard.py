"""``python -m xgrad check --shard K/N``, ``--jobs J`` and ``--merge``: the N
shards are disjoint and together make the whole run, balanced by the
measured cost of the cases; the merged report is the report of one
unsharded run; J processes find what one finds; bad arguments and reports
that do not belong together are refused, saying why."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy
import pytest

from xgrad._ops import _args, registry
from xgrad._ops._op import PyOp
from xgrad._ops.registry import OpInfo, Sample
from xgrad.testing import _cli, _driver

# A few cheap ops with several samples each, to keep the runs short.
OPS = 'sin,tanh,exp,matmul,relu'


def _all_cases(**kw):
    return _driver.cases(**kw)


# ---------------------------------------------------------------------------
# The split

@pytest.mark.parametrize('n', [1, 2, 3, 4, 7, 16])
@pytest.mark.parametrize('groups', [False, True], ids=['cases', 'snapshot-groups'])
def test_union_of_shards_is_the_whole_set_without_overlap(n, groups):
    cases = _all_cases()
    parts = [_driver.shard(cases, k, n, keep_snapshot_groups=groups)
             for k in range(1, n + 1)]
    flat = [i for p in parts for i in p]
    assert len(flat) == len(set(flat)) == len(cases)
    assert sorted(flat) == list(range(len(cases)))
    if groups:  # all dtypes of an op, sample and order in one shard
        where = {i: k for k, p in enumerate(parts) for i in p}
        for unit in _driver.work_units(cases, keep_snapshot_groups=True):
            assert len({where[i] for i in unit}) == 1


def test_split_is_deterministic_and_the_same_in_another_process():
    cases = _all_cases(ops=OPS.split(','))
    assert _driver.shard(cases, 2, 3) == _driver.shard(cases, 2, 3)
    listed = []
    for k in (1, 2, 3):
        out = subprocess.run([sys.executable, '-m', 'xgrad', 'check', '--ops', OPS,
                              '--list', '--shard', '{}/3'.format(k)],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        listed.append(out.split())
        assert listed[-1] == [cases[i].name for i in _driver.shard(cases, k, 3)]
    assert sorted(sum(listed, [])) == sorted(c.name for c in cases)


@pytest.mark.parametrize('n', [2, 3, 4, 8])
def test_shards_are_balanced_in_estimated_cost(n):
    """Greedy longest-first: no shard exceeds the mean by more than the most
    expensive case; with the shipped table, the whole check splits evenly."""
    cases = _all_cases()
    costs = _driver.estimate_costs(cases)
    loads = [sum(costs[i] for i in _driver.shard(cases, k, n)) for k in range(1, n + 1)]
    mean = sum(costs) / n
    assert max(loads) <= mean + max(costs) + 1e-9
    assert max(loads) <= 1.05 * mean, loads
    assert _driver.load_cost_table(), 'the measured cost table is not shipped'


def test_balance_is_by_cost_not_by_count():
    """One op ten times as costly as another: the shards hold equal costs,
    so different numbers of cases."""
    cases = _all_cases(ops=['sin', 'cos'], dtypes=['float64'], orders=[1])
    table = {_driver.cost_key(c): (1.0 if c.op == 'sin' else 0.1) for c in cases}
    n_sin = sum(c.op == 'sin' for c in cases)
    assert n_sin >= 2
    parts = [_driver.shard(cases, k, 2, table=table) for k in (1, 2)]
    loads = [sum(table[_driver.cost_key(cases[i])] for i in p) for p in parts]
    assert abs(loads[0] - loads[1]) <= 1.0
    # By count each half would hold as many cases; by cost they need not.
    assert sorted(parts[0] + parts[1]) == list(range(len(cases)))


def test_cases_missing_from_the_table_get_an_estimate():
    cases = _all_cases(ops=['sin', 'tanh'], dtypes=['float32'], orders=[1, 2])
    sin1 = [c for c in cases if c.op == 'sin' and c.order == 1]
    table = {_driver.cost_key(sin1[0]): 0.5}
    est = _driver.estimate_costs(cases, table)
    for c, e in zip(cases, est):
        if c.op == 'sin' and c.order == 1:
            assert e == 0.5  # measured, or the op's median
        elif c.order == 1:
            assert e == 0.5  # no entry for the op: the order's median
        else:
            assert e == _driver.DEFAULT_COST_S  # nothing for order 2 at all
    assert _driver.estimate_costs(cases, {}) == [_driver.DEFAULT_COST_S] * len(cases)


def test_assign_is_greedy_longest_first():
    assert _driver.assign([5, 4, 3, 3, 1], 2) == [[0, 3], [1, 2, 4]]  # 8 and 8
    assert _driver.assign([1, 1, 1], 1) == [[0, 1, 2]]
    assert _driver.assign([], 3) == [[], [], []]


# ---------------------------------------------------------------------------
# Running shards and merging their reports

def _main(argv, capsys):
    code = _cli.main(argv + ['--no-progress'])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _comparable(path):
    """A report's cases without what differs between runs (the times)."""
    report = json.loads(path.read_text())
    return report['summary'], [{k: v for k, v in c.items() if k != 'seconds'}
                                for c in report['cases']]


def _junit_counts(path):
    suite = ET.parse(path).getroot().find('testsuite')
    return (suite.get('tests'), suite.get('failures'), suite.get('errors'),
            sorted(tc.get('name') for tc in suite.findall('testcase')),
            sorted(tc.get('name') for tc in suite.findall('testcase')
                   if tc.find('failure') is not None))


class WrongFirst(PyOp):
    """y = x**2 with gradient 3x (wrong)."""
    op_name = 'broken_shard_wrong_first'

    def forward(self, inputs):
        self.retain_inputs((0,))
        return (inputs[0] ** 2,)

    def grads(self, xp, targets, gys, xs, ys):
        return (gys[0] * xs[0] * 3,)


def _wrong_first(x):
    return _args.apply(WrongFirst(), _args.as_array(x, 'x'))


@pytest.fixture
def broken_op():
    """A registered op whose gradient is wrong, so that the reports have
    failures to count (float64 and float32, one sample)."""
    name = 'broken_shard_wrong_first'
    registry.register(OpInfo(name, _wrong_first, samples=[Sample((2, 3))],
                             dtypes=(numpy.float64, numpy.float32)))
    yield name
    del registry._REGISTRY[name]


@pytest.mark.parametrize('n', [2, 3])
def test_merged_shards_count_as_one_unsharded_run(n, broken_op, capsys, tmp_path):
    ops = OPS + ',' + broken_op
    whole = ['--ops', ops, '--repeat', '2']
    code, out, _ = _main(whole + ['--json', str(tmp_path / 'all.json'),
                                  '--junit', str(tmp_path / 'all.xml')], capsys)
    assert code == 1 and broken_op in out
    shards = []
    for k in range(1, n + 1):
        path = tmp_path / 's{}.json'.format(k)
        _main(whole + ['--shard', '{}/{}'.format(k, n), '--json', str(path)], capsys)
        shards.append(str(path))
    code, out, _ = _main(['--merge'] + shards[::-1] + [
        '--json', str(tmp_path / 'm.json'), '--junit', str(tmp_path / 'm.xml')], capsys)
    assert code == 1  # a merged case failed
    assert broken_op in out and 'merged {} reports'.format(n) in out
    assert _comparable(tmp_path / 'm.json') == _comparable(tmp_path / 'all.json')
    assert _junit_counts(tmp_path / 'm.xml') == _junit_counts(tmp_path / 'all.xml')
    merged = json.loads((tmp_path / 'm.json').read_text())
    assert merged['shard'] is None and len(merged['merged_from']) == n


def test_merge_of_passing_shards_exits_0(capsys, tmp_path):
    paths = []
    for k in (1, 2):
        paths.append(str(tmp_path / 's{}.json'.format(k)))
        assert _main(['--ops', 'sin,tanh', '--shard', '{}/2'.format(k),
                      '--json', paths[-1]], capsys)[0] == 0
    code, out, _ = _main(['--merge'] + paths, capsys)
    assert code == 0 and ' 0 failed' in out


def test_sharded_golden_gradients_count_as_one_run(capsys, tmp_path):
    """With --snapshot, an op's float64 case (which records the golden
    gradients) runs in the shard of the other dtypes that compare with them."""
    args = ['--ops', 'tanh,exp', '--order', '1']
    _main(args + ['--snapshot', str(tmp_path / 'g0'), '--json', str(tmp_path / 'all.json')],
          capsys)
    paths = []
    for k in (1, 2, 3):
        paths.append(str(tmp_path / 's{}.json'.format(k)))
        _main(args + ['--snapshot', str(tmp_path / 'g{}'.format(k)), '--shard',
                      '{}/3'.format(k), '--json', paths[-1]], capsys)
    # Each shard had its own (fresh) snapshot directory: only the paths differ.
    for p in paths:
        report = json.loads(open(p).read())
        report['arguments']['snapshot'] = str(tmp_path / 'g0')
        open(p, 'w').write(json.dumps(report))
    _main(['--merge'] + paths + ['--json', str(tmp_path / 'm.json')], capsys)
    summary, records = _comparable(tmp_path / 'm.json')
    assert (summary, records) == _comparable(tmp_path / 'all.json')
    assert {r['snapshot'] for r in records} == {'recorded', 'matched'}


# ---------------------------------------------------------------------------
# --jobs

def test_jobs_find_what_one_process_finds(capsys, tmp_path):
    args = ['--ops', OPS, '--repeat', '2', '--seed', '3']
    code1, out1, _ = _main(args + ['--json', str(tmp_path / 'one.json'),
                                   '--junit', str(tmp_path / 'one.xml')], capsys)
    code2, out2, _ = _main(args + ['--jobs', '2', '--json', str(tmp_path / 'two.json'),
                                   '--junit', str(tmp_path / 'two.xml')], capsys)
    assert code1 == code2 == 0
    assert _comparable(tmp_path / 'one.json') == _comparable(tmp_path / 'two.json')
    assert _junit_counts(tmp_path / 'one.xml') == _junit_counts(tmp_path / 'two.xml')
    # The same summary line, but for the time.
    assert out1.rsplit(' in ', 1)[0] == out2.rsplit(' in ', 1)[0]


def test_jobs_with_a_shard_and_golden_gradients(capsys, tmp_path):
    args = ['--ops', 'tanh,sin', '--shard', '1/2', '--snapshot']
    _main(args + [str(tmp_path / 'g1'), '--json', str(tmp_path / 'one.json')], capsys)
    code, _, _ = _main(args + [str(tmp_path / 'g2'), '--jobs', '3',
                               '--json', str(tmp_path / 'three.json')], capsys)
    assert code == 0
    one, three = (json.loads((tmp_path / n).read_text()) for n in ('one.json', 'three.json'))
    strip = [{k: v for k, v in c.items() if k != 'seconds'} for c in one['cases']]
    assert strip == [{k: v for k, v in c.items() if k != 'seconds'} for c in three['cases']]
    assert {c['snapshot'] for c in three['cases']} == {'recorded', 'matched'}


def test_jobs_refuse_ops_registered_at_run_time(broken_op, capsys):
    with pytest.raises(SystemExit) as e:
        _cli.main(['--ops', 'sin,' + broken_op, '--order', '1', '--jobs', '2',
                   '--no-progress'])
    assert e.value.code == 2
    assert 'registered at run time' in capsys.readouterr().err


def test_jobs_exit_code_is_one_runs(tmp_path):
    """From the command line (spawned workers importing xgrad afresh)."""
    result = subprocess.run([sys.executable, '-m', 'xgrad', 'check', '--ops', 'sin,exp',
                             '--jobs', '2', '--no-progress'],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count('passed') == 1


# ---------------------------------------------------------------------------
# Refusals

@pytest.mark.parametrize('value', ['0/2', '3/2', 'x', '1/0', '1', '2/-3', ''])
def test_bad_shard_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as e:
        _cli.main(['--shard', value, '--ops', 'sin'])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert '--shard takes K/N with 1 <= K <= N' in err and repr(value) in err


def test_bad_jobs_and_merge_with_run_options_are_usage_errors(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        _cli.main(['--jobs', '-1', '--ops', 'sin'])
    assert e.value.code == 2 and '--jobs' in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        _cli.main(['--merge', str(tmp_path / 'a.json'), '--shard', '1/2'])
    assert e.value.code == 2 and '--shard' in capsys.readouterr().err


@pytest.fixture
def shard_reports(capsys, tmp_path):
    paths = {}
    for k, n in ((1, 3), (2, 3), (3, 3), (1, 2)):
        path = tmp_path / 's{}of{}.json'.format(k, n)
        _main(['--ops', 'sin,exp', '--order', '1', '--shard', '{}/{}'.format(k, n),
               '--json', str(path)], capsys)
        paths[k, n] = str(path)
    return paths


def _merge_error(paths, capsys):
    with pytest.raises(SystemExit) as e:
        _cli.main(['--merge'] + list(paths))
    assert e.value.code == 2
    return capsys.readouterr().err


def test_merge_refuses_missing_and_repeated_shards(shard_reports, capsys):
    s = shard_reports
    err = _merge_error([s[1, 3], s[3, 3]], capsys)
    assert 'shard 2/3 is missing' in err
    err = _merge_error([s[1, 3], s[2, 3], s[2, 3], s[3, 3]], capsys)
    assert 'shard 2/3 is given twice' in err
    err = _merge_error([s[1, 3], s[2, 3], s[1, 2]], capsys)
    assert 'shards of one split' in err


def test_merge_refuses_other_options_versions_and_overlaps(shard_reports, capsys,
                                                           tmp_path):
    s = shard_reports

    def edited(key, change):
        report = json.loads(open(s[key]).read())
        change(report)
        path = tmp_path / 'edited-{}.json'.format(len(list(tmp_path.iterdir())))
        path.write_text(json.dumps(report))
        return str(path)

    other_seed = edited((2, 3), lambda r: r['arguments'].update(seed=5))
    err = _merge_error([s[1, 3], other_seed, s[3, 3]], capsys)
    assert 'options differ' in err and '"seed": 5' in err
    other_version = edited((3, 3), lambda r: r.update(xgrad_version='0.0.9'))
    err = _merge_error([s[1, 3], s[2, 3], other_version], capsys)
    assert 'xgrad version differ' in err and '0.0.9' in err
    # A case of shard 1 claimed by shard 2 too (as shards of another cost table would).
    first = json.loads(open(s[1, 3]).read())['cases'][0]
    overlap = edited((2, 3), lambda r: r['cases'].append(first))
    err = _merge_error([s[1, 3], overlap, s[3, 3]], capsys)
    assert 'is in both' in err
    short = edited((2, 3), lambda r: r['cases'].pop())
    err = _merge_error([s[1, 3], short, s[3, 3]], capsys)
    assert 'ran in no shard' in err
    (tmp_path / 'junk.json').write_text('{"not": "a report"}')
    err = _merge_error([str(tmp_path / 'junk.json')], capsys)
    assert 'not a JSON report' in err

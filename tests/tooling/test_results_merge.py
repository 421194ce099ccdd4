"""bench/results_index.py --merge: a sweep and its reruns become one result
file, each point at its latest timing, earlier timings and provenance kept."""

import json
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     'bench')
sys.path.insert(0, BENCH)
import results_index  # noqa: E402


def _point(batch, size, xgrad_us, torch_us):
    return {'op': 'conv', 'batch': batch, 'in_channels': 16, 'out_channels': 32,
            'size': size, 'kernel': 3, 'stride': 1, 'pad': 1, 'xgrad_us': xgrad_us,
            'torch_us': torch_us, 'ratio': xgrad_us / torch_us,
            'paired_ratio': xgrad_us / torch_us}


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_a_rerun_replaces_the_points_it_timed(tmp_path):
    sweep = _write(tmp_path, 'conv_sweep_a.json', {
        'date': '2026-12-05T10:00:00', 'command': 'python bench/conv_sweep.py', 'threads': 1,
        'versions': {'xgrad_commit': 'aaaaaaa'},
        'conv': [_point(1, 8, 120.0, 100.0), _point(8, 16, 90.0, 100.0)], 'pool': []})
    rerun = _write(tmp_path, 'conv_sweep_a_rerun.json', {
        'date': '2026-12-05T11:00:00', 'command': 'python bench/conv_sweep.py --rerun',
        'threads': 1, 'versions': {'xgrad_commit': 'bbbbbbb'},
        'conv': [_point(1, 8, 95.0, 100.0)], 'pool': []})
    out = str(tmp_path / 'merged.json')
    merged = results_index.merge([('3x3s1', [sweep, rerun])], 'python bench/conv_sweep.py', out)
    retimed, kept = merged['conv']
    assert retimed['xgrad_us'] == 95.0 and retimed['timed_by'] == 'conv_sweep_a_rerun.json'
    assert retimed['earlier'][0]['xgrad_us'] == 120.0
    assert retimed['earlier'][0]['timed_by'] == 'conv_sweep_a.json'
    assert kept['xgrad_us'] == 90.0 and 'timed_by' not in kept
    assert merged['date'] == '2026-12-05T11:00:00'
    assert merged['commit'] == 'aaaaaaa, bbbbbbb'
    assert [p['label'] for p in merged['parts']] == ['3x3s1']
    assert '--part 3x3s1' in merged['merged']['by']


def test_a_rerun_of_a_point_the_sweep_lacks_is_refused(tmp_path):
    sweep = _write(tmp_path, 's.json', {'date': '1', 'threads': 1,
                                        'conv': [_point(1, 8, 1.0, 1.0)], 'pool': []})
    rerun = _write(tmp_path, 'r.json', {'date': '2', 'threads': 1,
                                        'conv': [_point(2, 8, 1.0, 1.0)], 'pool': []})
    with pytest.raises(SystemExit, match='times a point'):
        results_index.merge([('x', [sweep, rerun])], 'cmd', str(tmp_path / 'o.json'))


def test_parts_of_different_thread_settings_are_refused(tmp_path):
    one = _write(tmp_path, 'one.json', {'date': '1', 'threads': 1, 'conv': [], 'pool': []})
    two = _write(tmp_path, 'two.json', {'date': '1', 'threads': 2, 'conv': [], 'pool': []})
    with pytest.raises(SystemExit, match='threads'):
        results_index.merge([('a', [one]), ('b', [two])], 'cmd', str(tmp_path / 'o.json'))

#!/usr/bin/env python
"""Chainer 7.8.1's own examples, unmodified, with xgrad as ``chainerx``, on
synthetic data shaped like their datasets (nothing is downloaded).

    python scripts/chainer_examples.py CHAINER_TREE [--device native:0,@numpy]
        [--only mnist,vae,...] [--rounds N] [--threads one,default]
        [--json PATH] [--append PATH [--markdown PATH]] [--timer-hook N]

Each example runs in its own process (``examples/<dir>/<script>.py`` via
runpy, with ``chainer.datasets.get_*`` returning the synthetic data) for a
few hundred iterations at most; a row reports its exit status, the first
and last loss of Chainer's LogReport (else of the iterations), the wall
time, and per training iteration: the milliseconds of each
``updater.update`` call (the iterator, the converter, forward, backward and
the optimizer: what Chainer's ``elapsed_time`` counts less the extensions),
of its ``optimizer.update`` calls (forward, backward, optimizer) and the
process's minor page faults during it (``getrusage``), over the iterations
after the first ``--warmup`` (2). The ImageNet example (``--arch nin``,
``resnet50``) reads a list of synthetic 256x256 JPEG files and a mean file
that the child writes into its temporary directory first.

``--rounds N`` runs every example on every device N times, the devices
alternating (native:0 first in even rounds, @numpy first in odd ones), and
summarises per example and device the median of the runs' median
ms/iteration, their range, and the ratio of the first device to the second.
``--threads one`` sets ``OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1`` in the
children; ``default`` leaves them as they are. ``--append`` adds this
session (command, commit, machine, versions, runs, summary) to a result file
and ``--markdown`` renders that file's sessions as tables.
``--timer-hook N`` times iteration N (after warm-up, not counted in the
timing) with ``chainer.function_hooks.TimerHook`` and, on xgrad's devices,
``xgrad.hooks.TimerHook`` (Chainer's hook sees no ChainerX op), and keeps
their per-function summaries in the row.

The examples' plotting (matplotlib, PIL) is replaced by stand-ins that
accept every call when those packages are missing: the image extensions
still pull the arrays to the host as they would to plot them. Exit status 1
when an example fails.
"""

import argparse
import atexit
import datetime
import json
import os
import platform
import resource
import runpy
import statistics
import subprocess
import sys
import tempfile
import time

import numpy

# name: (script under examples/, its arguments, the loss its LogReport
# reports). Sizes keep each under a minute on two CPU cores.
EXAMPLES = {
    'mnist': ('mnist/train_mnist.py', ['--epoch', '2', '--unit', '200'], 'main/loss'),
    'vae': ('vae/train_vae.py', ['--epoch', '2', '--test'], 'main/loss'),
    'dcgan': ('dcgan/train_dcgan.py', ['--epoch', '1', '--display_interval', '5',
                                       '--snapshot_interval', '1000'], 'dis/loss'),
    'word2vec-skipgram-hsm': ('word2vec/train_word2vec.py', ['--epoch', '2'], 'main/loss'),
    'word2vec-skipgram-ns': ('word2vec/train_word2vec.py',
                             ['--epoch', '2', '--out-type', 'ns'], 'main/loss'),
    'word2vec-cbow-original': ('word2vec/train_word2vec.py',
                               ['--epoch', '2', '--model', 'cbow', '--out-type', 'original'],
                               'main/loss'),
    'cifar-vgg': ('cifar/train_cifar.py', ['--epoch', '2'], 'main/loss'),
}

# ImageNet: lists of synthetic 256x256 JPEG files (paths filled in by the
# child), batch 4, one epoch of SIZES['imagenet'][0] images: 12 iterations.
_IMAGENET = ['{train}', '{val}', '--mean', '{mean}', '--root', '{root}', '--batchsize', '4',
             '--val_batchsize', '4', '--epoch', '1', '--loaderjob', '1']
EXAMPLES.update({
    'imagenet-nin': ('imagenet/train_imagenet.py', _IMAGENET + ['--arch', 'nin'], 'main/loss'),
    'imagenet-resnet50': ('imagenet/train_imagenet.py', _IMAGENET + ['--arch', 'resnet50'],
                          'main/loss'),
})

SIZES = {'mnist': (2000, 500), 'cifar': (256, 128), 'words': 20000, 'vocabulary': 1000,
         'imagenet': (48, 8)}


# ---------------------------------------------------------------------------
# Synthetic datasets, returned by the patched chainer.datasets.get_* functions

def _rng():
    return numpy.random.RandomState(0)


def synthetic_ptb_words():
    """(train, valid, test) word-id arrays like get_ptb_words(): a random
    Markov chain over the vocabulary (three successors per word), the train
    split starting with every word once so that max(train) + 1 is the
    vocabulary size, as in PTB."""
    rng = _rng()
    size = SIZES['vocabulary']
    successors = rng.randint(0, size, size=(size, 3))

    def words(n):
        out = numpy.empty(n, numpy.int32)
        out[0] = 0
        for i in range(1, n):
            out[i] = successors[out[i - 1], rng.randint(3)]
        return out
    n = SIZES['words']
    train = numpy.concatenate([numpy.arange(size, dtype=numpy.int32), words(n)])
    return train, words(n // 10), words(n // 10)


def synthetic_ptb_vocabulary():
    return {'w{}'.format(i): i for i in range(SIZES['vocabulary'])}


def _images(rng, n, shape, classes, scale):
    """n images of ``shape`` in [0, scale], each of one of ``classes`` fixed
    patterns plus noise, and their labels."""
    patterns = rng.uniform(size=(classes,) + shape) > 0.7
    labels = rng.randint(0, classes, size=n).astype(numpy.int32)
    images = 0.7 * patterns[labels] + 0.3 * rng.uniform(size=(n,) + shape)
    return (images * scale).astype(numpy.float32), labels


def _split(make, sizes, withlabel):
    import chainer
    out = []
    for n in sizes:
        x, t = make(n)
        out.append(chainer.datasets.TupleDataset(x, t) if withlabel else x)
    return tuple(out)


def synthetic_mnist(withlabel=True, ndim=1, scale=1.0, dtype=None, label_dtype=numpy.int32,
                    rgb_format=False):
    rng = _rng()
    shape = {1: (784,), 2: (28, 28), 3: (1, 28, 28)}[ndim]
    return _split(lambda n: _images(rng, n, shape, 10, scale), SIZES['mnist'], withlabel)


def synthetic_cifar(withlabel=True, ndim=3, scale=1.0, dtype=None):
    rng = _rng()
    shape = (3, 32, 32) if ndim == 3 else (3072,)
    return _split(lambda n: _images(rng, n, shape, 10, scale), SIZES['cifar'], withlabel)


def synthetic_imagenet(directory):
    """Files for examples/imagenet: ``train.txt`` and ``val.txt`` (lines
    ``NAME LABEL`` as Caffe's ImageDataLayer reads them) of 256x256 RGB
    JPEG files, 10 of the 1000 classes (fixed patterns plus noise), and
    ``mean.npy`` (3, 256, 256), their mean as compute_mean.py makes it.
    Without PIL the images are .npy files and Chainer's image reader is
    patched to load them. Returns the format arguments of _IMAGENET."""
    rng = _rng()
    try:
        from PIL import Image
    except ImportError:
        Image = None
    os.makedirs(directory, exist_ok=True)
    total = numpy.zeros((3, 256, 256))
    for split, n in zip(('train', 'val'), SIZES['imagenet']):
        images, labels = _images(rng, n, (256, 256, 3), 10, 255.0)
        lines = []
        for i, (image, label) in enumerate(zip(images.astype(numpy.uint8), labels)):
            name = '{}{:03d}.{}'.format(split, i, 'jpg' if Image else 'npy')
            if Image:
                Image.fromarray(image).save(os.path.join(directory, name), quality=90)
            else:
                numpy.save(os.path.join(directory, name), image)
            lines.append('{} {}\n'.format(name, label))
            if split == 'train':
                total += image.transpose(2, 0, 1)
        with open(os.path.join(directory, split + '.txt'), 'w') as f:
            f.writelines(lines)
    mean = os.path.join(directory, 'mean.npy')
    numpy.save(mean, total / SIZES['imagenet'][0])
    if Image is None:
        from chainer.datasets import image_dataset
        image_dataset._read_image_as_array = lambda path, dtype: numpy.load(path).astype(dtype)
    return {'train': os.path.join(directory, 'train.txt'),
            'val': os.path.join(directory, 'val.txt'), 'mean': mean, 'root': directory}


def _plotting_stand_ins():
    """Stand-ins for matplotlib and PIL where they are not installed: every
    call is accepted; ``plt.subplots(r, c)`` gives a figure and an (r, c)
    array of axes, as the examples unpack it."""
    from unittest import mock
    for name in ('matplotlib', 'PIL'):
        try:
            __import__(name)
            continue
        except ImportError:
            pass
        module = mock.MagicMock()
        if name == 'matplotlib':
            def subplots(rows=1, cols=1, **kwargs):
                axes = numpy.empty((rows, cols), object)
                for index in numpy.ndindex(rows, cols):
                    axes[index] = mock.MagicMock()
                return mock.MagicMock(), axes
            module.pyplot.subplots = subplots
            sys.modules['matplotlib.pyplot'] = module.pyplot
        else:
            sys.modules['PIL.Image'] = module.Image
        sys.modules[name] = module


# ---------------------------------------------------------------------------
# One example (the child process)

def _instrument(path, warmup, timer_iteration):
    """Times every ``updater.update`` (and the ``optimizer.update`` calls in
    it), counts the minor page faults during it, keeps the loss it reported,
    and writes them as JSON to ``path`` when the process exits."""
    import chainer
    from chainer.training import updaters
    record = {'iterations': [], 'warmup': warmup, 'timer_hook': None}

    def write():
        with open(path, 'w') as f:
            json.dump(record, f)
    atexit.register(write)
    compute = [0.0]
    original_optimizer_update = chainer.optimizer.GradientMethod.update

    def optimizer_update(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original_optimizer_update(self, *args, **kwargs)
        finally:
            compute[0] += time.perf_counter() - start
    chainer.optimizer.GradientMethod.update = optimizer_update
    original_update = updaters.StandardUpdater.update

    def update(self):
        iteration = len(record['iterations']) + 1
        hooks = []
        if iteration == timer_iteration:
            hooks.append(('chainer', chainer.function_hooks.TimerHook()))
            if chainer.get_device(self.device).xp is sys.modules.get('chainerx'):
                import xgrad.hooks
                hooks.append(('xgrad', xgrad.hooks.TimerHook()))
        for _, hook in hooks:
            hook.__enter__()
        compute[0] = 0.0
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        try:
            original_update(self)
        finally:
            seconds = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_SELF)
            for _, hook in reversed(hooks):
                hook.__exit__(None, None, None)
        loss = chainer.reporter.get_current_reporter().observation.get('main/loss')
        try:
            loss = float(chainer.as_array(loss)) if loss is not None else None
        except (TypeError, ValueError):
            loss = None
        record['iterations'].append({
            'ms': seconds * 1e3, 'compute_ms': compute[0] * 1e3,
            'minor_faults': after.ru_minflt - before.ru_minflt,
            'major_faults': after.ru_majflt - before.ru_majflt, 'loss': loss,
            'timed': iteration > warmup and iteration != timer_iteration})
        if hooks:
            record['timer_hook'] = {'iteration': iteration, 'ms': seconds * 1e3}
            for kind, hook in hooks:
                # Chainer's summary counts a function's backward under its
                # name too, nested calls included; total_time counts the
                # outermost calls once.
                record['timer_hook'][kind] = {
                    fn: {k: v for k, v in row.items()} for fn, row in hook.summary().items()}
                record['timer_hook'][kind + '_total_ms'] = hook.total_time() * 1e3
                record['timer_hook'][kind + '_calls'] = [
                    [entry[0], entry[-1] * 1e3] + list(entry[1:-1]) for entry in hook.call_history]
    updaters.StandardUpdater.update = update
    return record


def _versions(device):
    import chainer
    out = {'numpy': numpy.__version__, 'chainer': chainer.__version__,
           'python': platform.python_version()}
    if device.startswith('native'):
        import xgrad
        from xgrad import _info
        from xgrad._backend import native_kernels
        out.update({'xgrad': xgrad.__version__, 'xgrad_threads': native_kernels.max_threads(),
                    'xgrad_cpu_path': _info.cpu_path_text(native_kernels)})
    return out


def run_child(tree, name, device, out, warmup=2, timer_iteration=0):
    from xgrad import chainerx_compat
    chainerx_compat.install()
    import chainer
    import chainer.training.extensions as extensions
    record = _instrument(os.path.join(out, 'timing.json'), warmup, timer_iteration)
    record['versions'] = _versions(device)
    _plotting_stand_ins()
    chainer.datasets.get_ptb_words = synthetic_ptb_words
    chainer.datasets.get_ptb_words_vocabulary = synthetic_ptb_vocabulary
    chainer.datasets.get_mnist = synthetic_mnist
    chainer.datasets.get_cifar10 = synthetic_cifar
    extensions.ProgressBar = lambda *a, **k: (lambda trainer: None)  # quiet logs
    script, args, _ = EXAMPLES[name]
    if script.startswith('imagenet/'):
        files = synthetic_imagenet(os.path.join(out, 'data'))
        args = [a.format(**files) for a in args]
    path = os.path.join(tree, 'examples', script)
    sys.path.insert(0, os.path.dirname(path))
    sys.argv = [path, '--device', device, '--out', out] + args
    runpy.run_path(path, run_name='__main__')


# ---------------------------------------------------------------------------
# The table (the parent process)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _losses(out, key):
    """First and last loss ``key`` of Chainer's LogReport in ``out``."""
    try:
        with open(os.path.join(out, 'log')) as f:
            log = json.load(f)
    except (OSError, ValueError):
        return None, None
    losses = [entry[key] for entry in log if key in entry]
    return (losses[0], losses[-1]) if losses else (None, None)


def _timing(out):
    """Per-iteration numbers of the child's timing.json: the timed
    iterations' median, min, max ms and mean faults."""
    try:
        with open(os.path.join(out, 'timing.json')) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return {}
    iterations = record['iterations']
    timed = [it for it in iterations if it['timed']]
    row = {'iterations': len(iterations), 'timed_iterations': len(timed),
           'warmup': record['warmup'], 'versions': record.get('versions'),
           'iteration_ms': [round(it['ms'], 2) for it in iterations],
           'iteration_minor_faults': [it['minor_faults'] for it in iterations],
           'iteration_losses': [it['loss'] for it in iterations]}
    if timed:
        ms = [it['ms'] for it in timed]
        row.update({
            'ms_per_iteration': round(statistics.median(ms), 2),
            'ms_min': round(min(ms), 2), 'ms_max': round(max(ms), 2),
            'compute_ms_per_iteration': round(statistics.median(
                [it['compute_ms'] for it in timed]), 2),
            'minor_faults_per_iteration': round(statistics.mean(
                [it['minor_faults'] for it in timed]), 1),
            'major_faults_per_iteration': round(statistics.mean(
                [it['major_faults'] for it in timed]), 2)})
    if record.get('timer_hook'):
        row['timer_hook'] = record['timer_hook']  # *_calls: [name, ms(, direction)] in order
    return row


def run_example(tree, name, device, env=None, warmup=2, timer_iteration=0):
    with tempfile.TemporaryDirectory(prefix='xgrad-example-') as out:
        load = os.getloadavg()[0]
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), tree, '--child', name,
             '--device', device, '--out', out, '--warmup', str(warmup),
             '--timer-hook', str(timer_iteration)],
            cwd=out, capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - start
        script, example_args, key = EXAMPLES[name]
        first, last = _losses(out, key)
        timing = _timing(out)
    losses = [v for v in timing.get('iteration_losses', []) if v is not None]
    if first is None and losses:
        first, last = losses[0], losses[-1]
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-12:]
    row = {'example': name, 'script': script, 'args': example_args,
           'device': device, 'exit': proc.returncode, 'seconds': round(seconds, 1),
           'loss': key, 'first_loss': first, 'last_loss': last,
           'nan_loss': any(v != v for v in losses),
           'load_average_1min_before': load,
           'output_tail': tail if proc.returncode else []}
    row.update(timing)
    return row


def summarise(rows, devices):
    """Per example and device: the median of the runs' ms/iteration, their
    range, the mean faults/iteration; the ratio of the first device to the
    second (of the medians, and the median and range of the per-round
    ratios, rounds pairing the runs in order)."""
    out = []
    names = list(dict.fromkeys(r['example'] for r in rows))
    for name in names:
        entry = {'example': name}
        per_device = {}
        for device in devices:
            runs = [r for r in rows if r['example'] == name and r['device'] == device
                    and r.get('ms_per_iteration') is not None]
            if not runs:
                continue
            ms = [r['ms_per_iteration'] for r in runs]
            per_device[device] = ms
            entry[device] = {
                'runs': len(runs), 'ms_per_iteration_median': round(statistics.median(ms), 1),
                'ms_per_iteration_min': round(min(ms), 1),
                'ms_per_iteration_max': round(max(ms), 1),
                'compute_ms_median': round(statistics.median(
                    [r['compute_ms_per_iteration'] for r in runs]), 1),
                'minor_faults_per_iteration_median': round(statistics.median(
                    [r['minor_faults_per_iteration'] for r in runs]), 1)}
        if len(devices) == 2 and all(d in per_device for d in devices):
            a, b = (per_device[d] for d in devices)
            paired = [x / y for x, y in zip(a, b)]
            entry['ratio'] = round(statistics.median(a) / statistics.median(b), 3)
            entry['paired_ratio_median'] = round(statistics.median(paired), 3)
            entry['paired_ratio_min'] = round(min(paired), 3)
            entry['paired_ratio_max'] = round(max(paired), 3)
        out.append(entry)
    return out


def _machine():
    model = platform.processor()
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    model = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    flags = ''
    try:
        with open('/proc/cpuinfo') as f:
            flags = next((l for l in f if l.startswith('flags')), '')
    except OSError:
        pass
    return {'cpu_model': model, 'cpus': os.cpu_count(),
            'cpus_usable': len(os.sched_getaffinity(0)),
            'avx2': ' avx2' in flags, 'avx512f': ' avx512f' in flags,
            'platform': platform.platform()}


def _commit():
    try:
        return subprocess.check_output(['git', 'rev-parse', 'HEAD'], cwd=ROOT, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _dirty(paths=('xgrad', 'setup.py')):
    """Files under ``paths`` that differ from the commit (the runs import
    xgrad from this working tree)."""
    try:
        out = subprocess.check_output(['git', 'status', '--porcelain', '--'] + list(paths),
                                      cwd=ROOT, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return [line[3:] for line in out.splitlines()]


def _env(threads):
    env = dict(os.environ)
    if threads == 'one':
        env.update(OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1', MKL_NUM_THREADS='1')
    return env


def _print_row(row):
    print('{:<24} {:<10} {:>4} {:>8} {:>12} {:>12} {:>10} {:>10}'.format(
        row['example'], row['device'], row['exit'], row['seconds'],
        _number(row['first_loss']), _number(row['last_loss']),
        _number(row.get('ms_per_iteration')), _number(row.get('minor_faults_per_iteration'))),
        flush=True)
    for line in row['output_tail']:
        print('    ' + line)


def markdown(sessions):
    """Tables of every session's summary."""
    lines = []
    for session in sessions:
        devices = session['devices']
        lines += ['## {} ({}, {} round(s), threads: {})'.format(
            session.get('label') or session['date'], session['date'], session['rounds'],
            session['threads']), '',
            '`{}`'.format(session['command']), '',
            'commit {}, {} ({} CPUs), NumPy {}, Chainer {}; extra environment: {}; '
            'warm-up iterations not timed: {}; {} s of runs.'.format(
                (session['commit'] or '?')[:12], session['machine']['cpu_model'],
                session['machine']['cpus'], session['versions'].get('numpy'),
                session['versions'].get('chainer'), session.get('env') or 'none',
                session['warmup'], session['seconds']), '',
            '| example | device | runs | ms/iteration median | range | compute ms | '
            'minor faults/iteration | ratio {} / {} (paired range) |'.format(*devices)
            if len(devices) == 2 else
            '| example | device | runs | ms/iteration median | range | compute ms | '
            'minor faults/iteration | |',
            '|---|---|---:|---:|---:|---:|---:|---:|']
        for entry in session['summary']:
            for i, device in enumerate(devices):
                if device not in entry:
                    continue
                d = entry[device]
                ratio = ''
                if i == 0 and 'ratio' in entry:
                    ratio = '**{:.2f}** ({:.2f}-{:.2f})'.format(
                        entry['ratio'], entry['paired_ratio_min'], entry['paired_ratio_max'])
                template = '| {} | `{}` | {} | {:.1f} | {:.1f}-{:.1f} | {:.1f} | {:.0f} | {} |'
                lines.append(template.format(
                    entry['example'], device, d['runs'], d['ms_per_iteration_median'],
                    d['ms_per_iteration_min'], d['ms_per_iteration_max'], d['compute_ms_median'],
                    d['minor_faults_per_iteration_median'], ratio))
        failed = [r for r in session['runs'] if r['exit'] or r.get('nan_loss')]
        for r in failed:
            lines += ['', 'FAILED: {} on {} (exit {}, NaN loss: {}):'.format(
                r['example'], r['device'], r['exit'], r.get('nan_loss')), '',
                '```', *r['output_tail'], '```']
        lines.append('')
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('chainer_tree')
    parser.add_argument('--device', default='native:0',
                        help='comma-separated devices, each runs every example '
                             '(e.g. native:0,@numpy: xgrad and Chainer\'s NumPy)')
    parser.add_argument('--only', help='comma-separated names: ' + ', '.join(EXAMPLES))
    parser.add_argument('--rounds', type=int, default=1,
                        help='runs of each example on each device, devices alternating')
    parser.add_argument('--threads', default='default', choices=('one', 'default'),
                        help='one: OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1 in the children')
    parser.add_argument('--warmup', type=int, default=2,
                        help='first iterations left out of the per-iteration timing')
    parser.add_argument('--timer-hook', type=int, default=0, metavar='N',
                        help='time iteration N with TimerHooks (0: none)')
    parser.add_argument('--json', help='write the rows here')
    parser.add_argument('--append', help='add this session to this result file')
    parser.add_argument('--label', help='the session\'s name in --append\'s file')
    parser.add_argument('--markdown', help='render --append\'s file as tables here')
    parser.add_argument('--child', help=argparse.SUPPRESS)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return run_child(args.chainer_tree, args.child, args.device, args.out,
                         args.warmup, args.timer_hook)
    names = args.only.split(',') if args.only else list(EXAMPLES)
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        parser.error('unknown example(s) {}; known: {}'.format(unknown, ', '.join(EXAMPLES)))
    devices = args.device.split(',')
    tree = os.path.abspath(args.chainer_tree)
    env = _env(args.threads)
    rows = []
    commit, dirty = _commit(), _dirty()
    began = time.perf_counter()
    print('{:<24} {:<10} {:>4} {:>8} {:>12} {:>12} {:>10} {:>10}'.format(
        'example', 'device', 'exit', 'seconds', 'first loss', 'last loss', 'ms/iter',
        'faults/it'))
    for round_ in range(args.rounds):
        for name in names:
            # alternate which device goes first, so neither always follows the other
            order = devices if round_ % 2 == 0 else devices[::-1]
            for device in order:
                row = run_example(tree, name, device, env, args.warmup, args.timer_hook)
                row['round'] = round_
                rows.append(row)
                _print_row(row)
    seconds = round(time.perf_counter() - began, 1)
    summary = summarise(rows, devices)
    for entry in summary:
        if 'ratio' in entry:
            print('{:<24} {} / {}: {:.3f} (paired {:.3f}, {:.3f}-{:.3f})'.format(
                entry['example'], devices[0], devices[1], entry['ratio'],
                entry['paired_ratio_median'], entry['paired_ratio_min'],
                entry['paired_ratio_max']))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)
    if args.append:
        versions = next((r['versions'] for r in rows if r.get('versions')
                         and 'xgrad' in r['versions']), None) or \
            next((r['versions'] for r in rows if r.get('versions')), {})
        extra = {k: v for k, v in env.items()
                 if k.startswith(('XGRAD_', 'OMP_', 'OPENBLAS_', 'MKL_'))}
        session = {
            'label': args.label, 'date': datetime.date.today().isoformat(),
            'command': 'python ' + ' '.join(
                [os.path.relpath(os.path.abspath(__file__), ROOT), 'CHAINER_TREE']
                + sys.argv[2:]),
            'commit': commit, 'xgrad_uncommitted_files': dirty,
            'commit_at_end': _commit(), 'machine': _machine(), 'versions': versions,
            'env': extra, 'threads': args.threads, 'devices': devices, 'rounds': args.rounds,
            'warmup': args.warmup, 'seconds': seconds, 'summary': summary, 'runs': rows}
        try:
            with open(args.append) as f:
                record = json.load(f)
        except (OSError, ValueError):
            record = {'sessions': []}
        record['sessions'].append(session)
        with open(args.append, 'w') as f:
            json.dump(record, f, indent=1)
        if args.markdown:
            with open(args.markdown, 'w') as f:
                f.write('<!-- written by scripts/chainer_examples.py from {} -->\n\n'.format(
                    os.path.basename(args.append)))
                f.write(markdown(record['sessions']))
    return 1 if any(r['exit'] for r in rows) else 0


def _number(v):
    return '-' if v is None else '{:.5g}'.format(v)


if __name__ == '__main__':
    sys.exit(main())

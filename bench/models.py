#!/usr/bin/env python
"""Real models' training steps, xgrad against PyTorch side by side.

    python bench/models.py [--quick] [--only resnet50_b8,lstm_lm] [--rounds N] [--out PATH]
    python bench/models.py --threads 1          # one thread setting only (1, or 0: default)
    python bench/models.py --profile resnet50_b8 [--threads 0]   # per-op profile of one step

Each step is forward, backward and an SGD update of every parameter
(``lr = 0.01``; xgrad through ``p.as_grad_stopped()``, torch under
``no_grad``), written once against a small op table per framework
(``XgradOps``, ``TorchOps``: one framework call per op) so the two graphs are
the same op for op, from the same float32 weights and synthetic data (NumPy,
seed 0):

| name | model | size |
| ---- | ----- | ---- |
| ``resnet50_b8``, ``resnet50_b32`` | ResNet-50 (torchvision's v1.5: bottlenecks 3-4-6-3, stride on the 3x3 conv, convs without bias, batch norm in training mode after each, 1000 classes), softmax cross-entropy | 224x224, batch 8 / 32 |
| ``vgg16_cifar`` | Chainer's CIFAR VGG-16 (examples/cifar/models/VGG.py): 13 conv 3x3 without bias + batch norm + relu, max_pool 2 after each group, linear 512->512 (no bias) + batch norm + relu, linear 512->10 (no bias); dropout omitted | 32x32x3, batch 64 |
| ``lstm_lm`` | Chainer's PTB language model: embedding (``xgrad.take``) 10,000 x 650, 2 LSTM layers of 650 (``xgrad.lstm``, ChainerX's cell: gates a, i, f, o interleaved per unit; torch reads the same layout with reshape(B, H, 4)), linear 650->10,000, softmax cross-entropy; each layer's input projection is one matmul over all steps; dropout omitted | 35 steps, batch 20 |
| ``transformer_block`` | one post-norm Transformer encoder block (d 512, 8 heads, FFN 2048 relu, layer norm: ``xgrad.layer_norm`` and torch's ``F.layer_norm``), a linear head 512->10 per token, softmax cross-entropy | sequence 128, batch 16 |
| ``nin`` | Chainer's ImageNet NIN (examples/imagenet/nin.py): mlpconv 11x11/4 96-96-96, max_pool 3/2; 5x5 pad 2 256-256-256, max_pool; 3x3 pad 1 384-384-384, max_pool; 3x3 pad 1 1024-1024-1000, relu after every conv, global average pool; dropout omitted | 227x227, batch 4 (Chainer's example: 32; 4 keeps the run short on 2 cores) |
| ``mlp_mnist`` | Chainer's MNIST MLP (examples/mnist/train_mnist.py): linear 784-1000-1000-10 with bias, relu, softmax cross-entropy | batch 100 |
| ``bert_base_block`` | the ``transformer_block`` at BERT-base's width: d 768, 12 heads, FFN 3072 | sequence 128, batch 4 |
| ``mobilenet_cifar`` | MobileNet v1's depthwise-separable blocks at CIFAR size: conv 3x3 3->32 + batch norm + relu, then six blocks of depthwise 3x3 (``groups`` = channels; stride 1, 2, 1, 2, 1, 2) + batch norm + relu and 1x1 + batch norm + relu (32->32->64->64->128->128->256), global average pool, linear 256->10 | 32x32x3, batch 32 |
| ``dcgan`` | a DCGAN generator and discriminator trained through together (the generator's step): linear 100->4x4x256 + batch norm + relu, three deconvolutions 4x4 stride 2 (``conv_transpose``, 256->128->64->32) + batch norm + relu, deconvolution 3x3 32->3; conv 3x3 3->64 then three conv 4x4 stride 2 (64->128->256->512), each with bias and leaky_relu(0.2), linear 8192->1, sigmoid cross-entropy against ones | 32x32x3, batch 16 |

``--quick`` shrinks every model's batch and resolution (the depth stays:
ResNet-50 at 64x64 batch 2 and 48x48 batch 4, VGG-16 batch 4, NIN 99x99
batch 2, the LSTM 64 units over 500 words, the block d 64) for a smoke run
that writes nothing, on one thread only (``--quick --threads 0`` for
default threads): 21-30 s on the shared 2-core VM, all checks included. With
default threads its small steps measure the neighbours' load (115 s for
that half at load 1.3-2.8: a 1 ms LSTM step took 48 ms).

**Checked first.** Before timing, three checks against torch:

* ``float64_step``: the whole step (forward, backward, SGD) with every array
  cast to float64 in both frameworks, called twice (the second call shows
  gradients left from the first or an update gone wrong), loss and every
  gradient elementwise at ``rtol 1e-6``, ``atol 1e-7 * max|torch|``: the
  math (every chain-rule term, the LSTM's gate order, the layer norm),
  tight. ResNet-50 at batch 32 runs it on batch 8's data (``F64_DATA``).
* ``float32_step``: the same in float32, elementwise at training_steps.py's
  tolerance (``rtol 1e-4``, ``atol 1e-5 * max|torch|``), both calls. For
  the nets with relus (``F32_FLIPS``: ResNet-50, VGG-16, NIN, the
  Transformer block) that is
  not a test of anything: relu and max-pool decisions on values within
  float32 rounding of a tie go either way, and one such flip moves whole
  gradients (measured against torch's float64 gradients on the first call:
  ResNet-50 b8 xgrad up to 4.3e-2, torch up to 2.7e-2; VGG-16 xgrad 1.0e-2,
  torch 7.7e-3; NIN xgrad 3.2e-3 from two flipped relus, torch 1.4e-6; the
  Transformer block, one flipped relu of 4M in the FFN in each framework,
  torch 8e-4, xgrad 8e-7).
  For them the first call's loss is elementwise and each gradient's
  ``|xgrad - torch| / |torch|`` (2-norms) at most ``F32_FLIP_BOUND`` (0.1,
  the measured values recorded), the second call finite.
* ``float32_ops``: every distinct op call of the float32 step (the op, its
  arguments' shapes and values), alone, on the inputs and output gradients
  recorded in torch's float32 step: xgrad's float32 forward and
  vector-Jacobian products against torch's in float64 of the same inputs,
  elementwise at ``rtol 1e-4``, ``atol 1e-5 * max|torch|`` (``1e-4`` for
  ``conv``, ``OP_ATOL_SCALE``: xgrad's Winograd and polyphase convolutions
  round further than direct ones). This is the tight float32 check for
  every kernel at the models' real shapes.

Gradients that are zero in exact arithmetic (``ZERO_GRADS``: the
Transformer's key bias) are checked to be below ``1e-5 *`` the largest
gradient in both frameworks instead.

A mismatch stops the run (exit 1).

**Timed** as training_steps.py: paired rounds (the frameworks take turns, one
sample each per round, the first rotating; see _timing.py), the median per
framework, the ratio of the medians and the median of the per-round ratios
(``xgrad_over_torch``). Page faults per step: ``ru_minflt`` (and
``ru_majflt``) of this process across each framework's timed samples,
divided by the steps timed. **Peak RSS** per framework comes from a child
process that imports only that framework, builds the one model, runs
warm-up + steps and reads its high-water mark, ``VmHWM`` of
/proc/self/status: not ``ru_maxrss``, which on Linux carries the parent's
peak across exec (a child of a process holding 2 GB reported 2.1 GB, its
VmHWM 14 MB). It is recorded too, with the RSS after the imports.

**Threads**: by default two child processes, one thread
(``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS`` = 1,
``torch.set_num_threads(1)``) then each framework's default threads (the
variables unset). Results: ``bench/results/models_<cpu path>_<date>.json``
(``models_1thread_...``/``models_default_threads_...`` when ``--threads``
picks one) and a markdown table beside it.
"""

import argparse
import datetime
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if _BENCH_DIR not in sys.path:
    sys.path.insert(0, _BENCH_DIR)

import numpy  # noqa: E402

import _machine  # noqa: E402
import _timing  # noqa: E402

LR = 0.01
BN_EPS, BN_DECAY = 1e-5, 0.9  # torch's eps and momentum 0.1
LN_EPS = 1e-5
RTOL, ATOL_SCALE = 1e-4, 1e-5  # training_steps.py's float32 tolerance
F64_RTOL, F64_ATOL_SCALE = 1e-6, 1e-7


# ---------------------------------------------------------------------------
# The op tables: one framework call each, so the models below are written once

class XgradOps:
    name = 'xgrad'

    def __init__(self, xgrad):
        self.X = X = xgrad
        self.relu, self.tanh, self.sigmoid, self.matmul = X.relu, X.tanh, X.sigmoid, X.matmul
        self.sqrt, self.reshape, self.transpose = X.sqrt, X.reshape, X.transpose

    # arrays
    def leaf(self, a):
        return self.X.array(a).require_grad()

    def const(self, a):
        return self.X.array(a)

    def state(self, a):  # batch norm's running statistics, updated in place
        return self.X.array(a)

    def zeros(self, shape, dtype):
        return self.X.zeros(shape, dtype)

    # layers
    def conv(self, x, w, b=None, stride=1, pad=0, groups=1):
        return self.X.conv(x, w, b, stride, pad, groups=groups)

    def deconv(self, x, w, b=None, stride=1, pad=0):  # w: (C_in, C_out, kh, kw), both
        return self.X.conv_transpose(x, w, b, stride, pad)

    def leaky_relu(self, x, slope):
        return self.X.leaky_relu(x, slope)

    def batch_norm(self, x, gamma, beta, mean, var):
        axis = (0,) if x.ndim == 2 else (0, 2, 3)
        return self.X.batch_norm(x, gamma, beta, mean, var, eps=BN_EPS, decay=BN_DECAY, axis=axis)

    def max_pool(self, x, k, stride, pad=0, cover_all=False):
        return self.X.max_pool(x, k, stride, pad, cover_all)

    def global_average_pool(self, x):
        return self.X.average_pool(x, x.shape[2:])

    def linear(self, x, w, b=None):  # w: (out, in), ChainerX's and torch's layout
        return self.X.linear(x, w, b)

    def embed(self, E, ids):
        return self.X.take(E, ids, axis=0)

    def lstm(self, c, z):  # ChainerX's cell: z (B, 4H), gates a, i, f, o interleaved per unit
        return self.X.lstm(c, z)

    def stack(self, xs):
        return self.X.stack(xs)

    def softmax(self, x, axis):
        return self.X.softmax(x, axis=axis)

    def layer_norm(self, x, gamma, beta):
        return self.X.layer_norm(x, gamma, beta, LN_EPS)

    def cross_entropy(self, y, t):  # mean softmax cross-entropy
        return self.X.mean(self.X.softmax_cross_entropy(y, t))

    def sigmoid_cross_entropy(self, y, t):  # mean; t: int labels 0/1
        return self.X.mean(self.X.sigmoid_cross_entropy(y, t))

    # the step
    def clear(self, params):
        for p in params:
            p.cleargrad()

    def backward(self, loss):
        loss.backward()

    def grads(self, params):
        return [p.grad for p in params]

    def sgd(self, params):
        for p in params:
            w = p.as_grad_stopped()
            w -= LR * p.grad


class TorchOps:
    name = 'torch'

    def __init__(self, torch):
        self.T = torch
        self.F = F = torch.nn.functional
        self.relu, self.tanh, self.sigmoid, self.matmul = F.relu, torch.tanh, torch.sigmoid, torch.matmul
        self.sqrt, self.reshape = torch.sqrt, torch.reshape

    def transpose(self, x, axes):
        return x.permute(axes)

    def leaf(self, a):
        return self.T.from_numpy(a.copy()).requires_grad_()

    def const(self, a):
        return self.T.from_numpy(a.copy())

    def state(self, a):
        return self.T.from_numpy(a.copy())

    def zeros(self, shape, dtype):
        return self.T.zeros(shape, dtype={'float32': self.T.float32, 'float64': self.T.float64}[
            numpy.dtype(dtype).name])

    def conv(self, x, w, b=None, stride=1, pad=0, groups=1):
        return self.F.conv2d(x, w, b, stride, pad, groups=groups)

    def deconv(self, x, w, b=None, stride=1, pad=0):
        return self.F.conv_transpose2d(x, w, b, stride, pad)

    def leaky_relu(self, x, slope):
        return self.F.leaky_relu(x, slope)

    def batch_norm(self, x, gamma, beta, mean, var):
        return self.F.batch_norm(x, mean, var, gamma, beta, True, 1 - BN_DECAY, BN_EPS)

    def max_pool(self, x, k, stride, pad=0, cover_all=False):
        return self.F.max_pool2d(x, k, stride, pad, ceil_mode=cover_all)

    def global_average_pool(self, x):
        return self.F.avg_pool2d(x, x.shape[2:])

    def linear(self, x, w, b=None):
        return self.F.linear(x, w, b)

    def embed(self, E, ids):
        return self.F.embedding(ids, E)

    def lstm(self, c, z):
        a, i, f, o = z.reshape(z.shape[0], -1, 4).unbind(2)
        c = self.T.tanh(a) * self.T.sigmoid(i) + self.T.sigmoid(f) * c
        return c, self.T.sigmoid(o) * self.T.tanh(c)

    def stack(self, xs):
        return self.T.stack(xs)

    def softmax(self, x, axis):
        return self.F.softmax(x, dim=axis)

    def layer_norm(self, x, gamma, beta):
        return self.F.layer_norm(x, x.shape[1:], gamma, beta, LN_EPS)

    def cross_entropy(self, y, t):
        return self.F.cross_entropy(y, t)

    def sigmoid_cross_entropy(self, y, t):
        return self.F.binary_cross_entropy_with_logits(y, t.to(y.dtype))

    def clear(self, params):
        for p in params:
            p.grad = None

    def backward(self, loss):
        loss.backward()

    def grads(self, params):
        return [p.grad for p in params]

    def sgd(self, params):
        with self.T.no_grad():
            for p in params:
                p -= LR * p.grad


# ---------------------------------------------------------------------------
# Weights and data (NumPy, seed 0). A model's data: {'params': {name: array},
# 'state': {name: array} (running statistics), 'inputs': {name: array}}.

def _he(rng, shape):  # He normal, fan in = everything but the first axis
    fan_in = int(numpy.prod(shape[1:]))
    return (rng.standard_normal(shape) * numpy.sqrt(2.0 / fan_in)).astype(numpy.float32)


def _lecun(rng, shape):
    return (rng.standard_normal(shape) / numpy.sqrt(shape[1])).astype(numpy.float32)


class _Builder:
    def __init__(self, rng):
        self.rng, self.params, self.state = rng, {}, {}

    def conv(self, name, o, c, k, bias=False):
        self.params[name + '.w'] = _he(self.rng, (o, c, k, k))
        if bias:
            self.params[name + '.b'] = numpy.zeros(o, numpy.float32)

    def bn(self, name, c):
        self.params[name + '.gamma'] = numpy.ones(c, numpy.float32)
        self.params[name + '.beta'] = numpy.zeros(c, numpy.float32)
        self.state[name + '.mean'] = numpy.zeros(c, numpy.float32)
        self.state[name + '.var'] = numpy.ones(c, numpy.float32)

    def linear(self, name, o, i, bias=True):
        self.params[name + '.w'] = _lecun(self.rng, (o, i))
        if bias:
            self.params[name + '.b'] = numpy.zeros(o, numpy.float32)


def _images(rng, n, size, classes):
    return {'x': rng.standard_normal((n, 3, size, size)).astype(numpy.float32),
            't': rng.integers(0, classes, n).astype(numpy.int64)}


def _batch_norm(ops, P, S, h, name):
    """Batch norm of h with the parameters and running statistics _Builder.bn
    made under ``name``."""
    return ops.batch_norm(h, P[name + '.gamma'], P[name + '.beta'], S[name + '.mean'],
                          S[name + '.var'])


RESNET_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # planes, blocks, stride


def resnet50_data(rng, batch, size, classes=1000):
    b = _Builder(rng)
    b.conv('conv1', 64, 3, 7)
    b.bn('bn1', 64)
    c = 64
    for s, (planes, blocks, _) in enumerate(RESNET_STAGES):
        for k in range(blocks):
            p = 's{}b{}.'.format(s, k)
            b.conv(p + 'conv1', planes, c, 1)
            b.bn(p + 'bn1', planes)
            b.conv(p + 'conv2', planes, planes, 3)
            b.bn(p + 'bn2', planes)
            b.conv(p + 'conv3', 4 * planes, planes, 1)
            b.bn(p + 'bn3', 4 * planes)
            if k == 0:
                b.conv(p + 'down', 4 * planes, c, 1)
                b.bn(p + 'down_bn', 4 * planes)
            c = 4 * planes
    b.linear('fc', classes, 2048)
    return {'params': b.params, 'state': b.state, 'inputs': _images(rng, batch, size, classes)}


def resnet50_loss(ops, P, S, I):
    def conv_bn(h, name, stride=1, pad=0, relu=True, bn=None):
        h = ops.conv(h, P[name + '.w'], None, stride, pad)
        bn = bn or name.replace('conv', 'bn')
        h = _batch_norm(ops, P, S, h, bn)
        return ops.relu(h) if relu else h

    h = conv_bn(I['x'], 'conv1', 2, 3)
    h = ops.max_pool(h, 3, 2, 1)
    for s, (planes, blocks, stride) in enumerate(RESNET_STAGES):
        for k in range(blocks):
            p = 's{}b{}.'.format(s, k)
            st = stride if k == 0 else 1
            y = conv_bn(h, p + 'conv1')
            y = conv_bn(y, p + 'conv2', st, 1)
            y = conv_bn(y, p + 'conv3', relu=False)
            if k == 0:
                h = conv_bn(h, p + 'down', st, relu=False, bn=p + 'down_bn')
            h = ops.relu(y + h)
    h = ops.reshape(ops.global_average_pool(h), (h.shape[0], h.shape[1]))
    return ops.cross_entropy(ops.linear(h, P['fc.w'], P['fc.b']), I['t'])


VGG_CONFIG = (64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M',
              512, 512, 512, 'M')


def vgg16_data(rng, batch, size=32, classes=10):
    b = _Builder(rng)
    c, k = 3, 0
    for v in VGG_CONFIG:
        if v != 'M':
            b.conv('conv{}'.format(k), v, c, 3)
            b.bn('bn{}'.format(k), v)
            c, k = v, k + 1
    b.linear('fc1', 512, 512, bias=False)
    b.bn('bn_fc1', 512)
    b.linear('fc2', classes, 512, bias=False)
    return {'params': b.params, 'state': b.state, 'inputs': _images(rng, batch, size, classes)}


def vgg16_loss(ops, P, S, I):
    bn = functools.partial(_batch_norm, ops, P, S)
    h, k = I['x'], 0
    for v in VGG_CONFIG:
        if v == 'M':
            h = ops.max_pool(h, 2, 2, cover_all=True)  # Chainer's max_pooling_2d default
        else:
            h = ops.relu(bn(ops.conv(h, P['conv{}.w'.format(k)], None, 1, 1), 'bn{}'.format(k)))
            k += 1
    h = ops.reshape(h, (h.shape[0], 512))
    h = ops.relu(bn(ops.linear(h, P['fc1.w']), 'bn_fc1'))
    return ops.cross_entropy(ops.linear(h, P['fc2.w']), I['t'])


NIN_BLOCKS = ((96, 11, 4, 0), (256, 5, 1, 2), (384, 3, 1, 1), (1024, 3, 1, 1))  # out, k, stride, pad


def nin_data(rng, batch, size=227, classes=1000):
    b = _Builder(rng)
    c = 3
    for n, (o, k, _, _) in enumerate(NIN_BLOCKS):
        last = classes if n == len(NIN_BLOCKS) - 1 else o
        b.conv('mlp{}.0'.format(n), o, c, k, bias=True)
        b.conv('mlp{}.1'.format(n), o, o, 1, bias=True)
        b.conv('mlp{}.2'.format(n), last, o, 1, bias=True)
        c = o
    return {'params': b.params, 'state': {}, 'inputs': _images(rng, batch, size, classes)}


def nin_loss(ops, P, S, I):
    h = I['x']
    for n, (_, k, stride, pad) in enumerate(NIN_BLOCKS):
        p = 'mlp{}.'.format(n)
        h = ops.relu(ops.conv(h, P[p + '0.w'], P[p + '0.b'], stride, pad))
        h = ops.relu(ops.conv(h, P[p + '1.w'], P[p + '1.b']))
        h = ops.relu(ops.conv(h, P[p + '2.w'], P[p + '2.b']))
        if n < len(NIN_BLOCKS) - 1:
            h = ops.max_pool(h, 3, 2, cover_all=True)  # Chainer's default cover_all
    h = ops.reshape(ops.global_average_pool(h), (h.shape[0], h.shape[1]))
    return ops.cross_entropy(h, I['t'])


def lstm_lm_data(rng, steps, batch, vocab=10000, units=650, layers=2):
    params = {'embed': (rng.uniform(-0.1, 0.1, (vocab, units))).astype(numpy.float32)}
    for k in range(layers):
        scale = 1 / numpy.sqrt(units)
        params['lstm{}.upward.w'.format(k)] = (rng.standard_normal((4 * units, units)) * scale).astype(numpy.float32)
        b = numpy.zeros((units, 4), numpy.float32)
        b[:, 2] = 1  # forget gate (a, i, f, o interleaved) bias 1
        params['lstm{}.upward.b'.format(k)] = b.reshape(-1)
        params['lstm{}.lateral.w'.format(k)] = (rng.standard_normal((4 * units, units)) * scale).astype(numpy.float32)
    params['out.w'] = _lecun(rng, (vocab, units))
    params['out.b'] = numpy.zeros(vocab, numpy.float32)
    words = rng.integers(0, vocab, (steps + 1, batch)).astype(numpy.int64)
    return {'params': params, 'state': {},
            'inputs': {'ids': words[:-1].reshape(-1), 't': words[1:].reshape(-1)},
            'layers': layers, 'steps': steps, 'batch': batch, 'units': units}


def lstm_lm_loss(ops, P, S, I):
    T, B, H, L = I['steps'], I['batch'], I['units'], I['layers']
    xs = ops.embed(P['embed'], I['ids'])  # (T * B, H)
    zero = I['zero']  # (B, H) zeros of the dtype
    for k in range(L):
        p = 'lstm{}.'.format(k)
        up = ops.linear(xs, P[p + 'upward.w'], P[p + 'upward.b'])  # all steps at once
        h, c, hs = zero, zero, []
        for s in range(T):
            z = up[s * B:(s + 1) * B] + ops.linear(h, P[p + 'lateral.w'])
            c, h = ops.lstm(c, z)
            hs.append(h)
        xs = ops.reshape(ops.stack(hs), (T * B, H))
    return ops.cross_entropy(ops.linear(xs, P['out.w'], P['out.b']), I['t'])


def transformer_data(rng, batch, seq, d=512, heads=8, ffn=2048, classes=10):
    b = _Builder(rng)
    for n in ('q', 'k', 'v', 'o'):
        b.linear(n, d, d)
    b.params['ln1.gamma'], b.params['ln1.beta'] = numpy.ones(d, numpy.float32), numpy.zeros(d, numpy.float32)
    b.linear('ffn1', ffn, d)
    b.linear('ffn2', d, ffn)
    b.params['ln2.gamma'], b.params['ln2.beta'] = numpy.ones(d, numpy.float32), numpy.zeros(d, numpy.float32)
    b.linear('head', classes, d)
    return {'params': b.params, 'state': {},
            'inputs': {'x': rng.standard_normal((batch * seq, d)).astype(numpy.float32),
                       't': rng.integers(0, classes, batch * seq).astype(numpy.int64)},
            'batch': batch, 'seq': seq, 'heads': heads}


def transformer_loss(ops, P, S, I):
    x, B, L, nh = I['x'], I['batch'], I['seq'], I['heads']
    d = x.shape[1]
    dk = d // nh

    def heads(name):  # (B * L, d) -> (B, heads, L, dk)
        y = ops.linear(x, P[name + '.w'], P[name + '.b'])
        return ops.transpose(ops.reshape(y, (B, L, nh, dk)), (0, 2, 1, 3))

    q, k, v = heads('q'), heads('k'), heads('v')
    scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * (1.0 / numpy.sqrt(dk))
    ctx = ops.matmul(ops.softmax(scores, 3), v)  # (B, heads, L, dk)
    ctx = ops.reshape(ops.transpose(ctx, (0, 2, 1, 3)), (B * L, d))
    h = ops.layer_norm(x + ops.linear(ctx, P['o.w'], P['o.b']), P['ln1.gamma'], P['ln1.beta'])
    f = ops.linear(ops.relu(ops.linear(h, P['ffn1.w'], P['ffn1.b'])), P['ffn2.w'], P['ffn2.b'])
    h = ops.layer_norm(h + f, P['ln2.gamma'], P['ln2.beta'])
    return ops.cross_entropy(ops.linear(h, P['head.w'], P['head.b']), I['t'])


def mlp_data(rng, batch, sizes, classes=10):
    b = _Builder(rng)
    for k in range(len(sizes) - 1):
        b.linear('l{}'.format(k), sizes[k + 1], sizes[k])
    b.linear('out', classes, sizes[-1])
    return {'params': b.params, 'state': {}, 'inputs': {
        'x': rng.standard_normal((batch, sizes[0])).astype(numpy.float32),
        't': rng.integers(0, classes, batch).astype(numpy.int64)}}


def mlp_loss(ops, P, S, I):
    h, k = I['x'], 0
    while 'l{}.w'.format(k) in P:
        h = ops.relu(ops.linear(h, P['l{}.w'.format(k)], P['l{}.b'.format(k)]))
        k += 1
    return ops.cross_entropy(ops.linear(h, P['out.w'], P['out.b']), I['t'])


MOBILENET_BLOCKS = ((32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (256, 2))  # (out, stride)


def mobilenet_data(rng, batch, size=32, classes=10):
    b = _Builder(rng)
    b.conv('c0', 32, 3, 3)
    b.bn('b0', 32)
    c = 32
    for k, (o, _) in enumerate(MOBILENET_BLOCKS):
        b.conv('dw{}'.format(k), c, 1, 3)  # depthwise: one input channel a group
        b.bn('dwb{}'.format(k), c)
        b.conv('pw{}'.format(k), o, c, 1)
        b.bn('pwb{}'.format(k), o)
        c = o
    b.linear('fc', classes, c)
    return {'params': b.params, 'state': b.state, 'inputs': _images(rng, batch, size, classes)}


def mobilenet_loss(ops, P, S, I):
    bn = functools.partial(_batch_norm, ops, P, S)
    h = ops.relu(bn(ops.conv(I['x'], P['c0.w'], None, 1, 1), 'b0'))
    for k, (_, stride) in enumerate(MOBILENET_BLOCKS):
        h = ops.relu(bn(ops.conv(h, P['dw{}.w'.format(k)], None, stride, 1, groups=h.shape[1]),
                        'dwb{}'.format(k)))
        h = ops.relu(bn(ops.conv(h, P['pw{}.w'.format(k)]), 'pwb{}'.format(k)))
    h = ops.reshape(ops.global_average_pool(h), (h.shape[0], h.shape[1]))
    return ops.cross_entropy(ops.linear(h, P['fc.w'], P['fc.b']), I['t'])


def dcgan_data(rng, batch, nz=100, ch=256):
    b = _Builder(rng)
    b.linear('l0', 16 * ch, nz)
    b.bn('bn0', ch)
    chans = (ch, ch // 2, ch // 4, ch // 8)
    for k in range(3):
        b.params['dc{}.w'.format(k)] = (rng.standard_normal((chans[k], chans[k + 1], 4, 4))
                                        * 0.02).astype(numpy.float32)
        b.params['dc{}.b'.format(k)] = numpy.zeros(chans[k + 1], numpy.float32)
        b.bn('bn{}'.format(k + 1), chans[k + 1])
    b.params['dc3.w'] = (rng.standard_normal((chans[3], 3, 3, 3)) * 0.02).astype(numpy.float32)
    b.params['dc3.b'] = numpy.zeros(3, numpy.float32)
    widths = (3, 64, 128, 256, 512)
    for k in range(4):
        b.conv('d{}'.format(k), widths[k + 1], widths[k], 4 if k else 3, bias=True)
    b.linear('dl', 1, 512 * 16)
    return {'params': b.params, 'state': b.state, 'inputs': {
        'z': rng.uniform(-1, 1, (batch, nz)).astype(numpy.float32),
        't': numpy.ones((batch, 1), numpy.int32)}}


def dcgan_loss(ops, P, S, I):
    bn = functools.partial(_batch_norm, ops, P, S)
    z = I['z']
    ch = P['l0.w'].shape[0] // 16
    h = ops.relu(bn(ops.reshape(ops.linear(z, P['l0.w'], P['l0.b']), (z.shape[0], ch, 4, 4)),
                    'bn0'))
    for k in range(3):
        h = ops.relu(bn(ops.deconv(h, P['dc{}.w'.format(k)], P['dc{}.b'.format(k)], 2, 1),
                        'bn{}'.format(k + 1)))
    h = ops.deconv(h, P['dc3.w'], P['dc3.b'], 1, 1)  # the generated 32x32 images
    h = ops.leaky_relu(ops.conv(h, P['d0.w'], P['d0.b'], 1, 1), 0.2)
    for k in range(1, 4):
        h = ops.leaky_relu(ops.conv(h, P['d{}.w'.format(k)], P['d{}.b'.format(k)], 2, 1), 0.2)
    y = ops.linear(ops.reshape(h, (h.shape[0], 512 * 16)), P['dl.w'], P['dl.b'])
    return ops.sigmoid_cross_entropy(y, I['t'])


# name: (what, make_data(rng, quick), loss function)
MODELS = {
    'resnet50_b8': ('ResNet-50, 224x224, batch 8',
                    lambda rng, q: resnet50_data(rng, 2 if q else 8, 64 if q else 224), resnet50_loss),
    'resnet50_b32': ('ResNet-50, 224x224, batch 32',
                     lambda rng, q: resnet50_data(rng, 4 if q else 32, 48 if q else 224), resnet50_loss),
    'vgg16_cifar': ('VGG-16 (CIFAR), 32x32, batch 64',
                    lambda rng, q: vgg16_data(rng, 4 if q else 64), vgg16_loss),
    'lstm_lm': ('2-layer LSTM LM, 650 units, vocabulary 10,000, 35 steps, batch 20',
                lambda rng, q: lstm_lm_data(rng, 5, 4, vocab=500, units=64) if q else
                lstm_lm_data(rng, 35, 20), lstm_lm_loss),
    'transformer_block': ('Transformer encoder block, d 512, 8 heads, FFN 2048, seq 128, batch 16',
                          lambda rng, q: transformer_data(rng, 2, 16, d=64, heads=4, ffn=128) if q
                          else transformer_data(rng, 16, 128), transformer_loss),
    'nin': ('NIN (ImageNet), 227x227, batch 4',
            lambda rng, q: nin_data(rng, 2, 99) if q else nin_data(rng, 4, 227), nin_loss),
    'mlp_mnist': ('MNIST MLP 784-1000-1000-10, batch 100',
                  lambda rng, q: mlp_data(rng, 8 if q else 100, (784, 64, 64) if q else
                                          (784, 1000, 1000)), mlp_loss),
    'bert_base_block': ('Transformer encoder block, d 768, 12 heads, FFN 3072, seq 128, batch 4',
                        lambda rng, q: transformer_data(rng, 2, 16, d=96, heads=12, ffn=192)
                        if q else transformer_data(rng, 4, 128, d=768, heads=12, ffn=3072),
                        transformer_loss),
    'mobilenet_cifar': ('MobileNet v1 blocks (depthwise-separable), 32x32, batch 32',
                        lambda rng, q: mobilenet_data(rng, 4 if q else 32), mobilenet_loss),
    'dcgan': ('DCGAN generator + discriminator step, 32x32, batch 16',
              lambda rng, q: dcgan_data(rng, 2 if q else 16, ch=64 if q else 256), dcgan_loss),
}


def make_data(name, quick):
    return MODELS[name][1](numpy.random.default_rng(0), quick)


def build_step(ops, name, data, dtype=numpy.float32):
    """step() -> (loss, [gradients in the order of data['params']])."""
    loss_fn = MODELS[name][2]

    def cast(a):
        return a.astype(dtype) if a.dtype.kind == 'f' else a

    params = {k: ops.leaf(cast(v)) for k, v in data['params'].items()}
    plist = list(params.values())
    state = {k: ops.state(cast(v)) for k, v in data['state'].items()}
    inputs = {k: ops.const(cast(v)) for k, v in data['inputs'].items()}
    for k in ('layers', 'steps', 'batch', 'units', 'seq', 'heads'):
        if k in data:
            inputs[k] = data[k]
    if 'units' in data:
        inputs['zero'] = ops.zeros((data['batch'], data['units']), dtype)

    def step():
        ops.clear(plist)
        loss = loss_fn(ops, params, state, inputs)
        ops.backward(loss)
        grads = ops.grads(plist)
        ops.sgd(plist)
        return loss, grads
    step.params = plist
    return step


# ---------------------------------------------------------------------------
# Checking (see the module docstring)

# Gradients that are zero in exact arithmetic, so that either framework's
# float32 value is rounding noise: checked as |g| <= ZERO_BOUND * the largest
# |gradient| beside it, not against the other framework.
_BIAS_BEFORE_BN = ('a bias per channel right before batch norm, which subtracts the channel '
                   'mean (not dcgan\'s l0.b: one per channel and position of the 4x4 map)')
ZERO_GRADS = {'transformer_block': {
    'k.b': 'softmax over the keys ignores the per-query constant q . b_k'},
    'bert_base_block': {'k.b': 'as transformer_block'},
    'dcgan': {name: _BIAS_BEFORE_BN for name in ('dc0.b', 'dc1.b', 'dc2.b')}}
ZERO_BOUND = 1e-5
# Models whose whole-step float32 gradients are compared as whole arrays (the
# relative 2-norm error, bounded by F32_FLIP_BOUND, on the first call): relu
# and max-pool decisions on values within float32 rounding of a tie go either
# way, and each such flip moves whole gradients. Measured (first call, each
# framework's float32 against torch's float64): ResNet-50 b8 xgrad up to
# 4.3e-2, torch up to 2.7e-2; VGG-16 xgrad 1.0e-2, torch 7.7e-3; NIN xgrad
# 3.2e-3 (two flipped relus), torch 1.4e-6; the Transformer block: one relu
# of the FFN's 4M flips in each, torch's gradients up to 8e-4, xgrad's 8e-7.
# The float64 step and the per-op float32 check are the tight ones for them.
F32_FLIPS = {
    'resnet50_b8': 'relu/max-pool flips in 53 batch-normalized layers (gradients of both '
                   'frameworks up to 4% from float64)',
    'resnet50_b32': 'as resnet50_b8',
    'vgg16_cifar': 'relu flips after batch norm (up to 1% from float64 in both frameworks)',
    'nin': 'relu flips (xgrad 3.2e-3 from float64 in the first layers, torch 1.4e-6)',
    'transformer_block': 'one relu flip in the FFN in each framework (torch at |x| = 9.3e-8, '
                         'xgrad at 7.2e-7): torch\'s gradients upstream of it 1e-4 to 8e-4 from '
                         'float64, xgrad\'s under 1e-6',
    'bert_base_block': 'as transformer_block (relu in the FFN)',
    'mobilenet_cifar': 'relu flips after batch norm in 13 layers',
    'dcgan': 'relu flips after batch norm in the generator, leaky_relu in the discriminator',
}
F32_FLIP_BOUND = 0.1
# The per-op check's atol (times max|torch float64|) where it is not
# ATOL_SCALE: xgrad's 3x3 and 5x5 convolutions (Winograd, polyphase) round
# further than direct convolution; measured up to 1.45e-5 * max|gradient|
# (one element of 401,408: conv 256->256 3x3 on 14x14 at batch 8, the
# gradient to x, in resnet50_b8).
OP_ATOL_SCALE = {'conv': 1e-4,
                 # gamma's gradient is a sum over the batch and the map of gy xhat whose
                 # terms cancel (xhat has mean 0): its float32 error goes with the terms,
                 # not with the sum; mobilenet_cifar --quick: 1.5e-9 where the op's
                 # largest gradient is 4e-6 (3.7e-4 of it)
                 'batch_norm': 1e-3}
# float64 ResNet-50 at batch 32 needs about 20 GB and minutes per step: its
# float64 check runs on resnet50_b8's data (the same model code), and is
# resnet50_b8's when that ran before it.
F64_DATA = {'resnet50_b32': 'resnet50_b8'}


def _as_numpy(a):
    if hasattr(a, 'detach'):
        return a.detach().numpy().copy()
    return a.to_numpy().copy()


def _calls(step, n=2):
    """The results of each of n calls (from the second on, gradients left
    behind or an update gone wrong would show)."""
    out = []
    for _ in range(n):
        loss, grads = step()
        out.append([_as_numpy(loss)] + [_as_numpy(g) for g in grads])
    return out


def _elementwise(what, a, b, rtol, atol_scale):
    """assert_allclose(a, b) at rtol and atol = atol_scale * max|b|; returns
    the largest error as a fraction of the tolerance."""
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
    assert numpy.all(numpy.isfinite(a)), (what, 'xgrad: not finite')
    atol = atol_scale * float(numpy.max(numpy.abs(b), initial=0))
    numpy.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=what)
    a, b = a.astype(numpy.float64), b.astype(numpy.float64)
    return float(numpy.max(numpy.abs(a - b) / (atol + rtol * numpy.abs(b) + 1e-300), initial=0))


def _norm_error(a, b):
    a, b = a.astype(numpy.float64).ravel(), b.astype(numpy.float64).ravel()
    return float(numpy.linalg.norm(a - b) / max(numpy.linalg.norm(b), 1e-300))


def compare_step(name, names, ours, theirs, rtol, atol_scale, flips=False):
    """Whole-step results (one list per call) of xgrad against torch; returns
    {'worst': (fraction of tolerance, where), 'norm_errors': ...}."""
    zero = ZERO_GRADS.get(name, {})
    worst, where, norm_errors = 0.0, None, {}
    for call, (A, B) in enumerate(zip(ours, theirs)):
        scale = max(float(numpy.max(numpy.abs(g), initial=0)) for g in B[1:])
        for label, a, b in zip(['loss'] + names, A, B):
            what = '{} {} call {}: {}'.format(name, b.dtype.name, call + 1, label)
            if label in zero:
                for fw, g in (('xgrad', a), ('torch', b)):
                    assert float(numpy.max(numpy.abs(g))) <= ZERO_BOUND * scale, (
                        '{}: {}\'s gradient, zero in exact arithmetic, is {:.3g} > {} * {:.3g}'.format(
                            what, fw, float(numpy.max(numpy.abs(g))), ZERO_BOUND, scale))
                continue
            if flips and label != 'loss':
                if call == 0:
                    err = _norm_error(a, b)
                    norm_errors[label] = err
                    assert err <= F32_FLIP_BOUND, '{}: |xgrad - torch| / |torch| = {:.3g} > {}'.format(
                        what, err, F32_FLIP_BOUND)
                else:
                    assert numpy.all(numpy.isfinite(a)), (what, 'xgrad: not finite')
                continue
            if flips and call > 0:  # the loss after an update that flips moved
                continue
            err = _elementwise(what, a, b, rtol, atol_scale)
            if err >= worst:
                worst, where = err, 'call {} {}'.format(call + 1, label)
    out = {'worst_fraction_of_tolerance': worst, 'worst_at': where}
    if norm_errors:
        top = max(norm_errors, key=norm_errors.get)
        out['first_call_gradient_norm_error_max'] = [norm_errors[top], top]
        out['first_call_gradient_norm_error_median'] = statistics.median(norm_errors.values())
    return out


_NOT_OPS = ('leaf', 'const', 'state', 'zeros', 'clear', 'backward', 'grads', 'sgd', 'name')


def _signature(v):
    if hasattr(v, 'requires_grad'):  # torch.Tensor
        return ('T', tuple(v.shape), str(v.dtype), bool(v.requires_grad))
    if isinstance(v, (list, tuple)):
        return tuple(_signature(u) for u in v)
    return repr(v)


class Recorder:
    """An op table that records, for each distinct call of an op (the op,
    its arguments' shapes, dtypes and other values), the first call's inputs
    and retains its outputs' gradients (torch only)."""

    def __init__(self, base):
        self.base, self.calls, self._seen = base, [], set()

    def __getattr__(self, k):
        f = getattr(self.base, k)
        if k in _NOT_OPS or not callable(f):
            return f

        def op(*args, **kwargs):
            y = f(*args, **kwargs)
            sig = (k, _signature(args), _signature(sorted(kwargs.items())))
            if sig not in self._seen:
                self._seen.add(sig)
                for t in (y if isinstance(y, tuple) else (y,)):
                    if t.requires_grad:
                        t.retain_grad()
                self.calls.append((k, args, kwargs, y))
            return y
        return op


def _flat(args):
    out = []
    for a in args:
        out.extend(_flat(a) if isinstance(a, (list, tuple)) else [a])
    return out


def check_ops(name, xgrad, torch, xops, tops, data, param_names):
    """Every distinct op of the float32 step, on its recorded float32 inputs
    and output gradients, alone: xgrad's float32 forward and vector-Jacobian
    products against torch's in float64 (of the same inputs), elementwise at
    training_steps.py's tolerance. Returns (ops checked, worst fraction, where)."""
    rec = Recorder(tops)
    step = build_step(rec, name, data)
    params = {id(t): n for n, t in zip(param_names, step.params)}
    step()
    zero = ZERO_GRADS.get(name, {})
    worst, where, checked = 0.0, None, set()

    def to64(v):
        if hasattr(v, 'requires_grad'):
            t = v.detach()
            if t.is_floating_point():
                t = t.double()
            return t.requires_grad_(bool(v.requires_grad))
        return [to64(u) for u in v] if isinstance(v, list) else v

    def to_xgrad(v):
        if hasattr(v, 'requires_grad'):
            a = xgrad.array(v.detach().numpy().copy())
            return a.require_grad() if v.requires_grad else a
        return [to_xgrad(u) for u in v] if isinstance(v, list) else v

    for n, (k, args, kwargs, y) in enumerate(rec.calls):
        ys = y if isinstance(y, tuple) else (y,)
        gys = [t.grad for t in ys]
        if all(g is None for g in gys):
            continue
        what = '{} op {} {} {}'.format(name, n, k, [tuple(a.shape) for a in args if hasattr(a, 'shape')])
        t_args = [to64(a) for a in args]
        x_args = [to_xgrad(a) for a in args]
        flat = _flat(args)
        t_leaves = [a for a in _flat(t_args) if hasattr(a, 'requires_grad') and a.requires_grad]
        x_leaves = [a for a in _flat(x_args) if isinstance(a, xgrad.ndarray) and a.is_grad_required()]
        labels = [params.get(id(a), 'input {}'.format(i)) for i, a in enumerate(flat)
                  if hasattr(a, 'requires_grad') and a.requires_grad]
        if not t_leaves:
            continue
        checked.add(k)
        t_y = getattr(tops, k)(*t_args, **kwargs)
        x_y = getattr(xops, k)(*x_args, **kwargs)
        t_ys = t_y if isinstance(t_y, tuple) else (t_y,)
        x_ys = x_y if isinstance(x_y, tuple) else (x_y,)
        for i, (a, b) in enumerate(zip(x_ys, t_ys)):
            err = _elementwise(what + ' forward {}'.format(i), _as_numpy(a),
                               _as_numpy(b).astype(numpy.float32), RTOL, OP_ATOL_SCALE.get(k, ATOL_SCALE))
            if err >= worst:
                worst, where = err, what + ' forward'
        t_g = torch.autograd.grad(
            t_ys, t_leaves, [g.double() if g is not None else torch.zeros_like(t)
                             for g, t in zip(gys, t_ys)])
        loss = None
        for a, g in zip(x_ys, gys):
            if g is not None:
                term = xgrad.sum(a * xgrad.array(g.numpy().copy()))
                loss = term if loss is None else loss + term
        x_g = xgrad.grad([loss], x_leaves)
        scale = max(float(numpy.max(numpy.abs(_as_numpy(g)), initial=0)) for g in t_g)
        for label, a, b in zip(labels, x_g, t_g):
            a, b = _as_numpy(a), _as_numpy(b).astype(numpy.float32)
            w = '{} gradient of {}'.format(what, label)
            if label in zero:
                assert float(numpy.max(numpy.abs(a))) <= ZERO_BOUND * scale, (w, 'not ~0')
                continue
            err = _elementwise(w, a, b, RTOL, OP_ATOL_SCALE.get(k, ATOL_SCALE))
            if err >= worst:
                worst, where = err, w
    return len(rec.calls), sorted(checked), worst, where


def check(name, xgrad, torch, xops, tops, data, quick, done64):
    """The float64 and float32 checks (docstring); returns their record."""
    names = list(data['params'])
    out = {}
    t0 = time.perf_counter()
    if name in F64_DATA and F64_DATA[name] in done64:
        out['float64_step'] = dict(done64[F64_DATA[name]], data=F64_DATA[name],
                                   note='the check of {} in this run'.format(F64_DATA[name]))
    else:
        data64 = make_data(F64_DATA[name], quick) if name in F64_DATA else data
        ours = _calls(build_step(xops, name, data64, numpy.float64))
        theirs = _calls(build_step(tops, name, data64, numpy.float64))
        r = compare_step(name, names, ours, theirs, F64_RTOL, F64_ATOL_SCALE)
        out['float64_step'] = dict(r, tolerance={'rtol': F64_RTOL, 'atol': 'max|torch| * {}'.format(F64_ATOL_SCALE)},
                                   calls=2, seconds=round(time.perf_counter() - t0, 1),
                                   data=F64_DATA.get(name, name))
        done64[out['float64_step']['data']] = out['float64_step']
        del ours, theirs
    _passed(name, 'float64_step', out['float64_step'])
    t0 = time.perf_counter()
    ours = _calls(build_step(xops, name, data))
    theirs = _calls(build_step(tops, name, data))
    flips = name in F32_FLIPS
    r = compare_step(name, names, ours, theirs, RTOL, ATOL_SCALE, flips)
    out['float32_step'] = dict(r, calls=2, seconds=round(time.perf_counter() - t0, 1),
                               loss=[float(ours[0][0]), float(theirs[0][0])])
    if flips:
        out['float32_step']['tolerance'] = {
            'loss, first call': {'rtol': RTOL, 'atol': 'max|torch| * {}'.format(ATOL_SCALE)},
            'gradients, first call': '|xgrad - torch| / |torch| <= {}'.format(F32_FLIP_BOUND),
            'second call': 'finite', 'why': F32_FLIPS[name]}
    else:
        out['float32_step']['tolerance'] = {'rtol': RTOL, 'atol': 'max|torch| * {}'.format(ATOL_SCALE)}
    _passed(name, 'float32_step', out['float32_step'])
    if name in ZERO_GRADS:
        out['zero_gradients'] = {'bound': '|g| <= {} * max|gradient|'.format(ZERO_BOUND),
                                 'which': ZERO_GRADS[name]}
    del ours, theirs
    t0 = time.perf_counter()
    n_ops, kinds, worst, where = check_ops(name, xgrad, torch, xops, tops, data, names)
    out['float32_ops'] = {'distinct_calls': n_ops, 'ops': kinds, 'worst_fraction_of_tolerance': worst, 'worst_at': where,
                          'tolerance': {'rtol': RTOL, 'atol': 'max|torch float64| * {}'.format(ATOL_SCALE),
                                        'atol_by_op': OP_ATOL_SCALE},
                          'seconds': round(time.perf_counter() - t0, 1)}
    _passed(name, 'float32_ops', out['float32_ops'])
    return out


def _passed(name, k, r):
    extra = ''
    if 'first_call_gradient_norm_error_max' in r:
        extra = '; gradients\' norm error vs torch max {:.2g} ({}), median {:.2g}'.format(
            *r['first_call_gradient_norm_error_max'], r['first_call_gradient_norm_error_median'])
    print('  {:18s} {:12s} passed: worst {:.3g} of the tolerance at {}{} ({:.0f} s)'.format(
        name, k, r['worst_fraction_of_tolerance'], r['worst_at'], extra, r['seconds']),
        file=sys.stderr, flush=True)

# ---------------------------------------------------------------------------
# Timing, page faults and peak RSS

def _faults():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_majflt


def time_pair(steps, settings):
    """Interleaved rounds (_timing.measure); ({name: Timing}, {name: (minor,
    major) faults per timed step})."""
    timings = _timing.measure(steps, settings['rounds'], settings['min_time'],
                              settings['warmup'], settings['warmup_time'], count=_faults)
    return timings, {n: t.counts_per_iteration() for n, t in timings.items()}


def _status_kb(field):
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(field + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_child(args):
    """In a process of its own: import one framework, build each model of
    --only (one, except with --quick), warm up, run steps; report memory."""
    framework = args.rss_child
    rss_import = None
    if framework == 'torch':
        import torch
        if args.threads == 1:
            torch.set_num_threads(1)
        ops = TorchOps(torch)
    else:
        import _frameworks
        ops = XgradOps(_frameworks.load('xgrad'))
    rss_import = _status_kb('VmRSS')
    steps_run = args.rss_steps
    minflt = majflt = 0
    for name in args.only:
        step = build_step(ops, name, make_data(name, args.quick))
        for _ in range(2):
            step()
        before = _faults()
        for _ in range(steps_run):
            step()
        after = _faults()
        minflt += after[0] - before[0]
        majflt += after[1] - before[1]
        del step
    n = steps_run * len(args.only)
    hwm = _status_kb('VmHWM')
    json.dump({'framework': framework, 'models': args.only,
               'peak_rss_mb': (hwm if hwm is not None else
                               resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024,
               'peak_rss_source': 'VmHWM' if hwm is not None else 'ru_maxrss',
               'ru_maxrss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               'rss_after_import_mb': rss_import / 1024 if rss_import else None,
               'steps': '2 warm-up + {} per model'.format(steps_run),
               'minor_faults_per_step': minflt / n, 'major_faults_per_step': majflt / n},
              sys.stdout)
    return 0


def peak_rss(args, models):
    """{framework: child's record}, a child per framework (same environment)."""
    out = {}
    for fw in ('xgrad', 'torch'):
        cmd = [sys.executable, os.path.abspath(__file__), '--rss-child', fw,
               '--threads', str(args.threads), '--only', ','.join(models),
               '--rss-steps', str(args.rss_steps)] + (['--quick'] if args.quick else [])
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, check=True)
        out[fw] = json.loads(proc.stdout)
    return out


def run_configuration(args):
    """Check, time and measure every model of --only with this process's threads."""
    import gc
    import torch
    import _frameworks
    xgrad = _frameworks.load('xgrad')
    if args.threads == 1:
        torch.set_num_threads(1)
    xops, tops = XgradOps(xgrad), TorchOps(torch)
    settings = {'rounds': args.rounds, 'min_time': args.min_time,
                'warmup': 2 if not args.quick else 1, 'warmup_time': 0.0}
    threads = 1 if args.threads == 1 else 'default'  # as training_steps.py records it
    env = ' '.join('{}=1'.format(v) for v in _machine.THREAD_VARS) + ' ' if args.threads == 1 else ''
    out = {'threads': threads, 'torch_threads': torch.get_num_threads(),
           'blas_threads': _machine.numpy_blas_threads(), 'xgrad_threads':
           os.environ.get('OMP_NUM_THREADS') or 'one per CPU ({})'.format(_machine.usable_cpus()),
           'load_average_1min_start': _machine.load_average(), 'entries': []}
    t_conf = time.perf_counter()
    done64 = {}  # float64 checks done, by the data they ran on
    for name in args.only:
        t_model = time.perf_counter()
        data = make_data(name, args.quick)
        checked = check(name, xgrad, torch, xops, tops, data, args.quick, done64)
        steps = {'xgrad': build_step(xops, name, data), 'torch': build_step(tops, name, data)}
        load = _machine.load_average()
        timings, faults = time_pair(steps, settings)
        del steps
        gc.collect()
        v = _timing.versus(timings)
        paired = sorted(a / b for a, b in zip(timings['xgrad'].samples, timings['torch'].samples))
        entry = {
            'model': name, 'what': MODELS[name][0] if not args.quick else MODELS[name][0] + ' (--quick: shrunk)',
            'threads': threads, 'torch_threads': out['torch_threads'],
            'xgrad_ms': v['time_us']['xgrad'] / 1e3, 'torch_ms': v['time_us']['torch'] / 1e3,
            'xgrad_over_torch': v['paired_ratio'], 'ratio_of_medians': v['ratio'],
            'paired_ratio_range': [paired[0], paired[-1]],
            'spread_ms': {fw: {k: (s / 1e3 if k not in ('rounds', 'iterations_per_sample') else s)
                               for k, s in v['spread_us'][fw].items()} for fw in ('xgrad', 'torch')},
            'minor_faults_per_step': {fw: faults[fw][0] for fw in faults},
            'major_faults_per_step': {fw: faults[fw][1] for fw in faults},
            'load_average_1min': load, 'check': checked,
            'command': '{}python bench/models.py --threads {} --only {} --rounds {}{}'.format(
                env, args.threads, name, args.rounds, ' --quick' if args.quick else ''),
        }
        if not args.quick:
            rss = peak_rss(args, [name])
            entry['peak_rss_mb'] = {fw: rss[fw]['peak_rss_mb'] for fw in rss}
            entry['rss'] = rss
        entry['wall_s'] = round(time.perf_counter() - t_model, 1)
        out['entries'].append(entry)
        print('  {:18s} threads={:7s} xgrad {:9.1f} ms  torch {:9.1f} ms  paired ratio {:.2f} '
              '({:.2f}-{:.2f}), faults/step {:.0f} / {:.0f}{}'.format(
                  name, str(threads), entry['xgrad_ms'], entry['torch_ms'], entry['xgrad_over_torch'],
                  paired[0], paired[-1], faults['xgrad'][0], faults['torch'][0],
                  '' if 'peak_rss_mb' not in entry else ', peak RSS {:.0f} / {:.0f} MB'.format(
                      entry['peak_rss_mb']['xgrad'], entry['peak_rss_mb']['torch'])),
              file=sys.stderr, flush=True)
    if args.quick:  # one child per framework for all the models: the path, not the figure
        rss = peak_rss(args, args.only)
        out['peak_rss_all_models_mb'] = {fw: rss[fw]['peak_rss_mb'] for fw in rss}
    out['wall_s'] = round(time.perf_counter() - t_conf, 1)
    return out


# ---------------------------------------------------------------------------
# Per-op profile of one step

def profile(args):
    import torch
    import _frameworks
    xgrad = _frameworks.load('xgrad')
    if args.threads == 1:
        torch.set_num_threads(1)
    name = args.profile
    data = make_data(name, args.quick)
    result = {'model': name, 'threads': 1 if args.threads == 1 else 'default'}
    for fw, ops in (('xgrad', XgradOps(xgrad)), ('torch', TorchOps(torch))):
        step = build_step(ops, name, data)
        for _ in range(2):
            step()
        n = args.profile_steps
        before = _faults()
        t0 = time.perf_counter()
        if fw == 'xgrad':
            hook = xgrad.hooks.TimerHook()
            with hook:
                for _ in range(n):
                    step()
        else:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(n):
                    step()
        wall = (time.perf_counter() - t0) / n
        after = _faults()
        rows = []
        if fw == 'xgrad':
            for op, r in hook.summary().items():
                rows.append({'op': op, 'ms': r['elapsed_time'] * 1e3 / n,
                             'forward_ms': r['forward_time'] * 1e3 / n, 'forward_calls': r['forward_calls'] // n,
                             'backward_ms': r['backward_time'] * 1e3 / n,
                             'backward_calls': r['backward_calls'] // n})
            in_ops = hook.total_time() / n
        else:
            for e in prof.key_averages():
                rows.append({'op': e.key, 'ms': e.self_cpu_time_total / 1e3 / n, 'calls': e.count // n})
            in_ops = sum(r['ms'] for r in rows) / 1e3
        rows.sort(key=lambda r: -r['ms'])
        steady = _timing.Timing(1)
        for _ in range(3):
            steady.samples.append(_timing._sample(step, 1))
        result[fw] = {'profiled_steps': n, 'step_ms_profiled': wall * 1e3,
                      'step_ms_unprofiled_median_of_3': steady.median * 1e3,
                      'in_ops_ms': in_ops * 1e3, 'minor_faults_per_step': (after[0] - before[0]) / n,
                      'major_faults_per_step': (after[1] - before[1]) / n, 'top': rows[:15],
                      'times': 'TimerHook elapsed (forward + backward)' if fw == 'xgrad'
                      else "torch.profiler self CPU time per aten op"}
        print('\n{} {} ({}): step {:.0f} ms profiled ({:.0f} ms in ops), {:.0f} ms '
              'unprofiled; {:.0f} minor page faults per step (mean of {} profiled steps)'.format(
                  fw, name, 'one thread' if args.threads == 1 else 'default threads', wall * 1e3, in_ops * 1e3,
                  steady.median * 1e3, (after[0] - before[0]) / n, n), file=sys.stderr)
        for r in rows[:10]:
            extra = ('fwd {:8.1f} ms x{:<4d} bwd {:8.1f} ms x{:<4d}'.format(
                r['forward_ms'], r['forward_calls'], r['backward_ms'], r['backward_calls'])
                if fw == 'xgrad' else 'x{}'.format(r['calls']))
            print('  {:40s} {:9.1f} ms  {}'.format(r['op'][:40], r['ms'], extra), file=sys.stderr)
        del step
    return result


# ---------------------------------------------------------------------------
# Driver: one child process per thread setting

def _child(args, threads):
    env = _machine.thread_environment(threads)
    cmd = [sys.executable, os.path.abspath(__file__), '--threads', str(threads),
           '--only', ','.join(args.only), '--rounds', str(args.rounds),
           '--min-time', str(args.min_time), '--rss-steps', str(args.rss_steps),
           '--json-stdout'] + (['--quick'] if args.quick else [])
    if args.profile:
        cmd += ['--profile', args.profile, '--profile-steps', str(args.profile_steps)]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE)
    if proc.returncode:
        raise SystemExit('the {} child failed (exit {}): {}'.format(
            'one-thread' if threads == 1 else 'default-threads', proc.returncode, ' '.join(cmd)))
    return json.loads(proc.stdout)


def _version(dist):
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def finish(result):
    """The keys bench/results_index.py reads: the thread setting at the top,
    and per configuration ``workloads`` ({model: ratios}) as training_steps.py
    writes them."""
    threads = [c['threads'] for c in result['configurations']]
    result['threads'] = threads[0] if len(threads) == 1 else ' and '.join(map(str, threads))
    for c in result['configurations']:
        c['workloads'] = {e['model']: {'ratio': e['ratio_of_medians'], 'paired_ratio': e['xgrad_over_torch']}
                          for e in c['entries']}


def _ms(t):
    return '{:.0f}'.format(t) if t >= 100 else '{:.1f}'.format(t) if t >= 1 else '{:.2f}'.format(t)


def markdown(result):
    m = result['machine']
    lines = ['# Real models\' training steps, xgrad / torch', '',
             'Run {}; {}, {} usable CPUs ({}, xgrad path {}), load {:.2f} at start. '
             'Python {}, numpy {}, torch {}; xgrad at {}. {} rounds; each step is '
             'forward + backward + SGD. Times: median over rounds; ratio: median of '
             'the paired per-round ratios (range over rounds); faults: minor page '
             'faults per step in the timing process; peak RSS: VmHWM of a process '
             'that ran only that framework and model.'.format(
                 result['date'], m.get('cpu_model'), m.get('usable_cpus'),
                 ', '.join(m.get('vector_extensions') or []), m.get('xgrad_cpu_path'),
                 m.get('load_average_1min') or 0, result['versions']['python'],
                 result['versions']['numpy'], result['versions']['torch'],
                 result['versions'].get('xgrad_commit'), result['settings']['rounds']), '',
             '| step | threads | xgrad ms | torch ms | xgrad / torch | faults/step xgrad | '
             'faults/step torch | peak RSS xgrad MB | peak RSS torch MB |',
             '|---|---|---|---|---|---|---|---|---|']
    for conf in result['configurations']:
        for e in conf['entries']:
            rss = e.get('peak_rss_mb', {})
            rss = rss or conf.get('peak_rss_all_models_mb', {})
            lines.append('| {} | {} (torch {}) | {} | {} | {:.2f} ({:.2f}-{:.2f}) | {:.0f} | '
                         '{:.0f} | {} | {} |'.format(
                             e['model'], conf['threads'], conf['torch_threads'], _ms(e['xgrad_ms']),
                             _ms(e['torch_ms']), e['xgrad_over_torch'], *e['paired_ratio_range'],
                             e['minor_faults_per_step']['xgrad'], e['minor_faults_per_step']['torch'],
                             '{:.0f}'.format(rss['xgrad']) if rss else '-',
                             '{:.0f}'.format(rss['torch']) if rss else '-'))
    lines.append('')
    base = {fw: [e['rss'][fw]['rss_after_import_mb'] for c in result['configurations']
                 for e in c['entries'] if 'rss' in e] for fw in ('xgrad', 'torch')}
    if base['xgrad'] and base['torch']:
        lines.append('Peak RSS includes each framework\'s RSS after its imports, before the model: '
                     'xgrad {:.0f}-{:.0f} MB, torch {:.0f}-{:.0f} MB.'.format(
                         min(base['xgrad']), max(base['xgrad']), min(base['torch']), max(base['torch'])))
    if any('peak_rss_all_models_mb' in c for c in result['configurations']):
        lines.append('--quick: peak RSS of one process per framework that ran all the models.')
    for conf in result['configurations']:
        lines.append('{}: {:.0f} s for the run.'.format(
            'one thread' if conf['threads'] == 1 else 'default threads', conf['wall_s']))
    return '\n'.join(lines) + '\n'


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--quick', action='store_true',
                   help='shrunk models, few rounds, one thread unless --threads 0 (smoke test, under '
                   'a minute); writes nothing')
    p.add_argument('--only', default=','.join(MODELS), help='comma-separated: ' + ','.join(MODELS))
    p.add_argument('--threads', type=int, choices=(0, 1),
                   help='one thread setting only: 1, or 0 (each framework\'s default threads)')
    p.add_argument('--rounds', type=int, help='paired rounds (default 7; --quick 3)')
    p.add_argument('--min-time', type=float, help='seconds per sample at least (default 0.05)')
    p.add_argument('--rss-steps', type=int, default=2, help='steps after warm-up in a peak-RSS child')
    p.add_argument('--profile', metavar='NAME', help='time one xgrad step per op (TimerHook) '
                   'and one torch step (torch.profiler); write models_profile_NAME_...json')
    p.add_argument('--profile-steps', type=int, default=3, help='steps profiled (per-op times: their mean)')
    p.add_argument('--out', help='JSON path (default bench/results/models_<cpu path>_<date>.json)')
    p.add_argument('--json-stdout', action='store_true', help=argparse.SUPPRESS)
    p.add_argument('--rss-child', choices=('xgrad', 'torch'), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.only = [n.strip() for n in args.only.split(',') if n.strip()]
    for n in args.only + ([args.profile] if args.profile else []):
        if n not in MODELS:
            p.error('unknown model {!r}; choose from {}'.format(n, ', '.join(MODELS)))
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.min_time = args.min_time or (0.005 if args.quick else 0.05)

    if args.rss_child:
        return rss_child(args)
    if args.json_stdout:  # a child: one thread setting, in this process
        result = profile(args) if args.profile else run_configuration(args)
        json.dump(result, sys.stdout)
        return 0

    t0 = time.perf_counter()
    # --quick: one thread unless --threads says otherwise (default threads on
    # small shapes measure the neighbours' load: 115 s against 21 s here)
    settings = [args.threads] if args.threads is not None else [1] if args.quick else [1, 0]
    commit = subprocess.run(['git', '-C', _BENCH_DIR, 'rev-parse', '--short', 'HEAD'],
                            stdout=subprocess.PIPE, text=True).stdout.strip() or None
    versions = {'python': sys.version.split()[0], 'numpy': numpy.__version__,
                'torch': _version('torch'), 'xgrad_commit': commit}
    machine = _machine.machine_info()
    date = datetime.datetime.now(datetime.timezone.utc)
    where = machine.get('xgrad_cpu_path') or machine.get('machine')
    tag = '' if len(settings) == 2 else ('1thread_' if settings[0] == 1 else 'default_threads_')
    if args.profile:
        result = {'date': date.isoformat(timespec='seconds'), 'machine': machine,
                  'versions': versions, 'profiles': [_child(args, t) for t in settings],
                  'command': ' '.join(['python', 'bench/models.py'] + sys.argv[1:])}
        threads = [p['threads'] for p in result['profiles']]
        result['threads'] = threads[0] if len(threads) == 1 else ' and '.join(map(str, threads))
        out = args.out or (None if args.quick else os.path.join(
            _BENCH_DIR, 'results', 'models_profile_{}_{}{}_{}.json'.format(
                args.profile, tag, where, date.strftime('%Y-%m-%d'))))
        if out:
            with open(out, 'w') as f:
                json.dump(result, f, indent=1)
        return 0
    result = {'date': date.isoformat(timespec='seconds'), 'machine': machine, 'versions': versions,
              'command': ' '.join(['python', 'bench/models.py'] + sys.argv[1:]),
              'settings': {'rounds': args.rounds, 'min_time': args.min_time, 'lr': LR,
                           'rss_steps': args.rss_steps, 'quick': args.quick,
                           'check_float64_step': {'rtol': F64_RTOL,
                                                  'atol': 'max|torch| * {}'.format(F64_ATOL_SCALE),
                                                  'data': F64_DATA},
                           'check_float32_step': {'rtol': RTOL, 'atol': 'max|torch| * {}'.format(ATOL_SCALE),
                                                  'flip_prone': F32_FLIPS,
                                                  'flip_bound': F32_FLIP_BOUND},
                           'check_float32_ops': {'rtol': RTOL, 'atol': 'max|torch float64| * {}'.format(ATOL_SCALE),
                                                 'atol_by_op': OP_ATOL_SCALE},
                           'zero_gradients': ZERO_GRADS},
              'configurations': [_child(args, t) for t in settings]}
    result['wall_s'] = round(time.perf_counter() - t0, 1)
    finish(result)
    out = args.out or (None if args.quick else os.path.join(  # bench/results/README.md's naming
        _BENCH_DIR, 'results', 'models_{}{}_{}.json'.format(tag, where, date.strftime('%Y-%m-%d'))))
    print(markdown(result))
    print('total {:.0f} s'.format(result['wall_s']))
    if out:
        with open(out, 'w') as f:
            json.dump(result, f, indent=1)
        with open(os.path.splitext(out)[0] + '.md', 'w') as f:
            f.write(markdown(result))
    return 0


if __name__ == '__main__':
    sys.exit(main())

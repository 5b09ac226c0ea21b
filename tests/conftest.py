"""Shared pytest set-up for tests/.

One torch thread: the tests' Jacobians and forwards are small (at most a few thousand
entries per side), where a second intra-op thread only adds synchronisation; with other
processes on the same cores it is several times slower (tests/test_counting.py: 6.5 s with
one thread against 40 s with two on a loaded 2-core machine). No assertion depends on it.
"""
import torch

torch.set_num_threads(1)

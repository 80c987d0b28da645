"""Triton's HTTP/gRPC client under its old name: it lives in kernel/triton.py with the
launcher (kernel/tritonserver.py), which the pools and the factory's tune stage share.
This module *is* that one."""

import sys

from kernel import triton

sys.modules[__name__] = triton

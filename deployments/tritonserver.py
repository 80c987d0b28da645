"""The tritonserver launcher under its old name: it lives in kernel/tritonserver.py (the
factory's tune stage starts scratch servers too, and the registry may not import
deployments). This module *is* that one, so code and tests that patch its globals
(`_HANDED_OUT`, `socket`) patch what the launcher reads."""

import sys

from kernel import tritonserver

sys.modules[__name__] = tritonserver

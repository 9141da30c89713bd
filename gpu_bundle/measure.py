"""Run one rendered project's training, then record its exit code and peak GPU memory
(allocated and reserved by torch's caching allocator).

    python measure.py REPORT PACKAGE [train flags...]

Run by run.py, also as torchrun's script: each rank writes REPORT.rank<RANK>.json.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

import torch

report, package, *argv = sys.argv[1:]
train = importlib.import_module(f"{package}.train")
code = train.main(argv)
cuda = torch.cuda.is_initialized()
peak = torch.cuda.max_memory_allocated() if cuda else None
reserved = torch.cuda.max_memory_reserved() if cuda else None
with open(f"{report}.rank{os.environ.get('RANK', '0')}.json", "w") as file:
    json.dump({"exit_code": code, "peak_bytes": peak, "peak_reserved": reserved}, file)
sys.exit(code)

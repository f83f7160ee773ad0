"""Load a Transformers model directory with AutoModel.from_pretrained and say what was loaded.

    python -m load_pretrained DIR        (with tests/servers on PYTHONPATH)

The smallest program that loads a model. The tests run `openjev_repro.upstream.hf_raw` around it
(`--server-module load_pretrained`) to see the launcher's check stop a model before the program
it wraps goes on; the launcher's normal path is tested around our own reference backend.
"""

import sys

from transformers import AutoModel

model = AutoModel.from_pretrained(sys.argv[1], local_files_only=True)
print(f"loaded {type(model).__name__}", flush=True)

"""Rebuild ``conversation_lengths.csv`` from Mooncake's ``conversation_trace.jsonl``.

Usage: ``python derive.py [PATH/TO/conversation_trace.jsonl]`` (default: the project's shared
copy, ``/work/shared/data/mooncake-llm-traces/conversation_trace.jsonl``; the raw file, 2.9 MB
with its prefix-block hashes, is not bundled).  Writes one row per request, in trace order,
with the columns ElastiCo uses -- ``timestamp_ms,input_length,output_length`` -- and drops
``hash_ids`` (prefix-cache block ids, which no ElastiCo model reads).  Values are unchanged.
Standard library only.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = Path("/work/shared/data/mooncake-llm-traces/conversation_trace.jsonl")


def main(src: Path = DEFAULT) -> None:
    with open(src, encoding="utf-8") as f, \
            open(HERE / "conversation_lengths.csv", "w", newline="") as out:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["timestamp_ms", "input_length", "output_length"])
        for line in f:
            if line.strip():
                r = json.loads(line)
                w.writerow([int(r["timestamp"]), int(r["input_length"]), int(r["output_length"])])


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)

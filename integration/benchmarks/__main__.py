"""``python -m benchmarks [name ...]``: run every ``bench_*.py`` module, or the named ones
(``kafka-sink`` and ``kafka_sink`` both name ``bench_kafka_sink.py``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def available() -> list[str]:
    """Benchmark names (module names without the ``bench_`` prefix), sorted."""
    here = Path(__file__).resolve().parent
    return sorted(p.stem[len("bench_") :] for p in here.glob("bench_*.py"))


def main(argv: list[str]) -> int:
    # "kafka-sink" names bench_kafka_sink.py
    names = [n.removeprefix("bench_").replace("-", "_") for n in argv] or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available())}",
            file=sys.stderr,
        )
        return 2
    for name in names:
        print(f"== benchmark {name} ==", flush=True)
        importlib.import_module(f"benchmarks.bench_{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

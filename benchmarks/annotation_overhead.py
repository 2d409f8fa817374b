"""What the annotation vocabulary costs a decode step when no tool is attached (profiler off).

Side by side in one process: runs alternate between annotations off (the shared no-op, nothing patched)
and on (NVTX push/pop + guarded record_function + the patched cache methods), so machine drift hits both
alike. Prints the median step time of each, the difference per step and per range, and the percentage.

    python benchmarks/annotation_overhead.py [--engine cached] [--prompt 64] [--new-tokens 64] [--pairs 15]
"""

from __future__ import annotations

import argparse
import statistics

from engines import engine_class
from engines.models import load_model, prompt_ids
from probe import annotate as A
from probe.loop import generate


def ranges_per_step(engine, prompt) -> int:
    """Count the ranges one decode step emits, by running one step with a counting annotator."""
    counted = []

    class Counting(A.NullAnnotator):
        enabled = True

        def __call__(self, name, index=None):
            counted.append(A.label(name, index))
            return self._null

    generate(engine, prompt, 2, Counting())
    first = counted.index("decode#0")
    return len(counted) - first


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default="cached")
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--pairs", type=int, default=15)
    args = p.parse_args()

    model = load_model("tiny", "float32", "cpu")
    engine = engine_class(args.engine)(model)
    prompt = prompt_ids(args.prompt, 1, model.config.vocab_size)
    modes = {"off": A.NULL, "on": A.Annotator()}
    for annotator in modes.values():  # warm both paths
        generate(engine, prompt, args.new_tokens, annotator)
    steps: dict[str, list[float]] = {name: [] for name in modes}
    for i in range(args.pairs):
        order = list(modes) if i % 2 == 0 else list(reversed(modes))
        for name in order:
            steps[name].extend(s / 1e3 for s in generate(engine, prompt, args.new_tokens, modes[name]).step_ns)
    off, on = statistics.median(steps["off"]), statistics.median(steps["on"])
    n_ranges = ranges_per_step(engine, prompt)
    print(f"tiny {args.engine} p{args.prompt}, {args.pairs} interleaved pairs of {args.new_tokens - 1} steps, "
          "profiler off")
    print(f"  median step, annotations off: {off:9.1f} us")
    print(f"  median step, annotations on:  {on:9.1f} us")
    print(f"  cost per step: {on - off:+.1f} us over {n_ranges} ranges "
          f"({(on - off) / n_ranges:+.2f} us a range) = {100 * (on - off) / off:+.2f}% (target <= 2%)")


if __name__ == "__main__":
    main()

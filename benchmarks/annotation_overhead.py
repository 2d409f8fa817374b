"""What the annotation vocabulary costs a decode step when no tool is attached (profiler off, no nsys).

Side by side in one process (benchmarks/paired.py): runs alternate between annotations off (the shared no-op,
nothing patched) and on (an Annotator: the patched cache methods and every range's check for a listening
tool), so machine drift hits both alike. Prints the overhead on the mean and median step, and the ranges a
step emits. Target: at most 2%.

    python -m benchmarks.annotation_overhead [--engine cached] [--prompt 64] [--new-tokens 32] [--pairs 150]
"""

from __future__ import annotations

import argparse

from benchmarks.paired import report, run_pairs
from engines import engine_class
from engines.models import load_model, prompt_ids
from probe.capture import annotate
from probe.capture.loop import generate


def ranges_per_step(engine, prompt) -> int:
    """Count the ranges one decode step emits, by running one step with a counting annotator."""
    counted = []

    class Counting(annotate.NullAnnotator):
        enabled = True

        def __call__(self, name, index=None):
            counted.append(annotate.label(name, index))
            return self._null

    generate(engine, prompt, 2, Counting())
    return len(counted) - counted.index("decode#0")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default="cached")
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--pairs", type=int, default=150)
    args = p.parse_args()

    model = load_model("tiny", "float32", "cpu")
    engine = engine_class(args.engine)(model)
    prompt = prompt_ids(args.prompt, 1, model.config.vocab_size)
    annotator = annotate.Annotator()
    for a in (annotate.NULL, annotator, annotate.NULL):  # warm both paths
        generate(engine, prompt, args.new_tokens, a)
    pairs = run_pairs(
        lambda: generate(engine, prompt, args.new_tokens, annotator),
        lambda: generate(engine, prompt, args.new_tokens, annotate.NULL),
        args.pairs,
    )
    nvtx = "NVTX on (a tool is attached)" if annotator.push else "NVTX skipped (no tool attached)"
    print(
        f"tiny {args.engine} p{args.prompt}, {args.pairs} ABBA pairs of {args.new_tokens - 1} steps, profiler off, "
        f"{nvtx}; {ranges_per_step(engine, prompt)} ranges a decode step"
    )
    report(pairs)


if __name__ == "__main__":
    main()

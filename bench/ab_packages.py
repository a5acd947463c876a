#!/usr/bin/env python3
"""Times two sets of compiled packages against each other in one run.

A change to the templates is judged by the same examples compiled before
and after it, timed on the same machine in the same call: run-to-run drift
on an H200 is a few percent, as large as many changes. This runs the GPU
check's benchmarks (`linac-gpu-check --bench-only`) on the baseline and
the candidate in alternation, --rounds times, keeps each case's best time,
and prints one table with the ratio baseline / candidate (above 1: the
candidate is faster).

On the GPU machine, after tests/gpu/run.sh has built build-gpu/:
  python3 bench/ab_packages.py BASELINE_DIR CANDIDATE_DIR \\
      [--examples linear_attention,kda] [--rounds 2]
where each directory holds NAME.linac packages (tests/gpu/prepare.sh
writes them; build the baseline from the commit before the change).
Packages of both sets must share the runtime's CUDA ABI version.
"""

import argparse
import collections
import json
import pathlib
import subprocess
import sys


def bench(check, packages, reps):
    """Each case's ms, keyed by (variant, mode, batch)."""
    out = subprocess.run([check, '--bench-only', '--reps', str(reps), *packages],
                         check=True, capture_output=True, text=True).stdout
    times = {}
    for line in out.splitlines():
        if not line.startswith('{'):
            continue
        case = json.loads(line)
        times[(case['variant'], case['mode'], case['shape']['B'])] = case['ms']
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('baseline', type=pathlib.Path)
    parser.add_argument('candidate', type=pathlib.Path)
    parser.add_argument('--examples', help='comma-separated names (default: all in both '
                        'whose forward is chunkwise; a recurrent scan at the default shape '
                        'takes minutes)')
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--reps', type=int, default=50)
    parser.add_argument('--check', default='build-gpu/bin/linac-gpu-check')
    args = parser.parse_args()

    def names(directory):
        return {p.name[:-len('.linac')] for p in directory.glob('*.linac')}
    def chunkwise(name):
        manifest = json.loads((args.candidate / f'{name}.linac' / 'manifest.json').read_text())
        return manifest['plan']['family'] != 'recurrent'
    common = names(args.baseline) & names(args.candidate)
    chosen = sorted({n for n in common if chunkwise(n)} if not args.examples
                    else set(args.examples.split(',')))
    missing = [n for n in chosen if n not in common]
    if missing or not chosen:
        sys.exit(f'not in both sets: {", ".join(missing) or "(no packages)"}')

    best = collections.defaultdict(lambda: float('inf'))
    for _ in range(args.rounds):
        for label, directory in (('baseline', args.baseline), ('candidate', args.candidate)):
            packages = [str(directory / f'{n}.linac') for n in chosen]
            for key, ms in bench(args.check, packages, args.reps).items():
                best[(label, *key)] = min(best[(label, *key)], ms)

    cases = sorted({key[1:] for key in best})
    print(f'{"variant":22s} {"mode":8s} {"B":>4s} {"baseline":>9s} {"candidate":>9s} {"speed-up":>8s}')
    for variant, mode, batch in cases:
        a, b = best[('baseline', variant, mode, batch)], best[('candidate', variant, mode, batch)]
        print(f'{variant:22s} {mode:8s} {batch:4d} {a:9.4f} {b:9.4f} {a / b:7.3f}x')


if __name__ == '__main__':
    main()

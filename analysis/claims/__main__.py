"""python -m analysis.claims <study dirs...> [--out DIR]: judge every claim of the papers
(docs/claims.md) on the runs at or below the given directories; print the verdicts and write
claims.md and claims.json.

Exit status 0 whatever the verdicts (a claim that does not hold is a result, not an error);
2 when a path does not exist or holds no runs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.claims.judge import judge_paths
from analysis.claims.output import terminal_text, write
from analysis.discover import find_run_dirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.claims", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="run, sweep or output directories (searched recursively)")
    parser.add_argument("--out", type=Path, default=None, help="where claims.md and claims.json go (default: <first DIR>/claims)")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the metrics cache")
    args = parser.parse_args(argv)
    for path in args.dirs:
        if not path.exists():
            print(f"error: {path}: no such file or directory (expected a run or sweep directory)", file=sys.stderr)
            return 2
        if not find_run_dirs([path]):
            print(f"error: {path} holds no runs", file=sys.stderr)
            return 2
    verdicts, study = judge_paths(args.dirs, cache=not args.no_cache)
    out = args.out or args.dirs[0] / "claims"
    md, js = write(out, verdicts, study, [str(path) for path in args.dirs])
    print(terminal_text(verdicts))
    print(f"\nclaims: {md}\n        {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

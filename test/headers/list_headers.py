#!/usr/bin/env python3
"""Prints the public headers under each ROOT/DIR as include paths (npurt/...), sorted, one a line."""
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
found = []
for d in sys.argv[2:]:
    base = root / d
    for p in base.rglob('*.hpp'):
        rel = p.relative_to(base).as_posix()
        if '/impl/' in '/' + rel:
            continue
        found.append(rel)
print('\n'.join(sorted(found)))

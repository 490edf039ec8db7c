#!/usr/bin/env python3
"""Time whole process calls: each call is spawned directly (posix_spawn, no
shell, no timing process inside the measured span) and reaped with wait4,
which also gives its CPU time (user + system). With several commands their
calls alternate (A B A B ...), so all of them see the same machine load.
Commands with the same NAME are pooled into one row (e.g. one per query).
Leading VAR=value words of a command set its environment (as env(1) would,
without a process of their own).

    scripts/time-calls.py CALLS WARMUP -- NAME CMD ARG... [-- NAME CMD ARG...]...

Prints a tab-separated line per command: NAME, then the median, 10th and
90th percentile wall milliseconds per call, then the median CPU milliseconds.
The calls' stdout and stderr go to /dev/null; a call that exits non-zero is
reported on stderr and ends the run (exit 2)."""
import os
import statistics
import sys
import time


def main() -> int:
    args = sys.argv[1:]
    if len(args) < 4 or args[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    calls, warmup = int(args[0]), int(args[1])
    cmds: list[list[str]] = []
    for a in args[2:]:
        if a == "--":
            cmds.append([])
        else:
            cmds[-1].append(a)
    if any(len(c) < 2 for c in cmds):
        print("each command needs a NAME and a program", file=sys.stderr)
        return 2
    devnull = os.open(os.devnull, os.O_WRONLY)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
    names = list(dict.fromkeys(c[0] for c in cmds))
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for i in range(warmup + calls):
        for name, *words in cmds:
            env, argv = split_env(words)
            t0 = time.monotonic_ns()
            pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions)
            _, status, usage = os.wait4(pid, 0)
            t1 = time.monotonic_ns()
            code = os.waitstatus_to_exitcode(status)
            if code not in (0, 1):
                print(f"{name}: exit {code}: {' '.join(argv)}", file=sys.stderr)
                return 2
            if i >= warmup:
                wall[name].append((t1 - t0) / 1e6)
                cpu[name].append((usage.ru_utime + usage.ru_stime) * 1e3)
    for name in names:
        w = sorted(wall[name])
        at = lambda p: w[min(len(w) - 1, int(p * len(w)))]
        print(f"{name}\t{statistics.median(w):.1f}\t{at(0.1):.1f}\t{at(0.9):.1f}\t{statistics.median(cpu[name]):.1f}")
    return 0


def split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env = dict(os.environ)
    i = 0
    while i < len(words) - 1 and "=" in words[i] and not words[i].startswith(("/", ".", "=")):
        key, value = words[i].split("=", 1)
        env[key] = value
        i += 1
    return env, words[i:]


if __name__ == "__main__":
    sys.exit(main())

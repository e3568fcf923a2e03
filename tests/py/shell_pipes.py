#!/usr/bin/python3
"""No shell test pipes into `grep -q`: under pipefail a writer still writing when grep -q exits at its first match
(bash's printf writes a line at a time) dies of SIGPIPE and fails the pipeline, and the test, at random. Tests pipe
into lib.sh's qgrep, which reads all of its input; a writer that writes once says so with a `# one write` comment.

    shell_pipes.py SOURCE_DIR"""
import glob
import os
import re
import sys

PIPE_INTO_GREP_Q = re.compile(r"(?<!\|)\|\s*grep\s+(-[a-zA-Z]*q[a-zA-Z]*|(-[a-zA-Z]+\s+)*-q\b)")
root = sys.argv[1]
bad, seen = [], 0
for path in sorted(glob.glob(os.path.join(root, "tests", "sh", "*.sh"))):
    seen += 1
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if PIPE_INTO_GREP_Q.search(line) and "# one write" not in line:
            bad.append(f"{os.path.relpath(path, root)}:{n}: a pipe into grep -q (use qgrep): {line.strip()}")
for b in bad:
    print(b)
if not seen:
    print("shell_pipes: no shell tests found")
    sys.exit(1)
print(f"shell_pipes: {seen} shell tests, {len(bad)} pipes into grep -q")
sys.exit(1 if bad else 0)

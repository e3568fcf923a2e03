#!/usr/bin/python3
"""Every relative link in the repository's Markdown (README.md, docs/, benchmarks/, slurm/, ...) names a file
inside the repository that exists, and every #anchor names a heading of that file, spelt as GitHub spells it
(lowercase; punctuation other than '-' and '_' dropped; each space a '-'; a repeated heading gets -1, -2, ...).
Links inside code blocks and inline code are not links. One line per broken link; exit 1 if any.

    doc_links.py SOURCE_DIR"""
import os
import re
import subprocess
import sys

root = os.path.realpath(sys.argv[1])
files = subprocess.run(["git", "-C", root, "ls-files", "*.md"], capture_output=True, text=True, check=True)
pages = files.stdout.split()
if len(pages) < 10:
    sys.exit(f"doc_links: only {len(pages)} Markdown files found under {root}")


def prose(text, keep_code=False):
    """The text outside fenced code blocks, line by line (line numbers kept), inline code blanked unless kept."""
    out, fence = [], False
    for line in text.split("\n"):
        if re.match(r"\s*(```|~~~)", line):
            fence = not fence
            out.append("")
            continue
        blank = "" if fence else line if keep_code else re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)
        out.append(blank)
    return out


def slug(heading):
    h = re.sub(r"<[^>]+>", "", heading).strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)  # \w keeps letters of any script, digits and '_'
    return h.replace(" ", "-")


anchors_of = {}


def anchors(path):
    if path not in anchors_of:
        seen, names = {}, set()
        for line in prose(open(path, errors="replace").read(), keep_code=True):
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(1).replace("`", ""))
                names.add(s if s not in seen else f"{s}-{seen[s]}")
                seen[s] = seen.get(s, 0) + 1
            names.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', line))
        anchors_of[path] = names
    return anchors_of[path]


bad, checked = [], 0
for page in pages:
    src = os.path.join(root, page)
    for n, line in enumerate(prose(open(src, errors="replace").read()), 1):
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            checked += 1
            path, _, frag = target.partition("#")
            dest = os.path.realpath(os.path.join(os.path.dirname(src), path)) if path else src
            if dest != root and not dest.startswith(root + os.sep):
                bad.append(f"{page}:{n}: {target}: points outside the repository")
            elif not os.path.exists(dest):
                bad.append(f"{page}:{n}: {target}: no such file")
            elif frag and dest.endswith(".md") and frag not in anchors(dest):
                bad.append(f"{page}:{n}: {target}: {os.path.relpath(dest, root)} has no heading with anchor #{frag}")
for b in bad:
    print(b)
print(f"doc_links: {checked} relative links in {len(pages)} pages, {len(bad)} broken")
sys.exit(1 if bad else 0)

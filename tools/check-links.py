#!/usr/bin/env python3
"""Check the relative links and #anchors in the repository's Markdown files.

    python3 tools/check-links.py [ROOT]

ROOT defaults to the repository holding this script. The files checked are the *.md files git
knows about (tracked, or new and not ignored); outside a git checkout, every *.md file under ROOT
but .git/ and target/.

A link is checked when it is relative: `[text](docs/x.md)`, `[text](../SECURITY.md#limits)`,
`[text](#section)`, images, and reference definitions (`[id]: docs/x.md`). Links with a scheme
(https:, mailto:) are left alone. The target file or directory must exist inside ROOT; an anchor
must name a heading of the target Markdown file, or an `id`/`name` attribute in it. Anchors follow
GitHub: the heading's text as shown (code marks and link targets dropped), lower-cased, every
character that is not a letter, a digit, a space, '-' or '_' removed, and each space turned into
'-'; a heading that comes again gets -1, -2, ... Code blocks and code spans hold no links.

Prints one line per broken link, `file:line: link: why`, and exits 1 if there is any; else prints a
count and exits 0. Standard library only.
"""

import os
import re
import subprocess
import sys
from urllib.parse import unquote

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ID = re.compile(r"""<[a-zA-Z][^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""")
REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files(root):
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
        names = [n for n in out.decode().split("\0") if n]
        return sorted(n for n in set(names) if os.path.isfile(os.path.join(root, n)))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if x not in (".git", "target", "node_modules")]
            found += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".md")]
        return sorted(found)


def prose_lines(text):
    """(line number, line) for every line outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield n, line


def strip_code_spans(line):
    """The line with each `code span` replaced by spaces of the same length."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "`":
            j = i
            while j < len(line) and line[j] == "`":
                j += 1
            ticks = line[i:j]
            end = line.find(ticks, j)
            if end < 0:
                out.append(line[i:j])
                i = j
                continue
            out.append(" " * (end + len(ticks) - i))
            i = end + len(ticks)
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def heading_text(raw):
    """A heading as GitHub shows it: links by their text, images by their alt, no code marks."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("*", "").strip()


def slug(text):
    text = heading_text(text).lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text):
    seen, found = {}, set()
    prev = None
    for _, line in prose_lines(text):
        title = None
        m = HEADING.match(line)
        if m:
            title = m.group(2)
        elif prev is not None and prev.strip() and SETEXT.match(line) and not HEADING.match(prev):
            title = prev.strip()
        if title is not None:
            s = slug(title)
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
        found.update(HTML_ID.findall(line))
        prev = line
    return found


def inline_links(line):
    """Targets of [text](target) and ![alt](target) in one line, code spans already blanked."""
    targets = []
    i = 0
    while True:
        i = line.find("](", i)
        if i < 0:
            return targets
        j, depth = i + 2, 1
        while j < len(line) and depth:
            if line[j] == "(":
                depth += 1
            elif line[j] == ")":
                depth -= 1
            j += 1
        inner = line[i + 2 : j - 1 if depth == 0 else j].strip()
        if inner.startswith("<"):
            target = inner[1 : inner.find(">")] if ">" in inner else inner[1:]
        else:
            target = inner.split()[0] if inner else ""
        targets.append(target)
        i = j


def links(text):
    for n, line in prose_lines(text):
        m = REF_DEF.match(line)
        if m:
            yield n, m.group(2).strip("<>")
            continue
        for target in inline_links(strip_code_spans(line)):
            yield n, target


def check(root):
    root = os.path.realpath(root)
    files = markdown_files(root)
    cache = {}

    def anchors_of(path):
        if path not in cache:
            with open(path, encoding="utf-8") as f:
                cache[path] = anchors(f.read())
        return cache[path]

    broken, count = [], 0
    for name in files:
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for n, target in links(text):
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            count += 1
            file_part, _, anchor = target.partition("#")
            file_part = unquote(file_part.split("?")[0])
            if file_part:
                base = root if file_part.startswith("/") else os.path.dirname(path)
                dest = os.path.realpath(os.path.join(base, file_part.lstrip("/")))
                if dest != root and not dest.startswith(root + os.sep):
                    broken.append(f"{name}:{n}: {target}: outside the repository")
                    continue
                if not os.path.exists(dest):
                    broken.append(f"{name}:{n}: {target}: no such file")
                    continue
            else:
                dest = path
            if anchor:
                if os.path.isdir(dest) or not dest.endswith(".md"):
                    broken.append(f"{name}:{n}: {target}: an anchor into a file that is not Markdown")
                elif unquote(anchor) not in anchors_of(dest):
                    rel = os.path.relpath(dest, root)
                    broken.append(f"{name}:{n}: {target}: no heading #{anchor} in {rel}")
    return files, count, broken


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(here)
    if len(sys.argv) > 2 or root in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if root in ("-h", "--help") else 2
    files, count, broken = check(root)
    for b in broken:
        print(b)
    if broken:
        print(f"{len(broken)} broken of {count} relative links in {len(files)} Markdown files", file=sys.stderr)
        return 1
    print(f"ok: {count} relative links in {len(files)} Markdown files")
    return 0


if __name__ == "__main__":
    sys.exit(main())

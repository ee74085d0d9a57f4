#!/usr/bin/env python3
"""Extracts the request cases of nodejs/llhttp's test suite (test/request/*.md) into
tests/fixtures/llhttp/requests.json, the corpus tests/llhttp_corpus.rs runs through roomgate.

    tools/llhttp-corpus.py LLHTTP_CHECKOUT [OUT]

LLHTTP_CHECKOUT is a clone of https://github.com/nodejs/llhttp (a work tree, or a bare git
directory: then the files are read at HEAD with `git show`). Only test data is taken, with its
attribution (tests/fixtures/llhttp/LICENSE); no llhttp code.

Each case's input is built the way llhttp's test/md-test.ts builds it (newlines to CRLF, the
\\r \\n \\t \\f \\xHH and octal escapes, UTF-8), and its expected log is kept as written and
digested into the messages llhttp reported: where each began (its byte offset in the input),
method, url, version, header fields, trailer fields, body, whether the head and the message
completed, and the case's error if any.
"""

import json
import os
import re
import subprocess
import sys

FILES = [
    "sample", "lenient-headers", "lenient-header-value-relaxed", "lenient-version", "method", "uri",
    "connection", "content-length", "transfer-encoding", "invalid", "finish", "pausing", "pipelining",
]


def read(checkout, rel):
    path = os.path.join(checkout, rel)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    return subprocess.run(["git", "-C", checkout, "show", f"HEAD:{rel}"], check=True, capture_output=True,
                          text=True).stdout


def commit_of(checkout):
    out = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def build_input(raw):
    """md-test.ts's transformation of an `http` block into the bytes llhttp is given."""
    s = re.sub(r"\n$", "", raw, count=1)
    s = re.sub(r"\\(\r\n|\r|\n)", "", s)
    s = re.sub(r"\r\n|\r|\n", "\r\n", s)
    s = s.replace("\\r", "\r").replace("\\n", "\n").replace("\\t", "\t").replace("\\f", "\f")
    s = re.sub(r"\\x([0-9a-fA-F]+)", lambda m: chr(int(m.group(1), 16)), s)
    s = re.sub(r"\\([0-7]{1,3})", lambda m: chr(int(m.group(1), 8)), s)
    if "${" in s:
        raise ValueError("inline JavaScript is not supported")
    return s


SPAN = re.compile(r'^off=(\d+) len=(\d+) span\[(\w+)\]="(.*)"$')
ERROR = re.compile(r'^off=(\d+) error code=(\d+) reason="(.*)"$')
HEADERS = re.compile(r"^off=(\d+) headers complete method=(\d+) v=(\d+)/(\d+) flags=(\w+) content_length=(\d+)")


def digest(log):
    """The messages a log reports, and its error."""
    messages, error, cur, spans, name = [], None, None, {}, None
    for line in log:
        # As md-test.ts reads the expected log: its escaped tabs and form feeds are the bytes.
        line = line.replace("\\t", "\t").replace("\\f", "\f")
        m = SPAN.match(line)
        if m:
            spans[m.group(3)] = spans.get(m.group(3), "") + m.group(4)
            continue
        m = re.match(r"^off=(\d+) message begin$", line)
        if m:
            cur = {"offset": int(m.group(1)), "method": None, "url": None, "version": None, "headers": [],
                   "trailers": [], "body": "", "headers_complete": False, "complete": False}
            messages.append(cur)
            continue
        m = ERROR.match(line)
        if m:
            error = {"offset": int(m.group(1)), "code": int(m.group(2)), "reason": m.group(3)}
            continue
        if cur is None:
            continue
        m = re.match(r"^off=\d+ (\w+) complete$", line)
        if m:
            kind = m.group(1)
            if kind in ("method", "url", "version"):
                cur[kind] = spans.pop(kind, "")
            elif kind == "header_field":
                name = spans.pop("header_field", "")
            elif kind == "header_value":
                # After the head's end a field is a trailer (of a chunked body).
                cur["trailers" if cur["headers_complete"] else "headers"].append([name, spans.pop("header_value", "")])
            elif kind == "message":
                cur["body"] += spans.pop("body", "")
                cur["complete"] = True
            continue
        m = HEADERS.match(line)
        if m:
            cur["headers_complete"] = True
            cur["content_length"] = int(m.group(6))
            continue
    if cur is not None and "body" in spans:
        cur["body"] += spans.pop("body")
    return messages, error


def cases_of(file, text):
    """The cases of one md file: a heading, the meta comment, an `http` block and a `log` block."""
    lines = text.split("\n")
    out, heading, meta, blocks, i = [], [], None, {}, 0
    while i < len(lines):
        line = lines[i]
        h = re.match(r"^(#+)\s+(.*)$", line)
        if h:
            depth = len(h.group(1))
            heading = heading[: depth - 1] + [h.group(2).strip()]
            meta, blocks = None, {}
            i += 1
            continue
        if i + 1 < len(lines) and re.match(r"^=+$|^-+$", lines[i + 1]) and line.strip():
            heading = [line.strip()] if lines[i + 1].startswith("=") else heading[:1] + [line.strip()]
            meta, blocks = None, {}
            i += 2
            continue
        m = re.match(r"^<!--\s*meta=(.*?)\s*-->", line)
        if m:
            meta = json.loads(m.group(1))
            i += 1
            continue
        f = re.match(r"^```(\w+)\s*$", line)
        if f:
            kind, body, j = f.group(1), [], i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                body.append(lines[j])
                j += 1
            blocks[kind] = "\n".join(body) + "\n"
            i = j + 1
            if "http" in blocks and "log" in blocks:
                line_no = i  # for the id: the heading's line is found below
                log = [x for x in blocks["log"].split("\n")[:-1]]
                messages, error = digest(log)
                out.append({
                    "name": " / ".join(heading),
                    "type": (meta or {}).get("type", "request"),
                    "meta": meta or {},
                    "input": build_input(blocks["http"]),
                    "log": log,
                    "messages": messages,
                    "error": error,
                    "_end": line_no,
                })
                blocks = {}
            continue
        i += 1
    # An id llhttp's own runner would name: the file and the heading's line.
    heads = [n for n, l in enumerate(lines) if re.match(r"^#+\s", l) or (n + 1 < len(lines) and re.match(r"^=+$|^-+$", lines[n + 1]) and l.strip())]
    for case in out:
        start = max([h for h in heads if h < case["_end"]], default=0)
        case["id"] = f"{file}.md:{start + 1}"
        del case["_end"]
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    checkout = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    target = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..", "tests", "fixtures", "llhttp", "requests.json")
    cases = []
    for name in FILES:
        for case in cases_of(name, read(checkout, f"test/request/{name}.md")):
            cases.append(dict(id=case.pop("id"), **case))
    doc = {"source": "https://github.com/nodejs/llhttp", "commit": commit_of(checkout),
           "note": "Generated by tools/llhttp-corpus.py from test/request/*.md; MIT, see LICENSE.",
           "cases": cases}
    with open(target, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print(f"{len(cases)} cases -> {target}")


if __name__ == "__main__":
    main()

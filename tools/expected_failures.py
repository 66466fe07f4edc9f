"""Regenerate tests/backend_expected_failures.py from a junit report of the backend suite.

    python -m pytest -n 2 tests/test_backend.py --junitxml=/tmp/backend.xml
    python tools/expected_failures.py /tmp/backend.xml

Algorithm: read every test case of the report; a case that failed (not an expected failure)
gets an entry whose reason is the first line of its error (exception type and message, with
object addresses and long numbers stripped, so reasons group); a case that was listed and
passed (strict XPASS, reported as a failure "XPASS(strict)" or
"Unexpected success") loses its entry; a listed case
that still fails keeps its old reason. Entries are exact names (`^name$`), sorted, grouped
by reason in comments-free form so a diff shows what changed.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "tests" / "backend_expected_failures.py"

HEADER = '''"""Expected failures of the ONNX backend suite: regex over test names -> reason.

Only ever shrinks: a listed case that passes fails the run (strict expectedFailure).
Regenerate with `tools/expected_failures.py` from a junit report; each reason is the error
the case raised when the list was made.
"""

EXPECTED_FAILURES: dict[str, str] = {
'''


def _reason(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # Prefer the raised exception's own line ("E   onnxjit.errors.X: ...").
    errs = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    line = errs[0] if errs else (lines[0] if lines else "failed")
    line = re.sub(r"0x[0-9a-f]+", "0x…", line)
    line = line.replace("onnxjit.errors.", "")
    return line[:150]


def main(report: str) -> int:
    current: dict[str, str] = {}
    if TARGET.exists():
        ns: dict = {}
        exec(TARGET.read_text(), ns)
        current = dict(ns["EXPECTED_FAILURES"])
    tree = ET.parse(report)
    out = dict(current)
    for tc in tree.iter("testcase"):
        name = tc.get("name", "")
        key = f"^{name}$"
        fail = tc.find("failure")
        if fail is None:
            fail = tc.find("error")
        skipped = tc.find("skipped")
        if fail is not None:
            msg = (fail.get("message") or "") + "\n" + (fail.text or "")
            if "XPASS(strict)" in msg or "Unexpected success" in msg:
                out.pop(key, None)
            else:
                out[key] = _reason(msg)
        elif skipped is not None and skipped.get("type") == "pytest.xfail":
            pass  # still an expected failure: keep the old reason
    body = "".join(f"    {k!r}: {v!r},\n" for k, v in sorted(out.items()))
    TARGET.write_text(HEADER + body + "}\n")
    print(f"{len(out)} expected failures ({len(out) - len(current):+d})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

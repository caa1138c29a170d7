"""Runs a test script's cases: each prints `ok NAME` or `FAIL NAME: why`,
and the script exits non-zero when any failed. SUPERFLUID_TEST_CASES
(comma-separated names) runs only those cases, from `cases` and
`named_only` (cases run only when named)."""

import os
import traceback


def run(cases, banner=None, named_only=()):
    if banner:
        print(banner, flush=True)
    named = os.environ.get("SUPERFLUID_TEST_CASES")
    if named:
        wanted = named.split(",")
        known = list(cases) + list(named_only)
        missing = set(wanted) - {case.__name__ for case in known}
        if missing:
            print(f"FAIL no such case: {sorted(missing)}", flush=True)
            return 1
        cases = [case for case in known if case.__name__ in wanted]
    failed = 0
    for case in cases:
        try:
            case()
        except Exception:
            failed += 1
            print(f"FAIL {case.__name__}:\n{traceback.format_exc()}", flush=True)
        else:
            print(f"ok {case.__name__}", flush=True)
    return 1 if failed else 0

"""A per-test time limit for pytest where pytest-timeout is not installed (as on the GPU hosts),
so a hung test fails with its stack instead of eating its step's time:

    PYTHONPATH=benchmarks/gpu pytest -p per_test_timeout --per-test-limit 180 ...

A test's limit is its `timeout` mark, else the `timeout` ini value (pyproject's), as
pytest-timeout reads them; at most --per-test-limit; and it ends END_MARGIN_S before
$PARBENCH_DEADLINE (seconds since the epoch: when whatever runs pytest will kill it), so pytest
still writes its report. At the limit SIGALRM fails the test where it stands, every thread's
stack on stderr, and the session goes on; a test that has not come back to Python GRACE_S later
(stuck in C code) is ended with the whole process by faulthandler, its stack on stderr. Where
pytest-timeout is active, it keeps the limits: this plugin gives each test the same limit as a
`timeout` mark placed first, which pytest-timeout reads when the test starts.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from collections.abc import Generator
from types import FrameType
from typing import Any

import pytest

DEADLINE_ENV = "PARBENCH_DEADLINE"
GRACE_S = 5.0  # from failing the test in Python to ending the process
END_MARGIN_S = 15.0  # before the deadline: teardown, the junit file, the summary
# faulthandler writes to a file descriptor while pytest captures fd 2 during a test: this is the
# real stderr, duplicated at import, which `-p` does before capturing starts.
_STDERR = os.fdopen(os.dup(2), "w")
_hard_at: float | None = None  # when faulthandler ends the process, while a test runs


def limit_s(marked: float | None, ini: float | None, cap: float | None,
            deadline: float | None, now: float) -> float | None:
    """A test's limit in seconds from now (None: no limit); 0 or None means not given."""
    limits = [marked if marked is not None else ini, cap]
    if deadline is not None:
        limits.append(max(1.0, deadline - END_MARGIN_S - now))
    given = [limit for limit in limits if limit]
    return min(given) if given else None


def _seconds(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def _item_limit_s(item: pytest.Item) -> float | None:
    mark = item.get_closest_marker("timeout")
    marked = None
    if mark is not None:
        marked = _seconds(mark.args[0] if mark.args else mark.kwargs.get("timeout"))
    return limit_s(marked, _seconds(item.config.getini("timeout")),
                   item.config.getoption("per_test_limit"),
                   _seconds(os.environ.get(DEADLINE_ENV)), time.time())


def _active(config: pytest.Config) -> bool:
    """Whether this plugin keeps the limits: pytest-timeout is not active, and signals work."""
    timeout_plugin = (config.pluginmanager.has_plugin("timeout")
                      or config.pluginmanager.has_plugin("pytest_timeout"))
    return hasattr(signal, "SIGALRM") and not timeout_plugin


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--per-test-limit", type=float, default=None, metavar="SECONDS",
                     help="no test runs longer, whatever its timeout mark (per_test_timeout)")
    # pytest-timeout's own ini key, so pyproject's `timeout` means the same without it
    parser.addini("timeout", "each test's time limit in seconds (pytest-timeout's key)")


def pytest_configure(config: pytest.Config) -> None:
    if _active(config):
        config.addinivalue_line("markers", "timeout(seconds): this test's time limit "
                                "(kept by per_test_timeout where pytest-timeout is missing)")


def pytest_report_header(config: pytest.Config) -> str:
    keeper = "per_test_timeout" if _active(config) else "pytest-timeout, per_test_timeout's limits"
    cap = config.getoption("per_test_limit")
    return (f"per-test limit: {keeper}, at most {cap:.0f} s" if cap
            else f"per-test limit: {keeper}")


def _expire(item: pytest.Item, limit: float) -> Any:
    def handler(signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True
        _STDERR.write(f"\n{item.nodeid} ran past its {limit:.0f} s limit; every thread:\n")
        _STDERR.flush()
        faulthandler.dump_traceback(file=_STDERR, all_threads=True)
        pytest.fail(f"{item.nodeid} ran past its {limit:.0f} s limit (per_test_timeout); "
                    "every thread's stack is on stderr")

    return handler


def _arm_hard(seconds: float) -> None:
    faulthandler.dump_traceback_later(max(seconds, 0.1), exit=True, file=_STDERR)


# tryfirst: the outermost wrapper, so the mark is in place before pytest-timeout reads it
@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    global _hard_at
    limit = _item_limit_s(item)
    cap = item.config.getoption("per_test_limit")
    if limit is not None and cap and limit < cap:  # the step's end is near: say so in its log
        _STDERR.write(f"\nper_test_timeout: {item.nodeid} has {limit:.0f} s, the time left "
                      f"before its step ends less {END_MARGIN_S:.0f} s\n")
        _STDERR.flush()
    if limit is not None and not _active(item.config):
        item.add_marker(pytest.mark.timeout(limit), append=False)
    if limit is None or not _active(item.config):
        yield
        return
    previous = signal.signal(signal.SIGALRM, _expire(item, limit))
    signal.setitimer(signal.ITIMER_REAL, limit)
    _hard_at = time.monotonic() + limit + GRACE_S
    _arm_hard(limit + GRACE_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()
        _hard_at = None


@pytest.hookimpl(trylast=True)
def pytest_exception_interact() -> None:
    # pytest's faulthandler plugin cancels any pending dump when a test fails: the failed
    # test's teardown is still to be kept to the limit.
    if _hard_at is not None:
        _arm_hard(_hard_at - time.monotonic())

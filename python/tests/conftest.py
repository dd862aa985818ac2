"""pytest's hooks for python/tests.

A run in which every test was skipped (no GPU for the GPU tests, no torch,
no NVRTC) exits 77, Automake's "skipped", instead of 0, so that `make
check` and the GPU host tell a suite that ran from one that could not.
The tests import their helpers as `_util` (this directory is on sys.path
under pytest's default import mode)."""


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    stats = reporter.stats
    if stats.get("skipped") and not stats.get("passed"):
        session.exitstatus = 77

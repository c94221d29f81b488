# pytest configuration of the Python tests (run by ctest as python_pytest):
# the run fails when a test is skipped or when fewer tests than expected were
# collected, so an import problem or a missing dependency is never a silent
# pass (pytest's own "no tests" exit code 5 fails ctest as well).
import os
import pathlib

import pytest

MIN_TESTS = 200  # 256 collected; raised with every test added (issue 50: the tree CRF from Python and Thinc)


def pytest_sessionstart(session):
    # ctest's python_pytest_<variant> forces a variant by BIAFFINE_ISA: on a
    # CPU that cannot run it, the run is skipped (ctest matches SKIPPED:).
    if not os.environ.get("BIAFFINE_ISA"):
        return
    try:
        import biaffine  # noqa: F401
    except ImportError as e:
        if type(e).__name__ == "ISAError" and "lacks" in str(e):
            pytest.exit(f"SKIPPED: {e}", returncode=0)
        raise


def pytest_collection_finish(session):
    if len(session.items) < MIN_TESTS and not session.config.option.keyword:
        raise pytest.UsageError(f"only {len(session.items)} tests collected, expected at least {MIN_TESTS}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped:
        rep.outcome = "failed"
        rep.longrepr = f"skipped tests are failures here: {rep.longrepr}"


@pytest.fixture(scope="session")
def data_dir():
    d = os.environ.get("BIAFFINE_TEST_DATA_DIR") or str(pathlib.Path(__file__).resolve().parents[1] / "data")
    return pathlib.Path(d)

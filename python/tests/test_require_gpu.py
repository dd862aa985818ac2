"""A Python GPU test that finds no GPU skips, and fails under
KDTREE_TEST_REQUIRE_GPU=1 (a GPU host's run must not pass by skipping),
as the C suites do (tests/test_require_gpu.sh).  The probe's answer is
made "no GPU" on purpose, so this holds on a GPU host too."""
import pytest

import _util


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(_util, "_gpu", (None, "no device (on purpose)"))
    monkeypatch.delenv("KDTREE_TEST_REQUIRE_GPU", raising=False)
    return monkeypatch


@pytest.mark.parametrize("value", [None, "", "0"])
def test_no_gpu_skips(no_gpu, value):
    if value is not None:
        no_gpu.setenv("KDTREE_TEST_REQUIRE_GPU", value)
    with pytest.raises(pytest.skip.Exception,
                       match="GPU test: no device \\(on purpose\\)"):
        _util.need_gpu()


def test_no_gpu_fails_when_one_is_required(no_gpu):
    no_gpu.setenv("KDTREE_TEST_REQUIRE_GPU", "1")
    with pytest.raises(pytest.fail.Exception,
                       match="KDTREE_TEST_REQUIRE_GPU=1: no device"):
        _util.need_gpu()


def test_other_values_are_an_error(no_gpu):
    no_gpu.setenv("KDTREE_TEST_REQUIRE_GPU", "yes")
    with pytest.raises(pytest.fail.Exception,
                       match='KDTREE_TEST_REQUIRE_GPU="yes" is neither 1 '
                             'nor 0'):
        _util.need_gpu()

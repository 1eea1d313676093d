"""pytest-xdist's loadgroup keeps the tests of one group on one worker, which the shared session fixtures rely on
(tests/conftest.py): its mark must reach the scheduler."""

import pytest
from xdist import is_xdist_worker

pytestmark = pytest.mark.xdist_group("worker_groups")


def test_a_grouped_test_is_scheduled_by_its_group(request):
    if not (is_xdist_worker(request) and request.config.getvalue("loadgroup")):
        pytest.skip("runs under pytest-xdist's --dist loadgroup (the suite's default)")
    # xdist schedules a group by the "@<group>" its worker adds to the node id; without it the group is ignored.
    assert request.node.nodeid.endswith("@worker_groups"), (
        f"pytest-xdist did not group {request.node.nodeid}: each worker would build the shared fixtures itself"
    )

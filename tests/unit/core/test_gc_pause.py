"""gc_pause.paused(): automatic collection off for the block, nested and across threads."""

from __future__ import annotations

import gc
import threading

import pytest

from airflow_provider_dj.core import gc_pause


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_nested_pauses_end_with_the_outermost():
    with gc_pause.paused():
        assert not gc.isenabled()
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_in_the_block_still_restores_the_collector():
    with pytest.raises(RuntimeError), gc_pause.paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_process_that_turned_the_collector_off_keeps_it_off():
    gc.disable()
    with gc_pause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_of_two_threads_end_when_both_end():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with gc_pause.paused():
            first_in.set()
            second_in.wait(5)
        seen["after_first"] = gc.isenabled()
        first_out.set()

    def second():
        first_in.wait(5)
        with gc_pause.paused():
            second_in.set()
            first_out.wait(5)
            seen["inside_second"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"after_first": False, "inside_second": False}
    assert gc.isenabled()
